"""copy_from and copy_to on the host: any layout to any layout without a driver, every dtype
bit for bit, and every refusal before anything is written.

The device paths (the driver's 1-D, 2-D and 3-D copies, streams, pinned and managed memory)
are in tests/test_gpu_copy.py, through the real driver on the simulated device or a GPU.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from stridedview import StridedMemoryView

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


def test_copy_from_and_copy_to_agree_on_the_stream(forbidden_driver):
    """copy_from, like copy_to, may leave the stream out (None): a host to host copy needs none,
    and both take it by position or by keyword alike."""
    import inspect

    for method in (StridedMemoryView.copy_from, StridedMemoryView.copy_to):
        assert inspect.signature(method).parameters["stream"].default is None
    src = np.arange(6.0).reshape(2, 3)
    for copy in (
        lambda dst: StridedMemoryView(dst).copy_from(StridedMemoryView(src)),
        lambda dst: StridedMemoryView(dst).copy_from(StridedMemoryView(src), stream=None),
        lambda dst: StridedMemoryView(src).copy_to(StridedMemoryView(dst)),
    ):
        dst = np.zeros((3, 2)).T
        copy(dst)
        assert np.array_equal(dst, src)


class _DeviceBuffer:
    """What from_buffer reads of a cuda.core Buffer: 16 bytes of device memory (never touched)."""

    handle, size, device_id = 0x10000, 16, 0
    is_device_accessible, is_host_accessible, is_managed = True, False, False


def test_a_device_copy_still_needs_its_stream(forbidden_driver):
    """Left out, the stream is None, which a copy touching device memory refuses (ValueError)."""
    device = StridedMemoryView.from_buffer(_DeviceBuffer(), (4,), dtype=np.float32)
    with pytest.raises(ValueError, match=r"^copy: a copy touching device memory needs a stream \(got None\)"):
        device.copy_from(StridedMemoryView(np.zeros(4, np.float32)))
