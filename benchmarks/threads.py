"""Per-call cost of a view and of a decorated launch, on 1 and on N threads.

    python benchmarks/threads.py [--threads 1 2 8] [--calls 200000]

Each thread makes ``--calls`` calls of its own arrays; the figure is the wall time from the
start to the last thread's end divided by one thread's calls (per-call time) and the calls of all threads per second
(throughput), then each thread count's throughput as a multiple of one thread's (the scaling
ratio: at best the number of threads, while there are cores for them).  Beside each thread
count's ratio, the same count of separate processes running the one-thread loop at once: what
the machine gives to fully independent work, the ceiling of any thread scaling on it (a
shared or virtual machine's cores may give two processes well under 2x).  Wall-clock: run it
on an otherwise idle machine; the load average at the start is printed with the figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import threading
import time

import numpy as np

from stridedview import StridedMemoryView, _view, args_viewable_as_strided_memory


@args_viewable_as_strided_memory((0, 1, 2))
def _launch(a, b, c):
    return a.view(-1).ptr, b.view(-1).ptr, c.view(-1).ptr


def _view_loop(arrays, calls):
    a = arrays[0]
    for _ in range(calls):
        v = StridedMemoryView(a, stream_ptr=-1)
        v.ptr, v.shape, v.strides, v.dtype


def _launch_loop(arrays, calls):
    a, b, c = arrays
    for _ in range(calls):
        _launch(a, b, c)


def _arrays():
    """One thread's (or process's) three arrays of its own."""
    return tuple(np.zeros((16, 16), dtype=np.float32) for _ in range(3))


def measure(loop, threads, calls):
    inputs = [_arrays() for _ in range(threads)]
    loop(inputs[0], 1000)  # warm up
    barrier = threading.Barrier(threads + 1)
    spans = []

    def run(arrays):
        barrier.wait()
        start = time.perf_counter()
        loop(arrays, calls)
        spans.append(time.perf_counter() - start)

    workers = [threading.Thread(target=run, args=(arrays,)) for arrays in inputs]
    for w in workers:
        w.start()
    barrier.wait()
    start = time.perf_counter()
    for w in workers:
        w.join()
    wall = time.perf_counter() - start  # all threads' calls, first start to last end
    return wall / calls, threads * calls / wall


LOOPS = {"view": _view_loop, "launch of 3": _launch_loop}


def _child(name, calls):
    """One process of measure_processes: warm up, say so, wait for the go, run, report."""
    arrays = _arrays()
    LOOPS[name](arrays, 1000)
    print("ready", flush=True)
    sys.stdin.readline()
    start = time.perf_counter()
    LOOPS[name](arrays, calls)
    print(start, time.perf_counter(), flush=True)


def measure_processes(name, processes, calls):
    """Calls per second of ``processes`` separate interpreters running the one-thread loop
    at once: what the machine itself gives to independent work (the ceiling of any
    thread scaling here).  perf_counter is CLOCK_MONOTONIC on Linux, one clock for all."""
    children = [
        subprocess.Popen([sys.executable, __file__, "--child", name, "--calls", str(calls)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(processes)
    ]
    for child in children:
        if child.stdout.readline().strip() != "ready":
            raise SystemExit("threads.py: a child process did not start")
    for child in children:
        child.stdin.write("go\n")
        child.stdin.flush()
    spans = [tuple(map(float, child.communicate()[0].split())) for child in children]
    wall = max(end for _, end in spans) - min(start for start, _ in spans)
    return processes * calls / wall


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 8])
    parser.add_argument("--calls", type=int, default=200000)
    parser.add_argument("--child", choices=sorted(LOOPS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.child, args.calls)
        return
    gil = sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"python {sys.version.split()[0]}  GIL {'on' if gil else 'off'}  "
          f"fast paths {_view.fast_paths_state or 'off'}  cores {os.cpu_count()}  "
          f"load average {load:.2f}")
    for name, loop in LOOPS.items():
        rates = {}
        for threads in args.threads:
            per_call, rates[threads] = measure(loop, threads, args.calls)
            print(f"{name:12s} {threads:2d} thread(s): {per_call * 1e9:8.0f} ns/call  "
                  f"{rates[threads] / 1e6:6.2f} M calls/s in all")
        if 1 in rates:
            print(f"{name:12s} scaling: " + ", ".join(
                f"{threads} threads {rates[threads] / rates[1]:.2f}x "
                f"({threads} processes {measure_processes(name, threads, args.calls) / rates[1]:.2f}x)"
                for threads in args.threads if threads != 1))


if __name__ == "__main__":
    main()
