"""Stream ordering on a real GPU: a producer kernel on stream A, a consumer kernel on stream B.

The producer enqueues a kernel that spins about 0.1 s and then writes; the view is made
with ``stream_ptr=B`` (or -1); a consumer kernel on B then reads the memory at
``view.ptr`` directly (tests/gpu_kernels.py), so nothing but the view orders the two.
With B, every write must be seen.  With -1 nothing is ordered, and the read must see
the race: that shows that the test can fail, and that -1 indeed orders nothing.

Run on a machine with a GPU and the ``gpu`` extra; there a missing library fails the
test (``conftest.gpu_import``).  Without a GPU every test here skips with the reason
"needs a CUDA GPU and driver".
"""

from __future__ import annotations

import numpy as np
import pytest

from conftest import TWO_GPUS_SKIP_REASON, gpu_import
from stridedview import StridedMemoryView, _driver

pytestmark = pytest.mark.gpu

N = 1 << 20
VALUE = 7.0


@pytest.fixture(autouse=True)
def real_driver():
    """The real CUDA driver behind the seam, whatever an earlier test installed."""
    _driver.use_api(None)
    yield
    _driver.use_api(None)


def _device_count(cp) -> int:
    return cp.cuda.runtime.getDeviceCount()


def _cupy_filled_on_a(cp, kernels, device):
    """A CuPy array of zeros on ``device`` and a new stream A on which a slow kernel fills it."""
    with cp.cuda.Device(device):
        stream_a = cp.cuda.Stream(non_blocking=True)
        with stream_a:
            x = cp.zeros(N, dtype=cp.float32)
        stream_a.synchronize()
        kernels.slow_fill(cp, x.data.ptr, N, VALUE, stream_a, x)
    return x, stream_a


def _produce_cupy_dlpack(cp, kernels, device):
    """CuPy array written on its current stream A; viewed through DLPack while A is current."""
    x, stream_a = _cupy_filled_on_a(cp, kernels, device)

    def view(stream_ptr):
        with cp.cuda.Device(device), stream_a:  # CuPy orders its current stream (A) before ours
            return StridedMemoryView.from_dlpack(x, stream_ptr=stream_ptr), stream_a

    return x, view


def _produce_tagged_cai(cp, kernels, device):
    """CuPy memory written on stream A, handed over by a CAI producer whose 'stream' is A."""
    x, stream_a = _cupy_filled_on_a(cp, kernels, device)
    producer = kernels.TaggedCAI(x, stream_a.ptr)

    def view(stream_ptr):  # made with device 0 current, whatever the array's device
        return StridedMemoryView.from_cuda_array_interface(producer, stream_ptr=stream_ptr), stream_a

    return x, view


def _produce_numba_cai(cp, kernels, device):
    """Numba array tied to Numba stream A, written by a kernel on A; its own CAI names A."""
    numba_cuda = gpu_import("numba.cuda")
    with numba_cuda.gpus[device]:
        stream_a = numba_cuda.stream()
        x = numba_cuda.to_device(np.zeros(N, dtype=np.float32), stream=stream_a)
        stream_a.synchronize()
    handle = stream_a.handle
    handle = int(handle.value if hasattr(handle, "value") else handle)
    with cp.cuda.Device(device):
        kernels.slow_fill(cp, x.__cuda_array_interface__["data"][0], N, VALUE,
                          cp.cuda.ExternalStream(handle), x)

    def view(stream_ptr):
        return StridedMemoryView.from_cuda_array_interface(x, stream_ptr=stream_ptr), stream_a

    return x, view


def _produce_torch_default_stream(cp, kernels, device):
    """torch tensor written on its device's default stream; viewed (DLPack) with device 0 current."""
    torch = gpu_import("torch")
    if not torch.cuda.is_available():
        pytest.fail("this machine has a CUDA GPU but torch has no CUDA: install torch with CUDA")
    with torch.cuda.device(device):
        t = torch.zeros(N, device=f"cuda:{device}")
        torch.cuda.synchronize()
        torch.cuda._sleep(kernels.SPIN_CYCLES)
        t.fill_(VALUE)

    def view(stream_ptr):
        return StridedMemoryView(t, stream_ptr=stream_ptr), torch.cuda.default_stream(device)

    return t, view


PRODUCERS = {
    "cupy-dlpack": _produce_cupy_dlpack,
    "cai-stream": _produce_tagged_cai,
    "numba-cai": _produce_numba_cai,
    "torch-dlpack": _produce_torch_default_stream,
}


def _consumer_stream(cp, device):
    with cp.cuda.Device(device):
        return cp.cuda.Stream(non_blocking=True)


def _race(name, device, ordered):
    """Produce on A, view with B (or -1), read on B; return (values read, the view)."""
    cp = gpu_import("cupy")
    import gpu_kernels as kernels

    if device >= _device_count(cp):
        pytest.skip(TWO_GPUS_SKIP_REASON)
    keep, make_view = PRODUCERS[name](cp, kernels, device)
    stream_b = _consumer_stream(cp, device)
    view, stream_a = make_view(stream_b.ptr if ordered else -1)
    with cp.cuda.Device(device):
        values = kernels.read_on(cp, view, stream_b)
    stream_a.synchronize()
    del keep
    return values, view


@pytest.mark.parametrize("device", [0, 1], ids=["one-device", "second-device"])
@pytest.mark.parametrize("name", list(PRODUCERS))
def test_gpu_view_on_b_orders_the_producer_before_b(name, device):
    """With stream_ptr=B, a kernel on B reads every value the producer's slow kernel on A wrote."""
    values, view = _race(name, device, ordered=True)
    assert view.device_id == device
    assert (values == VALUE).all(), f"{np.count_nonzero(values != VALUE)} of {N} values not yet written"


@pytest.mark.parametrize("device", [0, 1], ids=["one-device", "second-device"])
@pytest.mark.parametrize("name", list(PRODUCERS))
def test_gpu_view_with_minus_one_orders_nothing(name, device):
    """With stream_ptr=-1 nothing is ordered: a kernel on B races the producer and sees unwritten values."""
    values, view = _race(name, device, ordered=False)
    assert view.device_id == device
    assert (values != VALUE).any(), "no race seen: the ordered test above would prove nothing"
