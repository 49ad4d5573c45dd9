"""copy_from/copy_to and the buffer refusal on a real GPU (CuPy arrays as device memory).

Each layout pair is copied host -> device -> host and compared; a device-to-device copy is
made on a stream other than the producer's and must see the producer's slow write.
Without a GPU every test here skips with the reason "needs a CUDA GPU and driver".
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import gpu_import
from stridedview import StridedMemoryView, _driver

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def real_driver():
    """The real CUDA driver behind the seam, whatever an earlier test installed."""
    _driver.use_api(None)
    yield
    _driver.use_api(None)


LAYOUTS = [np.s_[...], np.s_[::2], np.s_[:, ::-1], np.s_[1:, 2:7], np.s_[::-1, ::3, 1:]]


@pytest.mark.parametrize("src_index", LAYOUTS)
@pytest.mark.parametrize("transpose", [False, True])
def test_gpu_round_trip_every_layout(src_index, transpose):
    """Host (strided) -> device (C or transposed) -> host gives back the values exactly."""
    cp = gpu_import("cupy")
    host = np.random.default_rng(1).standard_normal((6, 9, 8)).astype(np.float32)[src_index]
    stream = cp.cuda.Stream(non_blocking=True)
    device = cp.zeros(host.shape[::-1] if transpose else host.shape, dtype=cp.float32)
    target = device.T if transpose else device
    dview = StridedMemoryView(target, stream_ptr=stream.ptr)
    dview.copy_from(StridedMemoryView(host), stream.ptr)
    out = np.zeros(host.shape, np.float32)
    dview.copy_to(StridedMemoryView(out), stream.ptr, blocking=True)
    assert np.array_equal(out, host)
    stream.synchronize()
    assert np.array_equal(cp.asnumpy(target), host)


def test_gpu_device_to_device_after_producer():
    """A device copy on stream B sees a slow producer write on stream A (ordered by the view)."""
    cp = gpu_import("cupy")
    import gpu_kernels

    n = 1 << 20
    stream_a = cp.cuda.Stream(non_blocking=True)
    stream_b = cp.cuda.Stream(non_blocking=True)
    with stream_a:
        src = cp.zeros(n, dtype=cp.float32)
    stream_a.synchronize()
    gpu_kernels.slow_fill(cp, src.data.ptr, n, 7.0, stream_a, src)
    with stream_a:  # CuPy orders its current stream (A) before the consumer's
        src_view = StridedMemoryView(src, stream_ptr=stream_b.ptr)
    dst = cp.zeros(n, dtype=cp.float32)
    StridedMemoryView(dst, stream_ptr=stream_b.ptr).copy_from(src_view, stream_b.ptr)
    stream_b.synchronize()
    assert float(dst.min()) == 7.0


def test_gpu_device_view_refuses_buffer():
    """memoryview and numpy refuse a view of device memory with the reason."""
    cp = gpu_import("cupy")
    view = StridedMemoryView(cp.zeros(4), stream_ptr=-1)
    with pytest.raises(BufferError, match="buffer: the view holds CUDA device memory"):
        memoryview(view)
    with pytest.raises(BufferError, match="array interface: the view holds CUDA device memory"):
        np.asarray(view)
