"""The call log (``simgpu_call_log_start``): every driver call, in call order, with its
arguments, result and thread, for tests that need an exact call sequence.

A real driver keeps no such log, so every test here is simulator-only.  The calls are made
through ``cuda.bindings.driver``, as the library under test makes them; the bindings make no
driver call of their own around them (``cuGetProcAddress``, which they use to find each entry
point, is not counted and so not logged).
"""

from __future__ import annotations

import ctypes
import threading

import pytest

from .simgpu_support import SUCCESS, Call, CUresult, Gate, drv, ok

E = CUresult
LOG_SKIP_REASON = "the call log is a simulator feature"
NON_BLOCKING = int(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
DISABLE_TIMING = int(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
THREAD_LOCAL = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL


@pytest.fixture
def sim(sim):
    """The simulator's exports (skipped on a real driver); the log is stopped after the test."""
    if sim is None:
        pytest.skip(LOG_SKIP_REASON)
    yield sim
    sim.call_log_stop()


def calls(sim):
    """The log as (name, args, result) triples, the thread left out."""
    return [(c.name, c.args, c.result) for c in sim.call_log()]


def test_a_known_sequence_in_order_with_arguments_and_results(sim, res):
    """Create a stream and an event, record, wait, query: exactly those calls, in that order,
    each with its arguments (handles by value, the created handles as the out-values), its
    result, and the calling thread."""
    sim.call_log_start()
    stream = ok(drv.cuStreamCreate(NON_BLOCKING))
    event = ok(drv.cuEventCreate(DISABLE_TIMING))
    ok(drv.cuEventRecord(event, stream))
    ok(drv.cuStreamWaitEvent(stream, event, 0))
    ok(drv.cuStreamSynchronize(stream))
    assert drv.cuEventQuery(event)[0] == SUCCESS
    ok(drv.cuEventDestroy(event))
    ok(drv.cuStreamDestroy(stream))
    sim.call_log_stop()
    s, e = int(stream), int(event)
    assert calls(sim) == [
        ("cuStreamCreate", (s, NON_BLOCKING), 0),
        ("cuEventCreate", (e, DISABLE_TIMING), 0),
        ("cuEventRecord", (e, s), 0),
        ("cuStreamWaitEvent", (s, e, 0), 0),
        ("cuStreamSynchronize", (s,), 0),
        ("cuEventQuery", (e,), 0),
        ("cuEventDestroy_v2", (e,), 0),
        ("cuStreamDestroy_v2", (s,), 0),
    ]
    me = threading.get_native_id()
    assert all(c.thread == me and not c.per_thread and not c.injected for c in sim.call_log())


def test_out_values_are_what_the_call_wrote(sim, primary, res):
    """Out-parameters are logged as the value written: the context of cuCtxGetCurrent and
    cuStreamGetCtx, the capture status of cuStreamIsCapturing, the device of cuDeviceGet,
    the pointer of cuMemAlloc; an entry point's other arguments by value."""
    stream = res.stream()
    sim.call_log_start()
    ctx = ok(drv.cuCtxGetCurrent())
    ok(drv.cuStreamGetCtx(stream))
    ok(drv.cuStreamIsCapturing(stream))
    ok(drv.cuStreamBeginCapture(stream, THREAD_LOCAL))
    ok(drv.cuStreamIsCapturing(stream))
    graph = ok(drv.cuStreamEndCapture(stream))
    device = ok(drv.cuDeviceGet(1 if len(primary) > 1 else 0))
    pointer = ok(drv.cuMemAlloc(4096))
    ok(drv.cuMemFree(pointer))
    ok(drv.cuGraphDestroy(graph))
    sim.call_log_stop()
    s, c = int(stream), int(ctx)
    assert c == int(primary[0])
    assert calls(sim) == [
        ("cuCtxGetCurrent", (c,), 0),
        ("cuStreamGetCtx", (s, c), 0),
        ("cuStreamIsCapturing", (s, 0), 0),  # CU_STREAM_CAPTURE_STATUS_NONE
        ("cuStreamBeginCapture_v2", (s, int(THREAD_LOCAL)), 0),
        ("cuStreamIsCapturing", (s, 1), 0),  # CU_STREAM_CAPTURE_STATUS_ACTIVE
        ("cuStreamEndCapture", (s, int(graph)), 0),
        ("cuDeviceGet", (int(device), int(device)), 0),
        ("cuMemAlloc_v2", (int(pointer), 4096), 0),
        ("cuMemFree_v2", (int(pointer),), 0),
        ("cuGraphDestroy", (int(graph),), 0),
    ]


def test_a_failed_call_logs_its_code_and_no_out_value(sim, res):
    """A call the driver refuses is logged with its error and 0 for its out-values; one
    answered by an injected failure (``Simulator.fail``) with the injected code, marked
    ``injected``, and its arguments as passed."""
    stream = res.stream()
    event = res.event()
    sim.fail("cuEventRecord", E.CUDA_ERROR_LAUNCH_FAILED)
    sim.call_log_start()
    assert drv.cuEventRecord(event, stream)[0] == E.CUDA_ERROR_LAUNCH_FAILED
    ok(drv.cuEventRecord(event, stream))
    assert drv.cuStreamGetCtx(drv.CUstream(0x7777_0000_0000))[0] == E.CUDA_ERROR_INVALID_HANDLE
    assert drv.cuEventCreate(0x100)[0] == E.CUDA_ERROR_INVALID_VALUE
    sim.call_log_stop()
    log = sim.call_log()
    s, e = int(stream), int(event)
    assert [(c.name, c.args, c.result, c.injected) for c in log] == [
        ("cuEventRecord", (e, s), int(E.CUDA_ERROR_LAUNCH_FAILED), True),
        ("cuEventRecord", (e, s), 0, False),
        ("cuStreamGetCtx", (0x7777_0000_0000, 0), int(E.CUDA_ERROR_INVALID_HANDLE), False),
        ("cuEventCreate", (0, 0x100), int(E.CUDA_ERROR_INVALID_VALUE), False),
    ]


def test_the_thread_scope_ignores_other_threads(sim, primary):
    """Started with the default scope, the log holds only the calls of the thread that started
    it, however the threads interleave."""
    other_done = threading.Event()

    def other():
        ok(drv.cuCtxSetCurrent(primary[0]))
        ok(drv.cuCtxGetCurrent())
        other_done.set()

    sim.call_log_start()
    ok(drv.cuCtxGetDevice())
    thread = threading.Thread(target=other)
    thread.start()
    other_done.wait(10)
    thread.join(10)
    ok(drv.cuCtxGetCurrent())
    sim.call_log_stop()
    me = threading.get_native_id()
    log = sim.call_log()
    assert [(c.name, c.thread) for c in log] == [("cuCtxGetDevice", me), ("cuCtxGetCurrent", me)]


def test_the_all_threads_scope_interleaves_calls_in_call_order(sim, primary):
    """With ``all_threads`` every thread's calls are logged, in the order they were made, each
    with its thread: A, then main, then A again (the threads hand over with events)."""
    main_turn, other_turn = threading.Event(), threading.Event()
    other_id = []

    def other():
        other_id.append(threading.get_native_id())
        ok(drv.cuCtxSetCurrent(primary[0]))
        main_turn.set()
        other_turn.wait(10)
        ok(drv.cuCtxGetCurrent())

    sim.call_log_start(all_threads=True)
    thread = threading.Thread(target=other)
    thread.start()
    main_turn.wait(10)
    ok(drv.cuCtxGetDevice())
    other_turn.set()
    thread.join(10)
    sim.call_log_stop()
    me = threading.get_native_id()
    assert [(c.name, c.args, c.thread) for c in sim.call_log()] == [
        ("cuCtxSetCurrent", (int(primary[0]),), other_id[0]),
        ("cuCtxGetDevice", (0,), me),
        ("cuCtxGetCurrent", (int(primary[0]),), other_id[0]),
    ]


def test_start_clears_and_stop_stops(sim):
    """``call_log_start`` starts from an empty log; after ``call_log_stop`` nothing more is
    logged and what was stays readable, until the next start."""
    sim.call_log_start()
    ok(drv.cuCtxGetCurrent())
    ok(drv.cuCtxGetDevice())
    sim.call_log_start()
    version = ok(drv.cuDriverGetVersion())
    sim.call_log_stop()
    ok(drv.cuCtxGetCurrent())
    assert calls(sim) == [("cuDriverGetVersion", (version,), 0)]
    assert calls(sim) == [("cuDriverGetVersion", (version,), 0)]  # reading does not consume
    sim.call_log_start()
    sim.call_log_stop()
    assert sim.call_log() == []


def test_a_call_in_flight_has_no_result_until_it_returns(sim, res):
    """An entry is made as the call begins and completed as it returns: read meanwhile, a
    blocked cuStreamSynchronize has no result yet; once it returns, its CUDA_SUCCESS."""
    stream = res.stream()
    gate = Gate().enqueue(stream)
    assert gate.entered.wait(10)
    sim.call_log_start(all_threads=True)
    thread = threading.Thread(target=lambda: ok(drv.cuStreamSynchronize(stream)))
    thread.start()
    try:
        for _ in range(1000):
            if sim.call_log():
                break
            threading.Event().wait(0.005)
        (pending,) = sim.call_log()
        assert (pending.name, pending.args, pending.result) == ("cuStreamSynchronize", (int(stream),), None)
    finally:
        gate.open()
        thread.join(10)
    sim.call_log_stop()
    assert calls(sim) == [("cuStreamSynchronize", (int(stream),), 0)]


def test_a_per_thread_default_stream_variant_is_logged_under_its_entry_point(sim):
    """The ``_ptsz`` symbols (what cuGetProcAddress hands out for the per-thread default
    stream) run their base entry point: logged under its name, ``per_thread`` set."""
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuStreamQuery_ptsz.argtypes = [ctypes.c_void_p]
    sim.call_log_start()
    assert lib.cuStreamQuery_ptsz(None) == 0
    ok(drv.cuStreamQuery(0))
    sim.call_log_stop()
    assert [(c.name, c.args, c.result, c.per_thread) for c in sim.call_log()] == [
        ("cuStreamQuery", (0,), 0, True),
        ("cuStreamQuery", (0,), 0, False),
    ]


def test_a_full_log_keeps_the_first_calls_and_counts_the_rest(sim):
    """The log keeps the first 100,000 calls; later ones are counted as dropped, not logged."""
    lib = ctypes.CDLL("libcuda.so.1")
    version = ctypes.c_int()
    get_version = lib.cuDriverGetVersion
    sim.call_log_start()
    for _ in range(100_005):
        get_version(ctypes.byref(version))
    sim.call_log_stop()
    assert sim.call_log_dropped() == 5
    log = sim.call_log()
    assert len(log) == 100_000
    assert log[0] == Call("cuDriverGetVersion", (version.value,), 0, threading.get_native_id())
    sim.call_log_start()
    assert sim.call_log_dropped() == 0
