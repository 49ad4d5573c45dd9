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
are gone, exactly once, never before.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from stridedview import StridedMemoryView, _driver, _view, args_viewable_as_strided_memory, release_pending
from test_gpu_ordering import NBYTES, Spot as OrderedSpot

pytestmark = [pytest.mark.gpu, pytest.mark.simgpu]

DELAY_US = 1000
#: Operations queued on the producer's stream before its write: the write lands about
#: (FILLERS + 1) * DELAY_US after it is queued, well after a replay's copy would without a wait.
FILLERS = 4
REPLAYS = 20
ORIGINAL, NEW = 0x11, 0x5A


@pytest.fixture
def door(gpu, simulator, monkeypatch):
    """The simulated device with each operation delayed, the driver door decided afresh."""
    _driver.use_api(None)  # the door decided again at the next ordering
    simulator.set_delay_us(DELAY_US)
    yield gpu
    simulator.set_delay_us(0)
    Capture.close_left_open()
    for _ in range(2):
        release_pending(wait=True)


def door_state():
    return _view._driver_door_info()["state"]


class Spot(OrderedSpot):
    """test_gpu_ordering's Spot, its memory first set to ORIGINAL, FILLERS before each write
    (NEW by default), read by captured copies."""

    fillers = FILLERS

    def __init__(self, res, device=0):
        from driver_support import drv, ok, on_device

        super().__init__(res, device)
        with on_device(device):
            ok(drv.cuMemsetD8(self.memory.ptr, ORIGINAL, NBYTES))
            ok(drv.cuCtxSynchronize())

    def write(self, stream_handle, value=NEW):
        super().write(stream_handle, value)

    def capture_copy(self, stream_handle):
        """The captured "kernel": the memory copied to pinned host memory."""
        from driver_support import drv, ok

        ok(drv.cuMemcpyDtoHAsync(self.out.ptr, self.memory.ptr, NBYTES, stream_handle))


class Capture:
    """``with Capture(stream) as graph:`` captures ``stream``; ``graph.replay(n, check)``
    instantiates it and launches it ``n`` times on its stream, calling ``check()`` after
    each; ``close()`` destroys what was made."""

    # Every capture made since the fixtures' last ``close_left_open()``: a test that fails
    # before its ``close()`` would leave its graph, and the holds the graph owns, to every
    # later test; closed at teardown, one failure is reported once.
    made: list[Capture] = []

    def __init__(self, stream_handle, mode="thread_local", device=0):
        Capture.made.append(self)
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

    @classmethod
    def close_left_open(cls):
        """Destroy what every capture made since the last call left (a failed test's)."""
        made, cls.made = cls.made, []
        for capture in made:
            capture.close()


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
        # Only the graph's replays wait for the producer, never the consumer stream itself:
        # outside the graph the data are ready on the producer's stream.
        assert view.ready_stream == producer
        spot.capture_copy(consumer.handle)
    assert door_state() == 1
    assert _view._graph_owned() == 1  # the event
    assert replays_read(spot, capture) == REPLAYS
    capture.close()
    assert settle(lambda: _view._graph_owned() == 0)
    assert simulator.counter("events_live") <= events + 2  # (this thread's cached events)


@pytest.mark.races
def test_without_ordering_the_replay_reads_stale_data(door):
    """The control: the same capture with ``stream_ptr=-1`` does not wait for the producer, and
    its first replay reads the bytes from before the write.  The producer's stream is held
    at a gate until that replay has read (the delay alone let a loaded machine's replay
    start after the write), so the control cannot pass by the write's timing."""
    from simgpu.simgpu_support import Gate

    spot = Spot(door)
    consumer, producer = door.stream(), door.stream()
    gate = Gate().enqueue(producer.handle)
    try:
        spot.write(producer.ptr)
        with Capture(consumer.handle) as capture:
            StridedMemoryView(spot.array(producer.ptr), stream_ptr=-1)
            spot.capture_copy(consumer.handle)
        try:
            assert replays_read(spot, capture, value=ORIGINAL, times=1) == 1
        finally:
            capture.close()
    finally:
        gate.open()


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


# --- holds handed to a capturing stream belong to its graph ---------------------------------


def marking_for(res):
    from test_gpu_record_stream import Marking

    return Marking(res, 64)


def test_a_hold_lives_until_the_graph_and_its_executable_graphs_are_gone(door):
    """``record_stream`` on a capturing stream: the hold is kept through the capture, every
    replay and the graph's destruction (an executable graph still holds it), not waited for by
    ``release_pending(wait=True)``, and released exactly once after the executable graph is
    destroyed, after the replays' work (its marker) was done."""
    marking = marking_for(door)
    stream = door.stream()
    producer = marking.producer()
    with Capture(stream.handle) as capture:
        view = StridedMemoryView(producer, stream_ptr=stream.ptr)
        marking.mark(producer.last, stream)  # the graph's work on the view
        view.record_stream(stream)
        del view
    assert marking.calls == {}
    assert _view._pending_holds() == (0, 0, 0)  # not pending, not kept until exit: the graph's
    assert _view._graph_owned() == 1
    marking.markers[:] = 0
    capture.replay(REPLAYS, lambda: None)
    capture.destroy_graph()
    assert release_pending(wait=True) == 0  # the executable graph still holds it
    time.sleep(0.05)
    assert release_pending() == 0 and marking.calls == {}
    capture.destroy_exe()
    assert settle(lambda: marking.calls != {})
    time.sleep(0.05)
    release_pending()
    assert marking.calls == {producer.last: 1}
    assert marking.early == []
    assert _view._graph_owned() == 0


def test_a_hold_of_a_graph_never_instantiated(door):
    """A graph destroyed without ever being instantiated gives its hold back at once."""
    marking = marking_for(door)
    stream = door.stream()
    producer = marking.producer()
    with Capture(stream.handle) as capture:
        view = StridedMemoryView(producer, stream_ptr=-1)
        view.record_stream(stream)
        del view
    capture.destroy_graph()
    assert settle(lambda: marking.calls == {producer.last: 1})


def test_an_executable_graph_destroyed_while_running_holds_until_its_launch_ran(door, simulator):
    """Destroyed with a replay still queued (behind a gate on its stream), the executable graph
    gives the hold back only once that replay has run."""
    from driver_support import drv, ok
    from simgpu.simgpu_support import Gate

    marking = marking_for(door)
    stream = door.stream()
    producer = marking.producer()
    with Capture(stream.handle) as capture:
        view = StridedMemoryView(producer, stream_ptr=-1)
        marking.mark(producer.last, stream)
        view.record_stream(stream)
        del view
    exe = ok(drv.cuGraphInstantiate(capture.graph, 0))
    capture.destroy_graph()
    marking.markers[:] = 0
    gate = Gate().enqueue(stream.handle)
    try:
        ok(drv.cuGraphLaunch(exe, stream.handle))
        ok(drv.cuGraphExecDestroy(exe))
        time.sleep(0.1)
        release_pending()
        assert marking.calls == {}
    finally:
        gate.open()
    assert settle(lambda: marking.calls == {producer.last: 1})
    assert marking.early == []


def test_a_hold_on_a_capturing_and_a_running_stream(door):
    """A view recorded on a capturing stream and on an ordinary one with work queued (a gate):
    after the graph is gone, the hold still waits for the ordinary stream."""
    from simgpu.simgpu_support import Gate

    marking = marking_for(door)
    capturing, running = door.stream(), door.stream()
    producer = marking.producer()
    gate = Gate().enqueue(running.handle)
    try:
        with Capture(capturing.handle) as capture:
            view = StridedMemoryView(producer, stream_ptr=-1)
            view.record_stream(capturing)
            view.record_stream(running)
            marking.mark(producer.last, running)  # behind the gate
            del view
        capture.destroy_graph()
        time.sleep(0.05)
        release_pending()
        assert marking.calls == {}  # the graph is gone, the running stream is not done
    finally:
        gate.open()
    assert settle(lambda: marking.calls == {producer.last: 1})
    assert marking.early == []


def test_holds_of_many_captures_and_threads_released_exactly_once(door):
    """Threads capture graphs at once, each handing holds to its capturing stream and
    replaying; every hold is released once, after its graph is gone."""
    from driver_support import make_current

    marking = marking_for(door)
    threads_n, holds = 4, 8
    streams = [door.stream() for _ in range(threads_n)]
    failures, made = [], []

    def work(i):
        try:
            make_current(0)
            stream = streams[i]
            producer = marking.producer()
            with Capture(stream.handle) as capture:
                for _ in range(holds):
                    view = StridedMemoryView(producer, stream_ptr=stream.ptr)
                    marking.mark(producer.last, stream)
                    made.append(producer.last)
                    view.record_stream(stream)
                    del view
            capture.replay(3, lambda: None)
            capture.close()
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert failures == []
    assert settle(lambda: len(marking.calls) == threads_n * holds)
    time.sleep(0.05)
    release_pending()
    assert marking.calls == {tensor_id: 1 for tensor_id in made}
    assert marking.early == []
    assert _view._graph_owned() == 0


# --- decorated launches under capture ---------------------------------------------------------


def test_a_decorated_launch_captured_and_not(door):
    """One launcher (record_stream=True), used outside a capture, then captured, then outside
    again: each replay reads the producer's data, the launch's hold belongs to the graph, and
    the launches outside the capture behave as before."""
    spot = Spot(door)
    marking = marking_for(door)
    consumer, producer = door.stream(), door.stream()

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def launch(data, held, stream):
        data.view(stream_ptr=stream.ptr)
        held.view(stream_ptr=stream.ptr)
        spot.capture_copy(stream.handle)
        marking.mark(held.obj.last, stream)

    def run_outside(value):
        spot.write(producer.ptr, value)
        launch(spot.array(producer.ptr), marking.producer(), consumer)
        consumer.synchronize()
        return bool((spot.out.array() == value).all())

    assert run_outside(0x21)
    spot.write(producer.ptr)
    held = marking.producer()
    with Capture(consumer.handle) as capture:
        launch(spot.array(producer.ptr), held, consumer)
    assert _view._graph_owned() == 2  # the ordering's event and the launch's hold
    assert release_pending(wait=True) >= 0 and held.last not in marking.calls
    assert replays_read(spot, capture) == REPLAYS
    assert run_outside(0x22)
    capture.close()
    assert settle(lambda: marking.calls.get(held.last) == 1 and _view._graph_owned() == 0)
    assert marking.early == []


def test_a_producer_capturing_another_graph_is_refused_before_any_harm(door):
    """Producer and consumer each capture a graph of their own: the consumer cannot depend on
    the other capture.  A CUDAError says so (CUDA_ERROR_STREAM_CAPTURE_ISOLATION) before any
    call that would invalidate either capture: both end valid."""
    from stridedview import CUDAError

    spot = Spot(door)
    consumer, producer = door.stream(), door.stream()
    with Capture(producer.handle) as first:
        spot.write(producer.handle)
        with Capture(consumer.handle) as second:
            with pytest.raises(CUDAError) as caught:
                StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
            spot.capture_copy(consumer.handle)
    assert caught.value.name == "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"
    assert "order the streams yourself" in str(caught.value)
    assert first.graph is not None and second.graph is not None
    first.close()
    second.close()
