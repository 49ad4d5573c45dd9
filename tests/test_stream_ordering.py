"""Stream ordering of CUDA Array Interface views without a GPU: when nothing is ordered (no
driver call at all), ``ready_stream``, and what an ordering does with a fake driver installed.

Every ordering is made by the driver door (src/stridedview/_driver_door.h), which calls the
libcuda.so.1 that cuda-bindings loaded, so the orderings themselves run on the simulated
device: the exact call sequences of docs/concepts.md ("Streams") and docs/threads.md
("Events"), events per thread and per context, the retry after a stale handle
(tests/test_gpu_stream_ordering.py); what the consumer sees, raced with real data
(tests/test_gpu_streams.py, tests/test_gpu_ordering.py); failures injected into the driver's
entry points (tests/test_gpu_driver_faults.py); the door's calls once warm
(tests/test_gpu_driver_door.py).  The last section runs real producers on a GPU (marked
``gpu``, skipped here by conftest).
"""

import numpy as np
import pytest

from conftest import gpu_import
from stridedview import CUDAError, StridedMemoryView
from stridedview import _driver
from test_cai import CAIProducer, CudaStream

PRODUCER, CONSUMER = 0x5000, 0x7000


# --- when nothing is ordered -------------------------------------------------------

@pytest.mark.parametrize(
    "keys, stream_ptr",
    [
        ({"stream": PRODUCER}, -1),
        ({"stream": None}, CONSUMER),
        ({}, CONSUMER),
        ({"version": 2, "stream": PRODUCER}, CONSUMER),
        ({"version": 1, "stream": PRODUCER}, CONSUMER),
        ({"version": 0, "stream": PRODUCER}, CONSUMER),
        ({"stream": PRODUCER}, PRODUCER),
    ],
    ids=["opt-out", "stream-none", "stream-absent", "v2", "v1", "v0", "same"],
)
def test_no_calls_when_nothing_to_order(forbidden_driver, keys, stream_ptr):
    """No driver call at all (not even cuInit) for -1, no producer stream, v0-v2 dicts, or the same ordinary stream."""
    view = StridedMemoryView(CAIProducer(**keys), stream_ptr=stream_ptr)
    assert forbidden_driver.used == []
    assert view.shape == (2, 3)


def test_no_calls_with_cuda_stream_object_naming_the_same_stream(forbidden_driver):
    """A __cuda_stream__ object naming the producer's own stream orders nothing."""
    view = StridedMemoryView(CAIProducer(stream=PRODUCER), stream_ptr=CudaStream(PRODUCER))
    assert forbidden_driver.used == []
    assert view.ready_stream == PRODUCER


# --- ready_stream ----------------------------------------------------------------------

def test_ready_stream(forbidden_driver):
    """ready_stream, where nothing is ordered: the producer's stream for -1, None when neither
    has one, the consumer's when the producer names none.  (After an ordering it is the
    consumer's: test_gpu_stream_ordering.py's test_ready_stream.)"""
    assert StridedMemoryView(CAIProducer(stream=PRODUCER), stream_ptr=-1).ready_stream == PRODUCER
    assert StridedMemoryView(CAIProducer(stream=None), stream_ptr=-1).ready_stream is None
    assert StridedMemoryView(CAIProducer(), stream_ptr=-1).ready_stream is None
    assert StridedMemoryView(CAIProducer(stream=None), stream_ptr=CONSUMER).ready_stream == CONSUMER
    assert StridedMemoryView(CAIProducer(stream=PRODUCER, version=2), stream_ptr=-1).ready_stream is None
    assert forbidden_driver.used == []


# --- with a fake driver installed --------------------------------------------------------------

@pytest.mark.parametrize(
    "producer_stream, consumer_stream",
    [(PRODUCER, CONSUMER), (1, CONSUMER), (2, 2), (1, 0), (PRODUCER, 1)],
    ids=["ordinary", "legacy-producer", "per-thread-both", "legacy-vs-0", "legacy-consumer"],
)
def test_an_ordering_under_a_fake_driver_is_a_cuda_error(fake, producer_stream, consumer_stream):
    """With a fake driver installed (use_api), every ordering (default streams included: the
    driver decides what they name) raises CUDAError CUDA_ERROR_NO_DRIVER naming use_api and the
    way out, and the fake records, waits on and looks up nothing: the driver door orders
    streams only through the driver cuda-bindings loaded."""
    producer = CAIProducer(stream=producer_stream)
    fake.register_pointer(producer.ptr, producer.array.nbytes, device=0)
    with pytest.raises(CUDAError) as excinfo:
        StridedMemoryView(producer, stream_ptr=consumer_stream)
    assert excinfo.value.name == "CUDA_ERROR_NO_DRIVER"
    assert str(excinfo.value) == (
        "stream ordering and hand-overs go through the CUDA driver cuda-bindings loaded, and the "
        "driver in use (installed with stridedview._driver.use_api) is not it: "
        + _driver.NO_DRIVER_HINT
    )
    assert set(fake.names()) <= {"cuInit"}


# --- errors are reported as they happened -----------------------------------------------------

class RaisingDriver:
    """A driver whose cuPointerGetAttribute raises CUDAError itself (a wrapper or hook would)."""

    def __init__(self, fake):
        self._fake = fake

    def __getattr__(self, name):
        return getattr(self._fake, name)

    def cuPointerGetAttribute(self, *args):
        raise CUDAError("cuPointerGetAttribute failed: CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_LAUNCH_FAILED")


def test_cuda_error_raised_inside_a_call_is_not_no_driver(fake):
    """A CUDAError (a RuntimeError) raised inside a driver call (here the pointer's device, which
    a CAI view's device_id asks) propagates as it is, not as CUDA_ERROR_NO_DRIVER."""
    _driver.use_api(RaisingDriver(fake))
    view = StridedMemoryView(CAIProducer(stream=PRODUCER), stream_ptr=-1)
    with pytest.raises(CUDAError) as excinfo:
        view.device_id
    assert excinfo.value.name == "CUDA_ERROR_LAUNCH_FAILED"
    assert "could not be used" not in str(excinfo.value)


# --- real producers and kernels on a real GPU (skipped without one, and on the simulated device) --

SPIN_CYCLES = 200_000_000  # about 0.1 s on current GPUs: long enough for a race to show


@pytest.mark.gpu
@pytest.mark.real_gpu
def test_gpu_cupy_cross_stream_race_prevented():
    """CuPy: a long kernel writes on stream A; a view with stream B makes a read on B see every write."""
    cp = gpu_import("cupy")
    _driver.use_api(None)
    kernel = cp.RawKernel(
        r"""
        extern "C" __global__ void slow_fill(float* x, long long n, long long cycles, float value) {
            long long start = clock64();
            while (clock64() - start < cycles) { }
            for (long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
                x[i] = value;
        }
        """,
        "slow_fill",
    )
    n = 1 << 20
    stream_a = cp.cuda.Stream(non_blocking=True)
    stream_b = cp.cuda.Stream(non_blocking=True)
    with stream_a:
        x = cp.zeros(n, dtype=cp.float32)
        stream_a.synchronize()
        kernel((64,), (256,), (x, cp.int64(n), cp.int64(SPIN_CYCLES), cp.float32(7)))
        view = StridedMemoryView.from_cuda_array_interface(x, stream_ptr=stream_b.ptr)
        assert x.__cuda_array_interface__["stream"] == stream_a.ptr
    assert view.ready_stream == stream_b.ptr
    assert view.ptr == x.data.ptr
    with stream_b:
        total = float(x.sum())
    stream_b.synchronize()
    assert total == 7.0 * n


@pytest.mark.gpu
@pytest.mark.real_gpu
def test_gpu_numba_cross_stream_race_prevented():
    """Numba: a long kernel writes on stream A; a view with stream B makes a kernel on B see every write."""
    numba_cuda = gpu_import("numba.cuda")

    def handle(stream):
        raw = stream.handle
        return int(raw.value if hasattr(raw, "value") else raw)

    @numba_cuda.jit
    def slow_fill(x, spins, value):
        i = numba_cuda.grid(1)
        for _ in range(spins):
            numba_cuda.nanosleep(1000)
        if i < x.size:
            x[i] = value

    @numba_cuda.jit
    def copy(src, dst):
        i = numba_cuda.grid(1)
        if i < src.size:
            dst[i] = src[i]

    _driver.use_api(None)
    n = 1 << 16
    stream_a, stream_b = numba_cuda.stream(), numba_cuda.stream()
    x = numba_cuda.to_device(np.zeros(n, dtype=np.float32), stream=stream_a)
    y = numba_cuda.device_array(n, dtype=np.float32, stream=stream_b)
    stream_a.synchronize()
    slow_fill[n // 256, 256, stream_a](x, 100_000, np.float32(3))
    view = StridedMemoryView.from_cuda_array_interface(x, stream_ptr=handle(stream_b))
    assert x.__cuda_array_interface__["stream"] == handle(stream_a)
    assert view.ready_stream == handle(stream_b)
    copy[n // 256, 256, stream_b](x, y)
    result = y.copy_to_host(stream=stream_b)
    stream_b.synchronize()
    assert (result == 3).all()


@pytest.mark.gpu
@pytest.mark.real_gpu
def test_gpu_torch_cuda_views_and_race_prevented():
    """PyTorch: a CUDA tensor is viewed through DLPack (preferred) with its stream ordering, and through its v2 CAI."""
    torch = gpu_import("torch")
    if not torch.cuda.is_available():
        pytest.fail("this machine has a CUDA GPU but torch has no CUDA: install torch with CUDA")
    _driver.use_api(None)
    stream_a, stream_b = torch.cuda.Stream(), torch.cuda.Stream()
    n = 1 << 20
    with torch.cuda.stream(stream_a):
        t = torch.zeros(n, device="cuda")
        torch.cuda._sleep(SPIN_CYCLES)
        t.fill_(5.0)
        view = StridedMemoryView(t, stream_ptr=stream_b.cuda_stream)
    assert view.ptr == t.data_ptr()
    with torch.cuda.stream(stream_b):
        total = t.sum().item()
    assert total == 5.0 * n
    cai = StridedMemoryView.from_cuda_array_interface(t[::2], stream_ptr=stream_b.cuda_stream)
    assert t.__cuda_array_interface__["version"] == 2
    assert (cai.ptr, cai.shape, cai.strides) == (t.data_ptr(), (n // 2,), (2,))
    assert cai.dtype == np.dtype("float32")
    assert cai.ready_stream == stream_b.cuda_stream
    bf16 = torch.zeros((2, 3), dtype=torch.bfloat16, device="cuda")
    assert StridedMemoryView.from_cuda_array_interface(bf16, stream_ptr=-1).dtype == np.dtype("V2")


@pytest.mark.gpu
@pytest.mark.real_gpu
def test_gpu_device_id_of_real_pointer():
    """device_id of a real CuPy allocation is its device, asked of the real driver."""
    cp = gpu_import("cupy")
    _driver.use_api(None)
    x = cp.zeros(4)
    view = StridedMemoryView.from_cuda_array_interface(x, stream_ptr=-1)
    assert view.device_id == x.device.id
