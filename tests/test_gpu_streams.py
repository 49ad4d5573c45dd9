"""Stream ordering for real: a producer writes on stream A, a view is made with ``stream_ptr=B``,
and B copies the data back.

On the simulated device (tests/simgpu) every stream runs its work on a worker thread, and
``SIMGPU_DELAY_US`` (set here through the simulator's hook) makes each operation wait first:
the producer's write lands long after B's copy would have run, unless the view made B wait.
The copy goes to pinned host memory, which does not block the host (a pageable destination
would).  With B, every one of 1000 runs reads the new data, on one device, across two and from
eight threads; with ``stream_ptr=-1`` nothing is ordered and the same test reads stale data
(so it can fail).  Everything goes through the real cuda-bindings.

The last section runs real producers (CuPy, Numba kernels, torch) on a real GPU, where a slow
kernel plays the part of the delay (tests/gpu_kernels.py); those are marked ``real_gpu``.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from conftest import TWO_GPUS_SKIP_REASON, gpu_import
from stridedview import StridedMemoryView, _driver

pytestmark = pytest.mark.gpu

#: Each operation a simulated stream runs waits this long first.
DELAY_US = 100
#: Runs of each ordered race; every one must read the new data.
RUNS = 1000
#: Runs of the unordered control at most; one stale read ends it.
CONTROL_RUNS = 200
#: Bytes written and read back per run.
NBYTES = 4096
#: Operations the producer enqueues on A before its write: its write then lands about
#: (FILLERS + 1) * DELAY_US after the call, B's unordered copy about DELAY_US after its own.
FILLERS = 2


class Race:
    """One producer stream A writing NBYTES of device memory, one consumer stream B reading
    them back into pinned host memory; ``producer`` says how the memory is handed over."""

    def __init__(self, res, producer="cai", data_device=0, consumer_device=0, write="memset"):
        from driver_support import CAIArray

        self.write_kind = write
        self.memory = res.device(NBYTES, data_device)
        self.scratch = res.device(64, data_device)
        self.source = res.pinned(NBYTES, data_device)  # the producer's copy source
        self.out = res.pinned(NBYTES, consumer_device)
        self.stream_b = res.stream(consumer_device)
        self.producer_kind = producer
        if producer == "numba":
            numba_cuda = gpu_import("numba.cuda")
            with numba_cuda.gpus[data_device]:
                self.numba_stream = numba_cuda.stream()
                self.array = numba_cuda.device_array(NBYTES, dtype=np.uint8, stream=self.numba_stream)
            cai = self.array.__cuda_array_interface__
            self.memory_ptr = cai["data"][0]
            self.stream_a = int(cai["stream"])
        else:
            self.stream_a = res.stream(data_device).ptr
            self.memory_ptr = self.memory.ptr
            self.array = CAIArray(self.memory, (NBYTES,), np.uint8, stream=self.stream_a)
        self.data_device = data_device

    def produce(self, value: int) -> None:
        """A's work: FILLERS operations, then ``value`` written over the memory."""
        from driver_support import drv, ok

        for _ in range(FILLERS):
            ok(drv.cuMemsetD8Async(self.scratch.ptr, 0, 64, self.stream_a))
        if self.write_kind == "memset":
            ok(drv.cuMemsetD8Async(self.memory_ptr, value, NBYTES, self.stream_a))
        else:
            self.source.array()[:] = value
            ok(drv.cuMemcpyHtoDAsync(self.memory_ptr, self.source.ptr, NBYTES, self.stream_a))

    def view(self, stream_ptr):
        if self.producer_kind == "exchange":
            return exchange_view(self.memory_ptr, self.data_device, self.stream_a, stream_ptr)
        return StridedMemoryView(self.array, stream_ptr=stream_ptr)

    def run(self, value: int, ordered: bool) -> bool:
        """Produce ``value`` on A, view with B (or -1), copy on B; whether B read ``value``."""
        from driver_support import drv, ok

        self.produce(value)
        view = self.view(self.stream_b.ptr if ordered else -1)
        ok(drv.cuMemcpyDtoHAsync(self.out.ptr, view.ptr, NBYTES, self.stream_b.handle))
        self.stream_b.synchronize()
        return bool((self.out.array() == value).all())

    def finish(self) -> None:
        from driver_support import drv, ok

        ok(drv.cuStreamSynchronize(self.stream_a))


def exchange_view(ptr, device, work_stream, stream_ptr):
    """A view through the DLPack C exchange API of NBYTES at ``ptr`` on CUDA ``device``,
    whose producer reports ``work_stream`` as its current work stream."""
    import test_fuzz

    test_fuzz._WORK_STREAM[0] = work_stream
    lender = test_fuzz.ExchangeProducer(
        {"device": (2, device), "dtype": (1, 8, 1), "shape": [NBYTES], "ndim": 1, "strides": None,
         "byte_offset": 0, "data": ptr}
    )
    try:
        return StridedMemoryView(lender, stream_ptr=stream_ptr)
    finally:
        lender.close()
        test_fuzz._WORK_STREAM[0] = 0


def value_of(i: int) -> int:
    """The byte written by run ``i``: never 0 (the memory's first contents), never the last run's."""
    return i % 255 + 1


def _ordered_runs(race, runs, sim):
    if sim is not None:
        sim.set_delay_us(DELAY_US)
    stale = [i for i in range(runs) if not race.run(value_of(i), ordered=True)]
    race.finish()
    return stale


def _control_runs(race, sim):
    sim.set_delay_us(DELAY_US)
    for i in range(CONTROL_RUNS):
        if not race.run(value_of(i), ordered=False):
            race.finish()
            return i + 1
    race.finish()
    return None


LAYOUTS = {
    "one-device": (0, 0),
    "two-devices": (1, 0),  # data and producer stream on device 1, consumer on device 0
}


@pytest.mark.parametrize("where", list(LAYOUTS))
def test_view_on_b_orders_the_producer_before_b_every_time(gpu, sim, where):
    """With stream_ptr=B, B's copy reads the producer's new data in 1000 of 1000 runs (CAI over
    cuda-bindings memory, a memset on A), on one device and with the data on another."""
    data_device, consumer_device = LAYOUTS[where]
    if data_device > 0:
        request_two_gpus()
    race = Race(gpu, "cai", data_device, consumer_device)
    stale = _ordered_runs(race, RUNS, sim)
    assert stale == [], f"{len(stale)} of {RUNS} runs read stale data (first: run {stale[0]})"


@pytest.mark.simgpu
@pytest.mark.parametrize("where", list(LAYOUTS))
@pytest.mark.races
def test_view_with_minus_one_reads_stale_data(gpu, simulator, where):
    """Control: with stream_ptr=-1 nothing is ordered, and B's copy reads stale data (so the
    test above can fail)."""
    data_device, consumer_device = LAYOUTS[where]
    if data_device > 0:
        request_two_gpus()
    race = Race(gpu, "cai", data_device, consumer_device)
    assert _control_runs(race, simulator) is not None, f"no stale read in {CONTROL_RUNS} unordered runs"


THREADS = 8


def _thread_races(gpu, ordered, runs_per_thread, sim):
    """THREADS threads, each with its own producer and consumer streams (thread t's data on
    device t % device count, its consumer on device 0): per thread, the runs that read stale
    data, or the first stale run for a control."""
    from driver_support import device_count, make_current

    devices = min(device_count(), 2)
    races = [Race(gpu, "cai", t % devices, 0) for t in range(THREADS)]
    results: list = [None] * THREADS
    errors: list = []
    start = threading.Barrier(THREADS, timeout=30)

    def work(t):
        try:
            make_current(0)  # a new thread has no current context; the copies need one
            start.wait()
            race = races[t]
            if ordered:
                results[t] = [i for i in range(runs_per_thread) if not race.run(value_of(i), True)]
            else:
                results[t] = next(
                    (i + 1 for i in range(runs_per_thread) if not race.run(value_of(i), False)), None
                )
            race.finish()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
            errors.append(exc)

    if sim is not None:
        sim.set_delay_us(DELAY_US)
    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
        assert not thread.is_alive(), "a thread hung"
    if errors:
        raise errors[0]
    return results


def test_eight_threads_each_ordered_every_time(gpu, sim):
    """Eight threads, 1000 runs in all, each thread its own streams (half with data on the second
    device where there is one): every run reads the new data, and no event is shared."""
    results = _thread_races(gpu, True, RUNS // THREADS, sim)
    stale = {t: runs for t, runs in enumerate(results) if runs}
    assert stale == {}, f"stale reads per thread: {stale}"


@pytest.mark.simgpu
@pytest.mark.races
def test_eight_threads_with_minus_one_read_stale_data(gpu, simulator):
    """Control: the same eight threads with stream_ptr=-1 read stale data."""
    results = _thread_races(gpu, False, CONTROL_RUNS // THREADS, simulator)
    assert any(first is not None for first in results), "no thread read stale data"


PRODUCERS = [
    ("cai", "copy"),  # the producer's write is a host-to-device copy on A
    ("numba", "memset"),  # numba-cuda's device array, its CAI naming its own stream
    ("exchange", "memset"),  # the DLPack C exchange API reporting A as its work stream
]


@pytest.mark.parametrize(("producer", "write"), PRODUCERS, ids=[f"{p}-{w}" for p, w in PRODUCERS])
@pytest.mark.parametrize("where", list(LAYOUTS))
def test_other_producers_are_ordered_too(gpu, sim, producer, write, where):
    """Other producers and writes, 100 runs each: a host-to-device copy on A, numba-cuda's
    stream-tagged device array, an exchange-API producer's work stream."""
    data_device, consumer_device = LAYOUTS[where]
    if data_device > 0:
        request_two_gpus()
    race = Race(gpu, producer, data_device, consumer_device, write)
    stale = _ordered_runs(race, RUNS // 10, sim)
    assert stale == [], f"{len(stale)} of {RUNS // 10} runs read stale data"


@pytest.mark.simgpu
@pytest.mark.parametrize(("producer", "write"), PRODUCERS, ids=[f"{p}-{w}" for p, w in PRODUCERS])
@pytest.mark.races
def test_other_producers_with_minus_one_read_stale_data(gpu, simulator, producer, write):
    """Control for each of those producers: with stream_ptr=-1, B reads stale data."""
    race = Race(gpu, producer, 0, 0, write)
    assert _control_runs(race, simulator) is not None


def request_two_gpus():
    from driver_support import device_count

    if device_count() < 2:
        pytest.skip(TWO_GPUS_SKIP_REASON)


# --- real producers and real kernels on a real GPU ----------------------------------------

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


REAL_PRODUCERS = {
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
    keep, make_view = REAL_PRODUCERS[name](cp, kernels, device)
    stream_b = _consumer_stream(cp, device)
    view, stream_a = make_view(stream_b.ptr if ordered else -1)
    with cp.cuda.Device(device):
        values = kernels.read_on(cp, view, stream_b)
    stream_a.synchronize()
    del keep
    return values, view


@pytest.mark.real_gpu
@pytest.mark.parametrize("device", [0, 1], ids=["one-device", "second-device"])
@pytest.mark.parametrize("name", list(REAL_PRODUCERS))
def test_gpu_view_on_b_orders_the_producer_before_b(name, device):
    """With stream_ptr=B, a kernel on B reads every value the producer's slow kernel on A wrote."""
    values, view = _race(name, device, ordered=True)
    assert view.device_id == device
    assert (values == VALUE).all(), f"{np.count_nonzero(values != VALUE)} of {N} values not yet written"


@pytest.mark.real_gpu
@pytest.mark.parametrize("device", [0, 1], ids=["one-device", "second-device"])
@pytest.mark.parametrize("name", list(REAL_PRODUCERS))
def test_gpu_view_with_minus_one_orders_nothing(name, device):
    """With stream_ptr=-1 nothing is ordered: a kernel on B races the producer and sees unwritten values."""
    values, view = _race(name, device, ordered=False)
    assert view.device_id == device
    assert (values != VALUE).any(), "no race seen: the ordered test above would prove nothing"
