"""Views of device memory on a CUDA driver, stridedview against cuda.core, in instructions.

    python benchmarks/device.py [--calls N] [--quick] [--cases SUBSTRING ...] [--json FILE]
    python benchmarks/device.py --check      # no valgrind: every case runs, both libraries agree
    python benchmarks/device.py --wall       # no valgrind: microseconds a call (a real GPU's driver)

Needs cuda-bindings, cuda-core and a CUDA driver: the simulated device (``LD_LIBRARY_PATH`` at
the folder of tests/simgpu's ``libcuda.so.1``, built by ``simgpu/build.sh DIR``) or a
real GPU.  Every case is one small function, called ``--calls`` times under valgrind's
callgrind in a fresh process (benchmarks/callgrind.py's ``measure``: the loop over an empty
function taken off, the collector run and every object frozen before each case), counting
the instructions of the calling thread only (``--separate-threads=yes``): the simulated
device runs each stream's work on a thread of its own, where a GPU would run it.  Its
driver calls do run on the calling thread and are counted (what its C code costs, not what
a real driver's does).  The interpreter is the one running this script: run it with another
interpreter's ``python`` (whose environment has numpy, cuda-bindings, cuda-core and the
package built) to count on that one.

Both libraries view the same producers, with the same streams, in the same process, the way
their users write it: the stream by keyword (``stream_ptr=s``), each view's ``ptr``,
``shape``, ``strides`` and ``dtype`` read.  cuda.core's side is its own
``StridedMemoryView.from_cuda_array_interface`` / ``from_dlpack`` (its constructor is
deprecated for the CAI) and its own ``args_viewable_as_strided_memory``.

- **CAI**: objects whose ready ``__cuda_array_interface__`` dict (v3) points at
  ``cuMemAlloc`` memory and names the producer stream ``p``: 2-D float32 arrays (64, 64),
  C-contiguous (``strides`` None).  *ordered*: viewed with ``stream_ptr=s``, another stream,
  so each view orders ``s`` after ``p`` (an event recorded on ``p``, waited for on ``s``);
  ``(-1)``: ``stream_ptr=-1``, no ordering.  *strided slice*: ``[1:, ::2]`` of one, its
  byte strides given.
- **launch x3**: a function decorated for its three array arguments, called as
  ``launch(a, b, c, s)`` with three such arrays, whose body takes
  ``arg.view(stream_ptr=stream)`` of each and reads the four fields.
- **DLPack**: cuda.core's own device producers: its ``StridedMemoryView`` over a device
  ``Buffer`` (strided float32 (64, 32); it publishes the DLPack C exchange API, which
  stridedview uses) and the ``Buffer`` itself (its ``__dlpack__``), with ``stream_ptr=s``
  and with ``-1``.
- **hand-overs** (stridedview only: cuda.core has none): the same view of a CAI array that
  names no producer stream, on ``s``, with ``view.record_stream(s)`` before it is dropped,
  and a launch of three with ``record_stream=True``, each against the same call without
  it; a hand-over's cost is its case less its baseline.  The steady state ("then s
  synchronized"): the case and its baseline end with ``cuStreamSynchronize(s)``
  (cuda-bindings), so each hand-over's event has completed by the next hand-over's check,
  which releases its hold (one hold pending at a time).  Without it, whether the event has
  completed by then is up to how the simulated stream's thread is scheduled, and the count
  moved by up to 30% between runs.  "N pending": first N holds are handed to another stream
  that a host function keeps blocked, so they stay pending through the whole case (the
  pending bound raised past them for the case); against the baseline without the
  synchronization, because the simulated device's host waits trim its memory pools by
  walking every live handle, thousands of pending events included, which would be charged
  to the hand-over (a real driver's do not).

Printed: each pair's counts and ratio, each hand-over's added instructions, and each
target of the plan, met or NOT MET (the exit status is 0 either way: a measurement, not a
test).  ``--check`` runs every case a few times without valgrind and compares the ``ptr``,
``shape``, ``strides`` (cuda.core's None spelt out) and ``dtype`` of each pair's views; its
exit status is 1 when they differ.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Holds kept pending on a blocked stream for the "N pending" cases.
PENDING = (1, 4000)
#: The host function blocking that stream gives up after this many seconds (under
#: valgrind a case takes seconds; teardown opens it long before).
GATE_TIMEOUT = 3600.0

# (what, our case, cuda.core's case, bar): ours / theirs at most bar.
PAIR_TARGETS = [
    ("ordered CAI view", "CAI view, ordered", 0.5),
    ("ordered launch of three", "launch x3 CAI, ordered", 0.5),
    ("DLPack device producer (cuda.core view) with a stream", "DLPack cuda.core view, stream s", 1.0),
]
#: Suffix of the hand-over cases that end with cuStreamSynchronize(s).
SYNCED = ", then s synchronized"
#: (what, case with the hand-over, the same case without, most instructions added)
HANDOVER_TARGETS = [
    ("view + record_stream(s)", f"view on s, record_stream(s){SYNCED}", f"view on s{SYNCED}", 3000),
    *((f"view + record_stream(s), {holds} pending", f"view on s, record_stream(s), {holds} pending",
       "view on s", 3000) for holds in PENDING),
    ("launch x3 record_stream=True", f"launch x3 on s, record_stream=True{SYNCED}",
     f"launch x3 on s{SYNCED}", 3000),
    *((f"launch x3 record_stream=True, {holds} pending",
       f"launch x3 on s, record_stream=True, {holds} pending", "launch x3 on s", 3000)
      for holds in PENDING),
]
#: The pairs (stridedview "<name>" against cuda.core "<name>"), in the order printed.
PAIRS = [
    "CAI view, ordered",
    "launch x3 CAI, ordered",
    "CAI view (-1)",
    "launch x3 CAI (-1)",
    "CAI view, strided slice (-1)",
    "DLPack cuda.core view, stream s",
    "DLPack cuda.core view (-1)",
    "DLPack cuda.core Buffer, stream s",
    "DLPack cuda.core Buffer (-1)",
]
OURS, THEIRS = "stridedview ", "cuda.core "
#: The driver calls ``--check`` counts per call on the simulated device.
DRIVER_CALLS = ("cuEventRecord", "cuStreamWaitEvent", "cuEventQuery", "cuEventCreate", "cuStreamIsCapturing")


def _ok(result):
    code, *values = result
    if int(code) != 0:
        raise RuntimeError(f"driver call failed: {code!r}")
    return values[0] if len(values) == 1 else values


class _CAI:
    """A CUDA Array Interface producer over device memory: its dict built once."""

    def __init__(self, ptr, shape, strides, stream):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": shape, "typestr": "<f4", "data": (ptr, False),
            "strides": strides, "stream": stream,
        }


class _State:
    """Device 0's primary context current (through cuda.core), streams and device memory."""

    def __init__(self):
        import numpy as np
        from cuda.bindings import driver
        from cuda.core import Device
        from cuda.core.utils import StridedMemoryView as CoreView

        self.device = Device(0)
        self.device.set_current()
        self.producer = self.device.create_stream()  # p: the CAI arrays' stream
        self.consumer = self.device.create_stream()  # s: every view's stream
        self.blocked = self.device.create_stream()  # holds kept pending
        self.p, self.s = int(self.producer.handle), int(self.consumer.handle)
        self.b = int(self.blocked.handle)
        nbytes = 64 * 64 * 4
        self.memory = [int(_ok(driver.cuMemAlloc(nbytes))) for _ in range(4)]
        m = self.memory

        def arrays(stream):
            return tuple(_CAI(ptr, (64, 64), None, stream) for ptr in m[:3])

        self.ordered = arrays(self.p)
        self.unordered = arrays(None)
        # [1:, ::2] of the first: explicit strides, a view of its own (no launch).
        self.strided = _CAI(m[0] + 256, (63, 32), (256, 8), self.p)
        self.free = _CAI(m[3], (64, 64), None, None)  # the hand-overs' array
        self.buffer = self.device.allocate(nbytes, stream=self.producer)
        self.core_view = CoreView.from_buffer(
            self.buffer, (64, 32), (64, 2), dtype=np.dtype(np.float32)
        )
        self.producer.sync()
        self.gate = None

    def settle(self):
        """No work queued, no hand-over pending: each case starts alike."""
        from stridedview import release_pending

        for stream in (self.producer, self.consumer, self.blocked):
            stream.sync()
        release_pending(wait=True)

    def block(self, holds: int):
        """``holds`` hand-overs pending on the blocked stream (and the bound past them)."""
        from stridedview import StridedMemoryView, _view

        self.settle()
        sys.path.insert(0, str(HERE.parent / "tests" / "simgpu"))
        try:
            from simgpu_support import Gate
        finally:
            del sys.path[0]
        self.limit = _view._set_pending_limit(holds + 100_000)
        self.gate = Gate(GATE_TIMEOUT).enqueue(self.b)
        for _ in range(holds):
            view = StridedMemoryView(self.free, stream_ptr=self.b)
            view.record_stream(self.b)
            del view

    def unblock(self):
        from stridedview import _view

        if self.gate is not None:
            self.gate.open()
            self.gate = None
        self.settle()
        _view._set_pending_limit(self.limit)


def _fields(view) -> tuple:
    """ptr, shape, strides in elements (cuda.core's None spelt out) and dtype."""
    import numpy as np

    strides = view.strides
    if strides is None:
        strides, step = [], 1
        for extent in reversed(view.shape):
            strides.append(step)
            step *= max(extent, 1)
        strides = tuple(reversed(strides))
    return (int(view.ptr), tuple(view.shape), tuple(strides), np.dtype(view.dtype))


def build_cases(collect: dict | None = None) -> dict[str, object]:
    """name -> callable (the driver state kept by the closures).  With ``collect``, each
    view's fields are appended to ``collect[name]`` instead of only read."""
    from cuda.core.utils import StridedMemoryView as CoreView
    from cuda.core.utils import args_viewable_as_strided_memory as core_decorator

    from stridedview import StridedMemoryView, args_viewable_as_strided_memory

    state = _State()
    s = state.s
    cases: dict[str, object] = {}

    def view_case(name, make, obj, stream):
        if collect is None:
            def case():
                view = make(obj, stream_ptr=stream)
                view.ptr
                view.shape
                view.strides
                view.dtype
        else:
            sink = collect.setdefault(name, [])

            def case():
                view = make(obj, stream_ptr=stream)
                sink.append(_fields(view))
        cases[name] = case

    def launcher(name, decorator, **options):
        if collect is None:
            def body(x, y, z, stream):
                for arg in (x, y, z):
                    view = arg.view(stream_ptr=stream)
                    view.ptr
                    view.shape
                    view.strides
                    view.dtype
        else:
            sink = collect.setdefault(name, [])

            def body(x, y, z, stream):
                for arg in (x, y, z):
                    view = arg.view(stream_ptr=stream)
                    sink.append(_fields(view))
        return decorator((0, 1, 2), **options)(body)

    def launch_case(name, launch, arrays, stream):
        a, b, c = arrays
        cases[name] = lambda: launch(a, b, c, stream)

    for prefix, make, decorator, cai in (
        (OURS, StridedMemoryView, args_viewable_as_strided_memory, StridedMemoryView),
        (THEIRS, CoreView.from_dlpack, core_decorator, CoreView.from_cuda_array_interface),
    ):
        view_case(prefix + "CAI view, ordered", cai, state.ordered[0], s)
        launch_case(prefix + "launch x3 CAI, ordered",
                    launcher(prefix + "launch x3 CAI, ordered", decorator), state.ordered, s)
        view_case(prefix + "CAI view (-1)", cai, state.ordered[0], -1)
        view_case(prefix + "CAI view, strided slice (-1)", cai, state.strided, -1)
        launch_case(prefix + "launch x3 CAI (-1)",
                    launcher(prefix + "launch x3 CAI (-1)", decorator), state.ordered, -1)
        view_case(prefix + "DLPack cuda.core view, stream s", make, state.core_view, s)
        view_case(prefix + "DLPack cuda.core view (-1)", make, state.core_view, -1)
        view_case(prefix + "DLPack cuda.core Buffer, stream s", make, state.buffer, s)
        view_case(prefix + "DLPack cuda.core Buffer (-1)", make, state.buffer, -1)

    # Hand-overs: the array names no producer stream, so nothing is ordered.
    from cuda.bindings.driver import cuStreamSynchronize as sync

    free = state.free

    def viewer(record, synchronize):
        """The view on s, its fields read; handed over to s or not; s synchronized after
        the view is dropped or not."""
        if record and synchronize:
            def case():
                view = StridedMemoryView(free, stream_ptr=s)
                view.ptr
                view.shape
                view.strides
                view.dtype
                view.record_stream(s)
                del view
                sync(s)
        elif synchronize:
            def case():
                view = StridedMemoryView(free, stream_ptr=s)
                view.ptr
                view.shape
                view.strides
                view.dtype
                del view
                sync(s)
        elif record:
            def case():
                view = StridedMemoryView(free, stream_ptr=s)
                view.ptr
                view.shape
                view.strides
                view.dtype
                view.record_stream(s)
        else:
            def case():
                view = StridedMemoryView(free, stream_ptr=s)
                view.ptr
                view.shape
                view.strides
                view.dtype
        return case

    def launches(launch, synchronize):
        a, b, c = state.unordered
        if synchronize:
            def case():
                launch(a, b, c, s)
                sync(s)
        else:
            def case():
                launch(a, b, c, s)
        return case

    plain = launcher("launch x3 on s", args_viewable_as_strided_memory)
    recording = launcher("launch x3 on s, record_stream=True", args_viewable_as_strided_memory,
                         record_stream=True)
    cases["view on s"] = viewer(False, False)
    cases["launch x3 on s"] = launches(plain, False)
    cases[f"view on s{SYNCED}"] = viewer(False, True)
    cases[f"view on s, record_stream(s){SYNCED}"] = viewer(True, True)
    cases[f"launch x3 on s{SYNCED}"] = launches(plain, True)
    cases[f"launch x3 on s, record_stream=True{SYNCED}"] = launches(recording, True)
    for holds in PENDING:
        cases[f"view on s, record_stream(s), {holds} pending"] = _pending(
            viewer(True, False), state, holds
        )
        cases[f"launch x3 on s, record_stream=True, {holds} pending"] = _pending(
            launches(recording, False), state, holds
        )

    for func in cases.values():
        if getattr(func, "setup", None) is None:
            func.setup = state.settle  # type: ignore[attr-defined]
    cases["view on s"].state = state  # type: ignore[attr-defined]  # kept alive with the cases
    return cases


def _pending(func, state, holds):
    """``func`` run with ``holds`` hand-overs pending on the blocked stream."""
    func.setup = lambda: state.block(holds)
    func.teardown = state.unblock
    return func


def check(calls: int = 3) -> int:
    """Every case run ``calls`` times (its setup and teardown around it), each pair's views
    compared; 0 when they all agree.  On the simulated device, the driver calls that order
    and hand over are counted too: the ordered cases wait on ``s``, the others do not."""
    sys.path.insert(0, str(HERE.parent / "tests" / "simgpu"))
    try:
        from simgpu_support import simulator
    finally:
        del sys.path[0]

    collect: dict[str, list] = {}
    cases = build_cases(collect)
    sim = simulator()
    driver_calls: dict[str, str] = {}
    failed = 0
    for name, func in cases.items():
        func.setup()
        before = {call: sim.calls(call) for call in DRIVER_CALLS} if sim else {}
        for _ in range(calls):
            func()
        if sim is not None:
            made = {call: (sim.calls(call) - before[call]) / calls for call in DRIVER_CALLS}
            driver_calls[name] = ", ".join(f"{c} {n:g}" for c, n in made.items() if n) or "none"
            waits = made["cuStreamWaitEvent"]
            # A CAI case orders s after p exactly when it says so; no (-1) case waits.
            if ("ordered" in name) != (waits > 0) and ("CAI" in name or "(-1)" in name):
                failed += 1
                print(f"  WRONG   {name}: {waits:g} cuStreamWaitEvent per call")
        teardown = getattr(func, "teardown", None)
        if teardown is not None:
            teardown()
    cases["view on s"].state.settle()
    for pair in PAIRS:
        ours, theirs = collect.get(OURS + pair), collect.get(THEIRS + pair)
        same = bool(ours) and ours == theirs
        failed += not same
        shown = ", ".join(f"{p:#x} {s} {t} {d}" for p, s, t, d in dict.fromkeys(ours or []))
        print(f"  {'agree  ' if same else 'DIFFER '} {pair}: {shown}"
              + ("" if same else f" against {theirs}"))
    if driver_calls:
        width = max(map(len, driver_calls))
        print(f"\n{'case':<{width}}  driver calls per call (the simulated device's counters)")
        for name, made in driver_calls.items():
            print(f"{name:<{width}}  {made}")
    print(f"\n{'every case ran, every pair agrees' if not failed else f'{failed} case(s) wrong'}")
    return 1 if failed else 0


def wall(calls: int, patterns: list[str], repeats: int = 5) -> dict[str, float]:
    """Microseconds a call of each case (the best of ``repeats`` loops of ``calls``, after a
    warm-up), without valgrind: on a real GPU, where the instruction counts would measure
    the driver's own code, unknown here.  Each pair's ratio is printed as well."""
    import time

    every_case = build_cases()
    cases = {
        name: func for name, func in every_case.items()
        if not patterns or any(p in name for p in patterns)
    }
    timings: dict[str, float] = {}
    for name, func in cases.items():
        func.setup()
        for _ in range(max(calls // 10, 10)):
            func()
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(calls):
                func()
            best = min(best, (time.perf_counter() - start) / calls)
        teardown = getattr(func, "teardown", None)
        if teardown is not None:
            teardown()
        timings[name] = best * 1e6
        print(f"{timings[name]:10.2f} us  {name}", flush=True)
    every_case["view on s"].state.settle()
    print()
    for pair in PAIRS:
        ours, theirs = timings.get(OURS + pair), timings.get(THEIRS + pair)
        if ours and theirs:
            print(f"{ours / theirs:6.2f}x  {pair} ({ours:.2f} against {theirs:.2f} us)")
    return timings


def report(counts: dict[str, float]) -> None:
    width = max(map(len, PAIRS))
    print(f"{'case':<{width}}  {'stridedview':>11}  {'cuda.core':>9}  ratio")
    for pair in PAIRS:
        ours, theirs = counts.get(OURS + pair), counts.get(THEIRS + pair)
        if ours is None or theirs is None:
            continue
        print(f"{pair:<{width}}  {ours:11.0f}  {theirs:9.0f}  {ours / theirs:.2f}x")
    names = [n for n in counts if not n.startswith((OURS, THEIRS))]
    if names:
        width = max(map(len, names))
        print(f"\n{'stridedview only':<{width}}  instructions per call")
        for name in names:
            print(f"{name:<{width}}  {counts[name]:10.0f}")
    print()
    missed = 0
    for what, pair, bar in PAIR_TARGETS:
        ours, theirs = counts.get(OURS + pair), counts.get(THEIRS + pair)
        if ours is None or theirs is None:
            print(f"  {what}: skipped (not measured)")
            continue
        ratio = ours / theirs
        missed += ratio > bar
        print(f"  {'met    ' if ratio <= bar else 'NOT MET'} {what}: {ratio:.2f}x cuda.core's "
              f"(target <= {bar}x)")
    for what, top, bottom, most in HANDOVER_TARGETS:
        if top not in counts or bottom not in counts:
            print(f"  {what}: skipped (not measured)")
            continue
        added = counts[top] - counts[bottom]
        missed += added > most
        print(f"  {'met    ' if added <= most else 'NOT MET'} {what}: adds {added:,.0f} "
              f"instructions (target <= {most:,})")
    print(f"\n{'every target met' if not missed else f'{missed} target(s) not met'}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=1000, help="calls per case")
    parser.add_argument("--quick", action="store_true", help="100 calls per case: a smoke run")
    parser.add_argument(
        "--cases", action="append", default=[], metavar="SUBSTRING",
        help="only the cases whose name holds SUBSTRING (repeatable)",
    )
    parser.add_argument("--json", metavar="FILE", help="also write the counts as JSON")
    parser.add_argument(
        "--check", action="store_true",
        help="no valgrind: run every case and compare the two libraries' views",
    )
    parser.add_argument(
        "--wall", action="store_true",
        help="no valgrind: microseconds a call of each case (--calls a loop, best of five)",
    )
    args = parser.parse_args(argv)
    if args.check:
        return check()
    if args.wall:
        timings = wall(args.calls, args.cases)
        if args.json:
            with open(args.json, "w") as handle:
                json.dump(timings, handle, indent=1)
        return 0
    if args.quick:
        args.calls = 100
    sys.path.insert(0, str(HERE))
    from callgrind import measure

    counts = measure(args.calls, args.cases, "device", separate_threads=True)
    report(counts)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(counts, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
