"""The graph rules the simulated GPU models for capture-safe consumers, through cuda.bindings only.

User objects (a resource's life tied to graphs), the graph a capture is building
(``cuStreamGetCaptureInfo``) and external event waits replayed.  Like test_conformance.py, the
same file runs against a real driver (SIMGPU_REAL_DRIVER=1): every rule here is the driver's
documented behaviour (the CUDA driver API reference, "CUDA User Objects" in the CUDA C++
Programming Guide); the simulator's counters are read only where it is loaded (``sim``).
"""

from __future__ import annotations

import ctypes
import threading
import time

import numpy as np

from .simgpu_support import HOST_FN, CUresult, Gate, drv, ok, wait_until

E = CUresult
MOVE = drv.CUuserObjectRetain_flags.CU_GRAPH_USER_OBJECT_MOVE
NO_SYNC = drv.CUuserObject_flags.CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
ACTIVE = drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_ACTIVE
THREAD_LOCAL = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL


class Destructor:
    """A user object's destructor that notes the thread it ran on and how often."""

    def __init__(self):
        self.threads: list[int] = []
        self.callback = HOST_FN(lambda _data: self.threads.append(threading.get_ident()))

    def make(self, count=1):
        address = ctypes.cast(self.callback, ctypes.c_void_p).value
        return ok(drv.cuUserObjectCreate(0, drv.CUhostFn(address), count, NO_SYNC))

    def ran(self, timeout=10.0) -> bool:
        return wait_until(lambda: len(self.threads) > 0, timeout)

    def not_run(self, settle=0.05) -> bool:
        time.sleep(settle)  # long enough for an asynchronous destructor already due to run
        return self.threads == []


def captured_graph(stream, nbytes, dev, value=3):
    """A graph captured on ``stream`` with one memset (``value`` into ``dev``), and the graph
    handle cuStreamGetCaptureInfo gave while capturing."""
    ok(drv.cuStreamBeginCapture(stream, THREAD_LOCAL))
    status, _id, building, *_ = ok(drv.cuStreamGetCaptureInfo(stream))
    assert status == ACTIVE
    ok(drv.cuMemsetD8Async(dev, value, nbytes, stream))
    return building


def capture_holding(res, nbytes):
    """A new stream capturing a memset into ``nbytes`` of new device memory (captured_graph),
    the graph being built holding a new user object, its reference moved in:
    ``(dev, stream, destructor, building)``."""
    dev = res.alloc(nbytes)
    stream = res.stream()
    destructor = Destructor()
    building = captured_graph(stream, nbytes, dev)
    ok(drv.cuGraphRetainUserObject(building, destructor.make(), 1, MOVE))
    return dev, stream, destructor, building


def test_user_object_destructor_runs_once_in_the_releasing_thread(res):
    """The destructor runs when the last reference goes, once, synchronously: in the thread
    that released it, before cuUserObjectRelease returns (driver 580 on an H200 did so, though
    CU_USER_OBJECT_NO_DESTRUCTOR_SYNC lets a driver defer it)."""
    destructor = Destructor()
    obj = destructor.make(count=2)
    ok(drv.cuUserObjectRelease(obj, 1))
    assert destructor.not_run()
    ok(drv.cuUserObjectRetain(obj, 1))
    ok(drv.cuUserObjectRelease(obj, 2))
    assert destructor.threads == [threading.get_ident()]  # already run, here
    time.sleep(0.05)
    assert destructor.threads == [threading.get_ident()]  # and once


def test_user_object_destructor_runs_in_another_releasing_thread(res):
    """A last release made by another thread runs the destructor in that thread, before its
    call returns."""
    destructor = Destructor()
    obj = destructor.make()
    seen = {}

    def release():
        ok(drv.cuUserObjectRelease(obj, 1))
        seen["threads"] = list(destructor.threads)
        seen["self"] = threading.get_ident()

    worker = threading.Thread(target=release)
    worker.start()
    worker.join()
    assert seen["threads"] == [seen["self"]] and destructor.threads == [seen["self"]]


def test_user_object_create_checks_its_arguments(res):
    """A destructor, an initial count >= 1 and CU_USER_OBJECT_NO_DESTRUCTOR_SYNC are required."""
    destructor = Destructor()
    address = ctypes.cast(destructor.callback, ctypes.c_void_p).value
    assert drv.cuUserObjectCreate(0, drv.CUhostFn(address), 0, NO_SYNC)[0] == E.CUDA_ERROR_INVALID_VALUE
    assert drv.cuUserObjectCreate(0, drv.CUhostFn(address), 1, 0)[0] == E.CUDA_ERROR_INVALID_VALUE
    assert destructor.not_run()


def test_graph_owns_a_moved_reference_until_destroyed(res):
    """cuGraphRetainUserObject with CU_GRAPH_USER_OBJECT_MOVE hands the caller's reference to
    the graph: the object lives until the graph is destroyed, and cuGraphDestroy runs the
    destructor in the calling thread before it returns (as driver 580 on an H200 did)."""
    destructor = Destructor()
    graph = ok(drv.cuGraphCreate(0))
    obj = destructor.make()
    ok(drv.cuGraphRetainUserObject(graph, obj, 1, MOVE))
    assert destructor.not_run()
    ok(drv.cuGraphDestroy(graph))
    assert destructor.threads == [threading.get_ident()]


def test_graph_retain_without_move_adds_a_reference(res):
    """Without the move flag the graph takes a reference of its own: the caller's still counts."""
    destructor = Destructor()
    graph = ok(drv.cuGraphCreate(0))
    obj = destructor.make()
    ok(drv.cuGraphRetainUserObject(graph, obj, 1, 0))
    ok(drv.cuGraphDestroy(graph))
    assert destructor.not_run()
    ok(drv.cuUserObjectRelease(obj, 1))
    assert destructor.ran()


def test_graph_release_user_object(res):
    """cuGraphReleaseUserObject gives back references the graph holds: the last one runs the
    destructor before the call returns."""
    destructor = Destructor()
    graph = ok(drv.cuGraphCreate(0))
    obj = destructor.make()
    ok(drv.cuGraphRetainUserObject(graph, obj, 1, MOVE))
    ok(drv.cuGraphReleaseUserObject(graph, obj, 1))
    assert destructor.threads == [threading.get_ident()]
    ok(drv.cuGraphDestroy(graph))
    assert destructor.threads == [threading.get_ident()]


def test_graph_release_of_more_than_it_holds(res, sim):
    """Asked for more references than the graph holds, cuGraphReleaseUserObject answered
    CUDA_SUCCESS and ran no destructor, and a release of the one held then succeeded too
    (driver 580 on an H200, a graph holding one reference asked for two).  The simulator
    models that as releasing nothing, so there the one held still runs the destructor; what
    the driver's counts became is not known, so that part is simulator-only."""
    destructor = Destructor()
    graph = ok(drv.cuGraphCreate(0))
    obj = destructor.make()
    ok(drv.cuGraphRetainUserObject(graph, obj, 1, MOVE))
    ok(drv.cuGraphReleaseUserObject(graph, obj, 2))
    assert destructor.not_run()
    ok(drv.cuGraphReleaseUserObject(graph, obj, 1))
    if sim is not None:
        assert destructor.threads == [threading.get_ident()]
    ok(drv.cuGraphDestroy(graph))


def test_capture_info_gives_the_graph_being_built(res):
    """While a stream captures, cuStreamGetCaptureInfo names the graph cuStreamEndCapture
    returns; a user object it retains is held by the captured graph."""
    _, stream, destructor, building = capture_holding(res, 256)
    graph = ok(drv.cuStreamEndCapture(stream))
    assert int(graph) == int(building)
    assert destructor.not_run()
    ok(drv.cuGraphDestroy(graph))
    assert destructor.ran()


def test_failed_capture_releases_what_its_graph_held(res):
    """A capture that is invalidated ends without a graph: the references retained into the
    graph it was building are released."""
    _, stream, destructor, _ = capture_holding(res, 256)
    assert drv.cuStreamSynchronize(stream)[0] == E.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert drv.cuStreamEndCapture(stream)[0] == E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert destructor.ran()


def test_executable_graph_holds_references_of_its_own(res):
    """An executable graph keeps the objects its graph held when instantiated: destroying the
    graph first releases nothing; destroying the executable graph then does."""
    _, stream, destructor, _ = capture_holding(res, 256)
    graph = ok(drv.cuStreamEndCapture(stream))
    exe = ok(drv.cuGraphInstantiate(graph, 0))
    ok(drv.cuGraphDestroy(graph))
    assert destructor.not_run()
    ok(drv.cuGraphLaunch(exe, stream))
    ok(drv.cuStreamSynchronize(stream))
    ok(drv.cuGraphExecDestroy(exe))
    assert destructor.ran()


def test_executable_graph_destroyed_while_launched_releases_after_the_launch(res):
    """An executable graph destroyed while a launch of it is queued releases its references
    only once that launch has run (the release is deferred, never early)."""
    n = 256
    dev, stream, destructor, _ = capture_holding(res, n)
    graph = ok(drv.cuStreamEndCapture(stream))
    exe = ok(drv.cuGraphInstantiate(graph, 0))
    ok(drv.cuGraphDestroy(graph))
    gate = Gate().enqueue(stream)
    try:
        ok(drv.cuGraphLaunch(exe, stream))
        ok(drv.cuGraphExecDestroy(exe))
        assert destructor.not_run(0.1)
    finally:
        gate.open()
    ok(drv.cuStreamSynchronize(stream))
    assert destructor.ran()
    out = np.zeros(n, np.uint8)
    ok(drv.cuMemcpyDtoH(out.ctypes.data, dev, n))
    assert (out == 3).all()


def test_each_replay_waits_for_the_external_events_record_at_its_launch(res):
    """An external event wait node waits, at each launch of the graph, for the event's last
    record at that launch: a later record holds a later replay, an earlier one does not."""
    n = 4096
    dev = res.alloc(n)
    producer, capturing, runner = res.stream(), res.stream(), res.stream()
    event = res.event(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    ok(drv.cuEventRecord(event, producer))
    ok(drv.cuStreamBeginCapture(capturing, THREAD_LOCAL))
    ok(drv.cuStreamWaitEvent(capturing, event, drv.CUevent_wait_flags.CU_EVENT_WAIT_EXTERNAL))
    ok(drv.cuMemsetD8Async(dev, 4, n, capturing))
    graph = ok(drv.cuStreamEndCapture(capturing))
    exe = ok(drv.cuGraphInstantiate(graph, 0))
    for _ in range(3):  # replays with nothing held run at once
        ok(drv.cuGraphLaunch(exe, runner))
        ok(drv.cuStreamSynchronize(runner))
    gate = Gate().enqueue(producer)
    try:
        ok(drv.cuEventRecord(event, producer))  # held by the gate
        ok(drv.cuGraphLaunch(exe, runner))
        time.sleep(0.05)
        assert drv.cuStreamQuery(runner)[0] == E.CUDA_ERROR_NOT_READY
    finally:
        gate.open()
    ok(drv.cuStreamSynchronize(runner))
    ok(drv.cuGraphExecDestroy(exe))
    ok(drv.cuGraphDestroy(graph))


def test_user_object_destructor_may_not_call_the_driver(sim_only, res):
    """A destructor runs where no CUDA call is permitted (the simulator refuses one, as a
    driver's internal thread would not let it make progress)."""
    answers = []

    def destroy(_data):
        answers.append(drv.cuCtxGetCurrent()[0])

    callback = HOST_FN(destroy)
    address = ctypes.cast(callback, ctypes.c_void_p).value
    obj = ok(drv.cuUserObjectCreate(0, drv.CUhostFn(address), 1, NO_SYNC))
    ok(drv.cuUserObjectRelease(obj, 1))
    assert wait_until(lambda: answers)
    assert answers == [E.CUDA_ERROR_NOT_PERMITTED]


def test_one_object_in_several_graphs_lives_until_the_last(res):
    """An object retained by several graphs (its references moved into each) is destroyed once,
    after the last of them."""
    graphs = 3
    destructor = Destructor()
    obj = destructor.make(count=graphs)
    made = [ok(drv.cuGraphCreate(0)) for _ in range(graphs)]
    for graph in made:
        ok(drv.cuGraphRetainUserObject(graph, obj, 1, MOVE))
    for graph in made[:-1]:
        ok(drv.cuGraphDestroy(graph))
    assert destructor.not_run()
    ok(drv.cuGraphDestroy(made[-1]))
    assert destructor.ran()
    time.sleep(0.05)
    assert len(destructor.threads) == 1


def test_many_captures_at_once(res):
    """Sixty-four streams capturing at the same time, begun one after another and ended in
    reverse: each capture is its own and ends with its own graph.  (The simulator's table of
    captures, grown in place by realloc, once kept its old capacity and let later captures
    write past its end: heap corruption that cuda.core's suite met in one run of eight.)"""
    nbytes = 64
    dev = res.alloc(nbytes * 64)
    streams = [res.stream() for _ in range(64)]
    for i, stream in enumerate(streams):
        ok(drv.cuStreamBeginCapture(stream, THREAD_LOCAL))
        ok(drv.cuMemsetD8Async(dev + i * nbytes, i, nbytes, stream))
    ids = [ok(drv.cuStreamGetCaptureInfo(stream))[1] for stream in streams]
    assert len(set(ids)) == 64
    graphs = [ok(drv.cuStreamEndCapture(stream)) for stream in reversed(streams)]
    assert len({int(g) for g in graphs}) == 64
    for graph in graphs:
        ok(drv.cuGraphDestroy(graph))
