"""The driver door (src/stridedview/_driver_door.h, _driver_door.pxi) on the simulated device.

Every ordering and every hand-over is decided and made by the door, in C, through entry points
the driver's own ``cuGetProcAddress`` gave; _driver.py only loads the driver.  These tests show
the calls each ordering and hand-over makes once warm (the simulator counts them), that it
orders for real (delayed writes read back on the consumer), that its events are destroyed
when their thread ends and when ``use_api`` changes the driver, that a dead event after a
primary context reset is replaced, that a fake driver or a driver lacking an entry point
leaves it off with a CUDAError that says so, and how a hand-over's record that fails is kept
and tried again.
"""

from __future__ import annotations

import sys
import threading

import pytest

from stridedview import CUDAError, StridedMemoryView, _driver, _view, release_pending
from test_gpu_ordering import DELAY_US, Spot

pytestmark = [pytest.mark.gpu, pytest.mark.simgpu]

#: The driver calls an ordering may make; a warm one through the door makes one record and
#: one wait, nothing else.
COUNTED = (
    "cuEventRecord", "cuStreamWaitEvent", "cuStreamGetCtx", "cuEventCreate", "cuEventDestroy_v2",
    "cuCtxGetCurrent", "cuCtxPushCurrent_v2", "cuCtxPopCurrent_v2", "cuPointerGetAttribute",
    "cuDevicePrimaryCtxRetain",
)


@pytest.fixture
def door(gpu, simulator):
    """The door decided afresh (at the next ordering or hand-over)."""
    _driver.use_api(None)
    return gpu


def info() -> dict:
    return _view._driver_door_info()


def counts(sim, names=COUNTED) -> dict:
    return {name: sim.calls(name) for name in names}


def delta(sim, before) -> dict:
    """The calls made since ``before`` (a ``counts``), of the names it counted."""
    return {name: n - before[name] for name, n in counts(sim, before).items() if n != before[name]}


def test_door_is_on_with_the_real_bindings(door, simulator):
    """The first ordering decides the door: on, with cuda.bindings.driver as the driver."""
    spot = Spot(door)
    producer, consumer = door.stream(), door.stream()
    assert info()["state"] == 0
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    assert info()["state"] == 1
    assert info()["ordered"] >= 1


@pytest.mark.parametrize("site", ["cai", "view-of-view", "export"])
def test_warm_ordering_is_one_record_and_one_wait_in_c(door, simulator, monkeypatch, site):
    """After warm-up, each ordering at each call site is exactly one cuEventRecord and one
    cuStreamWaitEvent, made by the door."""
    spot = Spot(door)
    producer, consumer, other = door.stream(), door.stream(), door.stream()

    def order():
        if site == "cai":
            StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
            return
        base = StridedMemoryView(spot.array(producer.ptr), stream_ptr=producer.ptr)  # ready there
        if site == "view-of-view":
            StridedMemoryView(base, stream_ptr=consumer.ptr)
        else:
            base.__dlpack__(stream=consumer.ptr)

    order()  # warm-up: the door decided, the stream's context and the event cached
    StridedMemoryView(spot.array(other.ptr), stream_ptr=consumer.ptr)
    before, ordered = counts(simulator), info()["ordered"]
    for _ in range(10):
        order()
    expected = {"cuEventRecord": 10, "cuStreamWaitEvent": 10}
    if site == "export":
        expected["cuPointerGetAttribute"] = 10  # the export's device (a CAI view's device_id)
    assert delta(simulator, before) == expected
    assert info()["ordered"] - ordered == 10
    assert info()["thread_events"] == 1  # one context: one event, reused


@pytest.mark.parametrize("producer", ["cai-1", "cai-2", "exchange-0"])
def test_warm_default_producer_stream_is_ordered_in_c(door, simulator, monkeypatch, producer):
    """A producer's default stream (CAI 1 or 2: the device of the pointer; the exchange API's
    NULL: the tensor's device) is resolved in that device's primary context by the door, here
    the current one (asked, not pushed): record, wait (and, for the CAI, the pointer's device
    asked), late writes seen."""
    from test_gpu_streams import exchange_view

    spot = Spot(door)
    consumer = door.stream()
    handle = int(producer[-1])

    def order():
        if producer.startswith("cai"):
            StridedMemoryView(spot.array(handle), stream_ptr=consumer.ptr)
        else:
            exchange_view(spot.memory.ptr, 0, 0, consumer.ptr)

    order()
    before, ordered = counts(simulator), info()["ordered"]
    for _ in range(5):
        order()
    expected = {"cuCtxGetCurrent": 5, "cuEventRecord": 5, "cuStreamWaitEvent": 5}
    if producer.startswith("cai"):
        expected["cuPointerGetAttribute"] = 5
    assert delta(simulator, before) == expected
    assert info()["ordered"] - ordered == 5
    simulator.set_delay_us(DELAY_US)
    for i in range(5):
        spot.write(handle, i + 1)
        order()
        assert spot.read(consumer.handle), i


def test_door_orders_for_real(door, simulator, monkeypatch):
    """Late writes on the producer stream are seen by the consumer, every time, through the door."""
    spot = Spot(door)
    producer, consumer = door.stream(), door.stream()
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    ordered = info()["ordered"]
    simulator.set_delay_us(DELAY_US)
    for i in range(20):
        spot.write(producer.ptr, i + 1)
        StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
        assert spot.read(consumer.handle), i
    assert info()["ordered"] - ordered == 20


def test_a_fake_driver_leaves_the_door_off_and_use_api_destroys_its_events(door, simulator):
    """use_api destroys the door's events of every thread in the driver that made them; with a
    fake installed the door stays off and an ordering is a CUDAError naming use_api (the fake
    serves host-only contracts); back on the real driver the door is on again."""
    from fake_driver import FakeDriver

    spot = Spot(door)
    producer, consumer = door.stream(), door.stream()
    live = simulator.counter("events_live")
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)  # decides the door
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    assert info()["live_events"] >= 1
    fake = FakeDriver()
    _driver.use_api(fake)
    try:
        assert info()["state"] == 0 and info()["thread_events"] == info()["live_events"] == 0
        assert simulator.counter("events_live") == live
        a, b = fake.new_stream(), fake.new_stream()
        before = counts(simulator)
        with pytest.raises(CUDAError, match=r"use_api\) is not it: pass stream_ptr=-1") as caught:
            _driver.order_after(a, b)
        assert caught.value.name == "CUDA_ERROR_NO_DRIVER"
        assert info()["state"] == -1
        assert "cuEventRecord" not in fake.names()
        assert delta(simulator, before) == {}
    finally:
        _driver.use_api(None)
    assert info()["state"] == 0
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    assert info()["state"] == 1


@pytest.fixture
def too_old_for(simulator):
    """simulator.set_version_not_sufficient: the named entry point answered by cuGetProcAddress
    as by a driver older than it (CUDA_SUCCESS, a NULL function, VERSION_NOT_SUFFICIENT, as
    driver 580 answers for a version below the symbol's); undone after the test, and the door
    decided afresh."""
    yield simulator.set_version_not_sufficient
    simulator.set_version_not_sufficient(None)
    _driver.use_api(None)


def test_a_needed_entry_point_resolved_to_null_leaves_the_door_off(door, simulator, too_old_for):
    """An entry point the door needs that cuGetProcAddress_v2 answers with CUDA_SUCCESS but a
    NULL function is not available: the door stays off (never calls the NULL) and an ordering
    is a CUDAError naming the entry point and the way out."""
    too_old_for("cuStreamIsCapturing")
    spot = Spot(door)
    producer, consumer = door.stream(), door.stream()
    with pytest.raises(CUDAError, match=r"\(cuStreamIsCapturing not found\): pass stream_ptr=-1"):
        StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    assert info()["state"] == -1
    too_old_for(None)
    _driver.use_api(None)
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    assert info()["state"] == 1  # (the control: the same driver without the switch)


def test_an_optional_entry_point_resolved_to_null_is_not_used(door, simulator, too_old_for):
    """cuStreamGetId answered with CUDA_SUCCESS but a NULL function: the door is on without it
    (it is optional), never calls it, and hand-overs on one stream, whose id it then cannot
    read, each record an entry of their own; every hold is released once."""
    too_old_for("cuStreamGetId")
    marking, stream, producer = slow_stream_marking(door, simulator, 10)
    ids, handed = simulator.calls("cuStreamGetId"), handover_info()["handed"]
    try:
        hand_over_marked(marking, producer, stream, 3)
        assert _view._pending_holds() == (3, 3, 0)  # none joined: the stream's id is unknown
    finally:
        simulator.set_delay_us(0)
    assert info()["state"] == 1 and handover_info()["handed"] - handed == 3  # in C
    assert simulator.calls("cuStreamGetId") == ids
    assert release_pending(wait=True) == 3
    assert set(marking.calls.values()) == {1} and len(marking.calls) == 4
    assert marking.early == [1]  # (1: the first view, not handed over)


def test_door_events_are_destroyed_when_their_threads_end(door, simulator):
    """Threads ordering through the door (no current context in them: the event is created in
    the stream's context, pushed) have their events destroyed by the time join returns."""
    spot = Spot(door)
    producer, consumer = door.stream(), door.stream()
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)  # decides the door
    live, door_live = simulator.counter("events_live"), info()["live_events"]
    seen = []

    def run():
        for _ in range(3):
            StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
        seen.append((info()["ordered"], info()["thread_events"]))

    for _ in range(3):
        threads = [threading.Thread(target=run) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert simulator.counter("events_live") == live
        assert info()["live_events"] == door_live
    assert seen == [(3, 1)] * 12


def test_no_current_context_and_a_default_consumer_waits_in_the_data_devices_context(door, simulator):
    """A default-stream consumer in a thread with no current context is the data device's
    primary context's: the door's wait answers INVALID_CONTEXT there, and the door waits again
    with that context pushed."""
    spot = Spot(door)
    producer = door.stream()
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=door.stream().ptr)  # decides the door
    simulator.set_delay_us(DELAY_US)
    outcome = {}

    def run():
        try:
            spot.write(producer.ptr, 0x5A)
            StridedMemoryView(spot.array(producer.ptr), stream_ptr=1)
            outcome["ordered"] = info()["ordered"]
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert "error" not in outcome, outcome
    assert outcome["ordered"] == 1
    assert spot.read(1)


def test_a_record_that_keeps_failing_is_a_cuda_error_naming_it(door, simulator):
    """A producer stream whose record keeps failing with CUDA_ERROR_INVALID_HANDLE after its
    context was cached (the driver's answer for a stale entry): the record fails, the fresh
    lookup's too, and the ordering raises "cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE".
    (A stream really destroyed cannot serve: naming it again is undefined, and a real driver
    crashes.)"""
    from driver_support import drv

    spot = Spot(door)
    consumer, producer = door.stream(), door.stream()
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)  # its context cached
    assert info()["state"] == 1
    simulator.fail("cuEventRecord", drv.CUresult.CUDA_ERROR_INVALID_HANDLE, count=-1)
    try:
        with pytest.raises(CUDAError) as caught:
            StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
        fired = simulator.fail_fired("cuEventRecord")
    finally:
        simulator.fail_clear()
    assert fired == 2  # the cached context's record, then the fresh lookup's
    assert str(caught.value) == "cuEventRecord failed: CUDA_ERROR_INVALID_HANDLE"
    assert caught.value.name == "CUDA_ERROR_INVALID_HANDLE"


RESET_SCRIPT = """
import sys
sys.path[:0] = sys.argv[1:3]
import driver_support
from driver_support import Resources, drv, make_current, ok, simulator
import test_gpu_ordering as t
import stridedview
from stridedview import StridedMemoryView, _driver, _view

sim = simulator()
make_current(0)

def view_after(value):
    res = Resources()
    try:
        spot = t.Spot(res, 0)
        consumer = res.stream(1)
        stream = res.stream(0)
        sim.set_delay_us(t.DELAY_US)
        spot.write(stream.ptr, value)
        StridedMemoryView(spot.array(stream.ptr), stream_ptr=consumer.ptr)
        return spot.read(consumer.handle, device=1)
    finally:
        sim.set_delay_us(0)
        res.release()

results = [view_after(0x81)]  # decides the door (_driver.py loads the driver first)
results.append(view_after(0x82))
live = sim.counter("events_live")
stridedview.release_driver_resources()
given_back = live - sim.counter("events_live")
ok(drv.cuDevicePrimaryCtxReset(ok(drv.cuDeviceGet(0))))
make_current(0)
results.append(view_after(0x83))  # the door decided again, its events made anew
ordered = _view._driver_door_info()["ordered"]
created = sim.counter("events_created")
results.append(view_after(0x84))
print(results, given_back > 0, sim.counter("events_created") - created,
      _view._driver_door_info()["ordered"] - ordered)
"""


def test_door_starts_afresh_after_release_driver_resources_and_a_reset(gpu, two_gpus):
    """``release_driver_resources()`` before cuDevicePrimaryCtxReset of device 0 (the
    context keeps its handle, its events die, and naming one again would crash a real
    driver): the door's events are destroyed first, and after the reset the door orders in
    C again with events made anew, none named from before (the simulator would end the
    process).  In a child process: the reset would take every other test's memory on
    device 0 with it."""
    from simgpu.simgpu_support import child_paths, run_python

    result = run_python(RESET_SCRIPT, args=child_paths())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split()[-3:] == ["True", "0", "1"], result.stdout
    assert result.stdout.split("]")[0] + "]" == "[True, True, True, True]", result.stdout


# --- hand-overs (record_stream, record_stream=True) through the door ------------------------

#: The driver calls a hand-over may make.
HANDOVER_COUNTED = COUNTED + (
    "cuStreamIsCapturing", "cuEventQuery", "cuEventSynchronize", "cuStreamGetId",
)


def handover_info() -> dict:
    return _view._driver_door_handover_info()


def test_warm_hand_over_is_recorded_queried_and_released_in_c(door, simulator, monkeypatch):
    """After warm-up, a view's hand-over (record_stream, then the view dropped) is one
    cuStreamIsCapturing, one cuStreamGetId and one cuEventRecord (no context call: an
    ordinary stream carries its context): it joins the pending entry of the same stream,
    whose event is recorded again (no event created), queried with cuEventQuery and given
    back to the door's pool when the holds are released."""
    from test_gpu_record_stream import Marking

    marking = Marking(door, 100)
    stream = door.stream()
    producer = marking.producer()

    def hand_over():
        view = StridedMemoryView(producer, stream_ptr=-1)  # no ordering: only the hand-over
        view.record_stream(stream)
        del view

    for _ in range(3):  # warm-up: the door decided, the stream's context, the events pooled
        hand_over()
        stream.synchronize()
    before, handed = counts(simulator, HANDOVER_COUNTED), handover_info()["handed"]
    for _ in range(10):
        hand_over()
        stream.synchronize()
    made = delta(simulator, before)
    made.pop("cuEventQuery", None)  # (a check on view creation may have come)
    # (A second event once, if such a check released the entry the others joined.)
    assert made.pop("cuEventCreate", 0) <= 1
    assert made == {"cuStreamIsCapturing": 10, "cuStreamGetId": 10, "cuEventRecord": 10}
    assert handover_info()["handed"] - handed == 10
    queries = simulator.calls("cuEventQuery")
    release_pending()  # the stream is done: queried, released
    assert simulator.calls("cuEventQuery") > queries
    assert _view._pending_holds() == (0, 0, 0)
    assert set(marking.calls.values()) == {1} and len(marking.calls) == 13
    assert 1 <= handover_info()["pooled"] <= 2  # reused


def test_warm_launch_with_record_stream_is_one_record_per_stream_in_c(door, simulator, monkeypatch):
    """A launch of three views on one stream with record_stream=True hands over once: one
    cuStreamIsCapturing, one cuStreamGetId and one cuEventRecord, in C (no context call),
    its three holds kept in its hand-over's own fields and slots."""
    from test_gpu_record_stream import Marking

    from stridedview import args_viewable_as_strided_memory

    marking = Marking(door, 200)
    stream = door.stream()
    first, second, third = marking.producer(), marking.producer(), marking.producer()

    @args_viewable_as_strided_memory((0, 1, 2), record_stream=True)
    def launch(a, b, c, s):
        for arg in (a, b, c):
            arg.view(s.ptr)

    for _ in range(3):
        launch(first, second, third, stream)
        stream.synchronize()
    before, handed = counts(simulator, HANDOVER_COUNTED), handover_info()["handed"]
    for _ in range(10):
        launch(first, second, third, stream)
        stream.synchronize()
    made = delta(simulator, before)
    made.pop("cuEventQuery", None)
    assert made.pop("cuEventCreate", 0) <= 1
    assert made == {"cuStreamIsCapturing": 10, "cuStreamGetId": 10, "cuEventRecord": 10}
    assert handover_info()["handed"] - handed == 10
    release_pending(wait=True)
    assert set(marking.calls.values()) == {1} and len(marking.calls) == 39


@pytest.mark.parametrize("current", ["device 0", "none"])
def test_a_c_hand_over_on_another_devices_stream_needs_no_context_current(
    door, simulator, two_gpus, monkeypatch, current
):
    """A hand-over on device 1's stream, made and released on a new thread whose current
    context is device 0's or none: recorded in C with an event of device 1's context
    (created once, that context pushed around the create only: a record of an event of another context
    fails in the simulator), later ones with no context call at all; each hold released
    once, only after the stream's work (its marker set by then)."""
    from driver_support import drv, make_current, ok
    from test_gpu_record_stream import DELETER_DELAY_US, Marking

    marking = Marking(door, 20)
    stream = door.stream(device=1)
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    del view  # (no hand-over: its deleter counts as early)
    outcome = {}

    def run():
        if current == "device 0":
            make_current(0)
        else:
            assert int(ok(drv.cuCtxGetCurrent())) == 0
        before = counts(simulator, HANDOVER_COUNTED)
        simulator.set_delay_us(DELETER_DELAY_US)
        for i in range(10):
            view = StridedMemoryView(producer, stream_ptr=-1)
            marking.mark(producer.last, stream)
            view.record_stream(stream.ptr)
            del view
            if i == 0:
                outcome["first"] = delta(simulator, before)
                before = counts(simulator, HANDOVER_COUNTED)
        outcome["later"] = delta(simulator, before)
        outcome["released"] = release_pending(wait=True)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(60)
    simulator.set_delay_us(0)
    first, later = outcome["first"], outcome["later"]
    assert first.pop("cuEventCreate") == 1
    assert first.pop("cuCtxGetCurrent") == 1
    assert first.pop("cuCtxPushCurrent_v2") == first.pop("cuCtxPopCurrent_v2") == 1
    assert first == {  # (the stream's context looked up once by this thread's table)
        "cuStreamGetCtx": 1, "cuStreamIsCapturing": 1, "cuStreamGetId": 1, "cuEventRecord": 1,
    }
    later.pop("cuEventQuery", None)  # (a check on view creation may have come)
    assert "cuCtxGetCurrent" not in later and "cuCtxPushCurrent_v2" not in later
    assert later.pop("cuEventRecord") == 9
    assert outcome["released"] >= 1
    assert _view._pending_holds() == (0, 0, 0)
    assert set(marking.calls.values()) == {1} and len(marking.calls) == 11
    assert marking.early == [1]


def slow_stream_marking(door, simulator, count):
    """A Marking, a stream and a producer, the door decided (the producer's first view made
    and released: its deleter counts as early), nothing pending, and the simulated stream
    slowed so far that its work stays queued while the test hands over."""
    from test_gpu_record_stream import DELETER_DELAY_US, Marking

    marking = Marking(door, count)
    stream = door.stream()
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=stream.ptr)  # decides the door
    del view
    release_pending(wait=True)
    simulator.set_delay_us(20 * DELETER_DELAY_US)
    return marking, stream, producer


def hand_over_marked(marking, producer, stream, count):
    """``count`` views of ``producer``, each with its work marked on ``stream``, recorded
    on it and dropped (each a hand-over)."""
    for _ in range(count):
        view = StridedMemoryView(producer, stream_ptr=-1)
        marking.mark(producer.last, stream)
        view.record_stream(stream)
        del view


def test_c_hand_overs_on_one_stream_join_its_pending_entry_up_to_a_limit(door, simulator):
    """Hand-overs on a stream whose work is still queued join the youngest pending entry of
    that stream (its event recorded again, later: no event made, no entry listed) until it
    holds 32: 100 hand-overs make 4 entries.  Every deleter runs once, after the stream's
    work queued before its own hand-over."""
    marking, stream, producer = slow_stream_marking(door, simulator, 110)
    created = simulator.calls("cuEventCreate")
    try:
        hand_over_marked(marking, producer, stream, 100)
        assert _view._pending_holds() == (4, 100, 0)
        assert simulator.calls("cuEventCreate") - created <= 4
        assert marking.calls == {1: 1}  # (the first view's: not handed over)
    finally:
        simulator.set_delay_us(0)
    assert release_pending(wait=True) == 100
    assert set(marking.calls.values()) == {1} and len(marking.calls) == 101
    assert marking.early == [1]  # (1: the first view, not handed over)
    assert _view._pending_holds() == (0, 0, 0)


def test_released_joined_hand_overs_are_reused_and_keep_their_new_holds(door, simulator):
    """Hand-overs that joined an entry are kept for reuse once released (with the GIL;
    none without it), and a reused one starts empty: the views and launches handed over
    with them on two other slow streams keep each hold until their own stream ran, and
    every deleter runs once."""
    from test_gpu_record_stream import DELETER_DELAY_US, Marking

    from stridedview import args_viewable_as_strided_memory

    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    marking = Marking(door, 200)
    first, second, third = door.stream(), door.stream(), door.stream()
    producers_ = [marking.producer() for _ in range(3)]
    for _ in range(40):  # joined on one stream, then all released
        view = StridedMemoryView(producers_[0], stream_ptr=-1)
        view.record_stream(first)
        del view
    release_pending(wait=True)
    spares = _view._spare_handovers()
    assert (spares >= 30) if gil else spares == 0

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def launch(a, b, stream):
        for arg in (a, b):
            arg.view(stream.ptr)
            marking.mark(arg.obj.last, stream)

    simulator.set_delay_us(DELETER_DELAY_US)
    for i in range(10):
        view = StridedMemoryView(producers_[0], stream_ptr=-1)
        marking.mark(producers_[0].last, second)
        view.record_stream(second)
        del view
        launch(producers_[1], producers_[2], third)
    assert (_view._spare_handovers() < spares) if gil else _view._spare_handovers() == 0
    release_pending(wait=True)
    simulator.set_delay_us(0)
    assert _view._pending_holds() == (0, 0, 0)
    assert set(marking.calls.values()) == {1} and len(marking.calls) == 70
    assert sorted(marking.early) == list(range(1, 41))  # (the first 40: nothing marked)


def test_a_hand_over_joins_no_entry_of_a_stream_whose_id_is_not_known_the_same(door, simulator):
    """A pending entry's event is recorded again only on the stream it was recorded on: the
    stream's id (cuStreamGetId, never reused) must read the same.  A handle that names
    another stream now (the first destroyed, a new one made at its address, as a real driver
    may) reads another id; here the id cannot be read (the call fails), and the hand-over
    records an entry of its own."""
    from test_gpu_driver_faults import code

    marking, stream, producer = slow_stream_marking(door, simulator, 10)
    try:
        for failing in (False, False, True):
            view = StridedMemoryView(producer, stream_ptr=-1)
            marking.mark(producer.last, stream)
            view.record_stream(stream)
            if failing:
                simulator.fail("cuStreamGetId", code("CUDA_ERROR_INVALID_HANDLE"))
            del view
        fired = simulator.fail_fired("cuStreamGetId")
        simulator.fail_clear()
        assert fired == 1
        assert _view._pending_holds() == (2, 3, 0)  # the second joined the first; not the third
    finally:
        simulator.set_delay_us(0)
    assert release_pending(wait=True) == 3
    assert set(marking.calls.values()) == {1} and len(marking.calls) == 4
    assert marking.early == [1]  # (1: the first view, not handed over)


def test_c_hand_over_events_come_back_to_the_pool(door, simulator):
    """1,000 hand-overs through the door create no event after warm-up: the simulator's live
    events stay where they were, and the pool holds what was in flight at most."""
    from test_gpu_record_stream import Marking

    marking = Marking(door, 1100)
    stream = door.stream()
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    view.record_stream(stream)
    del view
    release_pending(wait=True)
    live, created = simulator.counter("events_live"), simulator.calls("cuEventCreate")
    handed = handover_info()["handed"]
    for i in range(1000):
        view = StridedMemoryView(producer, stream_ptr=-1)
        view.record_stream(stream)
        del view
        if i % 100 == 99:
            stream.synchronize()
    release_pending(wait=True)
    assert handover_info()["handed"] - handed == 1000
    assert simulator.counter("events_live") == live + handover_info()["pooled"] - 1
    assert simulator.calls("cuEventCreate") - created == handover_info()["pooled"] - 1
    assert handover_info()["pooled"] <= 101
    assert _view._pending_holds() == (0, 0, 0)


@pytest.mark.parametrize("call", ["cuEventRecord", "cuStreamIsCapturing", "cuEventCreate"])
def test_a_failure_in_the_record_keeps_the_hold_for_the_next_check(door, simulator, monkeypatch, call):
    """A record failing once with an answer that says nothing of the stream's work (not a
    lasting failure: test_gpu_driver_faults.py): the events recorded on the entry's other
    places are given back, the hold is kept (deferred), the failure reported once, and the
    next check records it again: the hold goes after the stream's work, once."""
    from test_gpu_record_stream import DELETER_DELAY_US, Marking

    from test_gpu_driver_faults import code

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    marking = Marking(door, 10)
    streams = [door.stream(), door.stream()]
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=streams[0].ptr)  # decides the door
    del view
    if call == "cuEventCreate":
        _driver.use_api(None)  # no event pooled: the record must create one
    live = simulator.counter("events_live")
    simulator.set_delay_us(20 * DELETER_DELAY_US)
    view = StridedMemoryView(producer, stream_ptr=streams[0].ptr)
    marking.mark(producer.last, streams[1])
    view.record_stream(streams[0])
    view.record_stream(streams[1])
    # The second place fails (the first was recorded and is given back).
    simulator.fail(call, code("CUDA_ERROR_ILLEGAL_ADDRESS"), skip=1)
    del view
    fired = simulator.fail_fired(call)
    simulator.fail_clear()
    assert fired == 1
    assert marking.calls == {1: 1} and _view._deferred_holds() == 1  # (1: no hand-over)
    assert len(reported) == 1 and reported[0].exc_value.name == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert release_pending(wait=True) == 1
    simulator.set_delay_us(0)
    assert marking.calls == {1: 1, 2: 1} and marking.early == [1]  # (1: released at once)
    assert len(reported) == 1
    _driver.trim_event_pool()
    assert simulator.counter("events_live") <= live + 1  # (the ordering's own event)


def test_c_hand_over_pools_are_destroyed_when_their_threads_end(door, simulator):
    """Threads handing over through the door (their events back in their own C pools) have
    those events destroyed by the time join returns."""
    from test_gpu_record_stream import Marking

    marking = Marking(door, 200)
    stream = door.stream()
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=stream.ptr)  # decides the door
    del view
    live, door_live = simulator.counter("events_live"), handover_info()["handover_events"]
    seen = []

    def run():
        for _ in range(5):
            view = StridedMemoryView(producer, stream_ptr=-1)
            view.record_stream(stream)
            del view
            release_pending(wait=True)  # released here: its event back to this thread's pool
        seen.append((handover_info()["handed"], handover_info()["pooled"]))

    threads = [threading.Thread(target=run) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    # Each thread handed 5 over in C.  Its pool holds its own event back, or another's:
    # release_pending(wait=True) releases every thread's pending holds, and gives their events
    # to the calling thread's pool (with the GIL off the threads interleave there).
    assert [handed for handed, _ in seen] == [5] * 4
    assert sum(pooled for _, pooled in seen) >= 1
    assert simulator.counter("events_live") == live
    assert handover_info()["handover_events"] == door_live


def test_use_api_with_c_hand_overs_pending_leaves_no_event_alive(door, simulator):
    """use_api waits for the pending hand-overs recorded in C, releases them, and destroys the
    C pools: no event is left alive, every deleter ran once, after its stream."""
    from test_gpu_record_stream import DELETER_DELAY_US, Marking

    live = simulator.counter("events_live")
    marking = Marking(door, 100)
    streams = [door.stream(), door.stream()]
    simulator.set_delay_us(DELETER_DELAY_US)
    producer = marking.producer()
    handed = None
    for i in range(20):
        view = StridedMemoryView(producer, stream_ptr=-1)
        marking.mark(producer.last, streams[i % 2])
        view.record_stream(streams[i % 2])
        del view
        if handed is None:
            handed = handover_info()["handed"]
    assert handover_info()["handed"] - handed == 19
    assert _view._pending_holds()[1] >= 1
    _driver.use_api(None)
    simulator.set_delay_us(0)
    assert _view._pending_holds() == (0, 0, 0)
    assert set(marking.calls.values()) == {1} and len(marking.calls) == 20
    assert marking.early == []
    assert handover_info()["handover_events"] == 0
    assert simulator.counter("events_live") == live


def test_a_per_thread_stream_is_recorded_on_its_thread_or_on_the_legacy_stream(door, simulator):
    """A per-thread default stream (2) recorded and released by the same thread is recorded
    there (the context current: no push); released by another thread while the recording
    thread lives, on its context's legacy stream (which waits for it), by the releasing
    thread."""
    from driver_support import make_current
    from test_gpu_record_stream import Marking

    make_current(0)
    marking = Marking(door, 10)
    producer = marking.producer()
    for _ in range(2):
        view = StridedMemoryView(producer, stream_ptr=-1)
        view.record_stream(2)
        del view
        release_pending(wait=True)
    handed = handover_info()["handed"]
    view = StridedMemoryView(producer, stream_ptr=-1)
    view.record_stream(2)
    del view
    assert handover_info()["handed"] - handed == 1
    # The other thread makes the view and drops the last reference: with the GIL off, an
    # object is freed by the thread that made it when another thread drops its last
    # reference (biased reference counting), so a view made here would be released here.
    views, made, recorded, counted = [], threading.Event(), threading.Event(), []

    def make_then_release():
        make_current(0)
        views.append(StridedMemoryView(producer, stream_ptr=-1))
        made.set()
        recorded.wait(30)
        before = handover_info()["handed"]
        views.clear()
        counted.append(handover_info()["handed"] - before)

    thread = threading.Thread(target=make_then_release)
    thread.start()
    made.wait(30)
    views[0].record_stream(2)
    recorded.set()
    thread.join(30)
    assert counted == [1]  # recorded in C by the releasing thread
    release_pending(wait=True)
    assert set(marking.calls.values()) == {1} and len(marking.calls) == 4
