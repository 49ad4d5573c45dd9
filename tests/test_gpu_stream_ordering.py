"""The calls each stream ordering makes, on the simulated device: their exact sequence and
arguments, which event and which context, the retry after a stale handle, events per thread and
per context, and what the consumer then sees.

These were tests/test_stream_ordering.py's (and tests/test_threads.py's event-cache) tests
against the Python fake of cuda-bindings.  The driver door (src/stridedview/_driver_door.h) is
now the one implementation of every ordering, and it calls the libcuda.so.1 cuda-bindings
loaded: here that is the simulator, whose call log (``Simulator.call_log_start``,
``call_log``) keeps every driver call in call order with its arguments, its result and its
thread, and whose ``stream_move`` makes a remembered stream->context mapping stale.  "What the
consumer sees" is decided by the simulator's stream-order checker (``Simulator.set_check``):
a consumer's read of the producer's write that the calls made do not order is reported,
whatever the timing, so a missing or misplaced wait fails a test on every run.

The door asks before it pushes: a context is pushed only when it is not the current one
(``cuCtxGetCurrent`` first), and a default-stream producer is never cached by handle.  Names
are those of the entry points the door resolves (``cuCtxPushCurrent_v2``,
``cuCtxPopCurrent_v2``, ``cuEventDestroy_v2``); an out-parameter is logged as the value the
call wrote (the event ``cuEventCreate`` made, the context ``cuStreamGetCtx`` answered).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from stridedview import CUDAError, StridedMemoryView, _driver, _view
from test_gpu_ordering import Spot

pytestmark = [pytest.mark.gpu, pytest.mark.simgpu]

DISABLE_TIMING = 2  # CU_EVENT_DISABLE_TIMING
INVALID_HANDLE = 400  # CUDA_ERROR_INVALID_HANDLE
HOST_BLOCKING_CALLS = ("cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize")
PUSH, POP, DESTROY = "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuEventDestroy_v2"
#: Stands for any value in ``check_call`` (an out-parameter the test cannot know beforehand).
ANY = object()


# --- helpers: the call log, the checker, threads ----------------------------------------------


class CallLog:
    """``with CallLog(simulator) as log:`` the driver calls made meanwhile by the calling OS
    thread (``all_threads``: by every thread), in call order: ``log.calls`` (the simulator's
    ``Call`` records), ``log.names()``."""

    def __init__(self, sim, all_threads=False):
        self.sim, self.all_threads = sim, all_threads
        self.calls = []

    def __enter__(self):
        self.sim.call_log_start(self.all_threads)
        return self

    def __exit__(self, *exc):
        self.sim.call_log_stop()
        self.calls = self.sim.call_log()
        assert self.sim.call_log_dropped() == 0

    def names(self, calls=None):
        return names(self.calls if calls is None else calls)

    def of_thread(self, native_id):
        """The calls thread ``native_id`` (``threading.get_native_id()``) made."""
        return [call for call in self.calls if call.thread == native_id]


def names(calls):
    return [call.name for call in calls]


def check_call(call, name, *args):
    """Fail unless ``call`` is ``name(*args)`` and succeeded (``ANY`` matches any value)."""
    assert call.name == name, call
    assert call.result == 0, call
    assert len(call.args) == len(args), call
    for got, want in zip(call.args, args):
        assert want is ANY or got == int(want), call


def created_in(calls, current):
    """Each event ``cuEventCreate`` made in ``calls``, mapped to the context it was made in:
    the context stack followed through the pushes and pops, ``current`` on top at the start."""
    stack, made = [int(current or 0)], {}
    for call in calls:
        if call.name == PUSH and call.result == 0:
            stack.append(call.args[0])
        elif call.name == POP and call.result == 0:
            stack.pop()
        elif call.name == "cuEventCreate" and call.result == 0:
            made[call.args[0]] = stack[-1]
    return made


class Ordered:
    """``with Ordered(simulator):`` the stream-order checker on for the block (from an empty
    history: only the work enqueued in it is known); fails if it reported anything."""

    def __init__(self, sim):
        self.sim = sim

    def __enter__(self):
        self.previous = self.sim.set_check(1)
        self.since = self.sim.check_report_count()
        return self

    def __exit__(self, kind, *exc):
        reports = self.sim.check_reports(self.since)
        self.sim.set_check(self.previous)
        if kind is None:
            assert reports == [], reports


def in_thread(target, current=0):
    """``target()`` run in a new thread whose current context is device ``current``'s primary
    context (None: no context current, as in any new thread); its result, or its exception
    raised here."""
    outcome = {}

    def run():
        try:
            if current is not None:
                from driver_support import make_current

                make_current(current)
            outcome["result"] = target()
        except BaseException as exc:  # noqa: BLE001 - raised in the calling thread
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "thread hung"
    if "error" in outcome:
        raise outcome["error"]
    return outcome["result"]


def current_context() -> int:
    from driver_support import current_context

    return current_context()


@pytest.fixture
def door(gpu, simulator):
    """The door undecided (``use_api(None)``: its events destroyed, its caches forgotten, cuInit
    to be called again): the next ordering is a first one."""
    _driver.use_api(None)
    return gpu


# --- the call sequence ---------------------------------------------------------------------


def test_first_ordering_call_sequence(door, simulator):
    """First ordering: cuInit(0), cuStreamIsCapturing(consumer), cuStreamGetCtx(producer),
    cuCtxGetCurrent, cuEventCreate(2), cuEventRecord, cuStreamWaitEvent(consumer, event, 0)."""
    from driver_support import primary

    spot = Spot(door)
    producer, consumer = door.stream(), door.stream()
    with CallLog(simulator) as log:
        view = StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    calls = log.calls
    assert log.names() == [
        "cuInit", "cuStreamIsCapturing", "cuStreamGetCtx", "cuCtxGetCurrent", "cuEventCreate",
        "cuEventRecord", "cuStreamWaitEvent",
    ]
    context = primary(0)
    check_call(calls[0], "cuInit", 0)
    check_call(calls[1], "cuStreamIsCapturing", consumer.ptr, 0)
    check_call(calls[2], "cuStreamGetCtx", producer.ptr, context)
    check_call(calls[3], "cuCtxGetCurrent", context)  # the producer's: no push
    event = calls[4].args[0]
    check_call(calls[4], "cuEventCreate", event, DISABLE_TIMING)
    check_call(calls[5], "cuEventRecord", event, producer.ptr)
    check_call(calls[6], "cuStreamWaitEvent", consumer.ptr, event, 0)
    assert created_in(calls, context) == {event: int(context)}
    assert view.ready_stream == consumer.ptr


@pytest.mark.parametrize("current", ["device-0", "none"])
@pytest.mark.parametrize("data_device", [0, 1])
@pytest.mark.parametrize("producer_handle", [1, 2], ids=["legacy", "per-thread"])
def test_default_stream_producer_resolved_in_data_device_primary(
    door, simulator, two_gpus, producer_handle, data_device, current
):
    """A CAI producer's handle 1 or 2 is the default stream of the data's device
    (cuPointerGetAttribute), recorded with that device's primary context current (pushed when
    it is not), whatever is current: the consumer sees the producer's write there, the current
    context is left as it was, and the next view resolves the handle afresh (never cached) with
    the device's primary context retained once."""
    from driver_support import primary

    spot = Spot(door, device=data_device)
    consumer = door.stream(0)
    wanted = int(primary(data_device))

    def run():
        before = current_context()
        with Ordered(simulator):
            spot.write(producer_handle, 0x21)
            with CallLog(simulator) as log:
                StridedMemoryView(spot.array(producer_handle), stream_ptr=consumer.ptr)
            assert spot.read(consumer.handle, device=0)
        with CallLog(simulator) as again:
            StridedMemoryView(spot.array(producer_handle), stream_ptr=consumer.ptr)
        return before, current_context(), log.calls, again.calls

    before, after, calls, again = in_thread(run, current=0 if current == "device-0" else None)
    pushed = before != wanted
    inside = [PUSH, "cuEventCreate", "cuEventRecord", POP] if pushed else ["cuEventCreate", "cuEventRecord"]
    assert names(calls) == [
        "cuInit", "cuPointerGetAttribute", "cuDeviceGet", "cuDevicePrimaryCtxRetain",
        "cuStreamIsCapturing", "cuCtxGetCurrent", *inside, "cuStreamWaitEvent",
    ]
    check_call(calls[1], "cuPointerGetAttribute", ANY, 9, spot.memory.ptr)  # DEVICE_ORDINAL
    check_call(calls[2], "cuDeviceGet", ANY, data_device)
    check_call(calls[3], "cuDevicePrimaryCtxRetain", wanted, ANY)
    check_call(calls[4], "cuStreamIsCapturing", consumer.ptr, 0)
    check_call(calls[5], "cuCtxGetCurrent", before)
    if pushed:
        check_call(calls[6], PUSH, wanted)
    record = calls[-2 - pushed]
    event = record.args[0]
    check_call(record, "cuEventRecord", event, producer_handle)
    check_call(calls[-1], "cuStreamWaitEvent", consumer.ptr, event, 0)
    assert created_in(calls, before) == {event: wanted}
    assert after == before == (int(primary(0)) if current == "device-0" else 0)
    # Never cached: the next view asks the pointer's device and the current context again;
    # the device's primary context is retained once.
    inside = [PUSH, "cuEventRecord", POP] if pushed else ["cuEventRecord"]
    assert names(again) == [
        "cuPointerGetAttribute", "cuStreamIsCapturing", "cuCtxGetCurrent", *inside,
        "cuStreamWaitEvent",
    ]


@pytest.mark.parametrize(
    "producer_handle, consumer_handle", [(1, 1), (1, 0), (2, 2)], ids=["1-vs-1", "1-vs-0", "2-vs-2"]
)
def test_same_default_stream_orders_nothing(door, simulator, producer_handle, consumer_handle):
    """Producer and consumer naming one default stream (0 is 1) of the data device's context,
    current or implied by none current, record and wait on nothing; the view is ready on the
    consumer's handle, which reads the producer's write (one stream)."""
    spot = Spot(door)

    def run():
        with Ordered(simulator):
            spot.write(producer_handle, 0x22)
            with CallLog(simulator) as log:
                view = StridedMemoryView(spot.array(producer_handle), stream_ptr=consumer_handle)
            assert spot.read(consumer_handle)
        return log.names(), view.ready_stream

    for current in (0, None):
        made, ready = in_thread(run, current)
        assert "cuEventRecord" not in made and "cuStreamWaitEvent" not in made, (current, made)
        assert ready == consumer_handle


def test_init_once_then_two_calls_per_view(door, simulator):
    """After warm-up every ordered view costs exactly cuStreamIsCapturing (the consumer: is it
    capturing a graph?), cuEventRecord and cuStreamWaitEvent, with the same event."""
    spot = Spot(door)
    producer, consumer = door.stream(), door.stream()
    with CallLog(simulator) as first:
        StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    event = first.calls[-1].args[1]
    with CallLog(simulator) as log:
        for _ in range(5):
            StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    assert log.names() == ["cuStreamIsCapturing", "cuEventRecord", "cuStreamWaitEvent"] * 5
    for check in log.calls[::3]:
        check_call(check, "cuStreamIsCapturing", consumer.ptr, 0)
    for record, wait in zip(log.calls[1::3], log.calls[2::3]):
        check_call(record, "cuEventRecord", event, producer.ptr)
        check_call(wait, "cuStreamWaitEvent", consumer.ptr, event, 0)


def test_one_event_reused_across_views_and_consumers(door, simulator):
    """One event serves every producer stream of a context and every consumer; cuInit is
    called once, and the context of each producer stream is looked up once."""
    spot = Spot(door)
    a, b, c1, c2 = (door.stream().ptr for _ in range(4))
    with CallLog(simulator) as log:
        for producer, consumer in ((a, c1), (b, c2), (a, c2), (b, c1)):
            StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    made = log.names()
    assert made.count("cuInit") == 1
    assert made.count("cuEventCreate") == 1
    assert len({call.args[0] for call in log.calls if call.name == "cuEventRecord"}) == 1
    assert [call.args[0] for call in log.calls if call.name == "cuStreamGetCtx"] == [a, b]


def test_separate_events_per_context(door, simulator, two_gpus):
    """Producer streams of two contexts get one event each, created in that context (the
    other one pushed around its creation), each used only on its own context's stream."""
    from driver_support import primary

    spot = Spot(door)
    here, there, consumer = door.stream(0).ptr, door.stream(1).ptr, door.stream(0).ptr
    with CallLog(simulator) as log:
        for producer in (here, there, here, there):
            StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    assert log.names().count("cuEventCreate") == 2
    by_stream = {}
    for call in log.calls:
        if call.name == "cuEventRecord":
            by_stream.setdefault(call.args[1], set()).add(call.args[0])
    assert set(by_stream) == {here, there}
    assert all(len(events) == 1 for events in by_stream.values())
    assert by_stream[here] != by_stream[there]
    made = created_in(log.calls, primary(0))
    assert made == {
        next(iter(by_stream[here])): int(primary(0)), next(iter(by_stream[there])): int(primary(1)),
    }


def test_event_created_in_producer_context_with_push_pop(door, simulator, two_gpus):
    """When the producer's context is not current, the event is created between
    cuCtxPushCurrent(ctx) and cuCtxPopCurrent; the caller's context stack is left as it was."""
    from driver_support import primary
    from test_gpu_driver_faults import context_stack

    spot = Spot(door)
    producer, consumer = door.stream(1).ptr, door.stream(0).ptr
    before = context_stack()
    with CallLog(simulator) as log:
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    calls = log.calls
    assert log.names() == [
        "cuInit", "cuStreamIsCapturing", "cuStreamGetCtx", "cuCtxGetCurrent", PUSH,
        "cuEventCreate", POP, "cuEventRecord", "cuStreamWaitEvent",
    ]
    other = int(primary(1))
    check_call(calls[2], "cuStreamGetCtx", producer, other)
    check_call(calls[4], PUSH, other)
    event = calls[5].args[0]
    check_call(calls[5], "cuEventCreate", event, DISABLE_TIMING)
    check_call(calls[6], POP, other)
    check_call(calls[7], "cuEventRecord", event, producer)
    check_call(calls[8], "cuStreamWaitEvent", consumer, event, 0)
    assert created_in(calls, primary(0)) == {event: other}
    assert context_stack() == before


def test_event_created_with_push_pop_when_no_context_is_current(door, simulator):
    """With no current context at all, the event is still created in the producer's context
    (push/pop), and no context is left current."""
    from driver_support import primary

    spot = Spot(door)
    producer, consumer = door.stream(0).ptr, door.stream(0).ptr

    def run():
        with CallLog(simulator) as log:
            StridedMemoryView(spot.array(producer), stream_ptr=consumer)
        return log.calls, current_context()

    calls, after = in_thread(run, current=None)
    assert PUSH in names(calls)
    assert list(created_in(calls, 0).values()) == [int(primary(0))]
    assert after == 0


def test_stale_context_retried_after_invalid_handle(door, simulator, two_gpus):
    """A producer handle that names a stream of another context now (the driver reused the
    handle: ``Simulator.stream_move``): the record with the cached context's event fails with
    INVALID_HANDLE, the context is looked up afresh, an event made there, the record retried
    once; the consumer sees the write made after the reuse."""
    from driver_support import primary

    spot = Spot(door, device=1)
    producer, consumer = door.stream(0), door.stream(0)
    with CallLog(simulator) as first:
        StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    old_event = first.calls[-1].args[1]
    other = int(primary(1))
    simulator.stream_move(producer.ptr, other)
    with Ordered(simulator):
        spot.write(producer.ptr, 0x23)  # in device 1's context, where the handle is now
        with CallLog(simulator) as log:
            StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
        assert spot.read(consumer.handle, device=0)
    calls = log.calls
    assert log.names() == [
        "cuStreamIsCapturing", "cuEventRecord", "cuStreamGetCtx", "cuCtxGetCurrent", PUSH,
        "cuEventCreate", POP, "cuEventRecord", "cuStreamWaitEvent",
    ]
    assert calls[1].name == "cuEventRecord" and calls[1].args == (old_event, producer.ptr)
    assert calls[1].result == INVALID_HANDLE
    check_call(calls[2], "cuStreamGetCtx", producer.ptr, other)
    check_call(calls[4], PUSH, other)
    new_event = calls[7].args[0]
    assert new_event != old_event
    assert created_in(calls, primary(0)) == {new_event: other}
    check_call(calls[7], "cuEventRecord", new_event, producer.ptr)
    check_call(calls[8], "cuStreamWaitEvent", consumer.ptr, new_event, 0)
    # Warm again: the capture check and two calls.
    with CallLog(simulator) as warm:
        StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    assert warm.names() == ["cuStreamIsCapturing", "cuEventRecord", "cuStreamWaitEvent"]


def test_legacy_stream_follows_the_data_not_the_current_context(door, simulator, two_gpus):
    """A producer on handle 1 is resolved afresh for each view: after the current context
    changes, still the data device's default stream (its primary context pushed for the
    record), with no failed record; the consumer sees what that stream wrote."""
    from driver_support import make_current, primary

    spot = Spot(door, device=0)
    consumer = door.stream(0)
    StridedMemoryView(spot.array(1), stream_ptr=consumer.ptr)
    make_current(1)  # another context current: its legacy stream is not the data's
    try:
        with Ordered(simulator):
            spot.write(1, 0x24)  # on device 0's legacy stream
            with CallLog(simulator) as log:
                StridedMemoryView(spot.array(1), stream_ptr=consumer.ptr)
            assert spot.read(consumer.handle, device=0)
    finally:
        make_current(0)
    calls = log.calls
    assert log.names() == [
        "cuPointerGetAttribute", "cuStreamIsCapturing", "cuCtxGetCurrent", PUSH, "cuEventRecord",
        POP, "cuStreamWaitEvent",
    ]
    check_call(calls[2], "cuCtxGetCurrent", primary(1))
    check_call(calls[3], PUSH, primary(0))
    check_call(calls[4], "cuEventRecord", ANY, 1)
    assert all(call.result == 0 for call in calls)


def test_use_api_resets_caches(door, simulator):
    """use_api forgets cuInit, contexts and events: the next ordering makes the full warm-up
    sequence again, with a new event (the old one is never named again)."""
    spot = Spot(door)
    producer, consumer = door.stream(), door.stream()
    with CallLog(simulator) as first:
        StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    _driver.use_api(None)
    p2, c2 = door.stream(), door.stream()
    with CallLog(simulator) as log:
        StridedMemoryView(spot.array(p2.ptr), stream_ptr=c2.ptr)
    assert log.names() == [
        "cuInit", "cuStreamIsCapturing", "cuStreamGetCtx", "cuCtxGetCurrent", "cuEventCreate",
        "cuEventRecord", "cuStreamWaitEvent",
    ]
    assert log.calls[4].args[0] != first.calls[4].args[0]


def test_no_host_blocking_call_ever(door, simulator, two_gpus):
    """Across every path (cold, warm, cross-context, default streams, stale retry) no
    host-blocking call is made."""
    from driver_support import primary

    spot = Spot(door)
    a, b, c = door.stream(0).ptr, door.stream(1).ptr, door.stream(0).ptr
    with CallLog(simulator) as log:
        for producer, consumer in [(a, c), (b, c), (1, c), (2, c), (a, 1), (b, 2), (a, c)]:
            StridedMemoryView(spot.array(producer), stream_ptr=consumer)
        simulator.stream_move(a, primary(1))
        StridedMemoryView(spot.array(a), stream_ptr=c)
    made = log.names()
    assert made.count("cuStreamWaitEvent") == 8 and "cuStreamGetCtx" in made
    assert not set(made) & set(HOST_BLOCKING_CALLS)


# --- many devices: default streams belong to the data's device -----------------------------


def test_exchange_api_same_default_stream_records_nothing(door, simulator, two_gpus):
    """NULL work stream and consumer stream 0 on the tensor's device (current): one stream,
    no event recorded; on another device: ordered, and the consumer sees that device's
    default-stream write."""
    from test_gpu_ordering import exchange_view

    here, there = Spot(door, 0), Spot(door, 1)
    with CallLog(simulator) as log:
        exchange_view(here.memory.ptr, 0, 0, 0)
    assert "cuEventRecord" not in log.names() and "cuStreamWaitEvent" not in log.names()
    with Ordered(simulator):
        there.write(0, 0x25)  # device 1's NULL stream
        with CallLog(simulator) as log:
            exchange_view(there.memory.ptr, 1, 0, 0)
        assert there.read(0, device=0)
    assert "cuEventRecord" in log.names() and "cuStreamWaitEvent" in log.names()


def test_exchange_api_unknown_device_is_cuda_error(door, simulator):
    """A NULL work stream for a device the driver does not have raises CUDAError
    (cuDeviceGet's CUDA_ERROR_INVALID_DEVICE)."""
    from test_gpu_ordering import exchange_view

    spot = Spot(door)
    with pytest.raises(CUDAError) as excinfo:
        exchange_view(spot.memory.ptr, 7, 0, door.stream().ptr)
    assert excinfo.value.name == "CUDA_ERROR_INVALID_DEVICE"
    assert str(excinfo.value) == "cuDeviceGet failed: CUDA_ERROR_INVALID_DEVICE"


# --- ready_stream ----------------------------------------------------------------------------


def test_ready_stream(door):
    """ready_stream after an ordering is the consumer stream; a legacy producer viewed on 0
    (the same stream) is ready on 0.  (The cases that order nothing: test_stream_ordering.py's
    test_ready_stream, without a driver.)"""
    spot = Spot(door)
    producer, consumer = door.stream().ptr, door.stream().ptr
    assert StridedMemoryView(spot.array(producer), stream_ptr=consumer).ready_stream == consumer
    assert StridedMemoryView(spot.array(1), stream_ptr=0).ready_stream == 0


# --- threads: one event per (context, thread), destroyed with the thread ---------------------


def door_calls(calls):
    """``calls`` without the test's own context switches (cuCtxSetCurrent: make_current)."""
    return [call for call in calls if call.name != "cuCtxSetCurrent"]


def test_separate_events_per_thread(door, simulator):
    """Each thread creates and uses its own event, looks up contexts itself, and cuInit runs
    once in all; each destroys its event, in its own context, when it ends."""
    from driver_support import make_current, primary

    spot = Spot(door)
    producer, consumer = door.stream().ptr, door.stream().ptr
    # All three alive together, so that their thread ids are distinct.
    start, end = threading.Barrier(3, timeout=10), threading.Barrier(3, timeout=10)
    ids = []

    def run():
        make_current(0)  # a new thread has none: real code makes one current
        ids.append(threading.get_native_id())
        start.wait()
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
        end.wait()

    with CallLog(simulator, all_threads=True) as log:
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
        threads = [threading.Thread(target=run) for _ in range(3)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    assert log.names().count("cuInit") == 1
    main = log.of_thread(threading.get_native_id())
    events = {main[-1].args[1]}
    context = int(primary(0))
    for native_id in ids:
        calls = door_calls(log.of_thread(native_id))
        assert names(calls) == [
            "cuStreamIsCapturing", "cuStreamGetCtx", "cuCtxGetCurrent", "cuEventCreate",
            "cuEventRecord", "cuStreamWaitEvent", PUSH, DESTROY, POP,
        ]
        event = calls[3].args[0]
        check_call(calls[1], "cuStreamGetCtx", producer, context)
        check_call(calls[4], "cuEventRecord", event, producer)
        check_call(calls[5], "cuStreamWaitEvent", consumer, event, 0)
        # ... and destroys it, in its own context, when it ends.
        check_call(calls[6], PUSH, context)
        check_call(calls[7], DESTROY, event)
        events.add(event)
    assert len(events) == 4


class Slots:
    """Device memory of ``count`` 64-byte slots, each written once on some stream and read
    back once or twice into pinned memory (no slot is rewritten: the only accesses the
    checker can order or not are the test's producer-consumer pairs)."""

    SIZE = 64

    def __init__(self, res, count, device=0):
        self.memory = res.device(count * self.SIZE, device)
        self.out = [res.pinned(count * self.SIZE, device) for _ in range(2)]
        self.values = {}
        self.device = device

    def ptr(self, slot):
        return self.memory.ptr + slot * self.SIZE

    def array(self, slot, stream):
        from driver_support import CAIArray

        return CAIArray(self.memory, (self.SIZE,), np.uint8, offset=slot * self.SIZE, stream=stream)

    def write(self, slot, value, stream, device):
        """``value`` over the slot, on ``stream`` (a handle of ``device``'s primary context)."""
        from driver_support import drv, ok, on_device

        self.values[slot] = value
        with on_device(device):
            ok(drv.cuMemsetD8Async(self.ptr(slot), value, self.SIZE, stream))

    def read(self, slot, stream, device, copy=0):
        """The slot copied into pinned memory ``copy`` on ``stream`` (of ``device``)."""
        from driver_support import drv, ok, on_device

        with on_device(device):
            ok(drv.cuMemcpyDtoHAsync(self.out[copy].ptr + slot * self.SIZE, self.ptr(slot), self.SIZE, stream))

    def wrong(self, copy=0):
        """The slots whose copy ``copy`` does not hold the value written (after a sync)."""
        data = self.out[copy].array()
        return [s for s, v in self.values.items() if not (data[s * self.SIZE:(s + 1) * self.SIZE] == v).all()]


def test_event_cache_per_thread_and_context(door, simulator, two_gpus):
    """Eight threads order views after shared and own producer streams of two contexts and the
    default streams, and export each view to a stream of the other context: one event per
    (context, thread), created, recorded, waited on and destroyed by that thread alone, and
    every consumer sees its producer's write (the checker reports nothing)."""
    import os

    from driver_support import drv, make_current, ok, on_device, primary

    threads_ = 8
    rounds = int(os.environ.get("STRIDEDVIEW_STRESS_ROUNDS", "3"))
    contexts = {0: int(primary(0)), 1: int(primary(1))}
    shared = {"shared0": (door.stream(0).ptr, 0), "shared1": (door.stream(1).ptr, 1)}
    streams = [
        {"own0": (door.stream(0).ptr, 0), "own1": (door.stream(1).ptr, 1),
         "consumer": door.stream(0).ptr, "export": door.stream(1).ptr}
        for _ in range(threads_)
    ]
    slots = Slots(door, threads_ * rounds * 6)
    ids = {}
    barrier = threading.Barrier(threads_, timeout=30)

    def work(index):
        mine = streams[index]
        ids[index] = threading.get_native_id()
        producers_ = [shared["shared0"], shared["shared1"], mine["own0"], mine["own1"], (1, 0), (2, 0)]
        barrier.wait()
        for round_ in range(rounds):
            for k, (producer, device) in enumerate(producers_):
                slot = (index * rounds + round_) * 6 + k
                slots.write(slot, slot % 251 + 1, producer, device)
                view = StridedMemoryView(slots.array(slot, producer), stream_ptr=mine["consumer"])
                slots.read(slot, mine["consumer"], 0)
                # Exported to a consumer of the other context: ordered after the view's ready stream.
                capsule = view.__dlpack__(stream=mine["export"], max_version=(1, 3))
                slots.read(slot, mine["export"], 1, copy=1)
                del view, capsule
        for stream, device in ((mine["consumer"], 0), (mine["export"], 1)):
            with on_device(device):
                ok(drv.cuStreamSynchronize(stream))

    errors = []

    def run(index):
        try:
            make_current(0)  # a new thread has none: real code makes one current
            work(index)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    with Ordered(simulator):
        with CallLog(simulator, all_threads=True) as log:
            threads = [threading.Thread(target=run, args=(i,)) for i in range(threads_)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(120)
        assert errors == [], errors
    assert slots.wrong(0) == [] and slots.wrong(1) == []
    assert log.names().count("cuInit") == 1
    assert log.names().count("cuStreamWaitEvent") == 2 * 6 * rounds * threads_
    owner = {}
    for index in range(threads_):
        calls = log.of_thread(ids[index])
        made = created_in(calls, contexts[0])
        # One event per context this thread used, created by this thread ...
        assert sorted(made.values()) == sorted(contexts.values()), made
        for event in made:
            owner[event] = index
        used = {c.args[0] for c in calls if c.name == "cuEventRecord"}
        used |= {c.args[1] for c in calls if c.name == "cuStreamWaitEvent"}
        assert used == set(made), "a thread used an event it did not create"
        # ... and destroyed by it when it ended.
        assert {c.args[0] for c in calls if c.name == DESTROY} == set(made)
    assert len(owner) == 2 * threads_
    assert _view._driver_door_info()["live_events"] == 0


def test_event_cache_with_exchange_api_producer(door, simulator):
    """Views through the C exchange API from eight threads order after the producer's work
    stream with per-thread events (one each, the only one it records), and every consumer sees
    the producer's write."""
    import test_fuzz

    from driver_support import make_current

    threads_, rounds = 8, 10
    work_stream = door.stream().ptr
    consumers = [door.stream().ptr for _ in range(threads_)]
    slots = Slots(door, threads_ * rounds)
    spec = {"device": (2, 0), "dtype": (1, 8, 1), "shape": [Slots.SIZE], "ndim": 1,
            "strides": None, "byte_offset": 0}
    lenders = [[test_fuzz.ExchangeProducer({**spec, "data": slots.ptr(t * rounds + r)})
                for r in range(rounds)] for t in range(threads_)]
    ids, errors = {}, []

    def work(index):
        try:
            make_current(0)
            ids[index] = threading.get_native_id()
            for round_ in range(rounds):
                slot = index * rounds + round_
                slots.write(slot, slot % 251 + 1, work_stream, 0)
                view = StridedMemoryView(lenders[index][round_], stream_ptr=consumers[index])
                if view.ready_stream != consumers[index] or view.shape != (Slots.SIZE,):
                    raise AssertionError(repr(view))
                slots.read(slot, consumers[index], 0)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    test_fuzz._WORK_STREAM[0] = work_stream
    try:
        with Ordered(simulator):
            with CallLog(simulator, all_threads=True) as log:
                threads = [threading.Thread(target=work, args=(i,)) for i in range(threads_)]
                for thread in threads:
                    thread.start()
                for thread in threads:
                    thread.join(60)
            assert errors == [], errors
            for consumer in consumers:
                from driver_support import drv, ok

                ok(drv.cuStreamSynchronize(consumer))
    finally:
        test_fuzz._WORK_STREAM[0] = 0
        for row in lenders:
            for lender in row:
                lender.close()
    assert slots.wrong() == []
    for index in range(threads_):
        calls = log.of_thread(ids[index])
        made = [c.args[0] for c in calls if c.name == "cuEventCreate"]
        assert len(made) == 1
        records = {c.args[0] for c in calls if c.name == "cuEventRecord"}
        assert records == set(made) and len([c for c in calls if c.name == "cuEventRecord"]) == rounds


def test_new_threads_after_use_api_start_clean(door, simulator):
    """use_api destroys every thread's events and forgets every cache: threads started after it
    create fresh events (one each), and none names an event made before."""
    from driver_support import make_current

    spot = Spot(door)
    producer, consumer = door.stream().ptr, door.stream().ptr
    with CallLog(simulator) as first:
        StridedMemoryView(spot.array(producer), stream_ptr=consumer)
    old = first.calls[-1].args[1]
    p2, c2 = door.stream().ptr, door.stream().ptr

    def work():
        make_current(0)
        StridedMemoryView(spot.array(p2), stream_ptr=c2)

    with CallLog(simulator, all_threads=True) as log:
        _driver.use_api(None)
        threads = [threading.Thread(target=work) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
    destroyed = [c.args[0] for c in log.calls if c.name == DESTROY]
    assert destroyed[0] == old  # by use_api, before the threads ran
    created = [c for c in log.calls if c.name == "cuEventCreate"]
    assert len(created) == 4 and len({c.thread for c in created}) == 4
    named = {c.args[0] for c in log.calls if c.name == "cuEventRecord"}
    named |= {c.args[1] for c in log.calls if c.name == "cuStreamWaitEvent"}
    assert old not in named and named == {c.args[0] for c in created}


EXIT_SCRIPT = """
import sys
import threading
sys.path[:0] = sys.argv[1:3]
from driver_support import Resources, make_current
import test_gpu_ordering as t
from stridedview import StridedMemoryView, _view

make_current(0)
res = Resources()
spot = t.Spot(res)
streams = [res.stream().ptr for _ in range(4)]

def order(producer, consumer):
    make_current(0)
    StridedMemoryView(spot.array(producer), stream_ptr=consumer)

order(*streams[:2])
done = threading.Event()

def daemon():
    order(*streams[2:])
    done.set()
    threading.Event().wait()

threading.Thread(target=daemon, daemon=True).start()
done.wait(10)
print(_view._driver_door_info()["live_events"])
sys.stderr.write("exiting\\n")
sys.stderr.flush()
"""


def test_interpreter_exit_with_live_events_is_quiet(gpu):
    """A process that exits with events held by its main thread and by a still-running thread
    prints nothing and exits 0: the driver is not called at shutdown (the simulator traces
    every call on stderr, ``SIMGPU_TRACE=1``: none comes after the script's last line)."""
    from simgpu.simgpu_support import child_paths, run_python

    result = run_python(EXIT_SCRIPT, args=child_paths(), env={"SIMGPU_TRACE": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "2"
    before, marker, after = result.stderr.partition("exiting\n")
    assert marker and "cuEventRecord" in before  # (the trace is on)
    assert after == ""


def test_exchange_api_null_work_stream_and_a_per_thread_consumer_are_ordered(door, simulator):
    """A NULL work stream (the tensor's device's legacy stream) and a per-thread consumer
    stream (2) are two streams: one event recorded on the legacy stream, the per-thread stream
    made to wait on it (tests/test_fuzz.py's null-work-stream-vs-per-thread edge, which a fake
    driver can only refuse, ordered on the device)."""
    from test_gpu_ordering import exchange_view

    spot = Spot(door)
    with CallLog(simulator) as log:
        view = exchange_view(spot.memory.ptr, 0, 0, 2)
    records = [call.args for call in log.calls if call.name == "cuEventRecord"]
    waits = [call.args for call in log.calls if call.name == "cuStreamWaitEvent"]
    assert len(records) == len(waits) == 1
    assert records[0][1] in (0, 1) and waits[0] == (2, records[0][0], 0)
    assert view.ready_stream == 2
