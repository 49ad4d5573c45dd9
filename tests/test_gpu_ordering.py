"""Which stream a handle names, raced on the simulated device: default streams, two devices,
chains of views, one reused event, the exchange API's NULL work stream, a reset context.

Each test writes late on a producer stream (the simulator delays every operation: marked
``simgpu``), makes a view ordering some consumer stream after it, and reads on the consumer
stream into pinned memory: the read must see the write.  These were the "what the consumer
sees" tests of tests/test_stream_ordering.py, checked there in the fake driver's model; here
the driver is the real cuda-bindings on the simulator, and the data are real.  The fake keeps
the exact call sequences; injected failures are in tests/test_gpu_driver_faults.py.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from stridedview import StridedMemoryView, _driver

pytestmark = [pytest.mark.gpu, pytest.mark.simgpu]

NBYTES = 1024
DELAY_US = 1000
FILLERS = 2


class Spot:
    """NBYTES of device memory on ``device``, written late on a stream, read back on another."""

    #: Operations queued on the writing stream before each write (each delayed).
    fillers = FILLERS

    def __init__(self, res, device=0):
        from driver_support import CAIArray

        self.device = device
        self.memory = res.device(NBYTES, device)
        self.scratch = res.device(64, device)
        self.out = res.pinned(NBYTES, device)
        self.res = res
        self.value = 0
        self.cai = CAIArray

    def write(self, stream_handle, value):
        """``value`` over the memory, late, on ``stream_handle`` of this device's primary
        context (0, 1 and 2 name that context's default streams)."""
        from driver_support import drv, ok, on_device

        self.value = value
        with on_device(self.device):
            for _ in range(self.fillers):
                ok(drv.cuMemsetD8Async(self.scratch.ptr, 0, 64, stream_handle))
            ok(drv.cuMemsetD8Async(self.memory.ptr, value, NBYTES, stream_handle))

    def array(self, stream):
        """A CAI producer over the memory naming ``stream`` as its own."""
        return self.cai(self.memory, (NBYTES,), np.uint8, stream=stream)

    def read(self, stream_handle, device=None) -> bool:
        """Copy the memory to pinned memory on ``stream_handle`` (of ``device``'s primary context,
        this one's by default); whether it holds the last value written."""
        from driver_support import drv, ok, on_device

        with on_device(self.device if device is None else device):
            ok(drv.cuMemcpyDtoHAsync(self.out.ptr, self.memory.ptr, NBYTES, stream_handle))
            ok(drv.cuStreamSynchronize(stream_handle))
        return bool((self.out.array() == self.value).all())


@pytest.fixture
def delayed(gpu, simulator):
    simulator.set_delay_us(DELAY_US)
    return gpu


@pytest.mark.parametrize(
    "producer, consumer",
    [(1, "stream"), (2, "stream"), (1, 2), (2, 1), (2, 0), ("stream", 0), ("stream", 1), ("stream", 2)],
    ids=["1-to-stream", "2-to-stream", "1-to-2", "2-to-1", "2-to-0", "stream-to-0", "stream-to-1", "stream-to-2"],
)
def test_default_streams_are_ordered(delayed, producer, consumer):
    """Writes on a default stream (1, 2) or an ordinary one are seen by a consumer on another
    stream, a default one included (0 is the legacy stream), after the view."""
    spot = Spot(delayed)
    producer = delayed.stream().ptr if producer == "stream" else producer
    consumer = delayed.stream().ptr if consumer == "stream" else consumer
    spot.write(producer, 0x21)
    view = StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert view.ready_stream == consumer
    assert spot.read(consumer)


@pytest.mark.parametrize("producer, consumer", [(1, 1), (1, 0), (2, 2), (1, 2)], ids=["1-1", "1-0", "2-2", "1-2"])
def test_default_streams_of_two_devices_are_ordered(delayed, two_gpus, producer, consumer):
    """Data on device 1 with device 0 current: the producer's default stream is device 1's, the
    consumer's device 0's, and device 0's default stream sees device 1's write."""
    spot = Spot(delayed, device=1)
    spot.write(producer, 0x22)
    StridedMemoryView(spot.array(producer), stream_ptr=consumer)  # device 0 current
    assert spot.read(consumer, device=0)


def test_chained_views_are_transitive(delayed, two_gpus):
    """p -> q (a view), a write on q, then q -> r on another device: r sees both."""
    spot = Spot(delayed)
    p, q, r = delayed.stream(), delayed.stream(), delayed.stream(1)
    spot.write(p.ptr, 0x31)
    StridedMemoryView(spot.array(p.ptr), stream_ptr=q.ptr)
    from driver_support import drv, ok

    ok(drv.cuMemsetD8Async(spot.memory.ptr + NBYTES // 2, 0x32, NBYTES // 2, q.handle))
    StridedMemoryView(spot.array(q.ptr), stream_ptr=r.ptr)
    from driver_support import on_device

    with on_device(1):
        ok(drv.cuMemcpyDtoHAsync(spot.out.ptr, spot.memory.ptr, NBYTES, r.handle))
        ok(drv.cuStreamSynchronize(r.handle))
    out = spot.out.array()
    assert (out[: NBYTES // 2] == 0x31).all() and (out[NBYTES // 2:] == 0x32).all()


def test_reused_event_waits_capture_their_own_point(delayed, simulator):
    """One event serves both views (created once), yet each consumer waits for what was written
    before its own view: c1 sees the first write, c2 the second.  (The producer's second write
    waits for c1's read, as a correct program's must: a write after another stream's read.)"""
    spot = Spot(delayed)
    producer, c1, c2 = delayed.stream(), delayed.stream(), delayed.stream()
    first, second = delayed.pinned(NBYTES), delayed.pinned(NBYTES)
    from driver_support import DISABLE_TIMING, drv, ok

    read = ok(drv.cuEventCreate(DISABLE_TIMING))  # (the test's own, made before the count)
    created = simulator.counter("events_created")
    spot.write(producer.ptr, 0x41)
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=c1.ptr)
    ok(drv.cuMemcpyDtoHAsync(first.ptr, spot.memory.ptr, NBYTES, c1.handle))
    ok(drv.cuEventRecord(read, c1.handle))
    ok(drv.cuStreamWaitEvent(producer.handle, read, 0))  # the second write after c1's read
    spot.write(producer.ptr, 0x42)
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=c2.ptr)
    ok(drv.cuMemcpyDtoHAsync(second.ptr, spot.memory.ptr, NBYTES, c2.handle))
    c1.synchronize()
    c2.synchronize()
    assert simulator.counter("events_created") - created <= 1
    ok(drv.cuEventDestroy(read))
    assert (first.array() == 0x41).all()
    assert (second.array() == 0x42).all()


def test_cuda_stream_object_is_ordered_like_its_handle(delayed):
    """A consumer given as an object with __cuda_stream__ is ordered like its handle."""
    spot = Spot(delayed)
    producer, consumer = delayed.stream(), delayed.stream()
    spot.write(producer.ptr, 0x51)
    view = StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer)
    assert view.ready_stream == consumer.ptr
    assert spot.read(consumer.handle)


def exchange_view(ptr, device, work_stream, consumer):
    from test_gpu_streams import exchange_view as make

    import test_gpu_streams

    saved, test_gpu_streams.NBYTES = test_gpu_streams.NBYTES, NBYTES
    try:
        return make(ptr, device, work_stream, consumer)
    finally:
        test_gpu_streams.NBYTES = saved


@pytest.mark.parametrize("work_stream", [0, 1, 2], ids=["null", "legacy", "per-thread"])
def test_exchange_api_default_stream_is_the_tensor_devices(delayed, two_gpus, work_stream):
    """A tensor on device 1 whose producer reports a NULL (or 1, 2) work stream while device 0
    is current: the consumer on device 0 sees device 1's default-stream write."""
    spot = Spot(delayed, device=1)
    consumer = delayed.stream(0)
    spot.write(work_stream, 0x61)
    view = exchange_view(spot.memory.ptr, 1, work_stream, consumer.ptr)
    assert view.ready_stream == consumer.ptr and view.device_id == 1
    assert spot.read(consumer.handle, device=0)


@pytest.mark.parametrize("consumer_kind", ["stream", "null", "legacy"])
def test_exchange_api_null_stream_with_no_current_context(delayed, two_gpus, consumer_kind):
    """In a thread with no current context, a NULL work stream of a tensor on device 1 is ordered
    in device 1's primary context; a default consumer stream is device 1's too."""
    spot = Spot(delayed, device=1)
    stream = delayed.stream(0)
    consumer = {"stream": stream.ptr, "null": 0, "legacy": 1}[consumer_kind]
    spot.write(0, 0x62)
    outcome = {}

    def run():
        try:
            from driver_support import current_context

            exchange_view(spot.memory.ptr, 1, 0, consumer)
            outcome["context"] = current_context()
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert outcome == {"context": 0}, outcome
    assert spot.read(consumer, device=0 if consumer_kind == "stream" else 1)


def test_exchange_api_default_stream_context_is_never_cached(delayed, two_gpus):
    """One thread viewing NULL-stream tensors on device 0, then 1, then 0, then 1: each view
    waits on its own tensor's device."""
    consumer = delayed.stream(0)
    spots = [Spot(delayed, 0), Spot(delayed, 1)]
    for round_, device in enumerate([0, 1, 0, 1]):
        spot = spots[device]
        spot.write(0, 0x70 + round_)
        exchange_view(spot.memory.ptr, device, 0, consumer.ptr)
        assert spot.read(consumer.handle, device=0), (round_, device)


def test_use_api_destroys_every_event_and_releases_primary_contexts(delayed, simulator, two_gpus):
    """Swapping the driver seam destroys the events of every thread (one per context and
    thread), live or not, in the real driver."""
    spot0, spot1 = Spot(delayed, 0), Spot(delayed, 1)
    consumer = delayed.stream(0)
    live = simulator.counter("events_live")
    StridedMemoryView(spot0.array(delayed.stream(0).ptr), stream_ptr=consumer.ptr)
    StridedMemoryView(spot1.array(delayed.stream(1).ptr), stream_ptr=consumer.ptr)
    ready, release = threading.Event(), threading.Event()

    def holder():
        from driver_support import make_current

        make_current(0)
        StridedMemoryView(spot0.array(delayed.stream(0).ptr), stream_ptr=consumer.ptr)
        ready.set()
        release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert ready.wait(10)
        assert simulator.counter("events_live") - live == 3
        _driver.use_api(None)
        assert simulator.counter("events_live") == live
    finally:
        release.set()
        thread.join(10)


def test_events_are_destroyed_when_their_threads_end(delayed, simulator):
    """Each thread's events are destroyed in the driver when the thread ends."""
    spot = Spot(delayed)
    live = simulator.counter("events_live")
    producer, consumer = delayed.stream(), delayed.stream()

    def run():
        StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    import gc

    gc.collect()
    assert simulator.counter("events_live") == live


RESET_SCRIPT = """
import sys
sys.path[:0] = sys.argv[1:3]
import numpy as np
import driver_support
from driver_support import Resources, drv, make_current, ok, simulator
import test_gpu_ordering as t
import stridedview
from stridedview import StridedMemoryView

sim = simulator()
make_current(0)

def view_after(value):
    res = Resources()
    try:
        spot = t.Spot(res, 0)
        consumer = res.stream(1)
        sim.set_delay_us(t.DELAY_US)
        if sys.argv[3] == "stream":
            stream = res.stream(0)
            spot.write(stream.ptr, value)
            StridedMemoryView(spot.array(stream.ptr), stream_ptr=consumer.ptr)
        else:
            spot.write(0, value)
            t.exchange_view(spot.memory.ptr, 0, 0, consumer.ptr)
        return spot.read(consumer.handle, device=1)
    finally:
        sim.set_delay_us(0)
        res.release()

results = [view_after(0x81)]
stridedview.release_driver_resources()
created = sim.counter("events_created")
ok(drv.cuDevicePrimaryCtxReset(ok(drv.cuDeviceGet(0))))
make_current(0)
results += [view_after(0x82), view_after(0x83)]
print(results, sim.counter("events_created") - created)
"""


@pytest.mark.parametrize("producer", ["stream", "null-stream"])
def test_ordering_works_after_release_driver_resources_and_a_reset(gpu, two_gpus, producer):
    """``release_driver_resources()``, then cuDevicePrimaryCtxReset of device 0 (what
    cudaDeviceReset does: the context keeps its handle, its events and streams die, and a
    real driver crashes when one is named again): the next views order correctly with an
    event made anew, once, and name nothing from before the reset (the simulator would end
    the process).  In a child process: the reset would take every other test's memory on
    device 0 with it."""
    from simgpu.simgpu_support import child_paths, run_python

    result = run_python(RESET_SCRIPT, args=[*child_paths(), producer])
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("]")[0] + "]" == "[True, True, True]", result.stdout
    assert result.stdout.split("]")[1].strip() == "1", result.stdout
