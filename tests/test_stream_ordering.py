"""Stream ordering of CUDA Array Interface views, against the modelling fake driver.

The fake (fake_driver.py) keeps contexts, streams as lists of operations, and
events that capture a point of a stream; these tests hold the library to the exact
call sequence of docs/concepts.md ("Streams") and docs/threads.md ("Events") and to what it does when
a call fails (failures injected into any call, a stream handle reused by another
context).  What the consumer then sees is raced with real data on the simulated device:
tests/test_gpu_streams.py and tests/test_gpu_ordering.py; the failures are injected into the
simulated device's entry points too, in tests/test_gpu_driver_faults.py (the list of what is
duplicated there, and what only the fake can do, opens fake_driver.py).  The last section runs real producers on a GPU (marked ``gpu``,
skipped here by conftest).
"""

import re
import threading

import numpy as np
import pytest

from conftest import gpu_import
from fake_driver import HOST_BLOCKING_CALLS, CUresult, FakeDriver
from stridedview import CUDAError, StridedMemoryView
from stridedview import _driver
from test_cai import CAIProducer, CudaStream

DISABLE_TIMING = 2



def ordered_view(producer_stream, consumer_stream, data_device=0, **keys):
    """A view of a fresh CAI producer whose dict names ``producer_stream``; its data is ``data_device``'s memory."""
    producer = CAIProducer(stream=producer_stream, **keys)
    if isinstance(_driver._api, FakeDriver):
        _driver._api.register_pointer(producer.ptr, producer.array.nbytes, device=data_device)
    return StridedMemoryView(producer, stream_ptr=consumer_stream)


def state_calls(fake, calls=None):
    """The calls that touch driver state (cuGetErrorName, used to name errors, left out)."""
    return [(n, a) for n, a in (fake.calls if calls is None else calls) if n != "cuGetErrorName"]


def names(calls):
    return [name for name, _ in calls]


def check_call(call, name, *args):
    """Fail unless ``call`` is ``name(*args)``, handles compared by int()."""
    got_name, got_args = call
    assert got_name == name, call
    assert len(got_args) == len(args), call
    for got, want in zip(got_args, args):
        assert int(got) == int(want), call


def event_of(fake, call):
    """The fake's model of the event in a cuEventRecord or cuStreamWaitEvent call."""
    name, args = call
    return fake.event(args[0] if name == "cuEventRecord" else args[1])


# --- when nothing is ordered -------------------------------------------------------

@pytest.mark.parametrize(
    "keys, stream_ptr",
    [
        ({"stream": 0x5000}, -1),
        ({"stream": None}, 0x7000),
        ({}, 0x7000),
        ({"version": 2, "stream": 0x5000}, 0x7000),
        ({"version": 1, "stream": 0x5000}, 0x7000),
        ({"version": 0, "stream": 0x5000}, 0x7000),
        ({"stream": 0x5000}, 0x5000),
    ],
    ids=["opt-out", "stream-none", "stream-absent", "v2", "v1", "v0", "same"],
)
def test_no_calls_when_nothing_to_order(fake, keys, stream_ptr):
    """No driver call at all (not even cuInit) for -1, no producer stream, v0-v2 dicts, or the same ordinary stream."""
    view = StridedMemoryView(CAIProducer(**keys), stream_ptr=stream_ptr)
    assert fake.calls == []
    assert view.shape == (2, 3)


def test_no_calls_with_cuda_stream_object_naming_the_same_stream(fake):
    """A __cuda_stream__ object naming the producer's own stream orders nothing."""
    producer_stream = fake.new_stream()
    ordered_view(producer_stream, CudaStream(producer_stream))
    assert fake.calls == []


# --- the call sequence ---------------------------------------------------------------

def test_first_ordering_call_sequence(fake):
    """First ordering: cuInit(0), cuStreamIsCapturing(consumer), cuStreamGetCtx(producer), cuCtxGetCurrent, cuEventCreate(2), cuEventRecord, cuStreamWaitEvent(consumer, event, 0)."""
    producer, consumer = fake.new_stream(), fake.new_stream()
    view = ordered_view(producer, consumer)
    calls = fake.calls
    assert names(calls) == [
        "cuInit", "cuStreamIsCapturing", "cuStreamGetCtx", "cuCtxGetCurrent", "cuEventCreate",
        "cuEventRecord", "cuStreamWaitEvent",
    ]
    check_call(calls[0], "cuInit", 0)
    check_call(calls[1], "cuStreamIsCapturing", consumer)
    check_call(calls[2], "cuStreamGetCtx", producer)
    check_call(calls[4], "cuEventCreate", DISABLE_TIMING)
    event = calls[5][1][0]
    check_call(calls[5], "cuEventRecord", event, producer)
    check_call(calls[6], "cuStreamWaitEvent", consumer, event, 0)
    model = fake.event(event)
    assert model.flags == DISABLE_TIMING
    assert model.context is fake.stream(producer).context
    assert view.ready_stream == consumer


@pytest.mark.parametrize("current", ["device-0", "none"])
@pytest.mark.parametrize("data_device", [0, 1])
@pytest.mark.parametrize("producer_handle", [1, 2], ids=["legacy", "per-thread"])
def test_default_stream_producer_resolved_in_data_device_primary(fake, producer_handle, data_device, current):
    """A CAI producer's handle 1 or 2 is the default stream of the data's device (cuPointerGetAttribute), recorded with that device's primary context pushed, whatever is current."""
    primary = fake.primary_contexts[data_device]
    consumer = fake.new_stream()
    if current == "none":
        fake.set_current(None)
    fake.enqueue_write(producer_handle, "w", context=primary)
    ordered_view(producer_handle, consumer, data_device=data_device)
    calls = fake.calls
    assert names(calls) == [
        "cuInit", "cuPointerGetAttribute", "cuDeviceGet", "cuDevicePrimaryCtxRetain",
        "cuStreamIsCapturing", "cuCtxPushCurrent", "cuEventCreate", "cuEventRecord",
        "cuCtxPopCurrent", "cuStreamWaitEvent",
    ]
    check_call(calls[2], "cuDeviceGet", data_device)
    check_call(calls[4], "cuStreamIsCapturing", consumer)
    check_call(calls[5], "cuCtxPushCurrent", primary)
    event = calls[7][1][0]
    check_call(calls[7], "cuEventRecord", event, producer_handle)
    check_call(calls[9], "cuStreamWaitEvent", consumer, event, 0)
    assert fake.event(event).context is fake.context_of(primary)
    assert fake.current_context() == (None if current == "none" else fake.primary_contexts[0])
    assert fake.enqueue_read(consumer) == {"w"}
    # Never cached: the next view pushes again; the device's primary context is retained once.
    fake.clear_calls()
    ordered_view(producer_handle, consumer, data_device=data_device)
    assert names(fake.calls) == [
        "cuPointerGetAttribute", "cuStreamIsCapturing", "cuCtxPushCurrent", "cuEventRecord",
        "cuCtxPopCurrent", "cuStreamWaitEvent",
    ]


@pytest.mark.parametrize(
    "producer_handle, consumer_handle", [(1, 1), (1, 0), (2, 2)], ids=["1-vs-1", "1-vs-0", "2-vs-2"]
)
def test_same_default_stream_orders_nothing(fake, producer_handle, consumer_handle):
    """Producer and consumer naming one default stream (0 is 1) of the data device's context, current or implied by none current, record and wait on nothing."""
    for current in (fake.primary_contexts[0], None):
        fake.set_current(current)
        ordered_view(producer_handle, consumer_handle, data_device=0)
        assert "cuEventRecord" not in names(fake.calls)
        assert "cuStreamWaitEvent" not in names(fake.calls)


def test_init_once_then_two_calls_per_view(fake):
    """After warm-up every ordered view costs exactly cuStreamIsCapturing (the consumer: is it capturing a graph?), cuEventRecord and cuStreamWaitEvent, with the same event."""
    producer, consumer = fake.new_stream(), fake.new_stream()
    ordered_view(producer, consumer)
    event = fake.calls[-1][1][1]
    fake.clear_calls()
    for _ in range(5):
        ordered_view(producer, consumer)
    assert names(fake.calls) == ["cuStreamIsCapturing", "cuEventRecord", "cuStreamWaitEvent"] * 5
    for check in fake.calls[::3]:
        check_call(check, "cuStreamIsCapturing", consumer)
    for record, wait in zip(fake.calls[1::3], fake.calls[2::3]):
        check_call(record, "cuEventRecord", event, producer)
        check_call(wait, "cuStreamWaitEvent", consumer, event, 0)


def test_one_event_reused_across_views_and_consumers(fake):
    """One event serves every producer stream of a context and every consumer; cuInit is called once."""
    a, b, c1, c2 = (fake.new_stream() for _ in range(4))
    ordered_view(a, c1)
    ordered_view(b, c2)
    ordered_view(a, c2)
    ordered_view(b, c1)
    assert names(fake.calls).count("cuInit") == 1
    assert names(fake.calls).count("cuEventCreate") == 1
    events = {int(args[0]) for name, args in fake.calls if name == "cuEventRecord"}
    assert len(events) == 1
    # The context of each producer stream is looked up once.
    assert names(fake.calls).count("cuStreamGetCtx") == 2


def test_separate_events_per_context(fake):
    """Producer streams of two contexts get one event each, created in that context."""
    other = fake.new_context(1)
    here, there, consumer = fake.new_stream(), fake.new_stream(other), fake.new_stream()
    ordered_view(here, consumer)
    ordered_view(there, consumer)
    ordered_view(here, consumer)
    ordered_view(there, consumer)
    assert names(fake.calls).count("cuEventCreate") == 2
    records = [(name, args) for name, args in fake.calls if name == "cuEventRecord"]
    by_stream = {}
    for _, (event, stream) in records:
        by_stream.setdefault(int(stream), set()).add(int(event))
    assert all(len(events) == 1 for events in by_stream.values())
    assert by_stream[here] != by_stream[there]
    for stream, (event,) in by_stream.items():
        assert fake.event(event).context is fake.stream(stream).context


def test_event_created_in_producer_context_with_push_pop(fake):
    """When the producer's context is not current, the event is created between cuCtxPushCurrent(ctx) and cuCtxPopCurrent."""
    other = fake.new_context(1)
    producer, consumer = fake.new_stream(other), fake.new_stream()
    current_before = fake.current_context()
    ordered_view(producer, consumer)
    assert names(fake.calls) == [
        "cuInit", "cuStreamIsCapturing", "cuStreamGetCtx", "cuCtxGetCurrent", "cuCtxPushCurrent",
        "cuEventCreate", "cuCtxPopCurrent", "cuEventRecord", "cuStreamWaitEvent",
    ]
    check_call(fake.calls[4], "cuCtxPushCurrent", other)
    check_call(fake.calls[5], "cuEventCreate", DISABLE_TIMING)
    assert fake.event(fake.calls[7][1][0]).context is fake.context_of(other)
    assert fake.current_context() == current_before
    assert fake.context_depth() == 1


def test_event_created_with_push_pop_when_no_context_is_current(fake):
    """With no current context at all, the event is still created in the producer's context (push/pop)."""
    fake.set_current(None)
    producer = fake.new_stream(fake.primary_contexts[0])
    consumer = fake.new_stream(fake.primary_contexts[0])
    ordered_view(producer, consumer)
    assert "cuCtxPushCurrent" in names(fake.calls)
    assert fake.current_context() is None


def test_stale_context_retried_after_invalid_handle(fake):
    """A producer handle destroyed and reused in another context: the record fails with INVALID_HANDLE, the context is looked up afresh, the record retried once."""
    other = fake.new_context(1)
    producer, consumer = fake.new_stream(), fake.new_stream()
    ordered_view(producer, consumer)
    old_event = fake.calls[-1][1][1]
    fake.reuse_stream_handle(producer, other)
    fake.enqueue_write(producer, "after-reuse")
    fake.clear_calls()
    ordered_view(producer, consumer)
    calls = state_calls(fake)
    assert names(calls) == [
        "cuStreamIsCapturing", "cuEventRecord", "cuStreamGetCtx", "cuCtxGetCurrent",
        "cuCtxPushCurrent", "cuEventCreate", "cuCtxPopCurrent", "cuEventRecord", "cuStreamWaitEvent",
    ]
    check_call(calls[1], "cuEventRecord", old_event, producer)
    check_call(calls[2], "cuStreamGetCtx", producer)
    new_event = calls[7][1][0]
    assert int(new_event) != int(old_event)
    assert fake.event(new_event).context is fake.context_of(other)
    check_call(calls[8], "cuStreamWaitEvent", consumer, new_event, 0)
    assert fake.enqueue_read(consumer) == {"after-reuse"}
    # Warm again: the capture check and two calls.
    fake.clear_calls()
    ordered_view(producer, consumer)
    assert names(fake.calls) == ["cuStreamIsCapturing", "cuEventRecord", "cuStreamWaitEvent"]


def test_legacy_stream_follows_the_data_not_the_current_context(fake):
    """A producer on handle 1 is resolved afresh for each view: after the current context changes, still the data device's default stream, with no failed record."""
    other = fake.new_context(1)
    consumer = fake.new_stream()
    ordered_view(1, consumer, data_device=0)
    fake.set_current(other)
    fake.enqueue_write(1, "legacy-of-device-0", context=fake.primary_contexts[0])
    fake.enqueue_write(1, "legacy-of-other")
    fake.clear_calls()
    ordered_view(1, consumer, data_device=0)
    calls = state_calls(fake)
    assert names(calls) == [
        "cuPointerGetAttribute", "cuStreamIsCapturing", "cuCtxPushCurrent", "cuEventRecord",
        "cuCtxPopCurrent", "cuStreamWaitEvent",
    ]
    assert fake.event(calls[3][1][0]).context is fake.context_of(fake.primary_contexts[0])
    assert fake.enqueue_read(consumer) == {"legacy-of-device-0"}


def test_invalid_handle_on_fresh_lookup_is_not_retried(fake):
    """An unknown producer handle fails at cuStreamGetCtx with CUDA_ERROR_INVALID_HANDLE, raised at once."""
    consumer = fake.new_stream()
    prefix = "cuStreamGetCtx failed: CUDA_ERROR_INVALID_HANDLE"
    with pytest.raises(CUDAError, match="^" + re.escape(prefix)) as excinfo:
        ordered_view(0xDEAD00, consumer)
    assert excinfo.value.name == "CUDA_ERROR_INVALID_HANDLE"
    assert names(state_calls(fake)) == ["cuInit", "cuStreamIsCapturing", "cuStreamGetCtx"]


# --- failures ------------------------------------------------------------------------------

def test_event_create_failure_in_other_context_pops(fake):
    """If cuEventCreate fails after cuCtxPushCurrent, cuCtxPopCurrent still runs and the caller's context is current again."""
    other = fake.new_context(1)
    producer, consumer = fake.new_stream(other), fake.new_stream()
    fake.fail("cuEventCreate", CUresult.CUDA_ERROR_OUT_OF_MEMORY)
    with pytest.raises(CUDAError):
        ordered_view(producer, consumer)
    assert names(state_calls(fake))[-2:] == ["cuEventCreate", "cuCtxPopCurrent"]
    assert fake.current_context() == fake.primary_contexts[0]
    assert fake.context_depth() == 1

def test_use_api_resets_caches(fake):
    """use_api forgets cuInit, contexts and events: a new fake sees the full warm-up sequence."""
    producer, consumer = fake.new_stream(), fake.new_stream()
    ordered_view(producer, consumer)
    second = FakeDriver()
    _driver.use_api(second)
    p2, c2 = second.new_stream(), second.new_stream()
    ordered_view(p2, c2)
    assert names(second.calls) == [
        "cuInit", "cuStreamIsCapturing", "cuStreamGetCtx", "cuCtxGetCurrent", "cuEventCreate",
        "cuEventRecord", "cuStreamWaitEvent",
    ]


def test_no_host_blocking_call_ever(fake):
    """Across every path (warm, cold, cross-context, default streams, stale retry) no host-blocking call is made."""
    other = fake.new_context(1)
    a, b, c = fake.new_stream(), fake.new_stream(other), fake.new_stream()
    for producer, consumer in [(a, c), (b, c), (1, c), (2, c), (a, 1), (b, 2), (a, c)]:
        ordered_view(producer, consumer)
    fake.reuse_stream_handle(a, other)
    ordered_view(a, c)
    assert not set(names(fake.calls)) & set(HOST_BLOCKING_CALLS)
    assert fake.violations == []


# --- what the consumer sees ----------------------------------------------------------------
# Raced on the simulated device with real data: tests/test_gpu_streams.py (a producer's write
# seen 1000 times in 1000, on one device, two, from eight threads; -1 sees stale data) and
# tests/test_gpu_ordering.py (default streams, two devices, chains, one reused event, the
# exchange API's NULL work stream, a reset primary context, events destroyed).

# --- many devices: default streams belong to the data's device -----------------------------

def exchange_view(device, work_stream, consumer_stream):
    """A view through the C exchange API of a tensor on CUDA ``device`` whose producer reports ``work_stream``."""
    import test_fuzz

    test_fuzz._WORK_STREAM[0] = work_stream
    lender = test_fuzz.ExchangeProducer(
        {"device": (2, device), "dtype": (2, 32, 1), "shape": [4], "ndim": 1, "strides": None,
         "byte_offset": 0, "data": 0x10000, "work_stream": work_stream}
    )
    try:
        return StridedMemoryView(lender, stream_ptr=consumer_stream)
    finally:
        lender.close()
        test_fuzz._WORK_STREAM[0] = 0


def test_exchange_api_same_default_stream_records_nothing(fake):
    """NULL work stream and consumer stream 0 on the tensor's device (current): one stream, no event recorded; on another device: ordered."""
    exchange_view(0, 0, 0)
    assert "cuEventRecord" not in names(fake.calls)
    fake.enqueue_write(0, "on-1", context=fake.primary_contexts[1])
    exchange_view(1, 0, 0)
    assert "cuEventRecord" in names(fake.calls)
    assert fake.enqueue_read(0) == {"on-1"}


def test_exchange_api_unknown_device_is_cuda_error(fake):
    """A NULL work stream for a device the driver does not have raises CUDAError (cuDeviceGet's CUDA_ERROR_INVALID_DEVICE)."""
    with pytest.raises(CUDAError) as excinfo:
        exchange_view(7, 0, fake.new_stream())
    assert excinfo.value.name == "CUDA_ERROR_INVALID_DEVICE"


# --- events are destroyed; a reset context recovers ---------------------------------------------

def test_use_api_destroys_every_event_and_releases_primary_contexts(fake):
    """Swapping the seam destroys the events of every thread, live or not, and releases the retained primary contexts."""
    consumer = fake.new_stream()
    ordered_view(fake.new_stream(fake.primary_contexts[0]), consumer)
    ordered_view(fake.new_stream(fake.primary_contexts[1]), consumer)  # a second event
    ordered_view(1, consumer, data_device=1)  # device 1's primary context, retained
    ready, release = threading.Event(), threading.Event()

    def holder():
        fake.set_current(fake.primary_contexts[0])
        ordered_view(fake.new_stream(), fake.new_stream())
        ready.set()
        release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    try:
        assert ready.wait(10)
        assert fake.live_events() == 3
        _driver.use_api(FakeDriver())
        assert fake.live_events() == 0
        assert fake.primary_retains == [1, 1]
    finally:
        release.set()
        thread.join(10)
        _driver.use_api(fake)


# --- errors are reported as they happened -----------------------------------------------------

class RaisingDriver:
    """A driver whose cuStreamWaitEvent raises CUDAError itself (a wrapper or hook would)."""

    def __init__(self, fake):
        self._fake = fake

    def __getattr__(self, name):
        return getattr(self._fake, name)

    def cuStreamWaitEvent(self, *args):
        raise CUDAError("cuStreamWaitEvent failed: CUDA_ERROR_LAUNCH_FAILED", "CUDA_ERROR_LAUNCH_FAILED")


def test_cuda_error_raised_inside_a_call_is_not_no_driver(fake):
    """A CUDAError (a RuntimeError) raised inside a driver call propagates as it is, not as CUDA_ERROR_NO_DRIVER."""
    _driver.use_api(RaisingDriver(fake))
    with pytest.raises(CUDAError) as excinfo:
        ordered_view(fake.new_stream(), fake.new_stream())
    assert excinfo.value.name == "CUDA_ERROR_LAUNCH_FAILED"
    assert "could not be used" not in str(excinfo.value)

# --- ready_stream ----------------------------------------------------------------------

def test_ready_stream(fake):
    """ready_stream: the consumer stream after ordering, the producer's for -1, None when neither has one."""
    producer, consumer = fake.new_stream(), fake.new_stream()
    assert ordered_view(producer, consumer).ready_stream == consumer
    assert ordered_view(producer, -1).ready_stream == producer
    assert ordered_view(None, -1).ready_stream is None
    assert StridedMemoryView(CAIProducer(), stream_ptr=-1).ready_stream is None
    assert ordered_view(1, 0).ready_stream == 0
    assert ordered_view(None, consumer).ready_stream == consumer
    assert ordered_view(producer, -1, version=2).ready_stream is None


# --- threads -------------------------------------------------------------------------------

def _run_threads(targets, timeout=30):
    errors = []

    def wrap(target):
        def run():
            try:
                target()
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                errors.append(exc)
        return run

    threads = [threading.Thread(target=wrap(t)) for t in targets]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), "thread hung"
    if errors:
        raise errors[0]
    return threads


def test_separate_events_per_thread(fake):
    """Each thread creates and uses its own event, looks up contexts itself, and cuInit runs once in all."""
    producer, consumer = fake.new_stream(), fake.new_stream()
    ordered_view(producer, consumer)
    # All three alive together, so that their thread ids are distinct.
    start, end = threading.Barrier(3, timeout=10), threading.Barrier(3, timeout=10)

    def run():
        fake.set_current(fake.primary_contexts[0])  # a new thread has none: real code makes one current
        start.wait()
        ordered_view(producer, consumer)
        end.wait()

    threads = _run_threads([run] * 3)
    assert names(fake.calls).count("cuInit") == 1
    events = set()
    created_by = {e.handle: e.created_by for e in fake.created_events}
    for thread in threads:
        calls = fake.thread_calls(thread.ident)
        # ... and destroys it, in its own context, when it ends.
        assert names(calls) == [
            "cuStreamIsCapturing", "cuStreamGetCtx", "cuCtxGetCurrent", "cuEventCreate",
            "cuEventRecord", "cuStreamWaitEvent", "cuCtxPushCurrent", "cuEventDestroy",
            "cuCtxPopCurrent",
        ]
        event = int(calls[4][1][0])
        assert created_by[event] == thread.ident
        check_call(calls[7], "cuEventDestroy", event)
        events.add(event)
    events.add(int(fake.thread_calls()[-1][1][1]))
    assert len(events) == 4


def test_interleaved_threads_each_wait_for_their_own_producer(fake):
    """Thread A records, thread B records, thread A waits: A's consumer still sees A's producer (no event shared across threads)."""
    pa, ca, pb, cb = (fake.new_stream() for _ in range(4))
    b_recorded = threading.Event()
    a_recorded = threading.Event()
    roles = {}
    log = []

    def hook(name, args, result):
        role = roles.get(threading.get_ident())
        if role is None or name not in ("cuEventRecord", "cuStreamWaitEvent"):
            return
        log.append((role, name))
        if name == "cuStreamWaitEvent":
            return
        if role == "A":
            a_recorded.set()
            if not b_recorded.wait(10):
                raise RuntimeError("thread B never recorded")
        else:
            b_recorded.set()

    def thread_a():
        roles[threading.get_ident()] = "A"
        fake.enqueue_write(pa, "a")
        ordered_view(pa, ca)

    def thread_b():
        roles[threading.get_ident()] = "B"
        if not a_recorded.wait(10):
            raise RuntimeError("thread A never recorded")
        fake.enqueue_write(pb, "b")
        ordered_view(pb, cb)

    fake.hooks.append(hook)
    _run_threads([thread_a, thread_b])
    assert log.index(("B", "cuEventRecord")) < log.index(("A", "cuStreamWaitEvent"))
    assert log.index(("A", "cuEventRecord")) < log.index(("B", "cuEventRecord"))
    assert fake.enqueue_read(ca) == {"a"}
    assert fake.enqueue_read(cb) == {"b"}
    assert fake.violations == []


# --- argument types against the real bindings ---------------------------------------------------

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
