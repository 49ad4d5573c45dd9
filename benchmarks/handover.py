"""What a hand-over costs: ``view.record_stream(s)`` and ``record_stream=True``.

    python benchmarks/handover.py [--rounds N] [--calls N]

Needs cuda-bindings and a CUDA driver: a real GPU, or the simulated device
(``simgpu/build.sh build/simgpu``, then ``LD_LIBRARY_PATH=build/simgpu`` in front of
the command).  ``python benchmarks/callgrind.py --module handover`` counts the instructions
of the same cases (on the simulated device its driver's own work is counted too).

The memory is device memory (``cuMemAlloc``) behind a CUDA Array Interface dict that names
no producer stream, so nothing is ordered and every difference between two cases is the
hand-over itself.  The stream ``s`` runs nothing, so each hand-over's event has completed by
the next check: the steady state of a launcher whose kernels keep up, where each hand-over
is recorded, checked, released and its event put back in the pool.

- ``view on s``: construct a view, read ptr, shape, strides and dtype, drop it;
- ``view on s, record_stream(s)``: the same, recorded on ``s`` before it is dropped;
- ``launch x3 on s``: a launcher decorated for three arguments whose body views all three
  on ``s``;
- ``launch x3 on s, record_stream=True``: the same launcher with the option (one event for
  the three views).

Printed: the median time per call over interleaved rounds, and, on the simulated device,
the driver calls each call made (its call counters), which a real driver makes as well.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import timeit
from pathlib import Path

NBYTES = 4096
#: The driver calls worth counting per case (the simulated device counts every call).
CALLS = ("cuEventRecord", "cuEventQuery", "cuStreamIsCapturing", "cuEventCreate", "cuCtxGetCurrent")


def _ok(result):
    code, *values = result
    if int(code) != 0:
        raise RuntimeError(f"driver call failed: {code!r}")
    return values[0] if len(values) == 1 else values


class _Device:
    """Device 0's primary context current, a non-blocking stream, and device memory."""

    def __init__(self):
        from cuda.bindings import driver

        self.driver = driver
        _ok(driver.cuInit(0))
        device = _ok(driver.cuDeviceGet(0))
        self.context = _ok(driver.cuDevicePrimaryCtxRetain(device))
        _ok(driver.cuCtxSetCurrent(self.context))
        self.stream = int(_ok(driver.cuStreamCreate(1)))
        self.memory = int(_ok(driver.cuMemAlloc(3 * NBYTES)))


class _DeviceArray:
    """A CUDA Array Interface producer over device memory, naming no producer stream."""

    def __init__(self, ptr):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (NBYTES // 4,), "typestr": "<f4", "data": (ptr, False),
            "strides": None, "stream": None,
        }


def build_cases() -> dict[str, object]:
    """name -> callable; the driver state they use is made here (kept by the closures)."""
    from stridedview import StridedMemoryView, args_viewable_as_strided_memory

    device = _Device()
    stream = device.stream
    a, b, c = (_DeviceArray(device.memory + i * NBYTES) for i in range(3))

    def view_on_stream():
        view = StridedMemoryView(a, stream_ptr=stream)
        view.ptr
        view.shape
        view.strides
        view.dtype

    def view_recorded():
        view = StridedMemoryView(a, stream_ptr=stream)
        view.ptr
        view.shape
        view.strides
        view.dtype
        view.record_stream(stream)

    def body(x, y, z):
        x.view(stream)
        y.view(stream)
        z.view(stream)

    plain = args_viewable_as_strided_memory((0, 1, 2))(body)
    recording = args_viewable_as_strided_memory((0, 1, 2), record_stream=True)(body)
    cases = {
        "view on s": view_on_stream,
        "view on s, record_stream(s)": view_recorded,
        "launch x3 on s": lambda: plain(a, b, c),
        "launch x3 on s, record_stream=True": lambda: recording(a, b, c),
    }
    view_on_stream.device = device  # type: ignore[attr-defined]  # kept alive with the cases
    return cases


def _simulator():
    """tests/simgpu's Simulator when libcuda.so.1 is the simulator, else None (a real driver:
    no call counts)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "simgpu"))
    try:
        from simgpu_support import simulator
    finally:
        del sys.path[0]
    return simulator()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--calls", type=int, default=2000, help="calls per sample")
    args = parser.parse_args(argv)
    try:
        cases = build_cases()
    except Exception as exc:  # noqa: BLE001 - said in one line: no driver, no device
        print(f"handover.py: needs cuda-bindings and a CUDA driver ({exc})", file=sys.stderr)
        return 1
    from stridedview import release_pending

    for func in cases.values():
        for _ in range(500):
            func()
    release_pending(wait=True)
    simulator = _simulator()
    counts = {}
    if simulator is not None:
        for name, func in cases.items():
            before = {call: simulator.calls(call) for call in CALLS}
            for _ in range(args.calls):
                func()
            counts[name] = {
                call: (simulator.calls(call) - before[call]) / args.calls
                for call in CALLS
            }
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(args.rounds):
        for name, func in cases.items():
            samples[name].append(timeit.timeit(func, number=args.calls) / args.calls)
    release_pending(wait=True)
    width = max(map(len, cases))
    print(f"{'case':<{width}}  µs per call" + ("  driver calls per call" if counts else ""))
    for name in cases:
        line = f"{name:<{width}}  {statistics.median(samples[name]) * 1e6:10.2f}"
        if counts:
            line += "  " + ", ".join(
                f"{call} {count:g}" for call, count in counts[name].items() if count
            )
        print(line)
    if simulator is not None:
        print("(the simulated device: its driver calls cost what its C code costs, not a GPU's)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
