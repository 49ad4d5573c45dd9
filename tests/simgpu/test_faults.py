"""Injected failures (``simgpu_fail``): what tests use to make a driver call fail on demand.

A real driver cannot be made to fail at will, so every test here is simulator-only: against a
real driver (``SIMGPU_REAL_DRIVER=1``) the module skips with ``FAULTS_SKIP_REASON``.  The rule
of ``simgpu_fail(entry_point, code, count, skip)``: the entry point's next ``skip`` calls run as
usual, the following ``count`` calls (-1: until cleared) return ``code`` and do nothing else.
"""

from __future__ import annotations

import ctypes
import threading

import pytest

from .simgpu_support import SUCCESS, CUresult, code, drv, ok

E = CUresult
FAULTS_SKIP_REASON = "fault injection is a simulator feature: a real driver cannot be made to fail on demand"
PER_THREAD_DEFAULT_STREAM = 2  # CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM


@pytest.fixture
def sim(sim):
    """The simulator's exports; skipped against a real driver."""
    if sim is None:
        pytest.skip(FAULTS_SKIP_REASON)
    return sim


def test_skip_then_count_failures_then_normal_calls(sim, driver):
    """The first `skip` calls succeed, the next `count` return the code, later calls succeed again."""
    sim.fail("cuEventCreate", E.CUDA_ERROR_OUT_OF_MEMORY, count=2, skip=1)
    results = [drv.cuEventCreate(0) for _ in range(5)]
    assert [code(r) for r in results] == [
        SUCCESS, E.CUDA_ERROR_OUT_OF_MEMORY, E.CUDA_ERROR_OUT_OF_MEMORY, SUCCESS, SUCCESS
    ]
    assert sim.fail_fired("cuEventCreate") == 2
    for result in results:
        if code(result) == SUCCESS:
            ok(drv.cuEventDestroy(result[1]))


def test_count_minus_one_fails_until_cleared(sim, driver):
    """count=-1 fails every call until fail_clear (or a count of 0 for that name) removes the rule."""
    sim.fail("cuStreamQuery", E.CUDA_ERROR_UNKNOWN, count=-1)
    assert all(code(drv.cuStreamQuery(0)) == E.CUDA_ERROR_UNKNOWN for _ in range(20))
    assert sim.fail_fired("cuStreamQuery") == 20
    sim.fail("cuStreamQuery", E.CUDA_ERROR_UNKNOWN, count=0)
    assert sim.fail_fired("cuStreamQuery") == -1
    assert code(drv.cuStreamQuery(0)) == SUCCESS
    sim.fail("cuStreamQuery", E.CUDA_ERROR_UNKNOWN, count=-1)
    sim.fail_clear()
    assert code(drv.cuStreamQuery(0)) == SUCCESS


def test_a_failed_call_does_nothing(sim, driver, primary):
    """An injected failure changes no state: no stream is created, the context stack is untouched."""
    created = sim.counter("streams_created")
    sim.fail("cuStreamCreate", E.CUDA_ERROR_OUT_OF_MEMORY)
    assert code(drv.cuStreamCreate(0)) == E.CUDA_ERROR_OUT_OF_MEMORY
    assert sim.counter("streams_created") == created
    sim.fail("cuCtxPushCurrent", E.CUDA_ERROR_INVALID_CONTEXT)
    assert code(drv.cuCtxPushCurrent(primary[1 if len(primary) > 1 else 0])) == E.CUDA_ERROR_INVALID_CONTEXT
    assert int(ok(drv.cuCtxGetCurrent())) == int(primary[0])
    assert code(drv.cuCtxPopCurrent()) == SUCCESS  # the stack still holds exactly the set context
    assert code(drv.cuCtxPopCurrent()) == E.CUDA_ERROR_INVALID_CONTEXT


def test_failed_calls_are_counted(sim, driver):
    """A call answered by an injected failure still counts in simgpu_call_count; calls_reset zeroes the counts."""
    sim.calls_reset()
    assert sim.calls("cuCtxGetCurrent") == 0
    sim.fail("cuCtxGetCurrent", E.CUDA_ERROR_DEINITIALIZED, count=1, skip=1)
    assert code(drv.cuCtxGetCurrent()) == SUCCESS
    assert code(drv.cuCtxGetCurrent()) == E.CUDA_ERROR_DEINITIALIZED
    assert sim.calls("cuCtxGetCurrent") == 2
    sim.calls_reset()
    assert sim.calls("cuCtxGetCurrent") == 0


def test_every_route_meets_the_rule(sim, driver):
    """The exported symbol, the pointer cuGetProcAddress hands out and its per-thread-default-stream
    variant all meet one rule, which counts their calls together."""
    lib = ctypes.CDLL("libcuda.so.1")
    prototype = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
    exported = prototype(("cuStreamSynchronize", lib))
    addresses = []
    for flags in (0, PER_THREAD_DEFAULT_STREAM):
        err, fn, _status = drv.cuGetProcAddress(b"cuStreamSynchronize", 12000, flags)
        assert err == SUCCESS
        addresses.append(int(fn))
    assert addresses[0] != addresses[1]  # the legacy and the _ptsz variant
    pointers = [prototype(address) for address in addresses]
    sim.fail("cuStreamSynchronize", E.CUDA_ERROR_LAUNCH_FAILED, count=3)
    assert [call(None) for call in (exported, *pointers)] == [E.CUDA_ERROR_LAUNCH_FAILED.value] * 3
    assert sim.fail_fired("cuStreamSynchronize") == 3
    assert [call(None) for call in (exported, *pointers)] == [0, 0, 0]


def test_a_rule_names_the_versioned_variants_only(sim, driver, primary):
    """A rule for "cuCtxPushCurrent" catches cuCtxPushCurrent_v2 (what the bindings call), while
    a rule for "cuStream" catches no cuStream... entry point."""
    sim.fail("cuCtxPushCurrent", E.CUDA_ERROR_INVALID_CONTEXT)
    assert code(drv.cuCtxPushCurrent(primary[0])) == E.CUDA_ERROR_INVALID_CONTEXT
    sim.fail("cuStream", E.CUDA_ERROR_UNKNOWN, count=-1)
    stream = ok(drv.cuStreamCreate(0))
    ok(drv.cuStreamSynchronize(stream))
    ok(drv.cuStreamDestroy(stream))
    assert sim.fail_fired("cuStream") == 0


def test_rules_are_process_wide(sim, driver, primary):
    """A rule set on one thread fails the call made on another thread."""
    sim.fail("cuCtxSetCurrent", E.CUDA_ERROR_INVALID_CONTEXT)
    seen = []
    thread = threading.Thread(target=lambda: seen.append(code(drv.cuCtxSetCurrent(primary[0]))))
    thread.start()
    thread.join(10)
    assert seen == [E.CUDA_ERROR_INVALID_CONTEXT]


def test_cuinit_can_fail(sim, driver):
    """cuInit itself can be failed (checked before initialisation), here with CUDA_ERROR_NO_DEVICE."""
    sim.fail("cuInit", E.CUDA_ERROR_NO_DEVICE)
    assert code(drv.cuInit(0)) == E.CUDA_ERROR_NO_DEVICE
    assert code(drv.cuInit(0)) == SUCCESS


def test_bad_rules_are_refused(sim, driver):
    """An empty name, an overlong name or a negative skip is refused (ValueError from the helper)."""
    for name, skip in (("", 0), ("cu" + "x" * 200, 0), ("cuInit", -1)):
        with pytest.raises(ValueError):
            sim.fail(name, E.CUDA_ERROR_UNKNOWN, count=1, skip=skip)
