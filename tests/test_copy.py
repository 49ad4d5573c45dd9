"""copy_from and copy_to: any layout to any layout, host to host without a driver, device
paths through the fake driver (which really moves the bytes, so every value is checked).
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stridedview import StridedMemoryView


class DeviceArray:
    """Fake device memory of the fake driver, offered through the CUDA Array Interface."""

    def __init__(self, fake, shape, dtype, *, strides=None, stream=None, readonly=False, device=0):
        dtype = np.dtype(dtype)
        self.shape = tuple(shape)
        items = max(int(np.prod(shape)), 1)
        if strides is not None:  # in elements; memory enough for the span
            items = 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides))
        self.ptr = fake.allocate(items * dtype.itemsize, device)
        self.fake, self.dtype, self.strides = fake, dtype, strides
        self.__cuda_array_interface__ = {
            "version": 3, "shape": self.shape, "typestr": dtype.str,
            "data": (self.ptr, readonly),
            "strides": None if strides is None else tuple(s * dtype.itemsize for s in strides),
            "stream": stream,
        }

    def contents(self):
        """The elements, read back from fake device memory (C order layout assumed)."""
        raw = self.fake.device_bytes(self.ptr, int(np.prod(self.shape)) * self.dtype.itemsize)
        return np.frombuffer(raw, self.dtype).reshape(self.shape)


def device_view(fake, array_like, stream):
    return StridedMemoryView(array_like, stream_ptr=stream)


LAYOUTS = [
    np.s_[...], np.s_[::2], np.s_[:, ::-1], np.s_[::-1, 1:], np.s_[:, :, ::3], np.s_[1::2, ::-1, ::2],
]


def _host(shape, dtype=np.float32, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 1000, size=shape).astype(dtype)


def test_host_to_host_any_layout_without_driver(forbidden_driver):
    """Host to host copies every layout pair exactly, with stream=None and no driver call."""
    base = _host((6, 5, 7), np.float64)
    for src_index, dst_index in itertools.product(LAYOUTS, repeat=2):
        src = base[src_index]
        target = np.zeros((9, 9, 9))
        dst = target.transpose(2, 0, 1)[tuple(slice(0, n) for n in src.shape)]
        StridedMemoryView(dst).copy_from(StridedMemoryView(src), None)
        assert np.array_equal(dst, src)
        back = np.zeros(src.shape)
        StridedMemoryView(src).copy_to(StridedMemoryView(back))
        assert np.array_equal(back, src)


def test_host_copy_is_bit_exact_for_every_dtype():
    """NaN payloads, bfloat16 and float8 bits and structured records are copied bit for bit."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    nan = np.array([0x7FF8DEADBEEF0001], np.uint64).view(np.float64)
    src = StridedMemoryView(np.concatenate([nan, nan])[::-1])
    out = np.zeros(2)
    StridedMemoryView(out).copy_from(src, None)
    assert out.view(np.uint64).tolist() == [0x7FF8DEADBEEF0001] * 2
    for dtype in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, np.dtype("V3"),
                  np.dtype([("a", "i1"), ("b", "<f8")])):
        raw = bytearray(range(48))
        size = np.dtype(dtype).itemsize
        src = StridedMemoryView.from_buffer(raw, (48 // size,), dtype=dtype)
        dst_bytes = bytearray(48)
        StridedMemoryView.from_buffer(dst_bytes, (48 // size,), dtype=dtype).copy_from(src, None)
        used = 48 // size * size
        assert dst_bytes[:used] == raw[:used] and not any(dst_bytes[used:])


def test_refusals_before_anything_is_written():
    """Read-only destination, shape or dtype mismatch and overlap are refused, nothing written."""
    src = np.arange(6.0)
    dst = np.full(6, -1.0)
    readonly = np.full(6, -1.0)
    readonly.setflags(write=False)
    with pytest.raises(BufferError, match="copy: the destination view is read-only"):
        StridedMemoryView(readonly).copy_from(StridedMemoryView(src), None)
    with pytest.raises(ValueError, match=r"copy: shapes differ \(destination \(5,\), source \(6,\)\)"):
        StridedMemoryView(dst[:5]).copy_from(StridedMemoryView(src), None)
    with pytest.raises(ValueError, match="copy: dtypes differ"):
        StridedMemoryView(dst.view(np.int64)).copy_from(StridedMemoryView(src), None)
    with pytest.raises(ValueError, match="copy: the source and destination overlap"):
        StridedMemoryView(src[1:]).copy_from(StridedMemoryView(src[:-1]), None)
    with pytest.raises(ValueError, match="copy: the source and destination overlap"):
        StridedMemoryView(src[::2]).copy_from(StridedMemoryView(src[1::2]), None)  # interleaved
    with pytest.raises(ValueError, match="copy: the destination's elements overlap"):
        StridedMemoryView.from_buffer(dst, (3,), (0,), dtype=np.float64).copy_from(
            StridedMemoryView(src[:3]), None)
    with pytest.raises(TypeError, match="copy: the source must be a StridedMemoryView"):
        StridedMemoryView(dst).copy_from(src, None)
    assert (dst == -1).all() and (readonly == -1).all() and src.tolist() == list(range(6))


def test_device_copy_needs_a_stream(fake):
    """A copy touching device memory refuses stream None or -1 (ValueError), writing nothing."""
    device = DeviceArray(fake, (4,), np.float32)
    view = StridedMemoryView(device, stream_ptr=-1)
    for stream in (None, -1):
        with pytest.raises(ValueError, match="copy: a copy touching device memory needs a stream"):
            view.copy_from(StridedMemoryView(np.ones(4, np.float32)), stream)
    assert not fake.copies


def test_contiguous_is_one_memcpy(fake):
    """Contiguous host to device is one cuMemcpyAsync of every byte, on the given stream."""
    stream = fake.new_stream()
    host = _host((3, 4, 5))
    device = DeviceArray(fake, host.shape, host.dtype)
    view = StridedMemoryView(device, stream_ptr=stream)
    fake.clear_calls()
    view.copy_from(StridedMemoryView(host), stream)
    copies = [c for c in fake.calls if c[0].startswith("cuMemcpy")]
    assert copies == [("cuMemcpyAsync", (device.ptr, host.ctypes.data, host.nbytes, stream))]
    assert np.array_equal(device.contents(), host)


def test_pitched_rows_are_one_2d_copy(fake):
    """Rows with a pitch on either side are one cuMemcpy2DAsync with the pitches and width."""
    stream = fake.new_stream()
    host = _host((6, 10))[:, 2:7]  # 5 of 10 floats per row: pitch 40 bytes, width 20
    device = DeviceArray(fake, host.shape, host.dtype)
    StridedMemoryView(device, stream_ptr=stream).copy_from(StridedMemoryView(host), stream)
    (name, _, _, (params,)), = fake.copies
    assert name == "cuMemcpy2DAsync"
    assert (params["srcPitch"], params["dstPitch"], params["WidthInBytes"], params["Height"]) == (40, 20, 20, 6)
    assert params["srcMemoryType"] == 1 and params["srcHost"] == host.ctypes.data
    assert params["dstMemoryType"] == 2 and params["dstDevice"] == device.ptr
    assert np.array_equal(device.contents(), host)


def test_two_pitched_axes_are_one_3d_copy(fake):
    """A sub-block of a 3-d array is one cuMemcpy3DAsync (heights from the outer strides)."""
    stream = fake.new_stream()
    host = _host((4, 6, 8))[1:3, 1:5, 2:6]
    device = DeviceArray(fake, host.shape, host.dtype)
    StridedMemoryView(device, stream_ptr=stream).copy_from(StridedMemoryView(host), stream)
    (name, _, _, (params,)), = fake.copies
    assert name == "cuMemcpy3DAsync"
    assert (params["WidthInBytes"], params["Height"], params["Depth"]) == (16, 4, 2)
    assert (params["srcPitch"], params["srcHeight"]) == (32, 6)
    assert (params["dstPitch"], params["dstHeight"]) == (16, 4)
    assert np.array_equal(device.contents(), host)


def test_transpose_copies_element_columns(fake):
    """A transposing copy is one 2-D copy of one-element-wide rows per outer index."""
    stream = fake.new_stream()
    host = _host((3, 4))
    device = DeviceArray(fake, (4, 3), host.dtype)
    StridedMemoryView(device, stream_ptr=stream).copy_from(StridedMemoryView(host.T), stream)
    assert [c[0] for c in fake.copies] == ["cuMemcpy2DAsync"] * 4
    assert all(c[3][0]["WidthInBytes"] == 4 for c in fake.copies)
    assert np.array_equal(device.contents(), host.T)


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    data=st.data(),
)
def test_any_layout_round_trip(shape, data):
    """Host -> device (any source layout) -> host (any destination layout) gives back the values."""
    from fake_driver import FakeDriver
    from stridedview import _driver

    fake = FakeDriver()
    _driver.use_api(fake)
    try:
        stream = fake.new_stream()
        ndim = len(shape)
        steps = [data.draw(st.sampled_from([1, 2, -1, -2])) for _ in range(ndim)]
        order = data.draw(st.permutations(range(ndim)))
        big = _host(tuple(n * abs(s) + 1 for n, s in zip(shape, steps)), np.int16, seed=len(shape))
        src = big[tuple(slice(None, None, s) for s in steps)][tuple(slice(0, n) for n in shape)]
        device = DeviceArray(fake, shape, np.int16)
        StridedMemoryView(device, stream_ptr=stream).copy_from(StridedMemoryView(src), stream)
        assert np.array_equal(device.contents(), src)
        out_base = np.zeros(tuple(shape[i] * 2 for i in order), np.int16)
        out = out_base[tuple(slice(None, None, 2) for _ in shape)].transpose(np.argsort(order))
        StridedMemoryView(device, stream_ptr=stream).copy_to(StridedMemoryView(out), stream)
        assert np.array_equal(out, src)
    finally:
        _driver.use_api(None)


def test_device_to_device_is_ordered_after_both_ready_streams(fake):
    """A device copy on stream C waits for both producers' streams (event waits) and sees their writes."""
    producer_a, producer_b, consumer = fake.new_stream(), fake.new_stream(), fake.new_stream()
    src = DeviceArray(fake, (8,), np.float32, stream=producer_a)
    dst = DeviceArray(fake, (8,), np.float32, stream=producer_b)
    fake.enqueue_write(producer_a, "src written")
    fake.enqueue_write(producer_b, "dst last read")
    src_view = StridedMemoryView(src, stream_ptr=-1)
    dst_view = StridedMemoryView(dst, stream_ptr=-1)
    assert src_view.ready_stream == producer_a
    fake.clear_calls()
    dst_view.copy_from(src_view, consumer)
    names = fake.names()
    assert names.index("cuMemcpyAsync") > max(i for i, n in enumerate(names) if n == "cuStreamWaitEvent")
    (_, stream_model, seen, args), = fake.copies
    assert stream_model is fake.stream(consumer)
    assert seen == {"src written", "dst last read"}
    assert args == (dst.ptr, src.ptr, 32)
    assert "cuStreamSynchronize" not in names  # never blocks unless asked


def test_blocking_true_synchronises_the_stream():
    """blocking=True ends with cuStreamSynchronize on the copy's stream (the only blocking call)."""
    from fake_driver import FakeDriver
    from stridedview import _driver

    fake = FakeDriver()
    _driver.use_api(fake)
    try:
        stream = fake.new_stream()
        device = DeviceArray(fake, (4,), np.float32)
        out = np.zeros(4, np.float32)
        StridedMemoryView(device, stream_ptr=stream).copy_to(StridedMemoryView(out), stream, blocking=True)
        assert fake.names()[-1] == "cuStreamSynchronize" and fake.calls[-1][1] == (stream,)
    finally:
        _driver.use_api(None)


def test_device_to_device_across_devices_refused(fake):
    """Views on two different devices are refused (ValueError) before any copy call."""
    stream = fake.new_stream()
    a = StridedMemoryView(DeviceArray(fake, (4,), np.float32, device=0), stream_ptr=-1)
    b = StridedMemoryView(DeviceArray(fake, (4,), np.float32, device=1), stream_ptr=-1)
    with pytest.raises(ValueError, match="copy: the views are on devices 0 and 1"):
        a.copy_from(b, stream)
    assert not fake.copies


def test_no_current_context_pushes_the_primary(fake):
    """With no context current, the copies run inside the device's primary context (pushed, popped)."""
    stream = fake.new_stream()
    device = DeviceArray(fake, (4,), np.float32, device=1)
    view = StridedMemoryView(device, stream_ptr=-1)
    fake.set_current(None)
    view.copy_from(StridedMemoryView(np.arange(4, dtype=np.float32)), stream)
    names = fake.names()
    assert names.index("cuCtxPushCurrent") < names.index("cuMemcpyAsync") < names.index("cuCtxPopCurrent")
    assert fake.context_depth() == 0
    assert device.contents().tolist() == [0, 1, 2, 3]
