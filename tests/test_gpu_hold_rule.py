"""The hand-over rule where the driver's answer says neither "done" nor "gone", on the
simulated device.

A hold (what a view recorded on streams kept its memory alive with) is released only once the
work of every stream it was handed to is known complete or known gone.  An answer that says
neither (``CUDA_ERROR_NOT_PERMITTED``, which every CUDA call answers inside a host function,
or any unexpected error) keeps it pending, to be asked again; nothing is released, and nothing
waited for, from inside a host function.  The cases here are those an outside review found
releasing memory while a stream could still read it: a failed event query or wait, a host
function, a garbage cycle, a capture begun after the view's stream had work queued, a
primary-context reset after ``release_driver_resources()`` with a graph owning a hold, and a
per-thread default stream whose thread ended while another thread captures.

Each stream that reads the memory is held by a ``Gate`` (a host function that waits until the
test opens it), so "still running" is a fact, not a matter of timing; the consumer's work
writes a marker byte the deleter reads (``Marking``), so a release before that work ran is
seen.  Marked ``simgpu`` for the simulator's injected failures and counters.
"""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

from stridedview import StridedMemoryView, _view, release_pending

from test_gpu_record_stream import Default, Marking

pytestmark = [pytest.mark.gpu, pytest.mark.simgpu]

#: Answers that say nothing of the work asked about: not "done", not "gone".
UNEXPECTED = (
    "CUDA_ERROR_NOT_PERMITTED",
    "CUDA_ERROR_UNKNOWN",
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_NOT_SUPPORTED",
    "CUDA_ERROR_OUT_OF_MEMORY",
    "CUDA_ERROR_ILLEGAL_STATE",
    "CUDA_ERROR_INVALID_VALUE",
)


def code(name):
    from driver_support import drv

    return getattr(drv.CUresult, name)


def gate_on(stream_handle):
    from simgpu.simgpu_support import Gate

    return Gate(timeout=30).enqueue(stream_handle)


def pending_holds():
    return _view._pending_holds()[1]


class Held:
    """One view of a ``Marking`` producer recorded on ``stream`` (a driver_support Stream or a
    ``Default``), whose work there is held by a gate: released, its hold is pending."""

    def __init__(self, gpu, stream):
        self.marking = Marking(gpu, 10)
        self.stream = stream
        self.gate = gate_on(stream.handle)
        producer = self.marking.producer()
        view = StridedMemoryView(producer, stream_ptr=-1)
        self.marking.mark(producer.last, stream)
        view.record_stream(stream.ptr)
        del view

    def release_after_the_stream(self):
        """Open the gate, wait for the hold: it goes once, after the stream's work."""
        self.gate.open()
        assert release_pending(wait=True) == 1
        assert self.marking.calls == {1: 1} and self.marking.early == []


def stream_of(gpu, kind):
    return gpu.stream() if kind == "ordinary" else Default(1)


@pytest.mark.parametrize("call", ["cuEventQuery", "cuEventSynchronize"])
@pytest.mark.parametrize("kind", ["ordinary", "legacy"])
@pytest.mark.parametrize("name", UNEXPECTED)
def test_a_failed_query_or_wait_keeps_the_hold(gpu, simulator, call, kind, name):
    """A pending hold on a stream still running, its event query (view creations and
    release_pending) or wait (release_pending(wait=True)) failing with an answer that says
    nothing of the work: the hold stays pending, its deleter not run; once the driver answers
    again and the stream is done, it goes, once."""
    held = Held(gpu, stream_of(gpu, kind))
    simulator.fail(call, code(name), count=-1)
    try:
        if call == "cuEventQuery":
            assert release_pending() == 0
            for _ in range(100):  # view creations check the oldest holds too
                StridedMemoryView(np.zeros(4), stream_ptr=-1)
        else:
            assert release_pending(wait=True) == 0
        assert simulator.fail_fired(call) >= 1
    finally:
        simulator.fail_clear()
        if pending_holds() != 1:
            held.gate.open()
    assert held.marking.calls == {} and pending_holds() == 1
    held.release_after_the_stream()


def test_a_host_function_releases_nothing(gpu, simulator):
    """Python run inside a CUDA host function (where every CUDA call answers
    CUDA_ERROR_NOT_PERMITTED) makes views, which check pending holds, and releases a view
    recorded on a stream: no hold is released there, neither another thread's pending one nor
    the released view's, and nothing waits; both go later, after their streams, once."""
    from simgpu.simgpu_support import host_fn

    recorded = Marking(gpu, 10)  # (first: a Marking synchronizes the context)
    pending = Held(gpu, gpu.stream())
    stream = gpu.stream()
    gate = gate_on(stream.handle)
    producer = recorded.producer()
    box = [StridedMemoryView(producer, stream_ptr=-1)]
    recorded.mark(producer.last, stream)
    box[0].record_stream(stream.ptr)
    seen = {}
    done = threading.Event()

    def inside():
        try:
            for _ in range(100):
                StridedMemoryView(np.zeros(4), stream_ptr=-1)
            del box[:]  # the recorded view released here
            seen["released"] = release_pending()
            seen["calls"] = (dict(pending.marking.calls), dict(recorded.calls))
        except BaseException as exc:  # (a host function cannot raise: reported below)
            seen["error"] = repr(exc)
        finally:
            done.set()

    waits = simulator.counter("host_waits")
    host_fn(gpu.stream().handle, inside)
    assert done.wait(30)
    try:
        assert "error" not in seen, seen["error"]
        assert seen["released"] == 0 and seen["calls"] == ({}, {})
        assert simulator.counter("host_waits") == waits
        assert pending.marking.calls == {} and recorded.calls == {}
    finally:
        gate.open()
        pending.gate.open()
    assert release_pending(wait=True) == 2
    assert pending.marking.calls == {1: 1} and pending.marking.early == []
    assert recorded.calls == {producer.last: 1} and recorded.early == []


def test_a_hold_with_nothing_left_to_wait_for_is_not_released_in_a_host_function(gpu, simulator):
    """A hold a destroyed graph gives back with nothing left to wait for (its streams were
    waited for by ``release_driver_resources()``: no event to ask) is released by the next
    check; one run inside a host function releases nothing (the deleter could make no CUDA
    call there) and drains nothing, and the check after it releases the hold, once."""
    import stridedview
    from driver_support import drv, ok
    from simgpu.simgpu_support import host_fn

    marking = Marking(gpu, 10)
    stream = gpu.stream()
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    view.record_stream(stream.ptr)
    begin_capture(stream.handle)
    del view  # released during the capture: the graph owns the hold
    graph = ok(drv.cuStreamEndCapture(stream.handle))
    assert release_pending() == 0  # (its place recorded now that the capture has ended)
    stridedview.release_driver_resources()  # waits for it: nothing left to wait for
    assert _view._graph_owned() == 1 and marking.calls == {}
    ok(drv.cuGraphDestroy(graph))  # (the destructor runs before the call returns)
    seen = {}
    done = threading.Event()

    def inside():
        try:
            for _ in range(40):  # view creations drain what graphs gave back
                StridedMemoryView(np.zeros(4), stream_ptr=-1)
            seen["released"] = release_pending()
            seen["calls"] = dict(marking.calls)
            seen["owned"] = _view._graph_owned()
        except BaseException as exc:  # (a host function cannot raise: reported below)
            seen["error"] = repr(exc)
        finally:
            done.set()

    other = gpu.stream()
    host_fn(other.handle, inside)
    assert done.wait(30)
    other.synchronize()  # (the host function has returned)
    assert "error" not in seen, seen["error"]
    assert seen == {"released": 0, "calls": {}, "owned": 1}
    assert release_pending() == 1
    assert marking.calls == {producer.last: 1}
    assert _view._graph_owned() == 0 and _view._pending_holds() == (0, 0, 0)


class Finalized:
    """A CUDA Array Interface producer over device memory whose finalizer marks it given back
    (as a stream-ordered allocator's owner frees its block when collected)."""

    def __init__(self, ptr, log):
        self.log = log
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (64,), "typestr": "|u1", "data": (ptr, False),
            "strides": None, "stream": None,
        }

    def __del__(self):
        self.log.append("freed")


def test_a_recorded_view_in_a_garbage_cycle_keeps_its_producer(gpu, simulator):
    """A view recorded on a stream still running, its last reference in a garbage cycle: the
    collector neither finalizes nor clears the producer with it (the view does not report its
    producer while a hand-over is pending), the view hands over, and the producer goes once
    the stream is done."""
    stream = gpu.stream()
    memory = gpu.device(64)
    log = []
    gate = gate_on(stream.handle)
    try:
        view = StridedMemoryView(Finalized(memory.ptr, log), stream_ptr=-1)
        view.record_stream(stream.ptr)
        cycle = [view]
        cycle.append(cycle)
        del view, cycle
        gc.collect()
        assert log == [] and pending_holds() == 1
    finally:
        gate.open()
    assert release_pending(wait=True) == 1
    assert log == ["freed"]


def begin_capture(handle):
    from driver_support import drv, ok

    ok(drv.cuStreamBeginCapture(handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))


@pytest.mark.parametrize("capture", ["ended", "invalidated"])
def test_a_hold_released_during_a_capture_waits_for_the_work_queued_before_it(gpu, simulator, capture):
    """A view recorded on C, C running work queued before a capture begins on it, the view
    released during the capture: the hold goes to the graph, and when the graph is gone (or
    the capture failed) it still waits for the work C had queued before the capture."""
    from driver_support import drv, ok

    held = Held.__new__(Held)
    held.marking = Marking(gpu, 10)
    stream = gpu.stream()
    held.gate = gate_on(stream.handle)
    producer = held.marking.producer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    held.marking.mark(producer.last, stream)  # before the capture
    view.record_stream(stream.ptr)
    try:
        begin_capture(stream.handle)
        del view  # released during the capture
        if capture == "ended":
            graph = ok(drv.cuStreamEndCapture(stream.handle))
            ok(drv.cuGraphDestroy(graph))
        else:
            drv.cuStreamQuery(stream.handle)  # a host query of a capturing stream invalidates it
            result = drv.cuStreamEndCapture(stream.handle)
            assert result[0] == drv.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
        from simgpu.simgpu_support import wait_until

        # (the graph gives the hold back from a driver thread; release_pending drains it)
        assert wait_until(lambda: release_pending() == 0 and _view._graph_owned() == 0)
        assert release_pending() == 0
        assert held.marking.calls == {}
    finally:
        held.gate.open()
    assert release_pending(wait=True) == 1
    assert held.marking.calls == {1: 1} and held.marking.early == []


RESET_GRAPH_SCRIPT = """
import sys
sys.path[:0] = sys.argv[1:3]
from driver_support import Resources, drv, make_current, ok, simulator
import test_gpu_record_stream as t
import stridedview
from stridedview import StridedMemoryView, _view, release_pending
from simgpu.simgpu_support import wait_until

sim = simulator()
make_current(0)
res = Resources()
marking = t.Marking(res, 10, pinned=False)
ordinary, capturing = res.stream(), res.stream()
view = StridedMemoryView(marking.producer(), stream_ptr=-1)
view.record_stream(ordinary.ptr)
view.record_stream(capturing.ptr)
ok(drv.cuStreamBeginCapture(capturing.handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
del view  # to the graph, with an event recorded on the ordinary stream
graph = ok(drv.cuStreamEndCapture(capturing.handle))
stridedview.release_driver_resources()
ok(drv.cuDevicePrimaryCtxReset(ok(drv.cuDeviceGet(0))))
ok(drv.cuGraphDestroy(graph))  # the hold comes back: its pre-reset event must not be named
released = []
wait_until(lambda: released.append(release_pending()) or _view._graph_owned() == 0)
print(sum(released), marking.calls, flush=True)
"""


def test_a_graph_hold_coming_back_after_a_reset_names_no_dead_event(gpu):
    """A hold owned by a graph and also recorded on an ordinary stream, then
    ``release_driver_resources()`` and a primary-context reset, then the graph destroyed: the
    hold comes back and is released once, without naming its pre-reset event (which a real
    driver crashes on, and the simulator with it).  In a child process: the reset takes every
    test's memory."""
    from simgpu.simgpu_support import child_paths, run_python

    result = run_python(RESET_GRAPH_SCRIPT, args=child_paths())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["1 {1: 1}"], result.stdout


def test_a_per_thread_stream_of_an_ended_thread_invalidates_no_capture(gpu, simulator):
    """Thread A records a view on its per-thread default stream (2), whose work is held, and
    ends; the main thread releases the view while thread B captures on a non-blocking stream:
    B's capture stays valid (no host synchronisation of the context), and the hold goes only
    after A's work ran, once."""
    from driver_support import drv, make_current, ok

    marking = Marking(gpu, 10)
    producer = marking.producer()
    box = [StridedMemoryView(producer, stream_ptr=-1)]
    gates = []

    def record():
        make_current(0)
        gates.append(gate_on(2))
        marking.mark(producer.last, Default(2))
        box[0].record_stream(2)

    capturing, release, results = threading.Event(), threading.Event(), {}
    stream = gpu.stream()

    def capture():
        make_current(0)
        begin_capture(stream.handle)
        capturing.set()
        release.wait(30)
        results["end"] = drv.cuStreamEndCapture(stream.handle)[0]

    recorder = threading.Thread(target=record)
    recorder.start()
    recorder.join(30)
    capturer = threading.Thread(target=capture)
    capturer.start()
    try:
        assert capturing.wait(30)
        del box[:]  # released by the main thread, A gone
        release_pending()
        assert marking.calls == {}
    finally:
        release.set()
        capturer.join(30)
        for gate in gates:
            gate.open()
    assert results["end"] == drv.CUresult.CUDA_SUCCESS
    assert release_pending(wait=True) == 1
    assert marking.calls == {1: 1} and marking.early == []
    ok(drv.cuCtxSynchronize())


def test_a_cycle_through_the_owner_of_the_memory_waits_for_the_hand_over(gpu, simulator):
    """A CUDA Array Interface owner that keeps its own view recorded on a stream still running,
    the cycle (owner -> view -> owner) dropped: the collector leaves it alone while the
    hand-over is pending (finalizing the owner would give its memory back); once the program
    breaks the cycle, the view hands over and the owner goes after the stream's work."""
    stream = gpu.stream()
    memory = gpu.device(64)
    log = []
    gate = gate_on(stream.handle)
    try:
        owner = Finalized(memory.ptr, log)
        owner.view = StridedMemoryView(owner, stream_ptr=-1)
        owner.view.record_stream(stream.ptr)
        del owner
        gc.collect()
        assert log == []
        found = [o for o in gc.get_objects() if type(o) is Finalized and o.log is log]
        assert len(found) == 1
    finally:
        gate.open()
    del found[0].view  # the program breaks the cycle: the view hands over
    del found[:]
    assert release_pending(wait=True) == 1
    assert log == ["freed"]


FIRST_HAND_OVERS_SCRIPT = """
import sys, threading
sys.path[:0] = sys.argv[1:3]
from driver_support import Resources, make_current
import test_gpu_record_stream as t
from stridedview import StridedMemoryView, _view, release_pending

make_current(0)
res = Resources()
marking = t.Marking(res, 64)
streams = [res.stream() for _ in range(8)]
producers = [marking.producer() for _ in range(8)]
start = threading.Barrier(8)
errors = []

def first(i):
    try:
        make_current(0)
        start.wait(30)
        view = StridedMemoryView(producers[i], stream_ptr=streams[i].ptr)
        marking.mark(producers[i].last, streams[i])
        view.record_stream(streams[i].ptr)
        del view
    except BaseException as exc:
        errors.append(repr(exc))

threads = [threading.Thread(target=first, args=(i,)) for i in range(8)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join(60)
release_pending(wait=True)
print(errors, sorted(marking.calls.values()), marking.early, _view._pending_holds())
"""


def test_threads_making_their_first_hand_over_at_once(gpu):
    """Eight threads of a fresh process make their first view and hand-over at once (the door
    decided, each thread's door struct made and tied to its thread state, the exit function
    registered, all racing): every hold is released once, after its stream's work.
    tools/tsan.sh --simgpu runs it under ThreadSanitizer, which reported races there."""
    from simgpu.simgpu_support import child_paths, run_python

    result = run_python(FIRST_HAND_OVERS_SCRIPT, args=child_paths())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[0] == "[] [1, 1, 1, 1, 1, 1, 1, 1] [] (0, 0, 0)", result.stdout
