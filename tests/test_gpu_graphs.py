"""CUDA graphs on the simulated device: views, launches and hand-overs made while a stream
captures, replayed many times.

A producer writes late on its own stream (the simulator delays every operation: marked
``simgpu``), a consumer stream that is capturing a graph views the producer's array (its
CUDA Array Interface names the producer's stream), and the capture copies the memory to
pinned host memory.  The capture must stay valid, and every replay of the instantiated graph
must read the producer's data: the ordering became the graph's external event wait
(``CU_EVENT_WAIT_EXTERNAL``) on an event the graph owns.  The control, the same capture with
``stream_ptr=-1``, reads stale bytes.  Holds handed to a capturing stream (``record_stream``,
``record_stream=True``) are released once the graph and every executable graph made from it
are gone, exactly once, never before.  Each test runs with the C driver door on and off
(``door``), the door's capture check being what sends a capturing consumer to the Python
path.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from stridedview import StridedMemoryView, _driver, _view, args_viewable_as_strided_memory, release_pending

pytestmark = [pytest.mark.gpu, pytest.mark.simgpu]

NBYTES = 1024
DELAY_US = 1000
#: Operations queued on the producer's stream before its write: the write lands about
#: (FILLERS + 1) * DELAY_US after it is queued, well after a replay's copy would without a wait.
FILLERS = 4
REPLAYS = 20
ORIGINAL, NEW = 0x11, 0x5A


@pytest.fixture(params=["c-door", "python"])
def door(request, gpu, simulator, monkeypatch):
    """The simulated device with each operation delayed, the C driver door on or off."""
    monkeypatch.setattr(_driver, "_c_door", request.param == "c-door")
    _driver.use_api(None)  # the door decided again at the next ordering
    simulator.set_delay_us(DELAY_US)
    yield gpu
    simulator.set_delay_us(0)
    for _ in range(2):
        release_pending(wait=True)


def door_state():
    return _view._driver_door_info()["state"]


class Spot:
    """NBYTES of device memory written late on a producer stream, read by captured copies."""

    def __init__(self, res, device=0):
        from driver_support import drv, ok, on_device

        self.device = device
        self.memory = res.device(NBYTES, device)
        self.scratch = res.device(64, device)
        self.out = res.pinned(NBYTES, device)
        with on_device(device):
            ok(drv.cuMemsetD8(self.memory.ptr, ORIGINAL, NBYTES))
            ok(drv.cuCtxSynchronize())

    def write(self, stream_handle, value=NEW):
        """``value`` over the memory, late, on ``stream_handle`` (0, 1 and 2 name this
        device's primary context's default streams)."""
        from driver_support import drv, ok, on_device

        with on_device(self.device):
            for _ in range(FILLERS):
                ok(drv.cuMemsetD8Async(self.scratch.ptr, 0, 64, stream_handle))
            ok(drv.cuMemsetD8Async(self.memory.ptr, value, NBYTES, stream_handle))

    def array(self, stream):
        from driver_support import CAIArray

        return CAIArray(self.memory, (NBYTES,), np.uint8, stream=stream)

    def capture_copy(self, stream_handle):
        """The captured "kernel": the memory copied to pinned host memory."""
        from driver_support import drv, ok

        ok(drv.cuMemcpyDtoHAsync(self.out.ptr, self.memory.ptr, NBYTES, stream_handle))


class Capture:
    """``with Capture(stream) as graph:`` captures ``stream``; ``graph.replay(n, check)``
    instantiates it and launches it ``n`` times on its stream, calling ``check()`` after
    each; ``close()`` destroys what was made."""

    def __init__(self, stream_handle, mode="thread_local", device=0):
        self.stream = stream_handle
        self.mode = mode
        self.device = device
        self.graph = None
        self.exe = None

    def __enter__(self):
        from driver_support import drv, ok, on_device

        modes = drv.CUstreamCaptureMode
        mode = modes.CU_STREAM_CAPTURE_MODE_GLOBAL if self.mode == "global" else (
            modes.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL)
        with on_device(self.device):
            ok(drv.cuStreamBeginCapture(self.stream, mode))
        return self

    def __exit__(self, *exc):
        from driver_support import drv, ok, on_device

        with on_device(self.device):
            result = drv.cuStreamEndCapture(self.stream)
        if exc[0] is None:
            self.graph = ok(result)
        elif int(result[0]) == 0:
            ok(drv.cuGraphDestroy(result[1]))

    def replay(self, times, check):
        from driver_support import drv, ok, on_device

        with on_device(self.device):
            if self.exe is None:
                self.exe = ok(drv.cuGraphInstantiate(self.graph, 0))
            for _ in range(times):
                ok(drv.cuGraphLaunch(self.exe, self.stream))
                ok(drv.cuStreamSynchronize(self.stream))
                check()

    def destroy_graph(self):
        from driver_support import drv, ok

        if self.graph is not None:
            ok(drv.cuGraphDestroy(self.graph))
            self.graph = None

    def destroy_exe(self):
        from driver_support import drv, ok

        if self.exe is not None:
            ok(drv.cuGraphExecDestroy(self.exe))
            self.exe = None

    def close(self):
        self.destroy_exe()
        self.destroy_graph()


def replays_read(spot, capture, value=NEW, times=REPLAYS):
    """Replay ``capture`` ``times`` times; how many replays read ``value``."""
    seen = []

    def check():
        seen.append(bool((spot.out.array() == value).all()))
        spot.out.array()[:] = 0

    spot.out.array()[:] = 0
    capture.replay(times, check)
    return sum(seen)


def settle(predicate, timeout=10.0):
    """Poll ``release_pending()`` until ``predicate()`` holds (a user object's destructor runs
    on a driver thread, some time after its graph is gone)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        release_pending()
        if predicate():
            return True
        time.sleep(0.002)
    release_pending()
    return predicate()


# --- ordering into a capturing stream -------------------------------------------------------


@pytest.mark.parametrize("producer", ["stream", 1, 2])
def test_replays_wait_for_the_producer_work_queued_at_capture(door, simulator, producer):
    """A CAI view made for a capturing consumer keeps the capture valid, and every replay reads
    what the producer's stream wrote (queued before the capture, still running when the
    first replay starts); the graph's event is destroyed with the graph."""
    spot = Spot(door)
    consumer = door.stream()
    producer = door.stream().ptr if producer == "stream" else producer
    events = simulator.counter("events_live")
    spot.write(producer)
    with Capture(consumer.handle) as capture:
        view = StridedMemoryView(spot.array(producer), stream_ptr=consumer.ptr)
        assert view.ready_stream == consumer.ptr
        spot.capture_copy(consumer.handle)
    assert door_state() == (1 if _driver._c_door else -1)
    assert _view._graph_owned() == 1  # the event
    assert replays_read(spot, capture) == REPLAYS
    capture.close()
    assert settle(lambda: _view._graph_owned() == 0)
    assert simulator.counter("events_live") <= events + 2  # (this thread's cached events)


def test_without_ordering_the_replay_reads_stale_data(door):
    """The control: the same capture with ``stream_ptr=-1`` does not wait for the producer, and
    its first replay reads the bytes from before the write."""
    spot = Spot(door)
    consumer, producer = door.stream(), door.stream()
    spot.write(producer.ptr)
    with Capture(consumer.handle) as capture:
        StridedMemoryView(spot.array(producer.ptr), stream_ptr=-1)
        spot.capture_copy(consumer.handle)
    try:
        assert replays_read(spot, capture, value=ORIGINAL, times=1) == 1
    finally:
        capture.close()


def test_a_plain_wait_would_have_invalidated_the_capture(door):
    """Why the wait is external: the wait an ordinary ordering makes, into a capturing stream,
    on an event recorded outside the capture, invalidates it (the driver's rule)."""
    from driver_support import drv, ok

    consumer, producer = door.stream(), door.stream()
    event = ok(drv.cuEventCreate(2))
    try:
        ok(drv.cuEventRecord(event, producer.handle))
        with pytest.raises(AssertionError):
            with Capture(consumer.handle):
                result = drv.cuStreamWaitEvent(consumer.handle, event, 0)
                assert result[0] == drv.CUresult.CUDA_ERROR_STREAM_CAPTURE_ISOLATION
                raise AssertionError("invalidated")
    finally:
        ok(drv.cuEventDestroy(event))


def test_a_producer_in_the_same_capture_is_joined(door):
    """A producer stream the capture forked to is part of the graph: the view joins it back
    (a plain wait, an edge of the graph), and the capture can end."""
    from driver_support import drv, ok

    spot = Spot(door)
    consumer, side = door.stream(), door.stream()
    fork = ok(drv.cuEventCreate(2))
    try:
        with Capture(consumer.handle) as capture:
            ok(drv.cuEventRecord(fork, consumer.handle))
            ok(drv.cuStreamWaitEvent(side.handle, fork, 0))
            spot.write(side.handle)  # captured: runs at each replay
            StridedMemoryView(spot.array(side.ptr), stream_ptr=consumer.ptr)
            spot.capture_copy(consumer.handle)
        assert _view._graph_owned() == 0  # no external event: the producer is in the graph
        assert replays_read(spot, capture, times=3) == 3
        capture.close()
    finally:
        ok(drv.cuEventDestroy(fork))


def test_global_capture_mode(door):
    """The calls the ordering makes are allowed in a global-mode capture (none of them is one
    of the "potentially unsafe" calls that would invalidate it)."""
    spot = Spot(door)
    consumer, producer = door.stream(), door.stream()
    spot.write(producer.ptr)
    with Capture(consumer.handle, mode="global") as capture:
        StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
        spot.capture_copy(consumer.handle)
    assert replays_read(spot, capture) == REPLAYS
    capture.close()


def test_a_per_thread_default_stream_capturing(door):
    """The consumer is the per-thread default stream (2), capturing."""
    spot = Spot(door)
    producer = door.stream()
    spot.write(producer.ptr)
    with Capture(2) as capture:
        StridedMemoryView(spot.array(producer.ptr), stream_ptr=2)
        spot.capture_copy(2)
    assert replays_read(spot, capture) == REPLAYS
    capture.close()


def test_two_devices(door, two_gpus):
    """Data on device 1, written late on a stream of device 1 (and on its default stream), viewed
    for a stream of device 0 that captures: each replay on device 0 reads device 1's write."""
    spot = Spot(door, device=1)
    for producer in (door.stream(1).ptr, 1):
        consumer = door.stream(0)
        spot.write(producer, NEW + producer % 7)
        with Capture(consumer.handle) as capture:
            StridedMemoryView(spot.array(producer), stream_ptr=consumer.ptr)
            spot.capture_copy(consumer.handle)
        assert replays_read(spot, capture, value=NEW + producer % 7, times=5) == 5
        capture.close()
    assert settle(lambda: _view._graph_owned() == 0)


def test_threads_capturing_at_once(door):
    """Threads, each capturing its own stream (thread-local mode) at the same time, each
    ordering after its own producer: every graph is valid and every replay reads its data."""
    from driver_support import make_current

    threads_n = 4
    spots = [Spot(door) for _ in range(threads_n)]
    streams = [(door.stream(), door.stream()) for _ in range(threads_n)]
    barrier = threading.Barrier(threads_n)
    results, failures = [None] * threads_n, []

    def work(i):
        try:
            make_current(0)
            consumer, producer = streams[i]
            spot = spots[i]
            spot.write(producer.ptr, NEW + i)
            barrier.wait()
            with Capture(consumer.handle) as capture:
                barrier.wait()  # every thread capturing now
                StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
                spot.capture_copy(consumer.handle)
                barrier.wait()
            results[i] = replays_read(spot, capture, value=NEW + i, times=5)
            capture.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    assert results == [5] * threads_n
    assert settle(lambda: _view._graph_owned() == 0)


def test_the_capture_ends_invalidated_elsewhere(door):
    """A consumer whose capture was invalidated (a host synchronize) gets a clear CUDAError
    naming it, no wait is made, and nothing is left owned by a graph."""
    from driver_support import drv

    from stridedview import CUDAError

    spot = Spot(door)
    consumer, producer = door.stream(), door.stream()
    with pytest.raises(CUDAError) as caught:
        with Capture(consumer.handle):
            drv.cuStreamSynchronize(consumer.handle)  # invalidates the capture
            StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    assert caught.value.name == "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
    assert _view._graph_owned() == 0
