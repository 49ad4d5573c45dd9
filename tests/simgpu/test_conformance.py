"""The driver rules the simulated GPU models, one test each, through cuda.bindings.driver only.

The same file runs against a real driver (SIMGPU_REAL_DRIVER=1): the checks that rest on a
simulator feature (the launch log, counters, the per-operation delay that makes a missing
wait visible) are made only when the simulator is loaded (``sim`` is not None) or skip
(``sim_only``).  The CUDA driver API reference gives the rules.
"""

from __future__ import annotations

import ctypes
import signal
import struct
import threading
import time

import numpy as np
import pytest

from .simgpu_support import SUCCESS, CUresult, Gate, drv, host_fn, ok, run_python, wait_until

E = CUresult  # error codes, short

PREAMBLE = """
import ctypes, sys
from cuda.bindings import driver as drv
def ok(r):
    code, *v = r if isinstance(r, tuple) else (r,)
    assert code == drv.CUresult.CUDA_SUCCESS, code
    return v[0] if len(v) == 1 else (tuple(v) or None)
"""

PTX = rb"""
.version 8.0
.target sm_90
.address_size 64

// two kernels: the simulator reads their parameter lists
.visible .entry fill(
    .param .u64 .ptr .global .align 8 fill_param_0,
    .param .u32 fill_param_1,
    .param .align 8 .b8 fill_param_2[24]
)
{
    ret;
}

.visible .entry empty()
{
    ret;
}
""" + b"\0"


def host_bytes(array: np.ndarray) -> int:
    return array.ctypes.data


# ---- initialisation, devices, errors, entry points ------------------------------------------


def test_calls_before_cuinit_fail_not_initialized():
    """Before cuInit(0) every call but the version and error queries is NOT_INITIALIZED."""
    result = run_python(PREAMBLE + """
E = drv.CUresult
assert drv.cuDeviceGetCount()[0] == E.CUDA_ERROR_NOT_INITIALIZED
assert drv.cuCtxGetCurrent()[0] == E.CUDA_ERROR_NOT_INITIALIZED
assert drv.cuMemAlloc(16)[0] == E.CUDA_ERROR_NOT_INITIALIZED
assert ok(drv.cuDriverGetVersion()) >= 12000
assert drv.cuInit(1)[0] == E.CUDA_ERROR_INVALID_VALUE
ok(drv.cuInit(0))
assert ok(drv.cuDeviceGetCount()) >= 1
print("ok")
""")
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_device_count_and_no_device(sim_only):
    """SIMGPU_DEVICES sets the device count; 0 devices makes cuInit answer NO_DEVICE."""
    three = run_python(PREAMBLE + "ok(drv.cuInit(0)); print(ok(drv.cuDeviceGetCount()))",
                       env={"SIMGPU_DEVICES": "3"})
    assert three.stdout.strip() == "3", three.stderr
    none = run_python(PREAMBLE + "print(int(drv.cuInit(0)[0]))", env={"SIMGPU_DEVICES": "0"})
    assert none.stdout.strip() == str(int(E.CUDA_ERROR_NO_DEVICE)), none.stderr


def test_device_identity_and_attributes(driver, device_count):
    """Each device answers its name, compute capability, UUID, PCI id and total memory."""
    A = drv.CUdevice_attribute
    uuids, buses = set(), set()
    for i in range(device_count):
        dev = ok(drv.cuDeviceGet(i))
        assert ok(drv.cuDeviceGetName(64, dev)).rstrip(b"\0 ")
        major = ok(drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
        minor = ok(drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
        assert (major, minor) == ok(drv.cuDeviceComputeCapability(dev))
        assert ok(drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_WARP_SIZE, dev)) == 32
        assert ok(drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev)) == 1
        assert ok(drv.cuDeviceTotalMem(dev)) > 0
        uuids.add(bytes(ok(drv.cuDeviceGetUuid(dev)).bytes))
        bus = ok(drv.cuDeviceGetPCIBusId(32, dev)).rstrip(b"\0 ")
        buses.add(bus)
        assert int(ok(drv.cuDeviceGetByPCIBusId(bus))) == i
    assert len(uuids) == len(buses) == device_count
    assert drv.cuDeviceGet(device_count)[0] == E.CUDA_ERROR_INVALID_DEVICE
    assert drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_WARP_SIZE, device_count)[0] == E.CUDA_ERROR_INVALID_DEVICE


def test_compute_capability_switch(sim_only):
    """SIMGPU_COMPUTE_CAPABILITY (major * 10 + minor) sets every device's compute capability at
    start, 9.0 by default; ``simgpu_set_compute_capability`` changes it at run time.  The
    attributes, cuDeviceComputeCapability and the name's sm_ follow it."""
    code = PREAMBLE + """
ok(drv.cuInit(0))
A = drv.CUdevice_attribute
dev = ok(drv.cuDeviceGet(1))
name = ok(drv.cuDeviceGetName(64, dev)).rstrip(b"\\0 ").decode()
major = ok(drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev))
minor = ok(drv.cuDeviceGetAttribute(A.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev))
assert (major, minor) == ok(drv.cuDeviceComputeCapability(dev))
print(major, minor, name)
"""
    default = run_python(code, env={"SIMGPU_COMPUTE_CAPABILITY": ""})
    assert default.stdout.split() == ["9", "0", "SimGPU", "1", "(simulated,", "sm_90)"], default.stderr
    blackwell = run_python(code, env={"SIMGPU_COMPUTE_CAPABILITY": "103"})
    assert blackwell.stdout.split()[:2] == ["10", "3"] and "sm_103" in blackwell.stdout, blackwell.stderr
    refused = run_python(code, env={"SIMGPU_COMPUTE_CAPABILITY": "80"})
    assert refused.stdout.split()[:2] == ["9", "0"] and "SIMGPU_COMPUTE_CAPABILITY=80" in refused.stderr
    before = ok(drv.cuDeviceComputeCapability(0))
    try:
        sim_only.set_compute_capability(12, 1)
        assert ok(drv.cuDeviceComputeCapability(0)) == (12, 1)
        with pytest.raises(ValueError):
            sim_only.set_compute_capability(8, 9)
        assert ok(drv.cuDeviceComputeCapability(0)) == (12, 1)
    finally:
        sim_only.set_compute_capability(*before)


def test_error_names_and_strings(driver):
    """cuGetErrorName/cuGetErrorString name every code; an unknown code is INVALID_VALUE."""
    for error in (E.CUDA_SUCCESS, E.CUDA_ERROR_INVALID_VALUE, E.CUDA_ERROR_INVALID_HANDLE,
                  E.CUDA_ERROR_INVALID_CONTEXT, E.CUDA_ERROR_NOT_READY, E.CUDA_ERROR_ILLEGAL_ADDRESS):
        assert ok(drv.cuGetErrorName(error)) == error.name.encode()
        assert ok(drv.cuGetErrorString(error))


def test_get_proc_address_status(driver):
    """cuGetProcAddress finds a symbol; for a version older than the symbol it answers
    CUDA_SUCCESS with a NULL function and VERSION_NOT_SUFFICIENT (driver 580 on an H200 did
    so for cuMemAllocAsync at 11000: the result alone does not say the pointer is usable);
    a symbol it lacks comes back NULL, with CUDA_SUCCESS (driver 580 again, though the
    documentation says NOT_FOUND): only the pointer says whether it was found."""
    Q = drv.CUdriverProcAddressQueryResult
    flags = drv.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
    err, fn, status = drv.cuGetProcAddress(b"cuStreamWaitEvent", 12000, flags)
    assert err == SUCCESS and int(fn) != 0 and status == Q.CU_GET_PROC_ADDRESS_SUCCESS
    err, fn, status = drv.cuGetProcAddress(b"cuMemAllocAsync", 11000, flags)
    assert (err, int(fn), status) == (SUCCESS, 0, Q.CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
    assert int(drv.cuGetProcAddress(b"cuMemAllocAsync", 11020, flags)[1]) != 0  # introduced in 11.2
    err, fn, status = drv.cuGetProcAddress(b"cuNoSuchEntryPoint", 12000, flags)
    assert (err, int(fn)) == (SUCCESS, 0), (err, fn, status)
    assert status != Q.CU_GET_PROC_ADDRESS_SUCCESS, status


def test_get_proc_address_version_switch(sim_only):
    """simgpu_set_version_not_sufficient: the named symbol answers as one newer than any
    version asked for, until cleared; other symbols are unaffected."""
    Q = drv.CUdriverProcAddressQueryResult
    flags = drv.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_DEFAULT
    sim_only.set_version_not_sufficient("cuStreamGetId")
    try:
        err, fn, status = drv.cuGetProcAddress(b"cuStreamGetId", 13000, flags)
        assert (err, int(fn), status) == (SUCCESS, 0, Q.CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT)
        assert int(drv.cuGetProcAddress(b"cuStreamGetCtx", 13000, flags)[1]) != 0
    finally:
        sim_only.set_version_not_sufficient(None)
    err, fn, status = drv.cuGetProcAddress(b"cuStreamGetId", 13000, flags)
    assert err == SUCCESS and int(fn) != 0 and status == Q.CU_GET_PROC_ADDRESS_SUCCESS


# ---- contexts --------------------------------------------------------------------------------


def in_thread(fn):
    """Runs fn in a new thread; returns its result or raises its exception."""
    box = {}

    def body():
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 (handed back to the caller)
            box["error"] = exc

    t = threading.Thread(target=body)
    t.start()
    t.join(60)
    if "error" in box:
        raise box["error"]
    return box.get("value")


def test_new_thread_has_no_current_context(primary):
    """A new thread has no current context: cuCtxGetCurrent is NULL, cuEventCreate INVALID_CONTEXT."""

    def body():
        assert int(ok(drv.cuCtxGetCurrent())) == 0
        assert drv.cuEventCreate(0)[0] == E.CUDA_ERROR_INVALID_CONTEXT
        assert drv.cuMemAlloc(64)[0] == E.CUDA_ERROR_INVALID_CONTEXT
        assert drv.cuStreamGetCtx(drv.CUstream(1))[0] == E.CUDA_ERROR_INVALID_CONTEXT
        ok(drv.cuCtxSetCurrent(primary[0]))
        assert int(ok(drv.cuCtxGetCurrent())) == int(primary[0])
        return True

    assert in_thread(body)


def test_context_stack_push_pop_set(primary, two_devices):
    """Push, pop and set act on the calling thread's context stack only."""

    def body():
        ok(drv.cuCtxPushCurrent(primary[0]))
        ok(drv.cuCtxPushCurrent(primary[1]))
        assert int(ok(drv.cuCtxGetCurrent())) == int(primary[1])
        assert int(ok(drv.cuCtxGetDevice())) == 1
        assert int(ok(drv.cuCtxPopCurrent())) == int(primary[1])
        assert int(ok(drv.cuCtxGetCurrent())) == int(primary[0])
        ok(drv.cuCtxSetCurrent(primary[1]))  # replaces the top
        assert int(ok(drv.cuCtxPopCurrent())) == int(primary[1])
        assert int(ok(drv.cuCtxGetCurrent())) == 0
        assert drv.cuCtxPopCurrent()[0] == E.CUDA_ERROR_INVALID_CONTEXT
        return True

    assert in_thread(body)
    assert int(ok(drv.cuCtxGetCurrent())) == int(primary[0])  # the main thread's stack untouched


def test_primary_context_one_per_device(primary, device_count):
    """Each device has one primary context: retaining again gives the same handle."""
    handles = set()
    for i in range(device_count):
        dev = ok(drv.cuDeviceGet(i))
        again = ok(drv.cuDevicePrimaryCtxRetain(dev))
        assert int(again) == int(primary[i])
        flags, active = ok(drv.cuDevicePrimaryCtxGetState(dev))
        assert active == 1
        ok(drv.cuDevicePrimaryCtxRelease(dev))
        handles.add(int(again))
    assert len(handles) == device_count


def test_primary_context_release_and_state():
    """Releasing an unretained primary context fails; the last release deactivates it."""
    result = run_python(PREAMBLE + """
E = drv.CUresult
ok(drv.cuInit(0))
dev = ok(drv.cuDeviceGet(0))
assert drv.cuDevicePrimaryCtxRelease(dev)[0] == E.CUDA_ERROR_INVALID_CONTEXT
flags, active = ok(drv.cuDevicePrimaryCtxGetState(dev))
assert active == 0
ctx = ok(drv.cuDevicePrimaryCtxRetain(dev))
assert ok(drv.cuDevicePrimaryCtxGetState(dev))[1] == 1
ok(drv.cuDevicePrimaryCtxRelease(dev))
assert ok(drv.cuDevicePrimaryCtxGetState(dev))[1] == 0
print("ok")
""")
    assert result.returncode == 0 and "ok" in result.stdout, result.stderr


def test_created_context_is_pushed_and_destroyed(primary):
    """cuCtxCreate pushes the new context; cuCtxDestroy pops it when current."""
    dev = ok(drv.cuDeviceGet(0))
    ctx = ok(drv.cuCtxCreate(None, 0, dev))
    assert int(ok(drv.cuCtxGetCurrent())) == int(ctx) != int(primary[0])
    stream = ok(drv.cuStreamCreate(0))
    assert int(ok(drv.cuStreamGetCtx(stream))) == int(ctx)
    ok(drv.cuCtxDestroy(ctx))
    assert int(ok(drv.cuCtxGetCurrent())) == int(primary[0])


def test_destroyed_context_current_elsewhere(primary):
    """A context destroyed while current to another thread stays current there, and calls
    there fail with CONTEXT_IS_DESTROYED."""
    dev = ok(drv.cuDeviceGet(0))
    ctx = ok(drv.cuCtxCreate(None, 0, dev))
    ok(drv.cuCtxPopCurrent())
    made, destroyed, done = threading.Event(), threading.Event(), {}

    def body():
        ok(drv.cuCtxSetCurrent(ctx))
        made.set()
        destroyed.wait(30)
        done["current"] = int(ok(drv.cuCtxGetCurrent()))
        done["event"] = drv.cuEventCreate(0)[0]

    t = threading.Thread(target=body)
    t.start()
    made.wait(30)
    ok(drv.cuCtxDestroy(ctx))
    destroyed.set()
    t.join(30)
    assert done["current"] == int(ctx)
    assert done["event"] == E.CUDA_ERROR_CONTEXT_IS_DESTROYED


# ---- streams -----------------------------------------------------------------------------------


def test_default_stream_handles_resolve_to_current_context(primary, two_devices):
    """Handles 0, 1 and 2 name the default streams of the context current at the call."""
    for handle in (0, 1, 2):
        ok(drv.cuCtxSetCurrent(primary[0]))
        assert int(ok(drv.cuStreamGetCtx(drv.CUstream(handle)))) == int(primary[0])
        ok(drv.cuCtxSetCurrent(primary[1]))
        assert int(ok(drv.cuStreamGetCtx(drv.CUstream(handle)))) == int(primary[1])


def test_stream_belongs_to_its_context(primary, two_devices, res):
    """A created stream stays in the context it was created in, whatever is current later."""
    ok(drv.cuCtxSetCurrent(primary[1]))
    stream = res.stream()
    ok(drv.cuCtxSetCurrent(primary[0]))
    assert int(ok(drv.cuStreamGetCtx(stream))) == int(primary[1])
    assert int(ok(drv.cuStreamGetDevice(stream))) == 1


def test_stream_flags_and_priorities(res):
    """Flags are kept; priorities are clamped to the context's range; bad flags are refused."""
    least, greatest = ok(drv.cuCtxGetStreamPriorityRange())
    assert greatest <= least
    s = res.stream(drv.CUstream_flags.CU_STREAM_NON_BLOCKING, greatest - 10)
    assert ok(drv.cuStreamGetFlags(s)) == drv.CUstream_flags.CU_STREAM_NON_BLOCKING
    assert ok(drv.cuStreamGetPriority(s)) == greatest
    t = res.stream(0, least + 10)
    assert ok(drv.cuStreamGetPriority(t)) == least
    assert ok(drv.cuStreamGetFlags(t)) == 0
    assert drv.cuStreamCreate(4)[0] == E.CUDA_ERROR_INVALID_VALUE


def test_stream_destroy_after_work(sim, res):
    """A stream destroyed with work queued finishes that work; its handle is then invalid."""
    stream = ok(drv.cuStreamCreate(0))
    gate = Gate().enqueue(stream)
    event = res.event()
    ok(drv.cuEventRecord(event, stream))
    ok(drv.cuStreamDestroy(stream))
    assert drv.cuEventQuery(event)[0] == E.CUDA_ERROR_NOT_READY
    gate.open()
    ok(drv.cuEventSynchronize(event))
    if sim is not None:  # (the handle named again: test_a_gone_handle_named_again)
        assert drv.cuStreamDestroy(drv.CUstream(1))[0] == E.CUDA_ERROR_INVALID_HANDLE


# A script's start: the driver initialised, device 0's primary context retained and current.
PRIMARY_PREAMBLE = PREAMBLE + """
E = drv.CUresult
ok(drv.cuInit(0))
dev = ok(drv.cuDeviceGet(0))
ctx = ok(drv.cuDevicePrimaryCtxRetain(dev))
ok(drv.cuCtxSetCurrent(ctx))
"""

GONE_PREAMBLE = PRIMARY_PREAMBLE + """
stream = ok(drv.cuStreamCreate(0))
event = ok(drv.cuEventCreate(0))
def reset():
    ok(drv.cuDevicePrimaryCtxReset(dev))
    ok(drv.cuCtxSetCurrent(ok(drv.cuDevicePrimaryCtxRetain(dev))))
"""

# (what makes a handle gone, the call naming it again): each kills the process.
GONE_FATAL = [
    ("stream-destroyed-record", "gone = ok(drv.cuStreamCreate(0)); ok(drv.cuStreamDestroy(gone))",
     "drv.cuEventRecord(event, gone)"),
    ("stream-destroyed-query", "gone = ok(drv.cuStreamCreate(0)); ok(drv.cuStreamDestroy(gone))",
     "drv.cuStreamQuery(gone)"),
    ("stream-destroyed-capturing", "gone = ok(drv.cuStreamCreate(0)); ok(drv.cuStreamDestroy(gone))",
     "drv.cuStreamIsCapturing(gone)"),
    ("stream-destroyed-wait", "gone = ok(drv.cuStreamCreate(0)); ok(drv.cuStreamDestroy(gone))",
     "drv.cuStreamWaitEvent(gone, event, 0)"),
    ("reset-event-record", "reset()", "drv.cuEventRecord(event, drv.CUstream(1))"),
    ("reset-event-query", "reset()", "drv.cuEventQuery(event)"),
    ("reset-event-destroy", "reset()", "drv.cuEventDestroy(event)"),
    ("reset-stream-query", "reset()", "drv.cuStreamQuery(stream)"),
]


@pytest.mark.parametrize("made_gone, call", [c[1:] for c in GONE_FATAL], ids=[c[0] for c in GONE_FATAL])
def test_a_gone_handle_named_again_ends_the_process(sim, made_gone, call):
    """A destroyed stream, or a stream or event of a primary context reset and retained
    again, named in a call: the driver reads freed state.  Driver 580 on an H200 died of
    SIGSEGV in every such call; the simulator ends the process the same way, saying which
    call named which handle, so that code relying on an error code there fails in tests."""
    result = run_python(GONE_PREAMBLE + made_gone + "\nprint('named', flush=True)\n" + call
                        + "\nprint('survived', flush=True)\n")
    assert result.stdout.split() == ["named"] and result.returncode == -signal.SIGSEGV, (
        result.returncode, result.stdout, result.stderr)
    if sim is not None:
        assert "simgpu: " in result.stderr and "undefined in CUDA" in result.stderr, result.stderr


def test_a_destroyed_event_answers_context_is_destroyed():
    """What is not fatal: a destroyed event of a live context, recorded, queried or waited
    on, answers CUDA_ERROR_CONTEXT_IS_DESTROYED (driver 580 on an H200)."""
    result = run_python(GONE_PREAMBLE + """
dead = ok(drv.cuEventCreate(0))
ok(drv.cuEventDestroy(dead))
print(drv.cuEventRecord(dead, stream)[0].name, drv.cuEventQuery(dead)[0].name,
      drv.cuStreamWaitEvent(stream, dead, 0)[0].name)
""")
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.split() == ["CUDA_ERROR_CONTEXT_IS_DESTROYED"] * 3


def test_context_synchronize_waits_for_a_destroyed_streams_work(primary, res):
    """cuCtxSynchronize waits for work still queued on a stream destroyed before the call (a
    destroyed stream's queued work still runs, in its context)."""
    stream = ok(drv.cuStreamCreate(drv.CUstream_flags.CU_STREAM_NON_BLOCKING))
    gate = Gate().enqueue(stream)
    event = res.event()
    ok(drv.cuEventRecord(event, stream))
    ok(drv.cuStreamDestroy(stream))
    synchronized = threading.Event()

    def synchronize():
        ok(drv.cuCtxSetCurrent(primary[0]))
        ok(drv.cuCtxSynchronize())
        synchronized.set()

    thread = threading.Thread(target=synchronize)
    thread.start()
    try:
        time.sleep(0.05)
        assert not synchronized.is_set(), "cuCtxSynchronize returned before the destroyed stream's work"
    finally:
        gate.open()
        thread.join(30)
    assert synchronized.is_set()
    assert drv.cuEventQuery(event)[0] == SUCCESS


def test_stream_runs_its_work_in_order(sim, res):
    """Operations of one stream complete in the order they were enqueued, asynchronously."""
    if sim is not None:
        sim.set_delay_us(300)
    n = 4096
    dev = res.alloc(n)
    stream = res.stream()
    for value in range(1, 41):
        ok(drv.cuMemsetD8Async(dev, value, n, stream))
    if sim is not None:
        assert drv.cuStreamQuery(stream)[0] == E.CUDA_ERROR_NOT_READY  # asynchronous
    out = np.zeros(n, np.uint8)
    ok(drv.cuMemcpyDtoHAsync(host_bytes(out), dev, n, stream))
    ok(drv.cuStreamSynchronize(stream))
    assert (out == 40).all()


def test_host_functions_run_in_stream_order_on_another_thread(res):
    """cuLaunchHostFunc calls run in stream order, on a thread of the driver's."""
    stream = res.stream()
    seen = []
    for i in range(10):
        host_fn(stream, lambda i=i: seen.append((i, threading.get_ident())))
    ok(drv.cuStreamSynchronize(stream))
    assert [i for i, _ in seen] == list(range(10))
    assert all(tid != threading.get_ident() for _, tid in seen)


def test_host_function_may_not_call_the_driver(sim_only, res):
    """A host function that calls the driver gets CUDA_ERROR_NOT_PERMITTED (the driver may
    refuse it; the simulator always does, so no such call can deadlock on its own stream)."""
    stream = res.stream()
    seen = []
    host_fn(stream, lambda: seen.append(drv.cuStreamSynchronize(stream)[0]))
    ok(drv.cuStreamSynchronize(stream))
    assert seen == [E.CUDA_ERROR_NOT_PERMITTED]


def test_host_function_current_context_query_is_refused(res):
    """Inside a host function cuCtxGetCurrent answers CUDA_ERROR_NOT_PERMITTED: stridedview
    asks it before releasing a hold with no event left to ask (sv_door_may_release), so that
    nothing is released where the producer's deleter could make no CUDA call.  Not sim_only:
    on a real GPU this says whether the driver refuses that call there too."""
    stream = res.stream()
    seen = []
    host_fn(stream, lambda: seen.append(drv.cuCtxGetCurrent()[0]))
    ok(drv.cuStreamSynchronize(stream))
    assert seen == [E.CUDA_ERROR_NOT_PERMITTED]


def test_streams_are_concurrent_missing_wait_reads_stale_data(sim_only, res):
    """Without a wait, a stream reads what another stream has not written yet (the delay shows it);
    with cuEventRecord + cuStreamWaitEvent it reads the new data."""
    n = 1 << 16
    dev = res.alloc(n)
    producer, consumer = res.stream(), res.stream()
    ok(drv.cuMemsetD8(dev, 1, n))
    ok(drv.cuCtxSynchronize())
    sim_only.set_delay_us(40000)
    out = np.zeros(n, np.uint8)
    for value in (9, 8, 7, 6, 5, 4, 3, 2):  # the producer's last write lands ~320 ms from now
        ok(drv.cuMemsetD8Async(dev, value, n, producer))
    ok(drv.cuMemcpyDtoHAsync(host_bytes(out), dev, n, consumer))  # no wait: read at ~40 ms
    assert not (out == 2).all()  # stale: the last write had not landed
    ok(drv.cuStreamSynchronize(producer))
    event = res.event(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    for value in (5, 4, 3):
        ok(drv.cuMemsetD8Async(dev, value, n, producer))
    ok(drv.cuEventRecord(event, producer))
    ok(drv.cuStreamWaitEvent(consumer, event, 0))
    ok(drv.cuMemcpyDtoHAsync(host_bytes(out), dev, n, consumer))
    assert (out == 3).all()


def test_wait_uses_the_record_made_before_it(res):
    """cuStreamWaitEvent waits for the work the event captured when the wait was made; a later
    record of the same event does not change that wait."""
    a, b = res.stream(), res.stream()
    event = res.event(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    ok(drv.cuEventRecord(event, a))     # captures nothing pending on a
    ok(drv.cuStreamWaitEvent(b, event, 0))
    gate = Gate().enqueue(a)            # a is now held
    ok(drv.cuEventRecord(event, a))     # a later record captures the held work
    marker = res.event()
    ok(drv.cuEventRecord(marker, b))
    try:
        assert wait_until(lambda: drv.cuEventQuery(marker)[0] == SUCCESS), "b waited for a later record"
        assert drv.cuEventQuery(event)[0] == E.CUDA_ERROR_NOT_READY
        ok(drv.cuStreamWaitEvent(b, event, 0))  # this wait does capture the held work
        ok(drv.cuEventRecord(marker, b))
        time.sleep(0.05)
        assert drv.cuEventQuery(marker)[0] == E.CUDA_ERROR_NOT_READY
    finally:
        gate.open()
    ok(drv.cuEventSynchronize(marker))


def test_unrecorded_event_is_complete(res):
    """An event never recorded is complete: query succeeds and a wait on it waits for nothing."""
    event = res.event()
    stream = res.stream()
    assert drv.cuEventQuery(event)[0] == SUCCESS
    ok(drv.cuEventSynchronize(event))
    ok(drv.cuStreamWaitEvent(stream, event, 0))
    ok(drv.cuStreamSynchronize(stream))


def test_event_query_and_synchronize_follow_the_work(res):
    """cuEventQuery is NOT_READY until the captured work is done; cuEventSynchronize waits for it."""
    stream = res.stream()
    event = res.event()
    gate = Gate().enqueue(stream)
    ok(drv.cuEventRecord(event, stream))
    assert drv.cuEventQuery(event)[0] == E.CUDA_ERROR_NOT_READY
    assert drv.cuStreamQuery(stream)[0] == E.CUDA_ERROR_NOT_READY
    gate.open()
    ok(drv.cuEventSynchronize(event))
    assert drv.cuEventQuery(event)[0] == SUCCESS


def test_event_flags_and_elapsed_time(res):
    """Timing events give an elapsed time; DISABLE_TIMING or unrecorded events do not."""
    F = drv.CUevent_flags
    assert drv.cuEventCreate(F.CU_EVENT_INTERPROCESS)[0] == E.CUDA_ERROR_INVALID_VALUE
    assert drv.cuEventCreate(0x40)[0] == E.CUDA_ERROR_INVALID_VALUE
    stream = res.stream()
    start, end = res.event(), res.event()
    untimed = res.event(F.CU_EVENT_DISABLE_TIMING)
    assert drv.cuEventElapsedTime(start, end)[0] == E.CUDA_ERROR_INVALID_HANDLE
    ok(drv.cuEventRecord(start, stream))
    gate = Gate().enqueue(stream)
    ok(drv.cuEventRecord(end, stream))
    ok(drv.cuEventRecord(untimed, stream))
    assert drv.cuEventElapsedTime(start, end)[0] == E.CUDA_ERROR_NOT_READY
    gate.open()
    ok(drv.cuStreamSynchronize(stream))
    assert ok(drv.cuEventElapsedTime(start, end)) >= 0
    assert drv.cuEventElapsedTime(start, untimed)[0] == E.CUDA_ERROR_INVALID_HANDLE


def test_record_on_a_stream_of_another_context_fails(primary, two_devices, res):
    """An event records only on streams of its own context (handles 1 and 2 included)."""
    event = res.event()  # context 0
    ok(drv.cuCtxSetCurrent(primary[1]))
    other = res.stream()
    bad = (E.CUDA_ERROR_INVALID_HANDLE, E.CUDA_ERROR_INVALID_CONTEXT)
    assert drv.cuEventRecord(event, other)[0] in bad
    assert drv.cuEventRecord(event, drv.CUstream(1))[0] in bad
    assert drv.cuEventRecord(event, drv.CUstream(2))[0] in bad
    ok(drv.cuCtxSetCurrent(primary[0]))
    ok(drv.cuEventRecord(event, drv.CUstream(1)))


def test_record_and_wait_need_no_current_context(primary, res):
    """cuEventRecord and cuStreamWaitEvent on ordinary streams act in the streams' context,
    whatever the calling thread has current: no context, or another context of the same
    device.  The ordering holds either way.  (stridedview's C door records a hand-over on an
    ordinary stream so, without pushing the stream's context.)"""
    F = drv.CUevent_flags
    event = res.event(F.CU_EVENT_DISABLE_TIMING)
    producer, consumer = res.stream(), res.stream()
    markers = [res.event(F.CU_EVENT_DISABLE_TIMING) for _ in range(2)]

    def ordered_after_a_gate(marker):
        gate = Gate().enqueue(producer)
        try:
            ok(drv.cuEventRecord(event, producer))
            ok(drv.cuStreamWaitEvent(consumer, event, 0))
            ok(drv.cuEventRecord(marker, consumer))
            time.sleep(0.05)
            assert drv.cuEventQuery(marker)[0] == E.CUDA_ERROR_NOT_READY
        finally:
            gate.open()
        ok(drv.cuEventSynchronize(marker))
        return True

    def with_none_current():
        assert int(ok(drv.cuCtxGetCurrent())) == 0
        return ordered_after_a_gate(markers[0])

    assert in_thread(with_none_current)

    def with_another_current():
        dev = ok(drv.cuDeviceGet(0))
        other = ok(drv.cuCtxCreate(None, 0, dev))  # pushed: current in this thread
        try:
            assert int(ok(drv.cuCtxGetCurrent())) == int(other) != int(primary[0])
            return ordered_after_a_gate(markers[1])
        finally:
            ok(drv.cuCtxDestroy(other))

    assert in_thread(with_another_current)


def test_wait_on_an_event_of_another_device(primary, two_devices, sim, res):
    """A stream of one device may wait on an event of another; the ordering holds."""
    n = 1 << 16
    src = res.alloc(n)  # device 0
    event = res.event(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    producer = res.stream()
    ok(drv.cuCtxSetCurrent(primary[1]))
    dst = res.alloc(n)
    consumer = res.stream()
    ok(drv.cuCtxSetCurrent(primary[0]))
    if sim is not None:
        sim.set_delay_us(20000)
    ok(drv.cuMemsetD8Async(src, 9, n, producer))
    ok(drv.cuEventRecord(event, producer))
    ok(drv.cuStreamWaitEvent(consumer, event, 0))
    ok(drv.cuMemcpyDtoDAsync(dst, src, n, consumer))
    out = np.zeros(n, np.uint8)
    ok(drv.cuMemcpyDtoHAsync(host_bytes(out), dst, n, consumer))
    assert (out == 9).all()
    assert int(ok(drv.cuPointerGetAttribute(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, dst))) == 1


def test_legacy_stream_synchronises_with_blocking_streams(res):
    """Work on the legacy stream waits for every blocking stream of its context, and work
    enqueued later on a blocking stream waits for the legacy stream."""
    legacy = drv.CUstream(1)
    blocking = res.stream()
    gate = Gate().enqueue(blocking)
    marker = res.event()
    ok(drv.cuEventRecord(marker, legacy))
    later = res.stream()
    after = res.event()
    ok(drv.cuEventRecord(after, later))
    time.sleep(0.05)
    try:
        assert drv.cuEventQuery(marker)[0] == E.CUDA_ERROR_NOT_READY
        assert drv.cuEventQuery(after)[0] == E.CUDA_ERROR_NOT_READY
    finally:
        gate.open()
    ok(drv.cuEventSynchronize(after))
    ok(drv.cuEventSynchronize(marker))


def test_non_blocking_stream_is_exempt(res):
    """A CU_STREAM_NON_BLOCKING stream neither waits for nor holds up the legacy stream."""
    legacy = drv.CUstream(1)
    quiet = res.stream(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)
    gate = Gate().enqueue(quiet)
    try:
        marker = res.event()
        ok(drv.cuEventRecord(marker, legacy))
        assert wait_until(lambda: drv.cuEventQuery(marker)[0] == SUCCESS)
        legacy_gate = Gate().enqueue(legacy)
        quiet_event = res.event()
        ok(drv.cuEventRecord(quiet_event, res.stream(drv.CUstream_flags.CU_STREAM_NON_BLOCKING)))
        assert wait_until(lambda: drv.cuEventQuery(quiet_event)[0] == SUCCESS)
        legacy_gate.open()
    finally:
        gate.open()


def test_per_thread_default_stream(primary, res):
    """Handle 2 is a stream of the calling thread's own: one thread's does not hold another's,
    and it is a blocking stream (it synchronises with the legacy stream)."""
    gate = Gate().enqueue(drv.CUstream(2))
    try:
        def other():
            ok(drv.cuCtxSetCurrent(primary[0]))
            event = ok(drv.cuEventCreate(0))
            ok(drv.cuEventRecord(event, drv.CUstream(2)))
            done = wait_until(lambda: drv.cuEventQuery(event)[0] == SUCCESS)
            ok(drv.cuEventDestroy(event))
            return done

        assert in_thread(other), "another thread's per-thread stream was held"
        legacy = res.event()
        ok(drv.cuEventRecord(legacy, drv.CUstream(1)))
        time.sleep(0.05)
        assert drv.cuEventQuery(legacy)[0] == E.CUDA_ERROR_NOT_READY
    finally:
        gate.open()
    ok(drv.cuStreamSynchronize(drv.CUstream(2)))


def test_per_thread_default_stream_mode():
    """With CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM=1, stream 0 is the thread's own stream."""
    result = run_python(PREAMBLE + """
import threading, time, ctypes
E = drv.CUresult
ok(drv.cuInit(0))
ctx = ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0))))
ok(drv.cuCtxSetCurrent(ctx))
release = threading.Event()
CB = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
hold = CB(lambda _: release.wait(20))
ok(drv.cuLaunchHostFunc(drv.CUstream(0), drv.CUhostFn(ctypes.cast(hold, ctypes.c_void_p).value), 0))
result = {}
def other():
    ok(drv.cuCtxSetCurrent(ctx))
    e = ok(drv.cuEventCreate(0))
    ok(drv.cuEventRecord(e, drv.CUstream(0)))
    end = time.time() + 10
    while drv.cuEventQuery(e)[0] != E.CUDA_SUCCESS and time.time() < end:
        time.sleep(0.01)
    result["free"] = drv.cuEventQuery(e)[0] == E.CUDA_SUCCESS
t = threading.Thread(target=other); t.start(); t.join()
release.set()
ok(drv.cuStreamSynchronize(drv.CUstream(0)))
print("free" if result["free"] else "held")
""", env={"CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM": "1"})
    assert result.stdout.strip() == "free", result.stderr


def test_synchronize_calls_wait_for_the_work(res):
    """cuStreamSynchronize and cuCtxSynchronize return once the work enqueued before them is done."""
    stream = res.stream()
    done = []
    gate = Gate().enqueue(stream)
    host_fn(stream, lambda: done.append(1))
    threading.Timer(0.05, gate.open).start()
    ok(drv.cuStreamSynchronize(stream))
    assert done == [1]
    gate = Gate().enqueue(stream)
    host_fn(stream, lambda: done.append(2))
    threading.Timer(0.05, gate.open).start()
    ok(drv.cuCtxSynchronize())
    assert done == [1, 2]


# ---- stream capture ------------------------------------------------------------------------------


def test_capture_records_instead_of_running(res):
    """Work enqueued under capture does not run; launching the captured graph runs it."""
    Status = drv.CUstreamCaptureStatus
    n = 4096
    dev = res.alloc(n)
    ok(drv.cuMemsetD8(dev, 1, n))
    stream = res.stream()
    ok(drv.cuStreamBeginCapture(stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    assert ok(drv.cuStreamIsCapturing(stream)) == Status.CU_STREAM_CAPTURE_STATUS_ACTIVE
    ok(drv.cuMemsetD8Async(dev, 5, n, stream))
    graph = ok(drv.cuStreamEndCapture(stream))
    assert ok(drv.cuStreamIsCapturing(stream)) == Status.CU_STREAM_CAPTURE_STATUS_NONE
    out = np.zeros(n, np.uint8)
    ok(drv.cuMemcpyDtoH(host_bytes(out), dev, n))
    assert (out == 1).all()
    exe = ok(drv.cuGraphInstantiate(graph, 0))
    ok(drv.cuGraphLaunch(exe, stream))
    ok(drv.cuStreamSynchronize(stream))
    ok(drv.cuMemcpyDtoH(host_bytes(out), dev, n))
    assert (out == 5).all()
    ok(drv.cuGraphExecDestroy(exe))
    ok(drv.cuGraphDestroy(graph))


def test_capture_fork_and_join_through_events(res):
    """Under capture, a record on the capturing stream and a wait on another stream bring it
    into the capture; the capture ends only once it is joined back the same way."""
    Status = drv.CUstreamCaptureStatus
    origin, side = res.stream(), res.stream()
    fork, join = res.event(), res.event()
    n = 1024
    dev = res.alloc(n)
    ok(drv.cuStreamBeginCapture(origin, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
    ok(drv.cuEventRecord(fork, origin))
    ok(drv.cuStreamWaitEvent(side, fork, 0))
    assert ok(drv.cuStreamIsCapturing(side)) == Status.CU_STREAM_CAPTURE_STATUS_ACTIVE
    ok(drv.cuMemsetD8Async(dev, 7, n, side))
    ok(drv.cuEventRecord(join, side))
    ok(drv.cuStreamWaitEvent(origin, join, 0))
    graph = ok(drv.cuStreamEndCapture(origin))
    assert ok(drv.cuStreamIsCapturing(side)) == Status.CU_STREAM_CAPTURE_STATUS_NONE
    ok(drv.cuGraphDestroy(graph))

    # The same fork, never joined: the capture cannot end.
    ok(drv.cuStreamBeginCapture(origin, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
    ok(drv.cuEventRecord(fork, origin))
    ok(drv.cuStreamWaitEvent(side, fork, 0))
    ok(drv.cuMemsetD8Async(dev, 7, n, side))
    assert drv.cuStreamEndCapture(origin)[0] == E.CUDA_ERROR_STREAM_CAPTURE_UNJOINED
    assert ok(drv.cuStreamIsCapturing(side)) == Status.CU_STREAM_CAPTURE_STATUS_NONE


def test_capture_waits_on_outside_work_only_as_external(res):
    """A capturing stream waits on an event of uncaptured work only with CU_EVENT_WAIT_EXTERNAL:
    the graph then waits, each time it runs, for the event's last record.  Without the flag the
    wait is refused and the capture invalidated."""
    n = 4096
    dev = res.alloc(n)
    ok(drv.cuMemsetD8(dev, 1, n))
    outside, capturing, runner = res.stream(), res.stream(), res.stream()
    event = res.event(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    ok(drv.cuEventRecord(event, outside))
    mode = drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
    ok(drv.cuStreamBeginCapture(capturing, mode))
    assert drv.cuStreamWaitEvent(capturing, event, 0)[0] == E.CUDA_ERROR_STREAM_CAPTURE_ISOLATION
    assert drv.cuStreamEndCapture(capturing)[0] == E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    ok(drv.cuStreamBeginCapture(capturing, mode))
    ok(drv.cuStreamWaitEvent(capturing, event, drv.CUevent_wait_flags.CU_EVENT_WAIT_EXTERNAL))
    ok(drv.cuMemsetD8Async(dev, 9, n, capturing))
    graph = ok(drv.cuStreamEndCapture(capturing))
    exe = ok(drv.cuGraphInstantiate(graph, 0))
    gate = Gate().enqueue(outside)
    ok(drv.cuEventRecord(event, outside))  # the record the graph's run will wait for
    ok(drv.cuGraphLaunch(exe, runner))
    time.sleep(0.05)
    out = np.zeros(n, np.uint8)
    try:
        assert drv.cuStreamQuery(runner)[0] == E.CUDA_ERROR_NOT_READY
    finally:
        gate.open()
    ok(drv.cuStreamSynchronize(runner))
    ok(drv.cuMemcpyDtoH(host_bytes(out), dev, n))
    assert (out == 9).all()
    ok(drv.cuGraphExecDestroy(exe))
    ok(drv.cuGraphDestroy(graph))


def test_synchronize_during_capture_invalidates_it(res):
    """A host synchronize of a capturing stream fails and invalidates the capture."""
    Status = drv.CUstreamCaptureStatus
    stream = res.stream()
    ok(drv.cuStreamBeginCapture(stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_GLOBAL))
    assert drv.cuStreamSynchronize(stream)[0] == E.CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
    assert ok(drv.cuStreamIsCapturing(stream)) == Status.CU_STREAM_CAPTURE_STATUS_INVALIDATED
    err, graph = drv.cuStreamEndCapture(stream)
    assert err == E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert ok(drv.cuStreamIsCapturing(stream)) == Status.CU_STREAM_CAPTURE_STATUS_NONE


def test_legacy_stream_during_capture_is_implicit_dependency(res):
    """Using the legacy stream while a blocking stream of its context captures is refused
    (it would make the capture depend on outside work) and invalidates the capture."""
    stream = res.stream()
    ok(drv.cuStreamBeginCapture(stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
    event = res.event()
    assert drv.cuEventRecord(event, drv.CUstream(1))[0] == E.CUDA_ERROR_STREAM_CAPTURE_IMPLICIT
    assert drv.cuStreamEndCapture(stream)[0] == E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED


def test_captured_event_cannot_be_queried(res):
    """An event last recorded under capture is not a host-visible point: a query is refused,
    and (an invalid operation under capture) invalidates the capture."""
    stream = res.stream()
    event = res.event()
    ok(drv.cuStreamBeginCapture(stream, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_RELAXED))
    ok(drv.cuEventRecord(event, stream))
    assert drv.cuEventQuery(event)[0] == E.CUDA_ERROR_CAPTURED_EVENT
    assert drv.cuStreamEndCapture(stream)[0] == E.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED


# ---- primary context reset ----------------------------------------------------------------------


def test_primary_reset_destroys_events_and_streams_keeps_handle(sim):
    """cuDevicePrimaryCtxReset destroys the context's streams and events; a retained primary
    context comes back with the same handle and a new cuCtxGetId (the one way to tell that
    its old streams and events are gone: naming them again ends the process,
    test_a_gone_handle_named_again_ends_the_process), and new events work."""
    result = run_python(PRIMARY_PREAMBLE + """
before = int(ok(drv.cuCtxGetId(ctx)))
event = ok(drv.cuEventCreate(0))
stream = ok(drv.cuStreamCreate(0))
ok(drv.cuEventRecord(event, stream))
ok(drv.cuDevicePrimaryCtxReset(dev))
again = ok(drv.cuDevicePrimaryCtxRetain(dev))
ok(drv.cuCtxSetCurrent(again))
print("same" if int(again) == int(ctx) else "other")
print("new-id" if int(ok(drv.cuCtxGetId(again))) != before else "same-id")
fresh = ok(drv.cuEventCreate(0))
ok(drv.cuEventRecord(fresh, drv.CUstream(1)))
ok(drv.cuCtxSynchronize())
if SIM:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.simgpu_counter.restype = ctypes.c_longlong
    print("live", lib.simgpu_counter(b"events_live"), lib.simgpu_counter(b"streams_live"))
""".replace("SIM", "True" if sim is not None else "False"))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.split()
    assert lines[:2] == ["same", "new-id"], result.stdout
    if sim is not None:
        assert lines[2:5] == ["live", "1", "0"]  # only the fresh event


# ---- memory ---------------------------------------------------------------------------------------


def test_host_dereference_of_device_pointer_faults():
    """A host load through a device pointer faults, as on a GPU (SIGSEGV in a subprocess)."""
    result = run_python(PREAMBLE + """
ok(drv.cuInit(0))
ok(drv.cuCtxSetCurrent(ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0))))))
ptr = int(ok(drv.cuMemAlloc(4096)))
ok(drv.cuMemsetD8(ptr, 1, 4096))
ok(drv.cuCtxSynchronize())
print("reading", flush=True)
ctypes.string_at(ptr, 1)
print("read", flush=True)
""", env={"PYTHONFAULTHANDLER": ""})
    assert result.returncode == -11, (result.returncode, result.stdout, result.stderr)
    assert "reading" in result.stdout and "read\n" not in result.stdout


def pointer_attributes(ptr):
    A = drv.CUpointer_attribute
    wanted = [A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
              A.CU_POINTER_ATTRIBUTE_IS_MANAGED, A.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR,
              A.CU_POINTER_ATTRIBUTE_RANGE_SIZE, A.CU_POINTER_ATTRIBUTE_CONTEXT,
              A.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, A.CU_POINTER_ATTRIBUTE_BUFFER_ID]
    values = ok(drv.cuPointerGetAttributes(len(wanted), wanted, ptr))
    return dict(zip(("type", "device", "managed", "start", "size", "context", "pool", "id"), values))


def test_memory_kinds_and_pointer_attributes(primary, res):
    """Device, stream-ordered, managed, pinned and registered memory each report their kind,
    device, range and context; interior pointers find their allocation."""
    M = drv.CUmemorytype
    A = drv.CUpointer_attribute
    stream = res.stream()
    device = res.alloc(1000)
    pooled = int(ok(drv.cuMemAllocAsync(512, stream)))
    managed = int(ok(drv.cuMemAllocManaged(256, drv.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL)))
    pinned = res.host_alloc(300)
    buffer = np.zeros(8192, np.uint8)
    ok(drv.cuMemHostRegister(host_bytes(buffer), buffer.nbytes, 0))
    try:
        a = pointer_attributes(device + 10)
        assert (a["type"], a["device"], a["managed"]) == (M.CU_MEMORYTYPE_DEVICE, 0, False)
        assert (int(a["start"]), a["size"]) == (device, 1000)
        assert int(a["context"]) == int(primary[0]) and int(a["pool"]) == 0
        p = pointer_attributes(pooled)
        assert (p["type"], p["device"], int(p["start"]), p["size"]) == (M.CU_MEMORYTYPE_DEVICE, 0, pooled, 512)
        assert int(p["pool"]) == int(ok(drv.cuDeviceGetMemPool(ok(drv.cuDeviceGet(0)))))
        m = pointer_attributes(managed)
        assert m["managed"] is True and m["device"] == 0
        h = pointer_attributes(pinned + 299)
        assert (h["type"], h["device"], h["managed"], int(h["start"])) == (M.CU_MEMORYTYPE_HOST, 0, False, pinned)
        r = pointer_attributes(host_bytes(buffer) + 100)
        assert (r["type"], r["device"], int(r["start"]), r["size"]) == (M.CU_MEMORYTYPE_HOST, 0, host_bytes(buffer), 8192)
        ids = {a["id"], p["id"], m["id"], h["id"], r["id"]}
        assert len(ids) == 5
        # An unknown host pointer: the single query fails, the plural one answers defaults.
        plain = np.zeros(16, np.uint8)
        assert drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, host_bytes(plain))[0] == E.CUDA_ERROR_INVALID_VALUE
        assert drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, host_bytes(plain))[0] == E.CUDA_ERROR_INVALID_VALUE
        u = pointer_attributes(host_bytes(plain))
        assert u["type"] == 0 and not u["managed"]
        # cuMemGetAddressRange finds the allocation of an interior pointer.
        base, size = ok(drv.cuMemGetAddressRange(device + 999))
        assert (int(base), size) == (device, 1000)
        assert int(ok(drv.cuMemHostGetDevicePointer(pinned, 0))) == pinned
    finally:
        ok(drv.cuMemHostUnregister(host_bytes(buffer)))
        ok(drv.cuMemFreeAsync(pooled, stream))
        ok(drv.cuMemFree(managed))


def test_allocation_belongs_to_its_device(primary, two_devices, res):
    """Memory belongs to the device whose context allocated it, whatever is current later."""
    A = drv.CUpointer_attribute
    ok(drv.cuCtxSetCurrent(primary[1]))
    ptr = res.alloc(64)
    stream1 = res.stream()
    pooled = int(ok(drv.cuMemAllocAsync(64, stream1)))
    ok(drv.cuCtxSetCurrent(primary[0]))
    assert ok(drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)) == 1
    assert ok(drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, pooled)) == 1
    assert int(ok(drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_CONTEXT, ptr))) == int(primary[1])
    ok(drv.cuMemFreeAsync(pooled, stream1))


def test_stream_ordered_allocation_comes_from_the_streams_device(primary, two_devices, res):
    """cuMemAllocAsync takes memory from the pool of the stream's device, whatever is current."""
    ok(drv.cuCtxSetCurrent(primary[1]))
    stream1 = res.stream()
    ok(drv.cuCtxSetCurrent(primary[0]))
    ptr = int(ok(drv.cuMemAllocAsync(4096, stream1)))
    A = drv.CUpointer_attribute
    assert ok(drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)) == 1
    pool = ok(drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr))
    assert int(pool) == int(ok(drv.cuDeviceGetMemPool(ok(drv.cuDeviceGet(1)))))
    ok(drv.cuMemFreeAsync(ptr, stream1))


def test_managed_memory_is_host_accessible(res):
    """Managed memory written by a stream reads back on the host after a synchronize."""
    ptr = int(ok(drv.cuMemAllocManaged(4096, drv.CUmemAttach_flags.CU_MEM_ATTACH_GLOBAL)))
    try:
        stream = res.stream()
        ok(drv.cuMemsetD32Async(ptr, 0x01020304, 1024, stream))
        ok(drv.cuStreamSynchronize(stream))
        view = np.frombuffer((ctypes.c_uint32 * 1024).from_address(ptr), np.uint32)
        assert (view == 0x01020304).all()
        view[:] = 7  # and the host writes it
        out = np.zeros(1024, np.uint32)
        ok(drv.cuMemcpyDtoH(host_bytes(out), ptr, 4096))
        assert (out == 7).all()
    finally:
        ok(drv.cuMemFree(ptr))


def test_pinned_and_registered_host_memory(res):
    """Pinned and registered host memory are reachable from streams through their device pointer;
    registering twice or unregistering unknown memory fails."""
    n = 4096
    pinned = res.host_alloc(n)
    dev = res.alloc(n)
    ok(drv.cuMemsetD8(dev, 0x5A, n))
    stream = res.stream()
    ok(drv.cuMemcpyDtoDAsync(int(ok(drv.cuMemHostGetDevicePointer(pinned, 0))), dev, n, stream))
    ok(drv.cuStreamSynchronize(stream))
    assert ctypes.string_at(pinned, n) == b"\x5a" * n
    buffer = np.zeros(n, np.uint8)
    ok(drv.cuMemHostRegister(host_bytes(buffer), n, 0))
    try:
        assert drv.cuMemHostRegister(host_bytes(buffer), n, 0)[0] == E.CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
        ok(drv.cuMemcpyDtoDAsync(int(ok(drv.cuMemHostGetDevicePointer(host_bytes(buffer), 0))), dev, n, stream))
        ok(drv.cuStreamSynchronize(stream))
        assert (buffer == 0x5A).all()
    finally:
        ok(drv.cuMemHostUnregister(host_bytes(buffer)))
    assert drv.cuMemHostUnregister(host_bytes(buffer))[0] == E.CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED


def test_copies_1d_byte_exact(primary, device_count, res):
    """HtoD, DtoD, DtoH, cuMemcpy and peer copies move exactly the bytes asked, sync and async."""
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, 10000, np.uint8)
    a, b = res.alloc(10000), res.alloc(10000)
    stream = res.stream()
    ok(drv.cuMemcpyHtoD(a, host_bytes(data), 10000))
    ok(drv.cuMemcpyDtoD(b + 100, a + 200, 5000))
    out = np.zeros(10000, np.uint8)
    ok(drv.cuMemcpyDtoH(host_bytes(out), b + 100, 5000))
    assert (out[:5000] == data[200:5200]).all()
    reverse = data[::-1].copy()  # held: the driver reads it during the call
    ok(drv.cuMemcpyHtoDAsync(a, host_bytes(reverse), 10000, stream))
    ok(drv.cuMemcpyAsync(b, a, 10000, stream))
    out2 = np.zeros(10000, np.uint8)
    ok(drv.cuMemcpyAsync(host_bytes(out2), b, 10000, stream))
    ok(drv.cuStreamSynchronize(stream))
    assert (out2 == data[::-1]).all()
    ok(drv.cuMemcpy(host_bytes(out), a, 10000))
    assert (out == data[::-1]).all()
    if device_count > 1:
        ok(drv.cuCtxSetCurrent(primary[1]))
        c = res.alloc(10000)
        ok(drv.cuCtxSetCurrent(primary[0]))
        ok(drv.cuMemcpyPeer(c, primary[1], a, primary[0], 10000))
        ok(drv.cuMemcpyDtoH(host_bytes(out), c, 10000))
        assert (out == data[::-1]).all()


def test_pageable_copies_and_host_waits(sim_only, res):
    """A copy from pageable memory takes the bytes at the call; an async copy into pageable
    memory returns only once done; into pinned memory it returns at once."""
    n = 1 << 16
    dev = res.alloc(n)
    stream = res.stream()
    src = np.full(n, 3, np.uint8)
    sim_only.set_delay_us(20000)
    ok(drv.cuMemcpyHtoDAsync(dev, host_bytes(src), n, stream))
    src[:] = 4  # too late: the source was staged
    out = np.zeros(n, np.uint8)
    ok(drv.cuMemcpyDtoHAsync(host_bytes(out), dev, n, stream))
    assert (out == 3).all()  # pageable destination: the call waited
    pinned = res.host_alloc(n)
    ctypes.memset(pinned, 0, n)
    ok(drv.cuMemsetD8Async(dev, 9, n, stream))
    ok(drv.cuMemcpyDtoHAsync(pinned, dev, n, stream))
    assert ctypes.string_at(pinned, 16) == b"\0" * 16  # pinned: asynchronous
    ok(drv.cuStreamSynchronize(stream))
    assert ctypes.string_at(pinned, n) == b"\x09" * n


def memcpy2d(src_type, src, src_pitch, src_x, src_y, dst_type, dst, dst_pitch, dst_x, dst_y, width, height):
    M = drv.CUmemorytype
    c = drv.CUDA_MEMCPY2D()
    c.srcMemoryType, c.srcXInBytes, c.srcY, c.srcPitch = src_type, src_x, src_y, src_pitch
    c.dstMemoryType, c.dstXInBytes, c.dstY, c.dstPitch = dst_type, dst_x, dst_y, dst_pitch
    if src_type == M.CU_MEMORYTYPE_HOST:
        c.srcHost = src
    else:
        c.srcDevice = src
    if dst_type == M.CU_MEMORYTYPE_HOST:
        c.dstHost = dst
    else:
        c.dstDevice = dst
    c.WidthInBytes, c.Height = width, height
    return c


def test_copies_2d_byte_exact(res):
    """cuMemcpy2D between pitched host and device regions moves exactly the rectangle asked."""
    M = drv.CUmemorytype
    rng = np.random.default_rng(2)
    host = rng.integers(0, 256, (40, 96), np.uint8)
    dev_pitch = 128
    dev = res.alloc(dev_pitch * 50)
    ok(drv.cuMemsetD8(dev, 0, dev_pitch * 50))
    ok(drv.cuMemcpy2D(memcpy2d(M.CU_MEMORYTYPE_HOST, host_bytes(host), 96, 8, 3,
                               M.CU_MEMORYTYPE_DEVICE, dev, dev_pitch, 16, 5, 64, 30)))
    out = np.full((50, dev_pitch), 0xEE, np.uint8)
    stream = res.stream()
    ok(drv.cuMemcpy2DAsync(memcpy2d(M.CU_MEMORYTYPE_DEVICE, dev, dev_pitch, 0, 0,
                                    M.CU_MEMORYTYPE_HOST, host_bytes(out), dev_pitch, 0, 0, dev_pitch, 50), stream))
    ok(drv.cuStreamSynchronize(stream))
    expected = np.zeros((50, dev_pitch), np.uint8)
    expected[5:35, 16:80] = host[3:33, 8:72]
    assert (out == expected).all()
    bad = memcpy2d(M.CU_MEMORYTYPE_HOST, host_bytes(host), 32, 0, 0, M.CU_MEMORYTYPE_DEVICE, dev, dev_pitch, 0, 0, 64, 2)
    assert drv.cuMemcpy2D(bad)[0] == E.CUDA_ERROR_INVALID_VALUE  # width past the source pitch


def test_copies_3d_byte_exact(res):
    """cuMemcpy3D between pitched host and device boxes moves exactly the box asked."""
    M = drv.CUmemorytype
    rng = np.random.default_rng(3)
    host = rng.integers(0, 256, (6, 10, 48), np.uint8)  # depth, rows, bytes
    pitch, rows, depth = 64, 12, 7
    dev = res.alloc(pitch * rows * depth)
    ok(drv.cuMemsetD8(dev, 0, pitch * rows * depth))
    c = drv.CUDA_MEMCPY3D()
    c.srcMemoryType, c.srcHost, c.srcPitch, c.srcHeight = M.CU_MEMORYTYPE_HOST, host_bytes(host), 48, 10
    c.srcXInBytes, c.srcY, c.srcZ = 4, 1, 2
    c.dstMemoryType, c.dstDevice, c.dstPitch, c.dstHeight = M.CU_MEMORYTYPE_DEVICE, dev, pitch, rows
    c.dstXInBytes, c.dstY, c.dstZ = 8, 2, 1
    c.WidthInBytes, c.Height, c.Depth = 40, 8, 4
    ok(drv.cuMemcpy3D(c))
    out = np.zeros((depth, rows, pitch), np.uint8)
    ok(drv.cuMemcpyDtoH(host_bytes(out), dev, out.nbytes))
    expected = np.zeros_like(out)
    expected[1:5, 2:10, 8:48] = host[2:6, 1:9, 4:44]
    assert (out == expected).all()


def test_memsets_byte_exact(res):
    """cuMemsetD8/D16/D32, their 2-D forms and async forms write exactly the elements asked."""
    n = 4096
    dev = res.alloc(n)
    stream = res.stream()
    ok(drv.cuMemsetD8(dev, 0, n))
    ok(drv.cuMemsetD16(dev + 2, 0xBEEF, 10))
    ok(drv.cuMemsetD32Async(dev + 64, 0xDEADBEEF, 4, stream))
    ok(drv.cuMemsetD2D8(dev + 256, 32, 0x11, 8, 4))
    ok(drv.cuMemsetD2D32Async(dev + 1024, 64, 0x22334455, 3, 2, stream))
    ok(drv.cuStreamSynchronize(stream))
    ok(drv.cuCtxSynchronize())
    out = np.zeros(n, np.uint8)
    ok(drv.cuMemcpyDtoH(host_bytes(out), dev, n))
    expected = np.zeros(n, np.uint8)
    expected[2:22].view(np.uint16)[:] = 0xBEEF
    expected[64:80].view(np.uint32)[:] = 0xDEADBEEF
    for row in range(4):
        expected[256 + 32 * row: 256 + 32 * row + 8] = 0x11
    for row in range(2):
        expected[1024 + 64 * row: 1024 + 64 * row + 12].view(np.uint32)[:] = 0x22334455
    assert (out == expected).all()
    assert drv.cuMemsetD16(dev + 1, 1, 4)[0] == E.CUDA_ERROR_INVALID_VALUE  # misaligned


COPY_OUTSIDE = PREAMBLE + """
import numpy as np
E = drv.CUresult
ok(drv.cuInit(0))
ok(drv.cuCtxSetCurrent(ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0))))))
dev = int(ok(drv.cuMemAlloc(1024)))
host = np.zeros(4096, np.uint8)
stream = ok(drv.cuStreamCreate(0))
codes = [
    drv.cuMemcpyHtoD(dev + 512, host.ctypes.data, 1024)[0],       # runs past the end
    drv.cuMemcpyDtoH(host.ctypes.data, dev + 1000, 100)[0],
    drv.cuMemcpyDtoDAsync(dev, dev + 1, 1024, stream)[0],
    drv.cuMemsetD8(dev + 1020, 0, 8)[0],
]
ok(drv.cuMemFree(dev))
codes.append(drv.cuMemcpyHtoD(dev, host.ctypes.data, 16)[0])      # freed memory
print(" ".join(c.name for c in codes))
"""


def test_copy_outside_an_allocation_fails(sim):
    """A copy or memset running past its allocation (or into freed memory) is refused, never a crash."""
    result = run_python(COPY_OUTSIDE)
    assert result.returncode == 0, result.stderr
    names = result.stdout.split()
    assert len(names) == 5
    assert all(name in ("CUDA_ERROR_ILLEGAL_ADDRESS", "CUDA_ERROR_INVALID_VALUE") for name in names), names
    if sim is not None:
        assert names[:4] == ["CUDA_ERROR_ILLEGAL_ADDRESS"] * 4 and names[4] == "CUDA_ERROR_INVALID_VALUE"


def test_unmapped_host_memory_is_refused(sim_only, res):
    """A host pointer that is not mapped (NULL, the first page) is refused, never read or written."""
    dev = res.alloc(4096)
    stream = res.stream()
    assert drv.cuMemcpyHtoD(dev, 0, 16)[0] == E.CUDA_ERROR_INVALID_VALUE
    assert drv.cuMemcpyHtoD(dev, 0x1000, 16)[0] == E.CUDA_ERROR_INVALID_VALUE
    assert drv.cuMemcpyDtoHAsync(0x1000, dev, 16, stream)[0] == E.CUDA_ERROR_INVALID_VALUE
    ok(drv.cuMemcpyHtoD(dev, 0, 0))  # nothing to copy


def test_mem_get_info_tracks_allocations(res):
    """cuMemGetInfo's free memory drops by an allocation's size and comes back after its free."""
    free0, total = ok(drv.cuMemGetInfo())
    ptr = int(ok(drv.cuMemAlloc(64 << 20)))
    free1, _ = ok(drv.cuMemGetInfo())
    ok(drv.cuMemFree(ptr))
    free2, _ = ok(drv.cuMemGetInfo())
    assert total >= free0 and free0 - free1 >= 64 << 20 and free2 == free0
    assert drv.cuMemAlloc(0)[0] == E.CUDA_ERROR_INVALID_VALUE
    assert drv.cuMemFree(ptr)[0] == E.CUDA_ERROR_INVALID_VALUE  # freed twice


def test_stream_ordered_free_and_reuse(sim, res):
    """cuMemFreeAsync frees in stream order: the same stream may get the block back at once,
    another stream does not while the free has not run."""
    a, b = res.stream(), res.stream()
    first = int(ok(drv.cuMemAllocAsync(1 << 20, a)))
    gate = Gate().enqueue(a)
    ok(drv.cuMemFreeAsync(first, a))
    try:
        on_b = int(ok(drv.cuMemAllocAsync(1 << 20, b)))
        again = int(ok(drv.cuMemAllocAsync(1 << 20, a)))
        if sim is not None:  # the driver may reuse otherwise; the simulator never does
            assert again == first
            assert on_b != first
        ok(drv.cuMemFreeAsync(on_b, b))
        ok(drv.cuMemFreeAsync(again, a))
    finally:
        gate.open()
    ok(drv.cuStreamSynchronize(a))
    ok(drv.cuStreamSynchronize(b))


def test_stream_ordered_free_of_plain_memory(sim_only, res):
    """cuMemFreeAsync of cuMemAlloc memory: the pointer is gone at the call, the memory returns
    to the device when the stream reaches the free."""
    stream = res.stream()
    free0, _ = ok(drv.cuMemGetInfo())
    ptr = int(ok(drv.cuMemAlloc(32 << 20)))
    gate = Gate().enqueue(stream)
    ok(drv.cuMemFreeAsync(ptr, stream))
    A = drv.CUpointer_attribute
    assert drv.cuPointerGetAttribute(A.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)[0] == E.CUDA_ERROR_INVALID_VALUE
    assert ok(drv.cuMemGetInfo())[0] < free0
    gate.open()
    ok(drv.cuStreamSynchronize(stream))
    assert ok(drv.cuMemGetInfo())[0] == free0


def test_memory_pools(res):
    """The default pool, pool attributes, a created pool and allocations from it."""
    P = drv.CUmemPool_attribute
    dev = ok(drv.cuDeviceGet(0))
    default = ok(drv.cuDeviceGetDefaultMemPool(dev))
    assert int(ok(drv.cuDeviceGetMemPool(dev))) == int(default)
    old = ok(drv.cuMemPoolGetAttribute(default, P.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD))
    ok(drv.cuMemPoolSetAttribute(default, P.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, drv.cuuint64_t(1 << 30)))
    assert int(ok(drv.cuMemPoolGetAttribute(default, P.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD))) == 1 << 30
    ok(drv.cuMemPoolSetAttribute(default, P.CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, old))
    props = drv.CUmemPoolProps()
    props.allocType = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.location.id = 0
    pool = ok(drv.cuMemPoolCreate(props))
    try:
        stream = res.stream()
        ptr = int(ok(drv.cuMemAllocFromPoolAsync(4096, pool, stream)))
        assert int(ok(drv.cuMemPoolGetAttribute(pool, P.CU_MEMPOOL_ATTR_USED_MEM_CURRENT))) >= 4096
        assert int(ok(drv.cuPointerGetAttribute(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr))) == int(pool)
        ok(drv.cuMemsetD8Async(ptr, 1, 4096, stream))
        ok(drv.cuMemFreeAsync(ptr, stream))
        ok(drv.cuStreamSynchronize(stream))
        assert int(ok(drv.cuMemPoolGetAttribute(pool, P.CU_MEMPOOL_ATTR_USED_MEM_CURRENT))) == 0
        ok(drv.cuMemPoolTrimTo(pool, 0))
        assert int(ok(drv.cuMemPoolGetAttribute(pool, P.CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT))) == 0
    finally:
        ok(drv.cuMemPoolDestroy(pool))


# ---- kernels --------------------------------------------------------------------------------------


def kernel_args(*values):
    """A kernelParams array (void**) over ctypes values; keep the result alive until the launch."""
    array = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
    return array, values


def test_module_launch_and_log(sim, res):
    """A module's kernel launches in stream order; the simulator logs what was passed."""
    module = ok(drv.cuModuleLoadData(PTX))
    fill = ok(drv.cuModuleGetFunction(module, b"fill"))
    assert drv.cuModuleGetFunction(module, b"nothere")[0] == E.CUDA_ERROR_NOT_FOUND
    stream = res.stream()
    dev = res.alloc(256)
    blob = (ctypes.c_uint8 * 24)(*range(24))
    array, keep = kernel_args(ctypes.c_uint64(dev), ctypes.c_uint32(0xABCD), blob)
    gate = Gate().enqueue(stream)
    before = sim.launch_count() if sim else 0
    ok(drv.cuLaunchKernel(fill, 4, 2, 1, 128, 1, 1, 1024, stream, ctypes.addressof(array), 0))
    if sim is not None:
        entry = sim.launch(before)
        assert entry["name"] == "fill" and not entry["executed"]
        assert entry["grid"] == (4, 2, 1) and entry["block"] == (128, 1, 1) and entry["shared_bytes"] == 1024
        assert entry["param_sizes"] == (8, 4, 24)
        assert entry["params"] == struct.pack("<QI4x", dev, 0xABCD) + bytes(range(24))
        assert entry["stream"] == int(stream) and entry["device"] == 0
    gate.open()
    ok(drv.cuStreamSynchronize(stream))
    if sim is not None:
        assert sim.launch(before)["executed"]
        assert ok(drv.cuFuncGetParamInfo(fill, 2)) == (16, 24)
    ok(drv.cuModuleUnload(module))


def test_launch_validation(res):
    """Launch dimensions beyond the device's limits are INVALID_VALUE."""
    module = ok(drv.cuModuleLoadData(PTX))
    empty = ok(drv.cuModuleGetFunction(module, b"empty"))
    stream = res.stream()
    assert drv.cuLaunchKernel(empty, 1, 1, 1, 2048, 1, 1, 0, stream, 0, 0)[0] == E.CUDA_ERROR_INVALID_VALUE
    assert drv.cuLaunchKernel(empty, 0, 1, 1, 32, 1, 1, 0, stream, 0, 0)[0] == E.CUDA_ERROR_INVALID_VALUE
    assert drv.cuLaunchKernel(empty, 1, 1, 1, 1, 1, 65, 0, stream, 0, 0)[0] == E.CUDA_ERROR_INVALID_VALUE
    assert drv.cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 1 << 20, stream, 0, 0)[0] == E.CUDA_ERROR_INVALID_VALUE
    ok(drv.cuLaunchKernel(empty, 1, 1, 1, 32, 1, 1, 0, stream, 0, 0))
    ok(drv.cuStreamSynchronize(stream))
    ok(drv.cuModuleUnload(module))


def test_library_kernel_launch_ex(sim, res):
    """cuLibraryLoadData / cuLibraryGetKernel / cuLaunchKernelEx with a packed parameter buffer."""
    library = ok(drv.cuLibraryLoadData(PTX, None, None, 0, None, None, 0))
    kernel = ok(drv.cuLibraryGetKernel(library, b"fill"))
    assert ok(drv.cuKernelGetName(kernel)) == b"fill"
    assert ok(drv.cuKernelGetParamInfo(kernel, 1)) == (8, 4)
    stream = res.stream()
    config = drv.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = 3, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = 64, 2, 1
    config.sharedMemBytes = 0
    config.hStream = stream
    config.numAttrs = 0
    payload = bytes(range(40))
    buf = ctypes.create_string_buffer(payload, 40)
    size = ctypes.c_size_t(40)
    extra = (ctypes.c_void_p * 5)(1, ctypes.addressof(buf), 2, ctypes.addressof(size), 0)
    before = sim.launch_count() if sim else 0
    ok(drv.cuLaunchKernelEx(config, drv.CUfunction(int(kernel)), None, ctypes.addressof(extra)))
    ok(drv.cuStreamSynchronize(stream))
    if sim is not None:
        entry = sim.launch(before)
        assert entry["name"] == "fill" and entry["params"] == payload and entry["executed"]
        assert entry["grid"] == (3, 1, 1) and entry["block"] == (64, 2, 1)
    ok(drv.cuLibraryUnload(library))


# ---- tensor maps ------------------------------------------------------------------------------------

T = drv.CUtensorMapDataType
IL = drv.CUtensorMapInterleave
SW = drv.CUtensorMapSwizzle
L2 = drv.CUtensorMapL2promotion
OOB = drv.CUtensorMapFloatOOBfill

BASE_MAP = dict(dtype=T.CU_TENSOR_MAP_DATA_TYPE_FLOAT32, rank=2, offset=0, dims=[64, 32], strides=[256],
                box=[16, 8], estrides=[1, 1], interleave=IL.CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle=SW.CU_TENSOR_MAP_SWIZZLE_NONE, l2=L2.CU_TENSOR_MAP_L2_PROMOTION_NONE,
                oob=OOB.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)

CC10 = "valid from compute capability 10.0"

TENSOR_MAP_CASES = [
    ("valid", {}, True),
    ("rank-5", dict(rank=5, dims=[16, 2, 2, 2, 2], strides=[64, 128, 256, 512], box=[4, 1, 1, 1, 1],
                    estrides=[1] * 5), True),
    ("rank-0", dict(rank=0, dims=[], strides=[], box=[], estrides=[]), False),
    ("address-8", dict(offset=8), False),
    ("address-16", dict(offset=16), True),
    ("dim-0", dict(dims=[0, 32]), False),
    ("dim-2**32", dict(dims=[2**32, 32]), True),
    ("dim-2**32+1", dict(dims=[2**32 + 1, 32]), False),
    ("stride-8", dict(strides=[264]), False),
    ("stride-2**40", dict(strides=[2**40]), False),
    ("box-0", dict(box=[16, 0]), False),
    ("box-257", dict(box=[16, 257]), False),
    ("box-256", dict(box=[16, 256]), True),
    ("box-inner-not-16-bytes", dict(box=[6, 8]), False),
    ("estride-0", dict(estrides=[1, 0]), False),
    ("estride-9", dict(estrides=[1, 9]), False),
    ("estride-8", dict(estrides=[1, 8]), True),
    ("interleave-rank-2", dict(interleave=IL.CU_TENSOR_MAP_INTERLEAVE_16B), False),
    ("interleave-16B-rank-3", dict(rank=3, dims=[8, 4, 4], strides=[32, 128], box=[8, 4, 4], estrides=[1, 1, 1],
                                   interleave=IL.CU_TENSOR_MAP_INTERLEAVE_16B), True),
    # Documented as needing swizzle 32B, but driver 580 (an H200) encodes 32-byte interleave with
    # swizzles none, 64B and 128B too.
    ("interleave-32B-without-swizzle-32B-accepted", dict(rank=3, dims=[8, 4, 4], strides=[64, 256], box=[8, 4, 4],
                                                         estrides=[1, 1, 1], interleave=IL.CU_TENSOR_MAP_INTERLEAVE_32B),
     True),
    ("interleave-32B-swizzle-128B-accepted", dict(rank=3, dims=[8, 4, 4], strides=[64, 256], box=[8, 4, 4],
                                                  estrides=[1, 1, 1], interleave=IL.CU_TENSOR_MAP_INTERLEAVE_32B,
                                                  swizzle=SW.CU_TENSOR_MAP_SWIZZLE_128B), True),
    ("interleave-32B-stride-16", dict(rank=3, dims=[8, 4, 4], strides=[48, 192], box=[8, 4, 4], estrides=[1, 1, 1],
                                      interleave=IL.CU_TENSOR_MAP_INTERLEAVE_32B, swizzle=SW.CU_TENSOR_MAP_SWIZZLE_32B), False),
    ("interleave-32B", dict(rank=3, dims=[8, 4, 4], strides=[64, 256], box=[8, 4, 4], estrides=[1, 1, 1],
                            interleave=IL.CU_TENSOR_MAP_INTERLEAVE_32B, swizzle=SW.CU_TENSOR_MAP_SWIZZLE_32B), True),
    ("swizzle-32B-box-64B", dict(box=[16, 8], swizzle=SW.CU_TENSOR_MAP_SWIZZLE_32B), False),
    ("swizzle-64B-box-64B", dict(box=[16, 8], swizzle=SW.CU_TENSOR_MAP_SWIZZLE_64B), True),
    ("swizzle-128B-box-128B", dict(box=[32, 8], swizzle=SW.CU_TENSOR_MAP_SWIZZLE_128B), True),
    ("swizzle-128B-box-256B", dict(box=[64, 8], swizzle=SW.CU_TENSOR_MAP_SWIZZLE_128B), False),
    ("nan-fill-float", dict(oob=OOB.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA), True),
    ("nan-fill-int", dict(dtype=T.CU_TENSOR_MAP_DATA_TYPE_INT32, oob=OOB.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA), False),
    ("uint8-box-16", dict(dtype=T.CU_TENSOR_MAP_DATA_TYPE_UINT8, box=[16, 8]), True),
    ("float64-box-2", dict(dtype=T.CU_TENSOR_MAP_DATA_TYPE_FLOAT64, box=[2, 8]), True),
    ("bfloat16-box-4", dict(dtype=T.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, box=[4, 8]), False),
    ("l2-256B", dict(l2=L2.CU_TENSOR_MAP_L2_PROMOTION_L2_256B), True),
    # Compute capability 10.0's: refused below it whatever the layout (driver 580 on an H200),
    # encoded from it (CC10: valid where the device has 10.0 or higher).
    ("packed-16U4_ALIGN8B", dict(dtype=T.CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B, dims=[512, 32], box=[32, 8]), CC10),
    ("packed-16U6_ALIGN16B", dict(dtype=T.CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B, dims=[128, 4], strides=[96],
                                  box=[128, 4]), CC10),
    ("swizzle-128B-atom-32B", dict(box=[32, 8], swizzle=SW.CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B), CC10),
    ("swizzle-128B-atom-64B", dict(box=[32, 8], swizzle=SW.CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B), CC10),
]


def encode(dev, case):
    c = dict(BASE_MAP, **case)
    u64, u32 = drv.cuuint64_t, drv.cuuint32_t
    return drv.cuTensorMapEncodeTiled(
        c["dtype"], c["rank"], dev + c["offset"], [u64(v) for v in c["dims"]], [u64(v) for v in c["strides"]],
        [u32(v) for v in c["box"]], [u32(v) for v in c["estrides"]], c["interleave"], c["swizzle"], c["l2"], c["oob"])


@pytest.mark.parametrize("case,valid", [(c, v) for _, c, v in TENSOR_MAP_CASES],
                         ids=[name for name, _, _ in TENSOR_MAP_CASES])
def test_tensor_map_encode_rules(res, case, valid):
    """cuTensorMapEncodeTiled accepts what the driver documents and refuses the rest with INVALID_VALUE
    (the packed types and ATOM swizzles only from compute capability 10.0)."""
    if valid == CC10:
        valid = ok(drv.cuDeviceComputeCapability(0)) >= (10, 0)
    dev = res.alloc(1 << 16)
    err = encode(dev, case)[0]
    assert err == (SUCCESS if valid else E.CUDA_ERROR_INVALID_VALUE)


U4_8B = dict(dtype=T.CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B, dims=[512, 32], box=[32, 8])
U4_16B = dict(dtype=T.CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN16B, dims=[256, 32], strides=[256], box=[128, 8])
U6_16B = dict(dtype=T.CU_TENSOR_MAP_DATA_TYPE_16U6_ALIGN16B, dims=[128, 4], strides=[96], box=[128, 4])
ATOM_32B, ATOM_FLIP, ATOM_64B = (SW.CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B, SW.CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B_FLIP_8B,
                                 SW.CU_TENSOR_MAP_SWIZZLE_128B_ATOM_64B)
INTERLEAVED = dict(rank=3, strides=[96, 384], box=[128, 4, 1], estrides=[1, 1, 1])

#: The documented rules of compute capability 10.0's packed types and ATOM swizzles, on the
#: simulator switched to 10.0 (below it every one of them is refused: TENSOR_MAP_CASES).
BLACKWELL_CASES = [
    ("16U4_ALIGN8B", U4_8B, True),
    ("16U4_ALIGN8B-odd-dim", dict(U4_8B, dims=[511, 32]), False),
    ("16U4_ALIGN8B-nan-fill", dict(U4_8B, oob=OOB.CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA), False),
    ("16U4_ALIGN16B", U4_16B, True),
    ("16U4_ALIGN16B-box-64", dict(U4_16B, box=[64, 8]), False),
    ("16U4_ALIGN16B-dim-192", dict(U4_16B, dims=[192, 32]), False),
    ("16U4_ALIGN16B-address-16", dict(U4_16B, offset=16), False),
    ("16U4_ALIGN16B-stride-272", dict(U4_16B, strides=[272]), False),
    ("16U4_ALIGN16B-swizzle-128B", dict(U4_16B, swizzle=SW.CU_TENSOR_MAP_SWIZZLE_128B), True),
    ("16U4_ALIGN16B-swizzle-atom-32B", dict(U4_16B, swizzle=ATOM_32B), True),
    ("16U4_ALIGN16B-swizzle-atom-64B", dict(U4_16B, swizzle=ATOM_64B), False),
    ("16U4_ALIGN16B-swizzle-atom-flip", dict(U4_16B, swizzle=ATOM_FLIP), False),
    ("16U6_ALIGN16B", U6_16B, True),
    ("16U6_ALIGN16B-swizzle-atom-64B", dict(U6_16B, swizzle=ATOM_64B), True),
    ("16U6_ALIGN16B-swizzle-atom-flip", dict(U6_16B, swizzle=ATOM_FLIP), False),
    ("16U6_ALIGN16B-interleave-16B", dict(U6_16B, dims=[128, 4, 1], **INTERLEAVED,
                                          interleave=IL.CU_TENSOR_MAP_INTERLEAVE_16B), False),
    ("16U4_ALIGN16B-interleave-16B", dict(U4_16B, dims=[128, 4, 1], **dict(INTERLEAVED, strides=[128, 512]),
                                          interleave=IL.CU_TENSOR_MAP_INTERLEAVE_16B), True),
    ("atom-32B", dict(box=[32, 8], swizzle=ATOM_32B), True),
    ("atom-flip-8B", dict(box=[32, 8], swizzle=ATOM_FLIP), True),
    ("atom-64B", dict(box=[32, 8], swizzle=ATOM_64B), True),
    ("atom-32B-box-256B", dict(box=[64, 8], swizzle=ATOM_32B), False),
]


@pytest.mark.parametrize("case,valid", [(c, v) for _, c, v in BLACKWELL_CASES],
                         ids=[name for name, _, _ in BLACKWELL_CASES])
def test_tensor_map_capability_10_rules(sim_only, res, case, valid):
    """On a device of compute capability 10.0 (the simulator switched to it) the packed types and
    the ATOM swizzles encode, under the rules the driver documents for them."""
    before = ok(drv.cuDeviceComputeCapability(0))
    sim_only.set_compute_capability(10, 0)
    try:
        err = encode(res.alloc(1 << 16), case)[0]
    finally:
        sim_only.set_compute_capability(*before)
    assert err == (SUCCESS if valid else E.CUDA_ERROR_INVALID_VALUE)


def test_tensor_map_is_deterministic(sim_only, res):
    """The simulator's encoding is a function of the arguments: the same call, the same bytes."""
    dev = res.alloc(1 << 16)
    words = [[int(w) for w in ok(encode(dev, {})).opaque] for _ in range(2)]
    assert words[0] == words[1] and words[0][0] == dev
    assert [int(w) for w in ok(encode(dev, dict(box=[8, 8]))).opaque] != words[0]


# ---- threads and exit -----------------------------------------------------------------------------------


def test_many_threads_order_their_own_work(primary, device_count, sim, res):
    """Eight threads, each with its own streams and event on alternating devices, order
    producer and consumer streams correctly and leave no event behind."""
    if sim is not None:
        sim.set_delay_us(200)
    events_before = sim.counter("events_live") if sim else 0
    n = 8192
    errors = []

    def worker(k):
        try:
            ctx = primary[k % device_count]
            ok(drv.cuCtxSetCurrent(ctx))
            dev = int(ok(drv.cuMemAlloc(n)))
            producer, consumer = ok(drv.cuStreamCreate(0)), ok(drv.cuStreamCreate(0))
            event = ok(drv.cuEventCreate(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING))
            out = np.zeros(n, np.uint8)
            for round_ in range(20):
                value = (k * 20 + round_) % 251 + 1
                ok(drv.cuMemsetD8Async(dev, value, n, producer))
                ok(drv.cuEventRecord(event, producer))
                ok(drv.cuStreamWaitEvent(consumer, event, 0))
                ok(drv.cuMemcpyDtoHAsync(out.ctypes.data, dev, n, consumer))
                if not (out == value).all():
                    errors.append((k, round_))
            for s in (producer, consumer):
                ok(drv.cuStreamSynchronize(s))
                ok(drv.cuStreamDestroy(s))
            ok(drv.cuEventDestroy(event))
            ok(drv.cuMemFree(dev))
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    if sim is not None:
        assert sim.counter("events_live") == events_before


def test_process_exits_promptly_with_work_pending(sim_only):
    """A process that exits with stream work still queued exits at once (no join, no hang)."""
    source = PREAMBLE + """
import time
ok(drv.cuInit(0))
ok(drv.cuCtxSetCurrent(ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0))))))
dev = int(ok(drv.cuMemAlloc(1 << 20)))
for i in range(4):
    s = ok(drv.cuStreamCreate(0))
    for _ in range(200):
        ok(drv.cuMemsetD8Async(dev, 1, 1 << 20, s))
print("queued", flush=True)
"""
    start = time.monotonic()
    result = run_python(source, env={"SIMGPU_DELAY_US": "100000"}, timeout=60)
    assert result.returncode == 0 and "queued" in result.stdout, result.stderr
    assert time.monotonic() - start < 20
