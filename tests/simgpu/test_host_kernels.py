"""Kernels that compute: host implementations registered per kernel name
(stridedview_simgpu.kernels, simgpu_register_kernel) run in the launch's place in stream
order, with the launch's parameters, reading and writing device memory; what they reach is
what the stream-order checker sees."""

from __future__ import annotations

import ctypes
import threading

import numpy as np
import pytest

from .simgpu_support import Gate, drv, ok  # noqa: I001 - puts the tree's simgpu/ on sys.path

from stridedview_simgpu import kernels

NON_BLOCKING = drv.CUstream_flags.CU_STREAM_NON_BLOCKING
N = 1024

PTX = rb"""
.version 8.0
.target sm_90
.address_size 64

.visible .entry hk_scale(
    .param .u64 hk_scale_dst,
    .param .u64 hk_scale_src,
    .param .f32 hk_scale_factor,
    .param .u32 hk_scale_n
)
{
    ret;
}

.visible .entry hk_plain(
    .param .u64 hk_plain_dst,
    .param .u16 hk_plain_small,
    .param .align 8 .b8 hk_plain_pair[16]
)
{
    ret;
}
""" + b"\0"


@pytest.fixture
def host_kernels(sim_only):
    """The kernels this test registers are removed after it."""
    names = []

    def register(name, fn, params=None, reads=None, writes=None):
        kernels.register(name, fn, params, reads, writes)
        names.append(name)

    yield register
    for name in names:
        kernels.unregister(name)


@pytest.fixture
def module(primary):
    handle = ok(drv.cuModuleLoadData(PTX))
    yield handle
    ok(drv.cuModuleUnload(handle))


def launch(module, name: bytes, stream, *values):
    function = ok(drv.cuModuleGetFunction(module, name))
    array = (ctypes.c_void_p * len(values))(*(ctypes.addressof(v) for v in values))
    ok(drv.cuLaunchKernel(function, 2, 1, 1, 64, 1, 1, 0, stream, ctypes.addressof(array), 0))


def scale(module, stream, dst, src, factor=2.0, n=N):
    launch(module, b"hk_scale", stream, ctypes.c_uint64(dst), ctypes.c_uint64(src), ctypes.c_float(factor),
           ctypes.c_uint32(n))


def upload(res, values, stream):
    host = np.ascontiguousarray(values, np.float32)
    device = res.alloc(host.nbytes)
    ok(drv.cuMemcpyHtoDAsync(device, host.ctypes.data, host.nbytes, stream))
    ok(drv.cuStreamSynchronize(stream))
    return device


def download(device, n, stream):
    host = np.empty(n, np.float32)
    ok(drv.cuMemcpyDtoHAsync(host.ctypes.data, device, host.nbytes, stream))
    ok(drv.cuStreamSynchronize(stream))
    return host


def numpy_scale(launch_, dst, src, factor, n):
    launch_.array(dst, n, np.float32)[:] = launch_.array(src, n, np.float32) * factor


SCALE_PARAMS = ("ptr", "ptr", "float32", "uint32")


def test_a_registered_kernel_computes_with_its_parameters(res, module, host_kernels):
    seen = []

    def body(launch_, dst, src, factor, n):
        seen.append((launch_.name, launch_.grid, launch_.block, launch_.device, factor, n))
        numpy_scale(launch_, dst, src, factor, n)

    host_kernels("hk_scale", body, SCALE_PARAMS)
    s = res.stream(NON_BLOCKING)
    src, dst = upload(res, np.arange(N), s), res.alloc(4 * N)
    scale(module, s, dst, src, 1.5)
    np.testing.assert_array_equal(download(dst, N, s), np.arange(N, dtype=np.float32) * 1.5)
    assert seen == [("hk_scale", (2, 1, 1), (64, 1, 1), 0, 1.5, N)]


def test_it_runs_after_the_streams_earlier_work_and_before_its_later_work(res, module, host_kernels):
    """Queued behind a gate: the implementation has not run before the gate opens, reads the
    memset queued before it, and the copy queued after it reads its result."""
    calls = []
    host_kernels("hk_scale", lambda l_, *a: (calls.append(1), numpy_scale(l_, *a)), SCALE_PARAMS)
    s = res.stream(NON_BLOCKING)
    src, dst = res.alloc(4 * N), res.alloc(4 * N)
    gate = Gate(timeout=30).enqueue(s)
    ok(drv.cuMemsetD32Async(src, 0x40400000, N, s))  # 3.0f
    scale(module, s, dst, src, 2.0)
    pinned = res.host_alloc(4 * N)  # an asynchronous copy (into pageable memory it would block)
    host = np.ctypeslib.as_array((ctypes.c_float * N).from_address(pinned))
    ok(drv.cuMemcpyDtoHAsync(pinned, dst, host.nbytes, s))
    assert gate.entered.wait(10)
    assert calls == []
    gate.open()
    ok(drv.cuStreamSynchronize(s))
    assert calls == [1]
    np.testing.assert_array_equal(host, np.full(N, 6.0, np.float32))


def test_it_waits_for_the_events_its_stream_waits_for(res, module, host_kernels):
    host_kernels("hk_scale", numpy_scale, SCALE_PARAMS)
    producer, consumer = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    src, dst = res.alloc(4 * N), res.alloc(4 * N)
    gate = Gate(timeout=30).enqueue(producer)
    ok(drv.cuMemsetD32Async(src, 0x3F800000, N, producer))  # 1.0f
    event = res.event(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
    ok(drv.cuEventRecord(event, producer))
    ok(drv.cuStreamWaitEvent(consumer, event, 0))
    scale(module, consumer, dst, src, 5.0)
    gate.open()
    np.testing.assert_array_equal(download(dst, N, consumer), np.full(N, 5.0, np.float32))


def test_every_replay_of_a_captured_graph_runs_it(res, module, host_kernels):
    """Captured, it does not run; each graph launch runs it, in the graph's order."""
    calls = []
    host_kernels("hk_scale", lambda l_, *a: (calls.append(1), numpy_scale(l_, *a)), SCALE_PARAMS)
    s = res.stream(NON_BLOCKING)
    src, dst = upload(res, np.ones(N), s), res.alloc(4 * N)
    ok(drv.cuStreamBeginCapture(s, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
    scale(module, s, dst, src, 2.0)
    scale(module, s, src, dst, 2.0)  # src = 4 * src: each replay multiplies by 4
    graph = ok(drv.cuStreamEndCapture(s))
    assert calls == []
    exe = ok(drv.cuGraphInstantiate(graph, 0))
    try:
        for _ in range(3):
            ok(drv.cuGraphLaunch(exe, s))
        np.testing.assert_array_equal(download(src, N, s), np.full(N, 64.0, np.float32))
        assert len(calls) == 6
    finally:
        ok(drv.cuGraphExecDestroy(exe))
        ok(drv.cuGraphDestroy(graph))


def test_a_kernel_without_an_implementation_is_logged_and_runs_nothing(sim_only, res, module):
    assert not kernels.registered("hk_scale")
    s = res.stream(NON_BLOCKING)
    src, dst = upload(res, np.ones(N), s), upload(res, np.full(N, 7.0), s)
    before = sim_only.launch_count()
    scale(module, s, dst, src, 2.0)
    ok(drv.cuStreamSynchronize(s))
    assert sim_only.launch(before)["name"] == "hk_scale" and sim_only.launch(before)["executed"]
    np.testing.assert_array_equal(download(dst, N, s), np.full(N, 7.0, np.float32))


def test_raw_parameters_keep_the_kernels_layout(res, module, host_kernels):
    """Without a parameter list, each parameter's bytes, taken at the offsets the PTX
    declares (an .align 8 byte array after a 2-byte value starts at 16)."""
    seen = []
    host_kernels("hk_plain", lambda l_, *params: seen.append(params))
    s = res.stream(NON_BLOCKING)
    pair = (ctypes.c_uint8 * 16)(*range(16))
    launch(module, b"hk_plain", s, ctypes.c_uint64(0x1234), ctypes.c_uint16(0xBEEF), pair)
    ok(drv.cuStreamSynchronize(s))
    assert seen == [((0x1234).to_bytes(8, "little"), (0xBEEF).to_bytes(2, "little"), bytes(range(16)))]


@pytest.fixture
def checking(sim_only):
    """The stream-order checker on for the test; its mode before, after."""
    previous = sim_only.set_check(1)
    yield sim_only
    sim_only.set_check(previous)


def unordered_readers(sim, res, module):
    """Launches on two streams, unordered, each scaling one src into a dst of its own: their
    buffers, and the checker's reports about them."""
    a, b = res.stream(NON_BLOCKING), res.stream(NON_BLOCKING)
    src = upload(res, np.ones(N), a)
    dst_a, dst_b = res.alloc(4 * N), res.alloc(4 * N)
    since = sim.check_report_count()
    scale(module, a, dst_a, src)
    scale(module, b, dst_b, src)
    ok(drv.cuCtxSynchronize())
    return (a, b, src, dst_a, dst_b), sim.check_reports(since)


RACE_OF_HK_SCALE = "simgpu: check: race: cuLaunchKernel of kernel hk_scale"


def test_the_checker_sees_the_declared_accesses(checking, res, module, host_kernels):
    """Declared reads of src and a write of dst: two unordered launches that only read the
    same src are no race; a launch writing what another stream's launch reads is one."""
    host_kernels("hk_scale", numpy_scale, SCALE_PARAMS, reads=(1,), writes=(0,))
    (a, b, src, dst_a, dst_b), reports = unordered_readers(checking, res, module)
    assert reports == []
    since = checking.check_report_count()
    scale(module, a, dst_a, src)
    scale(module, b, src, dst_b)  # b writes src, which a's launch reads, unordered
    ok(drv.cuCtxSynchronize())
    reports = checking.check_reports(since)
    assert len(reports) == 1 and reports[0].startswith(RACE_OF_HK_SCALE)


def test_an_implementation_that_raises_is_reported_and_the_stream_goes_on(res, module, host_kernels, capfd):
    def broken(launch_, dst, src, factor, n):
        raise ZeroDivisionError("on purpose")

    host_kernels("hk_scale", broken, SCALE_PARAMS)
    s = res.stream(NON_BLOCKING)
    src, dst = upload(res, np.ones(N), s), res.alloc(4 * N)
    before = len(kernels.errors())
    scale(module, s, dst, src)
    ok(drv.cuMemsetD32Async(dst, 0x40000000, N, s))  # later work still runs
    np.testing.assert_array_equal(download(dst, N, s), np.full(N, 2.0, np.float32))
    errors = kernels.errors()[before:]
    assert len(errors) == 1 and "ZeroDivisionError: on purpose" in str(errors[0])
    assert "simgpu: kernel hk_scale: host implementation failed" in capfd.readouterr().err


def test_memory_outside_an_allocation_is_refused(res, module, host_kernels):
    outcomes = []

    def reach(launch_, dst, src, factor, n):
        launch_.memory(dst, 4 * N)  # the whole allocation
        for address, nbytes in ((dst, 4 * N + 1), (dst + 4 * N, 4)):
            try:
                launch_.memory(address, nbytes)
                outcomes.append("reached")
            except kernels.KernelError as exc:
                outcomes.append(str(exc))

    host_kernels("hk_scale", reach, SCALE_PARAMS)
    s = res.stream(NON_BLOCKING)
    src, dst = res.alloc(4 * N), res.alloc(4 * N)
    scale(module, s, dst, src)
    ok(drv.cuStreamSynchronize(s))
    assert len(outcomes) == 2 and all("not in one allocation" in text for text in outcomes), outcomes


def test_driver_calls_inside_an_implementation_are_not_permitted(res, module, host_kernels):
    answers = []
    host_kernels("hk_scale", lambda *_: answers.append(drv.cuCtxSynchronize()[0]), SCALE_PARAMS)
    s = res.stream(NON_BLOCKING)
    scale(module, s, res.alloc(4 * N), res.alloc(4 * N))
    ok(drv.cuStreamSynchronize(s))
    assert answers == [drv.CUresult.CUDA_ERROR_NOT_PERMITTED]


def test_a_replacement_waits_for_the_running_call(res, module, host_kernels):
    """Registering again while the old implementation runs returns once it has returned; the
    next launch runs the new one."""
    entered, release, order = threading.Event(), threading.Event(), []

    def old(*_):
        entered.set()
        release.wait(10)
        order.append("old returned")

    host_kernels("hk_scale", old, SCALE_PARAMS)
    s = res.stream(NON_BLOCKING)
    src, dst = res.alloc(4 * N), res.alloc(4 * N)
    scale(module, s, dst, src)
    assert entered.wait(10)
    threading.Timer(0.2, release.set).start()
    host_kernels("hk_scale", lambda *_: order.append("new"), SCALE_PARAMS)
    order.append("replaced")
    scale(module, s, dst, src)
    ok(drv.cuStreamSynchronize(s))
    assert order == ["old returned", "replaced", "new"]


def test_arrays_with_strides_in_elements_negative_ones_too(res, module, host_kernels):
    """launch.array takes strides in elements: every other element of src, written into dst
    from its last element backwards (a stride of -1 from the address of the last)."""
    half = N // 2

    def body(launch_, dst, src, factor, n):
        backwards = launch_.array(dst + (half - 1) * 4, half, np.float32, strides=(-1,))
        backwards[:] = launch_.array(src, half, np.float32, strides=(2,))

    host_kernels("hk_scale", body, SCALE_PARAMS)
    s = res.stream(NON_BLOCKING)
    values = np.arange(N, dtype=np.float32)
    src, dst = upload(res, values, s), upload(res, np.zeros(N), s)
    scale(module, s, dst, src)
    out = download(dst, N, s)
    np.testing.assert_array_equal(out[:half], values[::2][::-1])
    np.testing.assert_array_equal(out[half:], np.zeros(N - half, np.float32))


def test_declared_accesses_go_with_their_implementation(checking, res, module, host_kernels):
    """Once the implementation that declared its reads is removed (or replaced by one that
    declares nothing), the checker takes the pointers as read and written again: two
    unordered launches sharing src are then a race."""
    host_kernels("hk_scale", numpy_scale, SCALE_PARAMS, reads=(1,), writes=(0,))
    kernels.unregister("hk_scale")
    host_kernels("hk_scale", numpy_scale, SCALE_PARAMS)
    _, reports = unordered_readers(checking, res, module)
    assert len(reports) == 1 and reports[0].startswith(RACE_OF_HK_SCALE)
