"""Views exchanged between two processes through CUDA IPC: order, lifetime and cost.

    simgpu/with-simulator.sh python benchmarks/ipc.py [--views 1000] [--delay-us 0 2000]

A producer process (this one) and a consumer process (spawned) exchange ``--views`` views.
For each, the producer allocates 4 KiB (``cuMemAlloc``), fills it with the view's number on
its stream (behind a second operation, so that with a delay the producer's stream runs at
half the consumer's pace), views it there and puts the view in a ``multiprocessing`` queue (it pickles,
through CUDA IPC); the allocation is freed (``cuMemFree``) as soon as the producer's view of
it is released, which stridedview's IPC share delays until the consumer has let go.  The
consumer views each received view on its own stream, queues a copy of its bytes into pinned
memory there, records the stream and drops it; only at the end does it synchronise its
stream and check every copy.  With ``SIMGPU_DELAY_US`` at 2000 every stream operation runs
2 ms late, so a copy ordered after nothing, or memory freed before the consumer's stream
is done, reads other bytes: both show as wrong copies.

Printed per delay: wrong copies (must be 0), host waits on each side during the exchange
(the simulator's ``host_waits`` counter: must be 0), and the consumer's median cost of
importing a view (unpickling it and viewing it on its stream), of a new allocation each
time and of one allocation already opened (at most 8 views in flight, as a bounded queue
keeps a pipeline), next to one
``cuIpcOpenMemHandle`` (of a fresh allocation, then closed) plus one ``cuStreamWaitEvent``
on an IPC event: the import opens each allocation's handle once and waits once.
Needs the simulated device (its counters and delay); ``--views`` and ``--delay-us`` choose.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import pickle
import statistics
import sys
import time
from pathlib import Path

NBYTES = 4096
REFERENCE_HANDLES = 200
DEPTH = 8  # views in flight in the cost phase


def _ok(result):
    code, *values = result
    if int(code) != 0:
        raise RuntimeError(f"driver call failed: {code!r}")
    return values[0] if len(values) == 1 else (values or None)


def _setup():
    from cuda.bindings import driver as drv

    _ok(drv.cuInit(0))
    context = _ok(drv.cuDevicePrimaryCtxRetain(_ok(drv.cuDeviceGet(0))))
    _ok(drv.cuCtxSetCurrent(context))
    return drv, _ok(drv.cuStreamCreate(1))


class _Owned:
    """4 KiB of device memory written on ``stream`` (a CUDA Array Interface producer), freed
    with cuMemFree when released."""

    def __init__(self, drv, ptr, stream):
        self.drv, self.ptr = drv, ptr
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (NBYTES,), "typestr": "|u1", "data": (int(ptr), False),
            "strides": None, "stream": int(stream),
        }

    def __del__(self):
        self.drv.cuMemFree(self.ptr)


class _Borrowed:
    """256 bytes of memory kept by its owner, written on ``stream``."""

    def __init__(self, ptr, stream):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (256,), "typestr": "|u1", "data": (ptr, False),
            "strides": None, "stream": int(stream),
        }


def _expect(queue, word: str) -> None:
    got = queue.get(timeout=120)
    if got != word:
        raise RuntimeError(f"expected {word!r} from the consumer, got {got!r}")


def _value(index: int) -> int:
    return index % 251 + 1


def consumer(inbox, outbox) -> None:
    import ctypes

    from stridedview import StridedMemoryView, release_pending
    from stridedview_simgpu import simulator

    drv, stream = _setup()
    sim = simulator()
    # The reference: one cuIpcOpenMemHandle (then closed) and one event wait, per handle.
    from stridedview._ipc import _handle_from

    handles, event_handle = inbox.get()
    handles = [_handle_from(drv.CUipcMemHandle, h) for h in handles]
    event = _ok(drv.cuIpcOpenEventHandle(_handle_from(drv.CUipcEventHandle, event_handle)))
    reference = []
    for handle in handles:
        start = time.perf_counter()
        base = _ok(drv.cuIpcOpenMemHandle(handle, 1))
        _ok(drv.cuStreamWaitEvent(stream, event, 0))
        reference.append(time.perf_counter() - start)
        _ok(drv.cuIpcCloseMemHandle(base))
    _ok(drv.cuStreamSynchronize(stream))
    outbox.put("ready")
    count = inbox.get()
    pinned = _ok(drv.cuMemAllocHost(count * NBYTES))
    waits = sim.counter("host_waits")
    imports = []
    for index in range(count):
        record = inbox.get()
        start = time.perf_counter()
        received = pickle.loads(record)
        view = StridedMemoryView(received, stream_ptr=int(stream))
        imports.append(time.perf_counter() - start)
        _ok(drv.cuMemcpyDtoHAsync(pinned + index * NBYTES, view.ptr, NBYTES, stream))
        view.record_stream(int(stream))
        del view, received
    waits = sim.counter("host_waits") - waits
    _ok(drv.cuStreamSynchronize(stream))
    release_pending()
    data = ctypes.string_at(pinned, count * NBYTES)
    wrong = sum(
        data[i * NBYTES:(i + 1) * NBYTES] != bytes([_value(i)]) * NBYTES for i in range(count)
    )
    # Views of one allocation the producer keeps, at most DEPTH in flight (a bounded queue,
    # as a pipeline runs): its handle is opened once, and the producer's interprocess events
    # come back to it as views are released, each opened here once.
    reused = []
    opens = sim.calls("cuIpcOpenMemHandle_v2") + sim.calls("cuIpcOpenMemHandle")
    event_opens = sim.calls("cuIpcOpenEventHandle")
    for _ in range(inbox.get()):
        record = inbox.get()
        start = time.perf_counter()
        view = StridedMemoryView(pickle.loads(record), stream_ptr=int(stream))
        reused.append(time.perf_counter() - start)
        del view
        outbox.put("done")
    opens = sim.calls("cuIpcOpenMemHandle_v2") + sim.calls("cuIpcOpenMemHandle") - opens
    event_opens = sim.calls("cuIpcOpenEventHandle") - event_opens
    outbox.put((
        wrong, waits, statistics.median(imports), statistics.median(reused), statistics.median(reference),
        opens, event_opens,
    ))


def run(views: int, delay_us: int) -> dict:
    from cuda.bindings import driver as drv_module  # noqa: F401 - loads the driver first

    from stridedview import StridedMemoryView, ipc
    from stridedview_simgpu import simulator

    drv, stream = _setup()
    sim = simulator()
    if sim is None:
        raise SystemExit("benchmarks/ipc.py needs the simulated device: run it through simgpu/with-simulator.sh")
    sim.set_delay_us(0)
    context = multiprocessing.get_context("spawn")
    inbox, outbox = context.Queue(), context.Queue()
    process = context.Process(target=consumer, args=(inbox, outbox), daemon=True)
    os.environ["SIMGPU_DELAY_US"] = str(delay_us)
    process.start()
    kept = [_ok(drv.cuMemAlloc(NBYTES)) for _ in range(REFERENCE_HANDLES)]
    event = _ok(drv.cuEventCreate(4 | 2))
    _ok(drv.cuEventRecord(event, stream))
    from stridedview._ipc import _handle_bytes

    handles = [_handle_bytes(_ok(drv.cuIpcGetMemHandle(p))) for p in kept]
    inbox.put((handles, _handle_bytes(_ok(drv.cuIpcGetEventHandle(event)))))
    _expect(outbox, "ready")
    sim.set_delay_us(delay_us)
    inbox.put(views)
    waits = sim.counter("host_waits")
    scratch = _ok(drv.cuMemAlloc(NBYTES))
    for index in range(views):
        ptr = _ok(drv.cuMemAlloc(NBYTES))
        # Two operations per view on the producer's stream, one on the consumer's: with a
        # delay, the consumer's copies would overtake the writes they must wait for.
        _ok(drv.cuMemsetD8Async(scratch, 0, NBYTES, stream))
        _ok(drv.cuMemsetD8Async(ptr, _value(index), NBYTES, stream))
        view = StridedMemoryView(_Owned(drv, ptr, stream), stream_ptr=int(stream))
        inbox.put(pickle.dumps(view))
        del view
    producer_waits = sim.counter("host_waits") - waits
    kept_one = _ok(drv.cuMemAlloc(NBYTES))
    inbox.put(views)
    for index in range(views):
        if index >= DEPTH:
            _expect(outbox, "done")
        offset = (index % 16) * 256
        array = _Borrowed(int(kept_one) + offset, stream)
        inbox.put(pickle.dumps(StridedMemoryView(array, stream_ptr=int(stream))))
    for _ in range(min(views, DEPTH)):
        _expect(outbox, "done")
    wrong, consumer_waits, imported, reused, reference, opens, event_opens = outbox.get(timeout=600)
    process.join(60)
    deadline = time.monotonic() + 30
    while ipc.shares_held() and time.monotonic() < deadline:
        time.sleep(0.01)
    sim.set_delay_us(0)
    for p in kept + [kept_one, scratch]:
        drv.cuMemFree(p)
    return {
        "delay_us": delay_us, "views": views, "wrong copies": wrong,
        "host waits (producer)": producer_waits, "host waits (consumer)": consumer_waits,
        "import, new allocation (us)": round(imported * 1e6, 1),
        "import, opened allocation (us)": round(reused * 1e6, 1),
        "open + wait (us)": round(reference * 1e6, 1),
        "opened allocation: handle opens": opens, "event opens": event_opens,
        "shares left": ipc.shares_held(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--views", type=int, default=1000)
    parser.add_argument("--delay-us", type=int, nargs="+", default=[0, 2000])
    args = parser.parse_args(argv)
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    failed = False
    for delay in args.delay_us:
        result = run(args.views, delay)
        print("  ".join(f"{key}: {value}" for key, value in result.items()))
        failed |= bool(result["wrong copies"] or result["host waits (producer)"] or result["host waits (consumer)"])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
