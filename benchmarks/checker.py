"""The simulated device's stream-order checker against three launchers, run after run.

    python benchmarks/checker.py [--runs N] [--rounds R]

A launcher decorated with ``args_viewable_as_strided_memory`` copies its argument on its
stream S (the stand-in for a kernel) from a producer that writes the memory on its own stream
P (``cuMemsetD8Async``) and frees it there (``cuMemFreeAsync``) as soon as the launcher
returns, as a stream-ordered allocator's owner does with a temporary.  Three launchers:

- **correct**: the view is made on S (S waits for P's write) and the launcher has
  ``record_stream=True`` (P's free waits until S has read the memory);
- **missing its ordering**: the view is made with ``stream_ptr=-1`` (S does not wait for the
  write), ``record_stream`` kept;
- **missing its record_stream**: the view is made on S, ``record_stream`` left out (the
  memory is freed while S may still read it).

Each runs ``--runs`` times (default 10) in a fresh process on the simulated device
(tests/simgpu, built here with the C compiler into a temporary folder), with
``SIMGPU_DELAY_US=0`` (no delay that would make a stale read likely) and the checker on
(``SIMGPU_CHECK=1``), ``--rounds`` launches a run; a run counts as *reported* when the checker
wrote at least one ``simgpu: check:`` line.  The targets (issue 47): both faulty launchers
reported on every run, the correct one on none.  Printed: each launcher's runs reported, and
each target met or NOT MET (exit status 0 either way: a measurement, not a test).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import sys
from cuda.bindings import driver as drv
from stridedview import args_viewable_as_strided_memory

mode, rounds = sys.argv[1], int(sys.argv[2])

def ok(result):
    code, *values = result if isinstance(result, tuple) else (result,)
    if code != drv.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"{code!r}")
    return values[0] if len(values) == 1 else values

ok(drv.cuInit(0))
ok(drv.cuCtxSetCurrent(ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0))))))
P = int(ok(drv.cuStreamCreate(1)))
S = int(ok(drv.cuStreamCreate(1)))
NBYTES = 4096
out = int(ok(drv.cuMemAllocHost(NBYTES)))


class Temporary:
    # A stream-ordered allocator's array: written on P, freed on P when it goes.
    def __init__(self):
        self.ptr = int(ok(drv.cuMemAllocAsync(NBYTES, P)))
        ok(drv.cuMemsetD8Async(self.ptr, 0xAA, NBYTES, P))
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (NBYTES,), "typestr": "|u1", "data": (self.ptr, False),
            "strides": None, "stream": P,
        }

    def __del__(self):
        drv.cuMemFreeAsync(self.ptr, P)


@args_viewable_as_strided_memory((0,), record_stream=(mode != "no-record-stream"))
def launch(src, stream):
    view = src.view(-1 if mode == "no-ordering" else stream)
    ok(drv.cuMemcpyDtoHAsync(out, view.ptr, view.nbytes, stream))


for _ in range(rounds):
    launch(Temporary(), S)  # the temporary goes as the launcher returns
ok(drv.cuStreamSynchronize(S))
ok(drv.cuStreamSynchronize(P))
"""

LAUNCHERS = ("correct", "no-ordering", "no-record-stream")
TITLES = {
    "correct": "correct launcher",
    "no-ordering": "launcher missing its ordering",
    "no-record-stream": "launcher missing its record_stream",
}


def build_simulator(folder: str) -> None:
    subprocess.run(["bash", str(ROOT / "simgpu/build.sh"), folder], check=True,
                   stdout=subprocess.DEVNULL)


def reported_runs(folder: str, mode: str, runs: int, rounds: int) -> int:
    env = dict(os.environ, LD_LIBRARY_PATH=folder, SIMGPU_LIB_DIR=folder, SIMGPU_DELAY_US="0",
               SIMGPU_CHECK="1")
    reported = 0
    for _ in range(runs):
        result = subprocess.run([sys.executable, "-c", CHILD, mode, str(rounds)], env=env,
                                capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise SystemExit(f"{mode}: the child failed:\n{result.stderr[-2000:]}")
        if any(line.startswith("simgpu: check: ") for line in result.stderr.splitlines()):
            reported += 1
    return reported


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=10, help="fresh processes per launcher")
    parser.add_argument("--rounds", type=int, default=5, help="launches per run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        build_simulator(folder)
        counts = {mode: reported_runs(folder, mode, args.runs, args.rounds) for mode in LAUNCHERS}
    print(f"{'launcher':40s} runs reported (SIMGPU_DELAY_US=0, SIMGPU_CHECK=1)")
    for mode in LAUNCHERS:
        print(f"{TITLES[mode]:40s} {counts[mode]} of {args.runs}")
    print()
    missed = 0
    for mode in LAUNCHERS:
        want = 0 if mode == "correct" else args.runs
        met = counts[mode] == want
        missed += not met
        print(f"  {'met    ' if met else 'NOT MET'} {TITLES[mode]}: reported on {counts[mode]} of "
              f"{args.runs} runs (target {want} of {args.runs})")
    print(f"\n{'every target met' if not missed else f'{missed} target(s) not met'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
