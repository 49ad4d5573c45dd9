"""The simulated device's cost per call early in a process and late in a long one.

    simgpu/with-simulator.sh python benchmarks/simgpu_growth.py [--destroyed N]

The simulator keeps what every destroyed stream and event leaves behind (so that a later use
of its handle is answered as the real driver answers it), so its handle table grows with the
life of the process.  No call may pay for that: each host synchronisation (stream, event,
context) and query is timed over 20,000 calls on a fresh stream, then again after
``--destroyed`` (default 200,000) events were created and destroyed.  The target (issue 49):
a long test suite runs at the speed of a short one, each late cost within 1.5x of the early
one (noise on a loaded two-core machine included).  Printed: each call's early and late
microseconds and their ratio, and the target met or NOT MET (exit status 0 either way: a
measurement, not a test).  Before the fix, a stream synchronisation walked the whole table
for the memory pools it trims: 0.89 us early, 4,826 us late (5,412x).
"""

from __future__ import annotations

import argparse
import time

from cuda.bindings import driver as drv

CALLS = 20_000


def ok(result):
    if int(result[0]) != 0:
        raise RuntimeError(f"{result[0]!r}")
    return result[1] if len(result) == 2 else result[1:]


def per_call(function) -> float:
    start = time.perf_counter()
    for _ in range(CALLS):
        function()
    return (time.perf_counter() - start) / CALLS * 1e6


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--destroyed", type=int, default=200_000)
    args = parser.parse_args()
    drv.cuInit(0)
    device = ok(drv.cuDeviceGet(0))
    drv.cuCtxSetCurrent(ok(drv.cuDevicePrimaryCtxRetain(device)))
    stream = ok(drv.cuStreamCreate(1))
    event = ok(drv.cuEventCreate(2))
    ok((drv.cuEventRecord(event, stream)[0], None))
    calls = {
        "cuStreamSynchronize": lambda: drv.cuStreamSynchronize(stream),
        "cuEventSynchronize": lambda: drv.cuEventSynchronize(event),
        "cuEventQuery": lambda: drv.cuEventQuery(event),
        "cuCtxSynchronize": lambda: drv.cuCtxSynchronize(),
    }
    early = {name: per_call(call) for name, call in calls.items()}
    for _ in range(args.destroyed):
        drv.cuEventDestroy(ok(drv.cuEventCreate(2)))
    late = {name: per_call(call) for name, call in calls.items()}
    met = True
    for name in calls:
        ratio = late[name] / early[name]
        met = met and ratio <= 1.5
        print(f"{name:<20} {early[name]:8.2f} us early  {late[name]:8.2f} us late  {ratio:6.2f}x")
    print(f"target (each late cost within 1.5x of the early one): {'met' if met else 'NOT MET'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
