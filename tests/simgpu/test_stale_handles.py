"""Handles a test makes stale, as a driver would report them (simulator-only).

``Simulator.stream_move(stream, ctx)``: the stream handle now names a new, empty stream of
another context (a driver that reused a destroyed stream's handle: a stream->context mapping
the caller remembered goes stale).  ``Simulator.handle_report_gone(handle, code)``: a stream or
event handle answers ``code`` in every call naming it, where a destroyed handle would end the
process (test_conformance.py's test_a_gone_handle_named_again_ends_the_process).  Both are
checked here through ``cuda.bindings.driver`` calls.
"""

from __future__ import annotations

import pytest

from .simgpu_support import SUCCESS, CUresult, Gate, drv, ok, run_python
from .test_conformance import GONE_FATAL, GONE_PREAMBLE

E = CUresult
STALE_SKIP_REASON = "stale handles on demand are a simulator feature"
NON_BLOCKING = drv.CUstream_flags.CU_STREAM_NON_BLOCKING


@pytest.fixture
def sim(sim):
    if sim is None:
        pytest.skip(STALE_SKIP_REASON)
    return sim


def test_a_moved_stream_names_a_new_stream_of_the_other_context(sim, primary, two_devices, res):
    """After the move, cuStreamGetCtx answers the new context, an event of the old context
    recorded on the handle answers CUDA_ERROR_INVALID_HANDLE (the event's context differs), one
    of the new context records, and the new stream is empty and usable."""
    stream = ok(drv.cuStreamCreate(NON_BLOCKING))
    assert int(ok(drv.cuStreamGetCtx(stream))) == int(primary[0])
    old_event = res.event()
    live = sim.counter("streams_live")
    sim.stream_move(stream, primary[1])
    assert sim.counter("streams_live") == live
    assert int(ok(drv.cuStreamGetCtx(stream))) == int(primary[1])
    assert drv.cuEventRecord(old_event, stream)[0] == E.CUDA_ERROR_INVALID_HANDLE
    ok(drv.cuCtxSetCurrent(primary[1]))
    try:
        new_event = ok(drv.cuEventCreate(0))
        ok(drv.cuEventRecord(new_event, stream))
        ok(drv.cuStreamSynchronize(stream))
        assert drv.cuEventQuery(new_event)[0] == SUCCESS
        assert ok(drv.cuStreamGetFlags(stream)) == int(NON_BLOCKING)  # the old stream's flags
        ok(drv.cuEventDestroy(new_event))
    finally:
        ok(drv.cuCtxSetCurrent(primary[0]))
    ok(drv.cuStreamDestroy(stream))
    assert sim.counter("streams_live") == live - 1


def test_the_moved_streams_queued_work_still_drains(sim, primary, res):
    """The stream the handle named is destroyed as by cuStreamDestroy: work queued on it runs
    to the end (an event recorded before the move completes once it does), while the handle's
    new stream is empty from the start."""
    stream = ok(drv.cuStreamCreate(NON_BLOCKING))
    gate = Gate().enqueue(stream)
    queued = res.event()
    ok(drv.cuEventRecord(queued, stream))
    sim.stream_move(stream, primary[-1])
    try:
        assert drv.cuEventQuery(queued)[0] == E.CUDA_ERROR_NOT_READY
        assert drv.cuStreamQuery(stream)[0] == SUCCESS  # the new stream: nothing queued
    finally:
        gate.open()
    ok(drv.cuEventSynchronize(queued))
    ok(drv.cuStreamDestroy(stream))


def test_stream_move_refuses_what_cannot_move(sim, primary, res):
    """Default streams, a destroyed stream, a made-up handle and a dead context are refused."""
    stream = res.stream()
    for handle in (0, 1, 2, 0x7777_0000_0000):
        with pytest.raises(ValueError):
            sim.stream_move(handle, primary[0])
    with pytest.raises(ValueError):
        sim.stream_move(stream, 0)
    context = ok(drv.cuCtxCreate(None, 0, ok(drv.cuDeviceGet(0))))
    ok(drv.cuCtxDestroy(context))
    ok(drv.cuCtxSetCurrent(primary[0]))
    with pytest.raises(ValueError):
        sim.stream_move(stream, context)
    gone = ok(drv.cuStreamCreate(0))
    ok(drv.cuStreamDestroy(gone))
    with pytest.raises(ValueError):
        sim.stream_move(gone, primary[0])


def test_an_event_reported_gone_answers_its_code_everywhere(sim, res):
    """A live event reported gone is destroyed (events_live drops) and every call naming it
    answers the code given: record, query, synchronize, wait, elapsed time, destroy."""
    stream = res.stream()
    other = res.event()
    for code in (E.CUDA_ERROR_INVALID_HANDLE, E.CUDA_ERROR_CONTEXT_IS_DESTROYED):
        event = ok(drv.cuEventCreate(0))
        live = sim.counter("events_live")
        sim.handle_report_gone(event, code)
        assert sim.counter("events_live") == live - 1
        assert [drv.cuEventRecord(event, stream)[0], drv.cuEventQuery(event)[0],
                drv.cuEventSynchronize(event)[0], drv.cuStreamWaitEvent(stream, event, 0)[0],
                drv.cuEventElapsedTime(event, other)[0], drv.cuEventDestroy(event)[0]] == [code] * 6


def test_a_stream_reported_gone_answers_instead_of_crashing(sim, res):
    """A live stream reported gone is destroyed (its queued work drains) and every call
    naming it answers CUDA_ERROR_INVALID_HANDLE, where a destroyed stream's handle would end
    the process."""
    stream = ok(drv.cuStreamCreate(0))
    gate = Gate().enqueue(stream)
    queued = res.event()
    ok(drv.cuEventRecord(queued, stream))
    event = res.event()
    dev = res.alloc(256)
    sim.handle_report_gone(stream)
    try:
        assert [drv.cuStreamQuery(stream)[0], drv.cuStreamSynchronize(stream)[0],
                drv.cuEventRecord(event, stream)[0], drv.cuStreamWaitEvent(stream, event, 0)[0],
                drv.cuStreamGetCtx(stream)[0], drv.cuStreamIsCapturing(stream)[0],
                drv.cuMemsetD8Async(dev, 1, 256, stream)[0],
                drv.cuStreamDestroy(stream)[0]] == [E.CUDA_ERROR_INVALID_HANDLE] * 8
        assert drv.cuEventQuery(queued)[0] == E.CUDA_ERROR_NOT_READY
    finally:
        gate.open()
    ok(drv.cuEventSynchronize(queued))


def test_a_moved_stream_reported_gone(sim, primary, res):
    """A moved handle reported gone: the stream it names now goes, and the handle answers the code."""
    stream = ok(drv.cuStreamCreate(0))
    sim.stream_move(stream, primary[-1])
    sim.handle_report_gone(stream, E.CUDA_ERROR_CONTEXT_IS_DESTROYED)
    assert drv.cuStreamQuery(stream)[0] == E.CUDA_ERROR_CONTEXT_IS_DESTROYED
    assert drv.cuStreamGetCtx(stream)[0] == E.CUDA_ERROR_CONTEXT_IS_DESTROYED


def test_report_gone_refuses_what_is_not_a_stream_or_event(sim, primary, res):
    """Default streams, contexts, made-up handles and code 0 are refused."""
    for handle in (0, 1, 2, 0x7777_0000_0000, int(primary[0])):
        with pytest.raises(ValueError):
            sim.handle_report_gone(handle)
    with pytest.raises(ValueError):
        sim.handle_report_gone(res.event(), 0)


REPORT_GONE = """
lib = ctypes.CDLL("libcuda.so.1")
lib.simgpu_handle_report_gone.argtypes = [ctypes.c_uint64, ctypes.c_int]
for handle in [h for h in ("gone", "stream", "event") if h in globals()]:
    assert lib.simgpu_handle_report_gone(int(globals()[handle]), 400) == 0, handle
"""


@pytest.mark.parametrize("made_gone, call", [c[1:] for c in GONE_FATAL], ids=[c[0] for c in GONE_FATAL])
def test_a_gone_handle_reported_gone_answers_instead_of_crashing(sim, made_gone, call):
    """Each case that ends the process (a destroyed stream, a stream or event of a reset
    primary context, named again) answers CUDA_ERROR_INVALID_HANDLE once the handle is reported
    gone, also after it went."""
    result = run_python(GONE_PREAMBLE + made_gone + REPORT_GONE + "print(" + call + "[0].name)\n")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == ["CUDA_ERROR_INVALID_HANDLE"]
