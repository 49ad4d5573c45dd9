"""CUDA graphs on the simulated device when the driver will not tie a resource to a graph.

What a capture's graph must own is tied to it with a user object (src/stridedview/_graphs.pxi,
_driver_door.pxi's ``_give_to_graphs``).  Two calls can fail there, injected here with
``Simulator.fail``:

- ``cuGraphRetainUserObject`` (a graph refuses the object's reference): ``GraphOwnedError``.
  An ordering's event is given back at once (no wait was made on it); a hold is kept until
  exit, since the life of the graph that refused it cannot be known.
- ``cuUserObjectCreate`` (no object): ``CUDAError``, nothing taken; an ordering's event is
  destroyed, a hold is kept until exit.

Each test asserts the error (type, message naming the ``CUresult``), the user's capture
(still valid: nothing that would invalidate it was called), every DLPack deleter run exactly
once and not while a graph may still use its memory, no event or user object leaked (the
simulator's counters), and that the next ordering (the driver door's warm path) and hand-over
work.  A real driver cannot be made to fail on demand: marked ``simgpu``.
"""

from __future__ import annotations

import sys
import time

import pytest

from stridedview import CUDAError, StridedMemoryView, _driver, _view, release_pending
from test_gpu_graphs import Capture, Spot, marking_for, settle

pytestmark = [pytest.mark.gpu, pytest.mark.simgpu]

CAPTURE_ACTIVE = 1  # CU_STREAM_CAPTURE_STATUS_ACTIVE

FAULTS = [
    ("cuGraphRetainUserObject", "CUDA_ERROR_OUT_OF_MEMORY"),
    ("cuUserObjectCreate", "CUDA_ERROR_OUT_OF_MEMORY"),
]
FAULT_IDS = ["graph-refuses", "no-user-object"]


@pytest.fixture
def door(gpu, simulator, monkeypatch):
    """The simulated device (no delay: nothing here races a late write), the driver door decided
    afresh; unraisable reports collected in ``door.reported``."""
    _driver.use_api(None)  # the door decided again at the next ordering
    gpu.reported = []
    monkeypatch.setattr(sys, "unraisablehook", gpu.reported.append)
    yield gpu
    simulator.fail_clear()
    Capture.close_left_open()
    for _ in range(2):
        release_pending(wait=True)


def capture_status(stream_handle) -> int:
    from driver_support import drv, ok

    return int(ok(drv.cuStreamIsCapturing(stream_handle)))


def live(simulator) -> tuple[int, int]:
    return simulator.counter("events_live"), simulator.counter("user_objects_live")


def check_error(error, call, name, owned):
    """The error a failed tie raises: ``GraphOwnedError`` for a refused reference, a plain
    ``CUDAError`` when no user object was made; "<call> failed: <NAME>", ``.name`` the name."""
    assert isinstance(error, CUDAError)
    assert isinstance(error, _driver.GraphOwnedError) is owned
    assert str(error) == f"{call} failed: {name}"
    assert error.name == name


def check_next_ordering(spot, res, simulator, producer, consumer):
    """An ordering outside any capture after the failure: through the driver door's warm path
    (one record, one wait, no context look-up), and the consumer reads the producer's write."""
    from driver_support import drv, ok

    assert _view._driver_door_info()["state"] == 1
    ordered = _view._driver_door_info()["ordered"]
    spot.write(producer.ptr, 0x42)
    simulator.calls_reset()
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    report = simulator.calls_report()
    assert _view._driver_door_info()["ordered"] - ordered == 1
    assert sum(n for call, n in report.items() if call.startswith("cuStreamWaitEvent")) == 1
    assert sum(n for call, n in report.items() if call.startswith("cuStreamGetCtx")) == 0
    spot.capture_copy(consumer.handle)
    ok(drv.cuStreamSynchronize(consumer.handle))
    assert (spot.out.array() == 0x42).all()


def warm(spot, producer, consumer):
    """One ordering and one hand-over outside a capture: the thread's events and the door made,
    so that the counters after a failure compare with a warm state."""
    StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
    release_pending(wait=True)


# --- ordering into a capturing stream -------------------------------------------------------


@pytest.mark.parametrize("source", ["cai", "dlpack-view"])
@pytest.mark.parametrize("call, name", FAULTS, ids=FAULT_IDS)
def test_an_ordering_whose_event_cannot_be_tied_to_the_graph(door, simulator, call, name, source):
    """The ordering raises (no wait was made, so the capture is still valid and ends into a
    graph), its event is destroyed (at once, or by the drain once the refused object's
    destructor ran), no user object is left, the producer's reference or capsule is released
    exactly once when its view goes, and orderings into a new capture and outside one work."""
    from driver_support import drv

    spot = Spot(door)
    marking = marking_for(door)
    consumer, producer = door.stream(), door.stream()
    warm(spot, producer, consumer)
    events, objects = live(simulator)
    array = spot.array(producer.ptr)
    if source == "cai":
        base = array
    else:  # a DLPack view whose data are ready on the producer's stream, viewed again
        dlpack = marking.producer()
        base = StridedMemoryView(dlpack, stream_ptr=producer.ptr)
        assert base.ready_stream == producer.ptr
    refs = sys.getrefcount(array)
    simulator.fail(call, getattr(drv.CUresult, name))
    with Capture(consumer.handle) as capture:
        with pytest.raises(CUDAError) as caught:
            StridedMemoryView(base, stream_ptr=consumer.ptr)
        assert capture_status(consumer.handle) == CAPTURE_ACTIVE
        spot.capture_copy(consumer.handle)
    assert simulator.fail_fired(call) == 1
    simulator.fail_clear()
    check_error(caught.value, call, name, owned=call == "cuGraphRetainUserObject")
    del caught
    assert capture.graph is not None  # the capture ended valid
    assert settle(lambda: _view._graph_owned() == 0)
    assert live(simulator) == (events, objects)
    if source == "cai":
        assert sys.getrefcount(array) == refs
    else:
        assert marking.calls == {}
        del base
        assert marking.calls == {dlpack.last: 1}
    capture.replay(2, lambda: None)  # (no wait: it reads what is there)
    capture.close()
    # A new capture ties its ordering's event to its graph, and replays wait for the producer.
    spot.write(producer.ptr)
    with Capture(consumer.handle) as again:
        StridedMemoryView(spot.array(producer.ptr), stream_ptr=consumer.ptr)
        spot.capture_copy(consumer.handle)
    assert _view._graph_owned() == 1
    again.close()
    assert settle(lambda: _view._graph_owned() == 0)
    check_next_ordering(spot, door, simulator, producer, consumer)
    assert door.reported == []


# --- holds handed to a capturing stream -----------------------------------------------------


@pytest.mark.parametrize("call, name", FAULTS, ids=FAULT_IDS)
def test_a_hold_its_graph_cannot_own_is_kept_until_exit(door, simulator, call, name):
    """``record_stream`` on a capturing stream whose graph cannot own the hold: the failure is
    reported (a deallocation cannot raise), the capture stays valid, and the hold is kept until
    exit: not released by ``release_pending(wait=True)``, nor when the graph is destroyed (the
    graph may be replayed until then, reading the memory), then released exactly once by what
    the exit function runs (``_drain_pending``).  No event nor user object is left, and the
    next hand-over and ordering work."""
    from driver_support import drv

    spot = Spot(door)
    marking = marking_for(door)
    stream, other = door.stream(), door.stream()
    warm(spot, other, stream)
    events, objects = live(simulator)
    producer = marking.producer()
    simulator.fail(call, getattr(drv.CUresult, name))
    with Capture(stream.handle) as capture:
        view = StridedMemoryView(producer, stream_ptr=stream.ptr)
        marking.mark(producer.last, stream)
        view.record_stream(stream)
        del view
        assert capture_status(stream.handle) == CAPTURE_ACTIVE
    assert simulator.fail_fired(call) == 1
    simulator.fail_clear()
    assert len(door.reported) == 1
    check_error(door.reported[0].exc_value, call, name, owned=call == "cuGraphRetainUserObject")
    assert "kept until exit" in str(door.reported[0].object)
    assert _view._pending_holds() == (0, 0, 1)
    marking.markers[:] = 0
    capture.replay(3, lambda: None)
    assert release_pending(wait=True) == 0
    capture.close()
    time.sleep(0.05)
    assert release_pending() == 0 and marking.calls == {}
    assert _view._drain_pending() == 1
    assert marking.calls == {producer.last: 1} and marking.early == []
    assert _view._pending_holds() == (0, 0, 0)
    assert settle(lambda: _view._graph_owned() == 0)
    assert live(simulator) == (events, objects)
    # The next hand-over to a capturing stream belongs to its graph again.
    held = marking.producer()
    with Capture(stream.handle) as again:
        view = StridedMemoryView(held, stream_ptr=stream.ptr)
        view.record_stream(stream)
        del view
    assert _view._graph_owned() == 1 and _view._pending_holds() == (0, 0, 0)
    again.close()
    assert settle(lambda: marking.calls.get(held.last) == 1)
    check_next_ordering(spot, door, simulator, other, stream)
    assert len(door.reported) == 1


def test_a_hold_refused_by_one_of_two_graphs(door, simulator):
    """A view recorded on two streams capturing two graphs; the first takes the hold's user
    object, the second refuses it: the hold is kept until exit, even after the graph that took
    it is gone (the one that refused may still be replayed), and released once then."""
    from driver_support import drv

    marking = marking_for(door)
    first, second = door.stream(), door.stream()
    producer = marking.producer()
    events, objects = live(simulator)
    simulator.fail("cuGraphRetainUserObject", drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY, skip=1)
    with Capture(first.handle) as took:
        with Capture(second.handle) as refused:
            view = StridedMemoryView(producer, stream_ptr=-1)
            marking.mark(producer.last, first)
            marking.mark(producer.last, second)
            view.record_stream(first)
            view.record_stream(second)
            del view
            assert capture_status(second.handle) == CAPTURE_ACTIVE
        assert capture_status(first.handle) == CAPTURE_ACTIVE
    assert simulator.fail_fired("cuGraphRetainUserObject") == 1
    simulator.fail_clear()
    assert len(door.reported) == 1
    check_error(
        door.reported[0].exc_value, "cuGraphRetainUserObject", "CUDA_ERROR_OUT_OF_MEMORY", owned=True
    )
    assert _view._pending_holds() == (0, 0, 1)
    assert _view._graph_owned() == 1  # the user object the first graph took
    assert live(simulator) == (events, objects + 1)  # the reference not moved was released
    took.close()
    assert settle(lambda: _view._graph_owned() == 0)  # its destructor ran, drained
    assert live(simulator) == (events, objects)
    time.sleep(0.05)
    assert release_pending(wait=True) == 0 and marking.calls == {}
    marking.markers[:] = 0
    refused.replay(2, lambda: None)  # still reads the memory
    refused.close()
    assert _view._drain_pending() == 1
    assert marking.calls == {producer.last: 1} and marking.early == []
    assert _view._pending_holds() == (0, 0, 0)


# --- a decorated launch under capture -------------------------------------------------------


@pytest.mark.parametrize("fails", ["ordering", "hold"])
def test_a_decorated_launch_whose_graph_refuses(door, simulator, fails):
    """A launcher (``record_stream=True``) captured while a graph refuses a user object: the
    first retain (``fails="ordering"``: the CAI argument's ordering, the launch raises
    GraphOwnedError before its body) or the second (``"hold"``: the launch's hold, reported,
    the launch returns).  Either way the capture stays valid, the DLPack argument's deleter
    runs exactly once and never while a graph that may read it is alive, and the same launcher
    works outside the capture afterwards."""
    from driver_support import drv, ok
    from stridedview import args_viewable_as_strided_memory

    spot = Spot(door)
    marking = marking_for(door)
    consumer, producer = door.stream(), door.stream()
    ran = []

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def launch(held, data, stream):
        held.view(stream_ptr=stream.ptr)
        data.view(stream_ptr=stream.ptr)
        spot.capture_copy(stream.handle)
        marking.mark(held.obj.last, stream)
        ran.append(stream.ptr)

    warm(spot, producer, consumer)
    held = marking.producer()
    simulator.fail(
        "cuGraphRetainUserObject",
        drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY,
        skip=0 if fails == "ordering" else 1,
    )
    with Capture(consumer.handle) as capture:
        if fails == "ordering":
            with pytest.raises(_driver.GraphOwnedError, match="^cuGraphRetainUserObject failed: "):
                launch(held, spot.array(producer.ptr), consumer)
        else:
            launch(held, spot.array(producer.ptr), consumer)
        assert capture_status(consumer.handle) == CAPTURE_ACTIVE
    assert simulator.fail_fired("cuGraphRetainUserObject") == 1
    simulator.fail_clear()
    assert ran == ([] if fails == "ordering" else [consumer.ptr])
    assert len(door.reported) == (0 if fails == "ordering" else 1)
    marking.markers[:] = 0
    capture.replay(2, lambda: None)
    release_pending(wait=True)
    if fails == "hold":  # (the group's two: the DLPack capsule and the CAI dict)
        assert marking.calls == {} and _view._pending_holds() == (0, 0, 2)
    else:  # the hold of the argument viewed before the failing one: the graph's (the refused
        # ordering's node comes back once the driver thread has run its object's destructor)
        assert marking.calls == {} and settle(lambda: _view._graph_owned() == 1)
    capture.close()
    assert settle(lambda: _view._graph_owned() == 0)
    # (A hold the graph gave back then waits for what its stream ran since the capture.)
    release_pending(wait=True)
    assert _view._drain_pending() == (0 if fails == "ordering" else 2)
    if fails == "ordering":
        # (the hold of the view made before the failing one: released once, the body never ran)
        assert marking.calls == {held.last: 1}
    else:
        assert marking.calls == {held.last: 1} and marking.early == []
    assert _view._pending_holds() == (0, 0, 0)
    # The same launcher outside the capture.
    spot.write(producer.ptr, 0x42)
    again = marking.producer()
    launch(again, spot.array(producer.ptr), consumer)
    ok(drv.cuStreamSynchronize(consumer.handle))
    assert (spot.out.array() == 0x42).all()
    assert settle(lambda: marking.calls.get(again.last) == 1)
