"""copy_from/copy_to through the real driver: device memory in any layout, the host, pinned and
managed memory, byte-exact against numpy.

Runs on any CUDA driver (marked ``gpu``): the simulated device (tests/simgpu), whose device
memory the host cannot touch and whose copies run on stream workers, or a real GPU.  The device
memory is cuda-bindings' own (cuMemAlloc) behind a hand-made CUDA Array Interface, and
cuda.core and numba-cuda arrays; the driver's ``CUDA_MEMCPY2D``/``CUDA_MEMCPY3D`` structs are
really marshalled.  Which copy call each layout takes is counted by the simulator (marked
``simgpu``: its call counters).
"""

from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import gpu_import
from stridedview import StridedMemoryView

pytestmark = pytest.mark.gpu


def device_array(res, shape, dtype, *, strides=None, stream=None, device=0, readonly=False):
    """A CAI producer over fresh device memory: ``strides`` in elements (None: C order), laid
    out so that negative strides stay inside the allocation; filled with 0xEE bytes."""
    from driver_support import CAIArray, span_bytes

    dtype = np.dtype(dtype)
    elements = strides if strides is not None else _c_strides(shape)
    byte_strides = tuple(s * dtype.itemsize for s in elements)
    low, high = span_bytes(shape, byte_strides, dtype.itemsize)
    memory = res.device(max(high - low, 1), device)
    memory.upload(np.full(memory.nbytes, 0xEE, np.uint8))
    return CAIArray(memory, shape, dtype, strides=None if strides is None else byte_strides,
                    offset=-low, stream=stream, readonly=readonly)


def _c_strides(shape):
    strides, step = [], 1
    for extent in reversed(shape):
        strides.append(step)
        step *= max(extent, 1)
    return tuple(reversed(strides))


def contents(array) -> np.ndarray:
    """The elements of a ``device_array``, read back through the driver (a host copy of its
    whole allocation, laid out as the CAI says)."""
    cai = array.__cuda_array_interface__
    dtype = np.dtype(cai["typestr"])
    raw = array.memory.download()
    offset = array.ptr - array.memory.ptr
    strides = cai["strides"] or tuple(s * dtype.itemsize for s in _c_strides(cai["shape"]))
    return np.lib.stride_tricks.as_strided(
        raw[offset:].view(np.uint8), cai["shape"], strides
    ).view(dtype) if dtype.itemsize == 1 else np.ndarray(
        cai["shape"], dtype, buffer=raw, offset=offset, strides=strides
    )


def _host(shape, dtype=np.float32, seed=0):
    return np.random.default_rng(seed).integers(0, 1000, size=shape).astype(dtype)


LAYOUTS = [np.s_[...], np.s_[::2], np.s_[:, ::-1], np.s_[1:, 2:7], np.s_[::-1, ::3, 1:]]


@pytest.mark.parametrize("src_index", LAYOUTS, ids=["full", "step2", "reversed", "block", "mixed"])
@pytest.mark.parametrize("transpose", [False, True], ids=["c", "transposed"])
def test_round_trip_every_layout(gpu, src_index, transpose):
    """Host (strided) -> device (C order or transposed) -> host gives back the values exactly,
    and the device memory holds them where the device layout says."""
    host = _host((6, 9, 8))[src_index]
    stream = gpu.stream()
    if transpose:
        device = device_array(gpu, host.shape, np.float32, strides=_c_strides(host.shape[::-1])[::-1])
    else:
        device = device_array(gpu, host.shape, np.float32)
    dview = StridedMemoryView(device, stream_ptr=stream.ptr)
    dview.copy_from(StridedMemoryView(host), stream.ptr)
    out = np.zeros(host.shape, np.float32)
    dview.copy_to(StridedMemoryView(out), stream.ptr, blocking=True)
    assert out.tobytes() == np.ascontiguousarray(host).tobytes()
    assert np.array_equal(contents(device), host)


@settings(max_examples=40, deadline=None)
@given(shape=st.lists(st.integers(1, 4), min_size=1, max_size=4), data=st.data())
def test_any_layout_round_trip(shape, data):
    """Host (any source layout) -> device (any layout) -> device (C order) -> host (any
    destination layout) gives back the values, bit for bit."""
    import driver_support

    driver_support.make_current(0)
    res = driver_support.Resources()
    try:
        stream = res.stream()
        ndim = len(shape)
        steps = [data.draw(st.sampled_from([1, 2, -1, -2])) for _ in range(ndim)]
        order = data.draw(st.permutations(range(ndim)))
        big = _host(tuple(n * abs(s) + 1 for n, s in zip(shape, steps)), np.int16, seed=ndim)
        src = big[tuple(slice(None, None, s) for s in steps)][tuple(slice(0, n) for n in shape)]
        dev_steps = [data.draw(st.sampled_from([1, 3, -2])) for _ in range(ndim)]
        dev_strides = [0] * ndim
        step = 1
        for axis in reversed(order):
            dev_strides[axis] = step * dev_steps[axis]
            step *= shape[axis] * abs(dev_steps[axis])
        first = device_array(res, shape, np.int16, strides=tuple(dev_strides))
        second = device_array(res, shape, np.int16)
        one = StridedMemoryView(first, stream_ptr=stream.ptr)
        two = StridedMemoryView(second, stream_ptr=stream.ptr)
        one.copy_from(StridedMemoryView(src), stream.ptr)
        two.copy_from(one, stream.ptr)
        out_base = np.zeros(tuple(shape[i] * 2 for i in order), np.int16)
        out = out_base[tuple(slice(None, None, 2) for _ in shape)].transpose(np.argsort(order))
        two.copy_to(StridedMemoryView(out), stream.ptr, blocking=True)
        assert np.array_equal(out, src)
        assert np.array_equal(contents(first), src) and np.array_equal(contents(second), src)
    finally:
        res.release()


@pytest.mark.parametrize("kind", ["pinned", "managed"])
def test_pinned_and_managed_sides(gpu, kind):
    """Pinned host and managed memory, viewed through DLPack capsules of their own device types
    (kDLCUDAHost, kDLCUDAManaged), copy to and from device memory (transposing) byte-exact;
    numpy imports both."""
    from producers import make_producer

    host = _host((5, 7), np.float64, seed=3)
    memory = gpu.pinned(host.nbytes) if kind == "pinned" else gpu.managed(host.nbytes)
    memory.array(np.float64, host.shape)[...] = host
    device_type = 3 if kind == "pinned" else 13
    producer = make_producer(shape=host.shape, dtype="float64", device=(device_type, 0), data=memory.ptr)
    stream = gpu.stream()
    side = StridedMemoryView(producer, stream_ptr=stream.ptr)
    assert side.is_device_accessible and side.ptr == memory.ptr
    assert side.__dlpack_device__() == (device_type, 0)
    device = device_array(gpu, (7, 5), np.float64)
    dview = StridedMemoryView(device, stream_ptr=stream.ptr)
    dview.copy_from(side.T, stream.ptr)
    stream.synchronize()
    assert np.array_equal(contents(device), host.T)
    memory.array(np.float64)[:] = 0
    side.T.copy_from(dview, stream.ptr, blocking=True)
    assert np.array_equal(memory.array(np.float64, host.shape), host)
    assert np.array_equal(np.from_dlpack(side), host)


# --- which copy call each layout takes (the simulator counts them) -------------------------

# The entry points the bindings resolve (the simulator counts calls by entry point).
COPY_CALLS = ("cuMemcpyAsync", "cuMemcpy2DAsync_v2", "cuMemcpy3DAsync_v2")


def _copy_calls(simulator, before=None):
    counts = {name: simulator.calls(name) for name in COPY_CALLS}
    if before is None:
        return counts
    return {name: counts[name] - before[name] for name in COPY_CALLS}


@pytest.mark.simgpu
@pytest.mark.parametrize(
    "case, host_index, device_shape, expected",
    [
        ("contiguous", np.s_[...], (3, 4, 5), {"cuMemcpyAsync": 1}),
        ("pitched-rows", np.s_[0, :, 2:7], (4, 5), {"cuMemcpy2DAsync_v2": 1}),
        ("two-pitched-axes", np.s_[1:3, 1:4, 1:5], (2, 3, 4), {"cuMemcpy3DAsync_v2": 1}),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_each_layout_takes_one_call(gpu, simulator, case, host_index, device_shape, expected):
    """Contiguous is one cuMemcpyAsync, rows with a pitch one cuMemcpy2DAsync, a sub-block of a
    3-d array one cuMemcpy3DAsync; the bytes arrive exactly."""
    host = _host((3, 4, 5) if case == "contiguous" else (4, 4, 8))[host_index]
    assert host.shape == device_shape
    stream = gpu.stream()
    device = device_array(gpu, host.shape, np.float32)
    view = StridedMemoryView(device, stream_ptr=stream.ptr)
    before = _copy_calls(simulator)
    view.copy_from(StridedMemoryView(host), stream.ptr)
    assert _copy_calls(simulator, before) == {name: expected.get(name, 0) for name in COPY_CALLS}
    stream.synchronize()
    assert np.array_equal(contents(device), host)


@pytest.mark.simgpu
def test_transpose_copies_element_columns(gpu, simulator):
    """A transposing copy is one 2-D copy of one-element-wide rows per outer index."""
    stream = gpu.stream()
    host = _host((3, 4))
    device = device_array(gpu, (4, 3), host.dtype)
    before = _copy_calls(simulator)
    StridedMemoryView(device, stream_ptr=stream.ptr).copy_from(StridedMemoryView(host.T), stream.ptr)
    assert _copy_calls(simulator, before) == {"cuMemcpyAsync": 0, "cuMemcpy2DAsync_v2": 4, "cuMemcpy3DAsync_v2": 0}
    stream.synchronize()
    assert np.array_equal(contents(device), host.T)


# --- streams -------------------------------------------------------------------------------


def test_device_copy_needs_a_stream(gpu):
    """A copy touching device memory refuses stream None or -1 (ValueError), writing nothing."""
    device = device_array(gpu, (4,), np.float32)
    view = StridedMemoryView(device, stream_ptr=-1)
    for stream in (None, -1):
        with pytest.raises(ValueError, match="copy: a copy touching device memory needs a stream"):
            view.copy_from(StridedMemoryView(np.ones(4, np.float32)), stream)
    assert (device.memory.download() == 0xEE).all()


@pytest.mark.simgpu
def test_device_to_device_is_ordered_after_both_ready_streams(gpu, simulator):
    """A device copy on stream C waits for the source's producer stream A (its slow write is
    copied) and for the destination's stream B (B's pending read of the old contents is not
    overwritten first)."""
    from driver_support import drv, ok

    stream_a, stream_b, stream_c = gpu.stream(), gpu.stream(), gpu.stream()
    n = 1024
    src = device_array(gpu, (n,), np.uint8, stream=stream_a.ptr)
    dst = device_array(gpu, (n,), np.uint8, stream=stream_b.ptr)
    seen_by_b = gpu.pinned(n)
    src_view = StridedMemoryView(src, stream_ptr=-1)
    dst_view = StridedMemoryView(dst, stream_ptr=-1)
    assert (src_view.ready_stream, dst_view.ready_stream) == (stream_a.ptr, stream_b.ptr)
    simulator.set_delay_us(2000)
    for _ in range(3):  # A's write lands late
        ok(drv.cuMemsetD8Async(src.ptr, 0x11, n, stream_a.handle))
    ok(drv.cuMemsetD8Async(src.ptr, 0x5A, n, stream_a.handle))
    for _ in range(3):  # B still reads the destination's old contents late
        ok(drv.cuMemsetD8Async(src.memory.ptr, 0x5A, 0, stream_b.handle))
    ok(drv.cuMemcpyDtoHAsync(seen_by_b.ptr, dst.ptr, n, stream_b.handle))
    syncs = simulator.calls("cuStreamSynchronize")
    dst_view.copy_from(src_view, stream_c.ptr)
    assert simulator.calls("cuStreamSynchronize") == syncs  # never blocks unless asked
    stream_c.synchronize()
    simulator.set_delay_us(0)
    assert (contents(dst) == 0x5A).all()
    stream_b.synchronize()
    assert (seen_by_b.array() == 0xEE).all()


@pytest.mark.simgpu
def test_blocking_true_waits_for_the_copy(gpu, simulator):
    """blocking=True returns once the copy is done (one cuStreamSynchronize, the only blocking
    call); without it the pinned destination is written later."""
    stream = gpu.stream()
    device = device_array(gpu, (256,), np.uint8)
    device.memory.upload(np.arange(256, dtype=np.uint8))
    out = gpu.pinned(256)
    view = StridedMemoryView(device, stream_ptr=stream.ptr)
    simulator.set_delay_us(50_000)
    syncs = simulator.calls("cuStreamSynchronize")
    view.copy_to(StridedMemoryView(out.array()), stream.ptr)
    assert simulator.calls("cuStreamSynchronize") == syncs
    assert not out.array().any()  # still queued behind the delay
    stream.synchronize()
    out.array()[:] = 0
    simulator.set_delay_us(20_000)
    view.copy_to(StridedMemoryView(out.array()), stream.ptr, blocking=True)
    assert simulator.calls("cuStreamSynchronize") == syncs + 2  # the test's own, and the copy's
    assert out.array().tolist() == list(range(256))


def test_device_to_device_across_devices_refused(gpu, two_gpus):
    """Views on two different devices are refused (ValueError) before any copy."""
    stream = gpu.stream()
    a = device_array(gpu, (4,), np.float32, device=0)
    b = device_array(gpu, (4,), np.float32, device=1)
    b.memory.upload(np.ones(4, np.float32))
    with pytest.raises(ValueError, match="copy: the views are on devices 0 and 1"):
        StridedMemoryView(a, stream_ptr=-1).copy_from(StridedMemoryView(b, stream_ptr=-1), stream.ptr)
    assert (a.memory.download() == 0xEE).all()


def test_no_current_context_pushes_the_primary(gpu, two_gpus):
    """In a thread with no current context, a copy into device 1's memory runs inside device 1's
    primary context (pushed, popped: the thread still has none afterwards)."""
    from driver_support import current_context

    stream = gpu.stream(device=1)
    device = device_array(gpu, (4,), np.float32, device=1)
    view = StridedMemoryView(device, stream_ptr=-1)
    outcome = {}

    def run():
        try:
            outcome["before"] = current_context()
            view.copy_from(StridedMemoryView(np.arange(4, dtype=np.float32)), stream.ptr)
            outcome["after"] = current_context()
        except BaseException as exc:  # noqa: BLE001 - reported below
            outcome["error"] = exc

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert "error" not in outcome, outcome.get("error")
    assert outcome == {"before": 0, "after": 0}
    stream.synchronize()
    assert contents(device).tolist() == [0, 1, 2, 3]


# --- real producers' memory -----------------------------------------------------------------


def test_cuda_core_buffers_as_both_sides(gpu):
    """cuda.core device Buffers from its default pool, typed and strided through cuda.core's
    own StridedMemoryView.from_buffer, copied into and out of through stridedview."""
    Device = gpu_import("cuda.core").Device
    CoreView = gpu_import("cuda.core.utils").StridedMemoryView

    device = Device(0)
    device.set_current()
    core_stream = device.create_stream()
    try:
        host = _host((6, 10), np.float32, seed=9)
        buffer = device.allocate(6 * 20 * 4, stream=core_stream)  # rows of 20 floats
        strided = CoreView.from_buffer(buffer, (6, 5), (20, 2), dtype=np.dtype(np.float32))
        target = StridedMemoryView(strided, stream_ptr=int(core_stream.handle))
        assert (target.shape, target.strides, target.ptr) == ((6, 5), (20, 2), int(buffer.handle))
        source = host[:, ::2]
        target.copy_from(StridedMemoryView(source), int(core_stream.handle))
        out = np.zeros((5, 6), np.float32).T
        target.copy_to(StridedMemoryView(out), int(core_stream.handle), blocking=True)
        assert np.array_equal(out, source)
        buffer.close(core_stream)
    finally:
        core_stream.sync()
        core_stream.close()


def test_numba_arrays_as_both_sides(gpu):
    """A numba-cuda device array (its CAI naming its stream) copied from a strided host array and
    into another numba array through stridedview; numba reads back the same values."""
    numba_cuda = gpu_import("numba.cuda")
    stream = numba_cuda.stream()
    handle = int(stream.handle)
    host = _host((8, 6), np.float64, seed=2)
    src = numba_cuda.device_array((6, 8), np.float64, stream=stream)
    dst = numba_cuda.device_array((8, 6), np.float64, stream=stream)
    src_view = StridedMemoryView(src, stream_ptr=handle)
    src_view.copy_from(StridedMemoryView(host.T), handle)
    # numba's own .T launches a kernel (NVRTC); the view's transpose is a layout only.
    StridedMemoryView(dst, stream_ptr=handle).T.copy_from(src_view, handle)
    assert np.array_equal(dst.copy_to_host(stream=stream), host)
    assert np.array_equal(src.copy_to_host(stream=stream), host.T)


def test_device_view_refuses_buffer(gpu):
    """memoryview and numpy refuse a view of device memory with the reason (they would read it
    on the host, which crashes on the simulated device as on a GPU)."""
    view = StridedMemoryView(device_array(gpu, (4,), np.float64), stream_ptr=-1)
    with pytest.raises(BufferError, match="buffer: the view holds CUDA device memory"):
        memoryview(view)
    with pytest.raises(BufferError, match="array interface: the view holds CUDA device memory"):
        np.asarray(view)


@pytest.mark.parametrize("pair", list(itertools.product(["device", "pinned", "managed"], repeat=2)))
def test_every_memory_kind_pair(gpu, pair):
    """Each pair of device, pinned and managed memory copies a strided layout byte-exact."""
    from producers import make_producer

    host = _host((4, 6), np.int32, seed=7)
    views = []
    for kind in pair:
        if kind == "device":
            array = device_array(gpu, (4, 6), np.int32, strides=(1, 4))  # column-major
            views.append((StridedMemoryView(array, stream_ptr=-1), lambda a=array: contents(a)))
        else:
            memory = gpu.pinned(host.nbytes) if kind == "pinned" else gpu.managed(host.nbytes)
            producer = make_producer(shape=(4, 6), dtype="int32", data=memory.ptr,
                                     device=(3 if kind == "pinned" else 13, 0))
            views.append((StridedMemoryView(producer, stream_ptr=-1),
                          lambda m=memory: m.array(np.int32, (4, 6)).copy()))
    stream = gpu.stream()
    (first, read_first), (second, read_second) = views
    first.copy_from(StridedMemoryView(host), stream.ptr)
    second.copy_from(first, stream.ptr, blocking=True)
    assert np.array_equal(read_first(), host) and np.array_equal(read_second(), host)
