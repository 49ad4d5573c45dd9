"""Hand-overs on the simulated device: memory a view handed to a stream is not given back to its
producer before that stream is done with it.

A producer allocates on its stream from a stream-ordered allocator (a cuda.core device buffer
from the device's pool; ``cuMemAllocAsync`` memory behind a CUDA Array Interface dict), a
launcher views it on stream S and enqueues a read of it on S, late (``SIMGPU_DELAY_US`` makes
every stream operation wait, and S has work queued first), into pinned host memory.  The view
is dropped, the producer frees the memory on its own stream, allocates again and writes other
bytes.  The simulator's pools hand a block freed on a stream to that stream's next allocation
at once, exactly as the driver's do, so without a hand-over S's read sees the new bytes (the
control); with ``view.record_stream(S)`` (or the decorator's ``record_stream=True``) the old
allocation is held until S is done, and every read sees the original bytes.

Then the deleters: 10,000 hand-overs of DLPack capsules over device memory from 8 threads,
views in garbage cycles, the collector running all along; each deleter runs exactly once, and
never before S has run the copy queued before the view was dropped (the copy writes a marker
byte the deleter reads).  No event leaks: the simulator counts them.  Everything goes through
the real cuda-bindings (and cuda.core); marked ``simgpu`` for the delay and the counters.
"""

from __future__ import annotations

import ctypes
import gc
import itertools
import threading
import time

import numpy as np
import pytest

import producers
from conftest import gpu_import
from stridedview import (
    StridedMemoryView, ViewableArgument, _driver, _view, args_viewable_as_strided_memory,
    release_pending,
)

pytestmark = [pytest.mark.gpu, pytest.mark.simgpu]

#: Each operation a simulated stream runs waits this long first.
DELAY_US = 100
#: Runs with the hand-over: every one must read the original bytes.
RUNS = 1000
#: Runs of the control at most: one read of the new bytes ends it.
CONTROL_RUNS = 200
NBYTES = 4096
#: Operations queued on S before its read: the read runs about (FILLERS + 1) * DELAY_US after
#: the call, the producer's rewrite of a reused block about 2 * DELAY_US after its own.
FILLERS = 3
ORIGINAL, NEW = 0xAA, 0xBB


# --- producers with stream-ordered allocators ------------------------------------------------


class CorePool:
    """cuda.core device buffers from the device's stream-ordered pool, allocated on the
    producer's stream, freed there (cuMemFreeAsync) when a Buffer is collected."""

    name = "cuda.core"

    def __init__(self, res):
        core = gpu_import("cuda.core")
        self.device = core.Device(0)
        self.device.set_current()
        self.stream = self.device.create_stream()
        self.handle = int(self.stream.handle)

    def allocate(self):
        buffer = self.device.allocate(NBYTES, stream=self.stream)
        return buffer, int(buffer.handle)

    def close(self):
        self.stream.sync()
        self.stream.close()


class AsyncArray:
    """``cuMemAllocAsync`` memory behind a CUDA Array Interface dict naming the producer's
    stream; freed with ``cuMemFreeAsync`` on that stream when the object goes."""

    def __init__(self, stream_handle):
        from driver_support import drv, ok

        self.stream = stream_handle
        self.ptr = int(ok(drv.cuMemAllocAsync(NBYTES, stream_handle)))
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (NBYTES,), "typestr": "|u1", "data": (self.ptr, False),
            "strides": None, "stream": int(stream_handle),
        }

    def __del__(self):
        from driver_support import drv

        drv.cuMemFreeAsync(self.ptr, self.stream)


class AsyncPool:
    """The producer of AsyncArray objects, on a stream of its own."""

    name = "cuMemAllocAsync"

    def __init__(self, res):
        self.handle = res.stream().ptr

    def allocate(self):
        array = AsyncArray(self.handle)
        return array, array.ptr

    def close(self):
        from driver_support import drv, ok

        ok(drv.cuStreamSynchronize(self.handle))


PRODUCERS = {"cuda.core": CorePool, "cuMemAllocAsync": AsyncPool}


class Reuse:
    """One producer (allocating on its stream P), one consumer stream S reading the producer's
    memory into pinned memory, late; the producer frees and reallocates meanwhile."""

    def __init__(self, res, producer_kind):
        from driver_support import drv, ok

        self.producer = PRODUCERS[producer_kind](res)
        self.consumer = res.stream()
        self.scratch = res.device(64)
        self.out = res.pinned(NBYTES)
        self.event = ok(drv.cuEventCreate(2))  # the test's own, reused

    def write(self, ptr, value):
        from driver_support import drv, ok

        ok(drv.cuMemsetD8Async(ptr, value, NBYTES, self.producer.handle))

    def wait_for_producer(self):
        """S waits for the producer's work so far: the ordering is the view's business and is
        proven elsewhere (tests/test_gpu_streams.py); here it is made explicit, for every
        producer alike."""
        from driver_support import drv, ok

        ok(drv.cuEventRecord(self.event, self.producer.handle))
        ok(drv.cuStreamWaitEvent(self.consumer.handle, self.event, 0))

    def read_late(self, ptr):
        """After the producer's write, FILLERS operations on S, then S copies the memory to
        pinned memory."""
        from driver_support import drv, ok

        self.wait_for_producer()
        for _ in range(FILLERS):
            ok(drv.cuMemsetD8Async(self.scratch.ptr, 0, 64, self.consumer.handle))
        ok(drv.cuMemcpyDtoHAsync(self.out.ptr, ptr, NBYTES, self.consumer.handle))

    def run(self, handover: bool) -> bool:
        """Whether S read the original bytes."""
        array, ptr = self.producer.allocate()
        self.write(ptr, ORIGINAL)
        view = StridedMemoryView(array, stream_ptr=self.consumer.ptr)
        self.read_late(view.ptr)
        if handover:
            view.record_stream(self.consumer)  # an object with __cuda_stream__
        del view, array  # the producer frees the memory on its stream
        again, ptr = self.producer.allocate()
        self.write(ptr, NEW)
        self.consumer.synchronize()
        del again
        return bool((self.out.array() == ORIGINAL).all())

    def close(self):
        from driver_support import drv, ok

        self.producer.close()
        self.consumer.synchronize()
        ok(drv.cuEventDestroy(self.event))


@pytest.fixture
def delayed(gpu, simulator):
    simulator.set_delay_us(DELAY_US)
    yield gpu
    release_pending(wait=True)


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_handed_over_memory_is_not_reused_while_the_stream_reads_it(delayed, producer):
    """With the hand-over, S's late read sees the original bytes in every one of 1000 runs: the
    producer's allocator cannot give the block to its next allocation before S is done."""
    reuse = Reuse(delayed, producer)
    try:
        wrong = [i for i in range(RUNS) if not reuse.run(handover=True)]
    finally:
        reuse.close()
    assert wrong == [], f"{len(wrong)} of {RUNS} reads saw the reused memory (first: run {wrong[0]})"


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
@pytest.mark.races
def test_without_a_hand_over_the_stream_reads_reused_memory(delayed, producer):
    """Control: without the hand-over the producer reuses the block at once, and S's late read
    sees the new bytes (so the test above can fail)."""
    reuse = Reuse(delayed, producer)
    try:
        runs = next((i + 1 for i in range(CONTROL_RUNS) if not reuse.run(handover=False)), None)
    finally:
        reuse.close()
    assert runs is not None, f"no read of reused memory in {CONTROL_RUNS} runs without a hand-over"


# --- the decorator ---------------------------------------------------------------------------


def copy_launcher(reuse, **options):
    """``launch(src, dst, stream)``: a launcher viewing its first two arguments on ``stream``
    and copying src to dst there, late (what a kernel reading src does)."""

    @args_viewable_as_strided_memory((0, 1), **options)
    def launch(src, dst, stream):
        from driver_support import drv, ok

        source = src.view(stream)
        target = dst.view(stream)
        for _ in range(FILLERS):
            ok(drv.cuMemsetD8Async(reuse.scratch.ptr, 0, 64, stream.handle))
        ok(drv.cuMemcpyDtoHAsync(target.ptr, source.ptr, NBYTES, stream.handle))

    return launch


def decorated_run(reuse, launch, out) -> bool:
    """``launch(temporary, out, S)``: a temporary source nobody else holds, then the producer
    frees, reallocates and rewrites; whether S's copy saw the original bytes."""
    array, ptr = reuse.producer.allocate()
    reuse.write(ptr, ORIGINAL)
    reuse.wait_for_producer()
    launch(array, out, reuse.consumer)
    del array
    again, ptr = reuse.producer.allocate()
    reuse.write(ptr, NEW)
    reuse.consumer.synchronize()
    del again
    return bool((reuse.out.array() == ORIGINAL).all())


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
def test_decorator_record_stream_keeps_temporaries_until_the_launch_is_done(delayed, simulator, producer):
    """``@args_viewable_as_strided_memory((0, 1), record_stream=True)`` with three arguments:
    1000 of 1000 launches of a temporary read the original bytes, with one hand-over event per
    launch (records not followed by a wait are the hand-overs') and no new event after the
    first launches (the pool)."""
    from driver_support import CAIArray

    reuse = Reuse(delayed, producer)
    out = CAIArray(reuse.out, (NBYTES,), np.uint8)  # pinned memory: device-accessible
    launch = copy_launcher(reuse, record_stream=True)
    try:
        for _ in range(4):
            decorated_run(reuse, launch, out)
        created = simulator.counter("events_created")
        wrong = []
        for i in range(RUNS):
            records, waits = simulator.calls("cuEventRecord"), simulator.calls("cuStreamWaitEvent")
            if not decorated_run(reuse, launch, out):
                wrong.append(i)
            records = simulator.calls("cuEventRecord") - records
            waits = simulator.calls("cuStreamWaitEvent") - waits
            # the test's own ordering and the view's (CAI) each record and wait; the launch's
            # hand-over records alone, once
            assert records - waits == 1, (i, records, waits)
        assert simulator.counter("events_created") - created <= 4
    finally:
        reuse.close()
    assert wrong == [], f"{len(wrong)} of {RUNS} launches read reused memory (first: {wrong[0]})"


@pytest.mark.parametrize("producer", sorted(PRODUCERS))
@pytest.mark.races
def test_decorator_without_record_stream_reads_reused_memory(delayed, producer):
    """Control: the same launcher without the option lets the temporary go at the launch's end,
    and S's copy sees the new bytes."""
    from driver_support import CAIArray

    reuse = Reuse(delayed, producer)
    out = CAIArray(reuse.out, (NBYTES,), np.uint8)
    launch = copy_launcher(reuse)
    try:
        runs = next(
            (i + 1 for i in range(CONTROL_RUNS) if not decorated_run(reuse, launch, out)), None
        )
    finally:
        reuse.close()
    assert runs is not None, f"no read of reused memory in {CONTROL_RUNS} launches without the option"


# --- deleters: exactly once, after the stream, from many threads ------------------------------


class MarkedCapsules:
    """A DLPack producer of device memory (kDLCUDA): each ``__dlpack__`` hands out a new capsule
    with an id.  Its deleter, written in Python through ctypes, counts its calls per id and
    notes any id whose marker byte (pinned memory the consumer stream writes after its work
    on the view) was still 0 when it ran: a release before the stream got there."""

    ids = itertools.count(1)  # (a NULL manager_ctx would read back as None)

    def __init__(self, ptr, markers, calls, early):
        self.ptr, self.markers, self.calls, self.early = ptr, markers, calls, early
        self.live = {}
        self.last = None
        self.keeps = None
        self._deleter = producers.DLPackDeleter(self._delete)

    def __dlpack_device__(self):
        return (2, 0)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        tensor_id = next(MarkedCapsules.ids)
        managed = producers.DLManagedTensorVersioned()
        managed.version = producers.DLPackVersion(1, 2)
        shape = (ctypes.c_int64 * 1)(64)
        strides = (ctypes.c_int64 * 1)(1)
        managed.dl_tensor = producers.DLTensor(
            data=self.ptr, device=producers.DLDevice(2, 0), ndim=1,
            dtype=producers.DLDataType(1, 8, 1), shape=shape, strides=strides,
        )
        managed.manager_ctx = tensor_id
        managed.deleter = self._deleter
        self.live[tensor_id] = (managed, shape, strides)
        self.last = tensor_id
        return producers._PyCapsule_New(
            ctypes.addressof(managed), b"dltensor_versioned", producers._capsule_destructor
        )

    def _delete(self, address):
        tensor_id = producers.DLManagedTensorVersioned.from_address(address).manager_ctx
        if self.markers[tensor_id] == 0:
            self.early.append(tensor_id)
        self.calls[tensor_id] = self.calls.get(tensor_id, 0) + 1
        self.live.pop(tensor_id, None)


class Cycle:
    """A producer lending another's capsules, which its view can keep in a garbage cycle."""

    def __init__(self, inner):
        self.inner = inner
        self.keeps = None

    def __dlpack__(self, **kwargs):
        return self.inner.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return (2, 0)

    @property
    def last(self):
        return self.inner.last


class Marking:
    """What the threads share: device memory viewed, a device byte of 1, the pinned markers."""

    def __init__(self, res, count, pinned=True):
        from driver_support import drv, ok

        self.memory = res.device(64)
        self.one = res.device(1)
        ok(drv.cuMemsetD8(self.one.ptr, 1, 1))
        # A device memset returns before it runs (on the legacy stream, which the test's
        # non-blocking streams do not wait for): done before any marker copies the byte.
        ok(drv.cuCtxSynchronize())
        if pinned:
            memory = res.pinned(count)
            self.markers_ptr = memory.ptr
            self.markers = memory.array()
        else:  # (no marker is then written: every deleter counts as early)
            self.markers_ptr = None
            self.markers = np.zeros(count, np.uint8)
        self.calls, self.early = {}, []
        self.producers = []
        MarkedCapsules.ids = itertools.count(1)

    def producer(self):
        """A new producer, kept here: its capsules' structures and its deleter (a ctypes thunk)
        must outlive every hold, as a real producer's do."""
        producer = MarkedCapsules(self.memory.ptr, self.markers, self.calls, self.early)
        self.producers.append(producer)
        return producer

    def mark(self, tensor_id, stream):
        """The stream's "kernel" on the view, late: it sets the view's marker when it runs."""
        from driver_support import drv, ok

        ok(drv.cuMemcpyDtoHAsync(self.markers_ptr + tensor_id, self.one.ptr, 1, stream.handle))


THREADS = 8
HAND_OVERS = 10_000
DELETER_DELAY_US = 200


def _storm(stop):
    """Full collections, one every 2 ms until ``stop``."""
    while not stop.is_set():
        gc.collect()
        stop.wait(0.002)


class collections_storm:
    """``with collections_storm():`` a thread collecting garbage all along.  What exists
    before is frozen (gc.freeze), so that a full collection walks only what the test makes:
    in a process that has run the whole suite one would take tens of milliseconds."""

    def __enter__(self):
        gc.collect()
        gc.freeze()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=_storm, args=(self.stop,))
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)
        gc.unfreeze()


def events_back_to(simulator, live, seconds=5.0):
    """The simulator's live events once the calling thread's pool is trimmed and the ended
    threads' pools are destroyed (their finalizers may still be running in a thread
    that is ending: waited for up to ``seconds``); ``live`` if no event was left behind."""
    deadline = time.monotonic() + seconds
    while True:
        _driver.trim_event_pool()
        gc.collect()
        count = simulator.counter("events_live")
        if count == live or time.monotonic() > deadline:
            return count
        time.sleep(0.05)


def test_deleters_run_once_after_the_stream_from_many_threads(gpu, simulator):
    """10,000 hand-overs from 8 threads, one in 25 of a view in a garbage cycle, the collector
    running all along: every deleter runs exactly once, none before its stream ran the copy
    queued before the view was released, and no hand-over leaves an event behind."""
    live = simulator.counter("events_live")
    marking = Marking(gpu, HAND_OVERS + 1000)
    streams = [gpu.stream() for _ in range(THREADS)]
    simulator.set_delay_us(DELETER_DELAY_US)
    failures = []
    per_thread = HAND_OVERS // THREADS

    def work(t):
        try:
            from driver_support import make_current

            make_current(0)
            producer = marking.producer()
            for i in range(per_thread):
                source = Cycle(producer) if i % 25 == 0 else producer
                view = StridedMemoryView(source, stream_ptr=streams[t].ptr)
                marking.mark(source.last, streams[t])
                view.record_stream(streams[t].ptr)
                if source is not producer:
                    source.keeps = view  # source -> view -> source
                del view, source
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    with collections_storm():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
    gc.collect()
    release_pending(wait=True)
    simulator.set_delay_us(0)
    assert failures == []
    missing = sorted(set(range(1, HAND_OVERS + 1)) - set(marking.calls))
    assert missing == [], (missing, _view._pending_holds(), len(marking.calls))
    assert set(marking.calls.values()) == {1}, "a deleter ran more than once"
    assert marking.early == [], f"{len(marking.early)} deleters ran before their stream's copy"
    assert _view._pending_holds() == (0, 0, 0)
    # No hand-over leaves its event behind.  (Ended threads once kept a few: a hold released
    # as its thread ended gave its event back to driver state kept in a threading.local's
    # new dict, never cleared; test_hand_overs_as_a_thread_ends_leave_no_event_behind.)
    assert events_back_to(simulator, live) == live


class _RecordAsTheThreadEnds:
    """Kept in a thread's threading.local made after the thread's first hand-over, so released
    as that thread ends, after stridedview's own per-thread caches: records its views on
    ``stream`` and drops them one by one, the stream synchronized after each (so that each
    release finds the one before it done, and gives its event back to the thread's pool)."""

    def __init__(self, views, stream):
        self.views, self.stream = views, stream

    def __del__(self):
        while self.views:
            view = self.views.pop()
            view.record_stream(self.stream.ptr)
            del view
            self.stream.synchronize()


def test_hand_overs_as_a_thread_ends_leave_no_event_behind(gpu, simulator):
    """Views recorded and released by code that runs as their thread ends (its thread state's
    dict cleared, stridedview's per-thread caches already released): every deleter runs once,
    after the stream, and no event is left behind (a threading.local reached then keeps what
    it is given in a new dict that is never cleared: driver state kept there leaked its events,
    a few per thread, up to a pool's worth)."""
    live = simulator.counter("events_live")
    marking = Marking(gpu, 200)
    stream = gpu.stream()
    local = threading.local()
    failures = []

    def work():
        try:
            from driver_support import make_current

            make_current(0)
            producer = marking.producer()
            for _ in range(3):  # this thread's caches made and its pool used
                view = StridedMemoryView(producer, stream_ptr=stream.ptr)
                marking.mark(producer.last, stream)
                view.record_stream(stream.ptr)
                del view
            release_pending(wait=True)
            views = []
            for _ in range(5):
                views.append(StridedMemoryView(producer, stream_ptr=stream.ptr))
                marking.mark(producer.last, stream)
            local.keep = _RecordAsTheThreadEnds(views, stream)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    for _ in range(4):
        thread = threading.Thread(target=work)
        thread.start()
        thread.join(60)
    release_pending(wait=True)
    assert failures == []
    assert len(marking.calls) == 4 * 8 and set(marking.calls.values()) == {1}
    assert marking.early == []
    assert events_back_to(simulator, live, seconds=1.0) == live


def test_without_a_hand_over_deleters_run_before_the_stream(gpu, simulator):
    """Control: the same capsules without record_stream are deleted at once, while the stream
    still has the copy queued (so the test above can fail)."""
    marking = Marking(gpu, 100)
    stream = gpu.stream()
    simulator.set_delay_us(DELETER_DELAY_US)
    producer = marking.producer()
    for _ in range(20):
        view = StridedMemoryView(producer, stream_ptr=stream.ptr)
        marking.mark(producer.last, stream)
        del view
    stream.synchronize()
    simulator.set_delay_us(0)
    assert set(marking.calls.values()) == {1}
    assert marking.early != []


LAUNCHES_PER_THREAD = 400


def test_decorator_deleters_run_once_after_the_stream_from_many_threads(gpu, simulator):
    """The decorator with record_stream=True, three arguments (two viewed, and the stream), from
    8 threads with the collector running: each launch records one event, every deleter runs
    once and after its stream's work, and no event is left behind."""
    live = simulator.counter("events_live")
    marking = Marking(gpu, 2 * THREADS * LAUNCHES_PER_THREAD + 100)
    streams = [gpu.stream() for _ in range(THREADS)]
    simulator.set_delay_us(DELETER_DELAY_US)
    failures = []
    handed = []

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def launch(a, b, stream):
        a.view(stream.ptr)
        b.view(stream.ptr)
        marking.mark(a.obj.last, stream)
        marking.mark(b.obj.last, stream)

    def work(t):
        try:
            from driver_support import make_current

            make_current(0)
            first, second = marking.producer(), marking.producer()
            before = _view._driver_door_handover_info()
            for _ in range(LAUNCHES_PER_THREAD):
                launch(first, second, streams[t])
            after = _view._driver_door_handover_info()
            # Hand-overs this thread recorded (the driver door counts them).
            in_c = after["handed"] - before["handed"]
            assert after["recorded"] - before["recorded"] == in_c  # one event each
            handed.extend([1] * in_c)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(THREADS)]
    with collections_storm():
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(300)
    gc.collect()
    release_pending(wait=True)
    simulator.set_delay_us(0)
    assert failures == []
    assert handed == [1] * (THREADS * LAUNCHES_PER_THREAD)  # one event per launch
    assert len(marking.calls) == 2 * THREADS * LAUNCHES_PER_THREAD
    assert set(marking.calls.values()) == {1}
    assert marking.early == []
    assert events_back_to(simulator, live) == live


def test_recording_launches_of_six_arguments_joined_keep_every_hold_until_the_stream_ran(
    gpu, simulator
):
    """Recording launches of six arguments on one slow stream (each group's holds in its own
    fields, its slots and two hold objects; the launches after the first join its entry,
    up to the limit, then a new entry): every deleter runs once, only after the stream's
    work on its view (its marker set), and no hold is left pending."""
    launches = 80
    marking = Marking(gpu, 6 * launches + 10)
    stream = gpu.stream()
    producers_ = [marking.producer() for _ in range(6)]

    @args_viewable_as_strided_memory((0, 1, 2, 3, 4, 5), record_stream=True)
    def launch(a, b, c, d, e, f, stream):
        for arg in (a, b, c, d, e, f):
            arg.view(stream.ptr)
            marking.mark(arg.obj.last, stream)

    simulator.set_delay_us(DELETER_DELAY_US // 4)
    for _ in range(launches):
        launch(*producers_, stream)
    assert _view._pending_holds()[1] >= 1
    release_pending(wait=True)
    simulator.set_delay_us(0)
    assert _view._pending_holds() == (0, 0, 0)
    assert len(marking.calls) == 6 * launches
    assert set(marking.calls.values()) == {1}
    assert marking.early == []


def test_a_recording_launch_on_two_streams_keeps_each_hold_until_both_ran(gpu, simulator):
    """A recording launch whose two arguments are viewed on two streams (the group's second
    place, which makes its list of places): each launch records one event on each stream,
    and every deleter runs once, after both streams ran the launch's work."""
    live = simulator.counter("events_live")
    launches = 200
    marking = Marking(gpu, 2 * launches + 100)
    first_stream, second_stream = gpu.stream(), gpu.stream()
    simulator.set_delay_us(DELETER_DELAY_US)

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def launch(a, b, s1, s2):
        a.view(s1.ptr)
        b.view(s2.ptr)
        # each hold is the launch's: both streams run work on both arguments
        marking.mark(a.obj.last, s2)
        marking.mark(b.obj.last, s1)

    first, second = marking.producer(), marking.producer()
    for _ in range(launches):
        records = simulator.calls("cuEventRecord")
        waits = simulator.calls("cuStreamWaitEvent")
        launch(first, second, first_stream, second_stream)
        records = simulator.calls("cuEventRecord") - records
        waits = simulator.calls("cuStreamWaitEvent") - waits
        assert records - waits == 2, (records, waits)  # one hand-over event per stream
    gc.collect()
    release_pending(wait=True)
    simulator.set_delay_us(0)
    assert len(marking.calls) == 2 * launches
    assert set(marking.calls.values()) == {1}
    assert marking.early == []
    assert events_back_to(simulator, live) == live


def test_a_recording_launch_takes_one_stream_named_by_equal_ints_of_any_make(gpu, simulator):
    """A recording launch whose three views name one stream through different objects of
    the same value (the handle itself, an equal int made anew, a numpy integer): each is
    that stream (an int's value read in C, not only the same object), so each launch
    records one hand-over event, and every deleter runs once, after the stream's work."""
    live = simulator.counter("events_live")
    launches = 100
    marking = Marking(gpu, 3 * launches + 50)
    stream = gpu.stream()
    simulator.set_delay_us(DELETER_DELAY_US)

    @args_viewable_as_strided_memory((0, 1, 2), record_stream=True)
    def launch(a, b, c, s):
        handle = s.ptr
        a.view(handle)
        b.view(int(str(handle)))  # an equal int, not the same object
        c.view(np.uint64(handle))
        for arg in (a, b, c):
            marking.mark(arg.obj.last, s)

    args = [marking.producer() for _ in range(3)]
    for _ in range(launches):
        records = simulator.calls("cuEventRecord")
        waits = simulator.calls("cuStreamWaitEvent")
        launch(*args, stream)
        records = simulator.calls("cuEventRecord") - records
        waits = simulator.calls("cuStreamWaitEvent") - waits
        assert records - waits == 1, (records, waits)  # one hand-over event per launch
    gc.collect()
    release_pending(wait=True)
    simulator.set_delay_us(0)
    assert len(marking.calls) == 3 * launches
    assert set(marking.calls.values()) == {1}
    assert marking.early == []
    assert events_back_to(simulator, live) == live


def _parked_view_ids():
    """The ids of the emptied views the spare proxies keep (no reference kept to them: a view
    held elsewhere is let go, not filled again)."""
    gc.collect()
    spares = [o for o in gc.get_objects() if type(o) is ViewableArgument and o.obj is None]
    return {id(r) for p in spares for r in gc.get_referents(p) if type(r) is StridedMemoryView}


def test_a_recording_launch_fills_its_kept_views_again(gpu, simulator):
    """With record_stream=True a launcher's proxies keep their views as any launcher's do: as
    the launch ends each view's hold (a DLPack capsule) moves to the launch's hand-over and
    the view is emptied, and the next launch fills those view objects again.  Every deleter
    runs once, after the stream's work; one event per launch."""
    marking = Marking(gpu, 2 * 20 + 10)
    stream = gpu.stream()
    first, second = marking.producer(), marking.producer()
    made = []

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def launch(a, b, s):
        for arg in (a, b):
            made.append(id(arg.view(s.ptr)))
            marking.mark(arg.obj.last, s)

    simulator.set_delay_us(DELETER_DELAY_US)
    launch(first, second, stream)
    parked = _parked_view_ids()
    filled_again = []
    for _ in range(19):
        del made[:]
        launch(first, second, stream)
        filled_again.append(set(made) <= parked and len(set(made)) == 2)
        parked = _parked_view_ids()
    release_pending(wait=True)
    simulator.set_delay_us(0)
    if _view.fast_paths:
        assert filled_again == [True] * 19
    else:
        assert parked == set()  # (a build without spares keeps no view)
    assert len(marking.calls) == 40 and set(marking.calls.values()) == {1}
    assert marking.early == []
    assert _view._pending_holds() == (0, 0, 0)


# --- streams, contexts and graphs that go away -----------------------------------------------


def test_a_stream_destroyed_under_a_pending_hold_releases_it_once_done(gpu, simulator):
    """Destroying S under a pending hold lets S's queued work finish (the driver's rule), and the
    event recorded on it completes with that work: the hold goes then, its deleter once."""
    from driver_support import Stream, drv, ok

    marking = Marking(gpu, 10)
    stream = Stream(0)
    simulator.set_delay_us(20 * DELETER_DELAY_US)
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=stream.ptr)
    marking.mark(producer.last, stream)
    view.record_stream(stream)
    del view
    ok(drv.cuStreamDestroy(stream.handle))
    stream.handle = None
    assert release_pending() == 0 and marking.calls == {}
    assert release_pending(wait=True) == 1
    simulator.set_delay_us(0)
    assert marking.calls == {1: 1} and marking.early == []
    assert _view._pending_holds() == (0, 0, 0)


RESET_SCRIPT = """
import sys
sys.path[:0] = sys.argv[1:3]
import driver_support
from driver_support import Resources, drv, make_current, ok, simulator
import test_gpu_record_stream as t
import stridedview
from stridedview import StridedMemoryView, release_pending

sim = simulator()
make_current(0)
res = Resources()
marking = t.Marking(res, 10)  # (its pinned markers are read before the reset frees them)
stream = res.stream()
sim.set_delay_us(100000)  # the stream's work would take long: the reset comes first
producer = marking.producer()
view = StridedMemoryView(producer, stream_ptr=stream.ptr)
ok(drv.cuMemsetD8Async(marking.memory.ptr, 7, 64, stream.handle))
marking.mark(producer.last, stream)
view.record_stream(stream)
del view
before = release_pending()
stridedview.release_driver_resources()
print(before, marking.calls, marking.early, flush=True)
ok(drv.cuDevicePrimaryCtxReset(ok(drv.cuDeviceGet(0))))
print(release_pending(), marking.calls)
"""


def test_release_driver_resources_before_a_reset_waits_for_a_pending_hold(gpu):
    """A pending hold whose stream is still busy, then ``release_driver_resources()`` and
    cudaDeviceReset: the call waits for the stream's work and releases the hold once, never
    early, before the reset (which would kill its event: naming that event afterwards
    crashes a real driver); after the reset nothing is pending.  In a child process: the
    reset takes every test's memory."""
    from simgpu.simgpu_support import child_paths, run_python

    result = run_python(RESET_SCRIPT, args=child_paths())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["0 {1: 1} []", "0 {1: 1}"], result.stdout


EXIT_SCRIPT = """
import sys
sys.path[:0] = sys.argv[1:3]
from driver_support import Resources, make_current, simulator
import test_gpu_record_stream as t
from stridedview import StridedMemoryView


class Loud(t.MarkedCapsules):
    def _delete(self, address):
        super()._delete(address)
        print("deleted; early:", self.early, flush=True)


sim = simulator()
make_current(0)
res = Resources()
marking = t.Marking(res, 10)
stream = res.stream()
sim.set_delay_us(20000)
producer = Loud(marking.memory.ptr, marking.markers, marking.calls, marking.early)
view = StridedMemoryView(producer, stream_ptr=stream.ptr)
marking.mark(producer.last, stream)
view.record_stream(stream)
del view
print("exiting with", marking.calls, flush=True)
"""


def test_interpreter_exit_waits_for_the_stream_then_releases(gpu):
    """A hold pending at interpreter exit is released after its stream is done (never before,
    never not at all)."""
    from simgpu.simgpu_support import child_paths, run_python

    result = run_python(EXIT_SCRIPT, args=child_paths())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["exiting with {}", "deleted; early: []"], result.stdout


def test_a_capturing_stream_keeps_the_hold_and_its_capture(gpu, simulator):
    """Handed to a stream that is capturing a graph (whose work runs only when the graph is
    launched), the hold is kept, outside the bound, by the graph (tests/test_gpu_graphs.py has
    the rest), and nothing queries the capture's events: the capture stays valid.  Once the
    graph is destroyed the hold comes back, released exactly once."""
    from driver_support import drv, ok

    marking = Marking(gpu, 10)
    stream = gpu.stream()
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    ok(drv.cuStreamBeginCapture(stream.handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))
    view.record_stream(stream)
    del view
    assert _view._pending_holds() == (0, 0, 0) and _view._graph_owned() == 1
    assert release_pending() == 0
    graph = ok(drv.cuStreamEndCapture(stream.handle))
    assert marking.calls == {}
    ok(drv.cuGraphDestroy(graph))
    deadline = time.monotonic() + 10
    while marking.calls == {} and time.monotonic() < deadline:  # (a driver thread gives it back)
        release_pending()
        time.sleep(0.002)
    assert marking.calls == {1: 1} and _view._graph_owned() == 0


# --- where a stream is: decided at record_stream, kept until the record ----------------------


#: The delay of each stream operation below: the work on the view (one copy) runs this long
#: after it is queued, longer than anything the test does meanwhile on a busy machine.
LATE_US = 50_000


class Default:
    """A default-stream handle (1: the legacy stream, 2: the calling thread's per-thread stream)
    where Marking.mark wants a stream object."""

    def __init__(self, handle):
        self.handle = handle
        self.ptr = handle


def test_a_stream_reported_gone_at_release_is_waited_for(gpu, simulator):
    """A view recorded on S, S's work still queued, then the view released while the driver
    answers the record and cuStreamGetCtx with CUDA_ERROR_INVALID_HANDLE (what a driver that
    reports a destroyed stream answers): the hold goes only once S's work has run (the host
    waits for S's context), its deleter once, with nothing left pending.  (A stream really
    destroyed cannot serve here: naming it is undefined, and a real driver crashes.)"""
    from driver_support import Stream, drv

    marking = Marking(gpu, 10)
    stream = Stream(0)
    simulator.set_delay_us(LATE_US)
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=stream.ptr)
    marking.mark(producer.last, stream)
    view.record_stream(stream)
    simulator.fail("cuEventRecord", drv.CUresult.CUDA_ERROR_INVALID_HANDLE, count=-1)
    simulator.fail("cuStreamGetCtx", drv.CUresult.CUDA_ERROR_INVALID_HANDLE, count=-1)
    try:
        del view
        assert simulator.fail_fired("cuEventRecord") >= 1
    finally:
        simulator.fail_clear()
    simulator.set_delay_us(0)
    release_pending(wait=True)
    assert marking.calls == {1: 1} and marking.early == []
    assert _view._pending_holds() == (0, 0, 0)


def begin_capture(stream):
    from driver_support import drv, ok

    ok(drv.cuStreamBeginCapture(stream.handle, drv.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL))


def test_the_legacy_stream_beside_a_capture_keeps_the_hold_until_it_can_be_recorded(gpu, simulator):
    """Recorded on the legacy stream, released while a blocking stream of its context captures a
    graph (the legacy stream then answers STREAM_CAPTURE_IMPLICIT, a temporary state): the hold
    is kept unrecorded, nothing invalidates the capture, and once the capture ends the hold is
    recorded (by the checks that later view creations make) and released after the legacy
    stream's work."""
    from driver_support import drv, ok

    marking = Marking(gpu, 10)
    capturing = gpu.stream(flags=0)  # a blocking stream
    legacy = Default(1)
    simulator.set_delay_us(LATE_US)
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    marking.mark(producer.last, legacy)
    view.record_stream(1)
    begin_capture(capturing)
    try:
        del view
        assert marking.calls == {} and _view._deferred_holds() == 1
        assert release_pending() == 0 and _view._pending_holds() == (1, 1, 0)
    finally:
        graph = ok(drv.cuStreamEndCapture(capturing.handle))  # fails if the capture was invalidated
        ok(drv.cuGraphDestroy(graph))
    for _ in range(64):  # view creations check the pending hand-overs: the record is made now
        StridedMemoryView(np.zeros(1), stream_ptr=-1)
    assert _view._deferred_holds() == 0 and _view._pending_holds() == (1, 1, 0)
    assert marking.calls == {}  # (the legacy stream's work is still running)
    simulator.set_delay_us(0)
    assert release_pending(wait=True) == 1
    assert marking.calls == {1: 1} and marking.early == []
    assert _view._pending_holds() == (0, 0, 0)


def test_a_stream_whose_capture_was_invalidated_keeps_the_hold_until_it_ends(gpu, simulator):
    """Recorded on S, released while S's capture is invalidated (S takes no record until the
    capture is ended): the hold is kept unrecorded, then recorded once the capture has ended and
    released after S's work, never at once."""
    from driver_support import drv, ok

    marking = Marking(gpu, 10)
    stream = gpu.stream()
    simulator.set_delay_us(LATE_US)
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    marking.mark(producer.last, stream)
    view.record_stream(stream)
    begin_capture(stream)
    # A query of a capturing stream is not allowed: it invalidates the capture.
    assert drv.cuStreamQuery(stream.handle)[0] != drv.CUresult.CUDA_SUCCESS
    status = ok(drv.cuStreamIsCapturing(stream.handle))
    assert status == drv.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_INVALIDATED
    try:
        del view
        assert marking.calls == {} and _view._deferred_holds() == 1
        assert release_pending() == 0
    finally:
        result = drv.cuStreamEndCapture(stream.handle)
    assert result[0] == drv.CUresult.CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
    assert marking.calls == {}
    simulator.set_delay_us(0)
    assert release_pending(wait=True) == 1
    assert marking.calls == {1: 1} and marking.early == []
    assert _view._pending_holds() == (0, 0, 0)


@pytest.mark.parametrize("recorder", ["alive", "ended"])
def test_a_per_thread_stream_handed_to_another_thread_is_waited_for(gpu, simulator, recorder):
    """Thread A records a view on its per-thread default stream (2), with work queued there; the
    view is released by the main thread: the hold goes only after A's work has run (recorded on
    the legacy stream of A's context, which waits for A's per-thread stream; with A ended, its
    context is waited for), never on the main thread's own per-thread stream."""
    marking = Marking(gpu, 10)
    simulator.set_delay_us(LATE_US)
    # The main thread makes the view: with the GIL off, an object is freed by the thread that
    # made it when another thread drops its last reference (biased reference counting), so
    # a view made by A would be released by A (and A blocked here would release it late).
    producer = marking.producer()
    box = [StridedMemoryView(producer, stream_ptr=-1)]
    recorded, finish = threading.Event(), threading.Event()

    def record():
        from driver_support import make_current

        make_current(0)
        marking.mark(producer.last, Default(2))
        box[0].record_stream(2)
        recorded.set()
        finish.wait(60)

    thread = threading.Thread(target=record)
    thread.start()
    try:
        recorded.wait(60)
        if recorder == "ended":
            finish.set()
            thread.join(60)
        del box[:]  # the main thread releases the view
        simulator.set_delay_us(0)
        release_pending(wait=True)
    finally:
        finish.set()
        thread.join(60)
    assert marking.calls == {1: 1} and marking.early == []
    assert _view._pending_holds() == (0, 0, 0)


def test_a_legacy_stream_is_its_recording_contexts_wherever_the_view_is_released(gpu, simulator):
    """A view of device 0's memory recorded on the legacy stream (1) with device 0 current, then
    released with device 1 current: the hold goes only after device 0's legacy stream has run
    the work queued there, never after device 1's."""
    from driver_support import make_current

    marking = Marking(gpu, 10)
    simulator.set_delay_us(LATE_US)
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    marking.mark(producer.last, Default(1))
    view.record_stream(1)
    make_current(1)
    try:
        del view
        simulator.set_delay_us(0)
        release_pending(wait=True)
    finally:
        make_current(0)
    assert marking.calls == {1: 1} and marking.early == []
    assert _view._pending_holds() == (0, 0, 0)


RESET_DEFAULT_SCRIPT = """
import sys
sys.path[:0] = sys.argv[1:3]
from driver_support import Resources, drv, make_current, ok, simulator
import test_gpu_record_stream as t
import stridedview
from stridedview import StridedMemoryView, release_pending

sim = simulator()
make_current(0)
first = t.Marking(Resources(), 10, pinned=False)
view = StridedMemoryView(first.producer(), stream_ptr=-1)
view.record_stream(1)
del view
release_pending(wait=True)  # its event is back in this thread's pool
live = sim.counter("events_live")
stridedview.release_driver_resources()  # the pooled event destroyed: the reset would kill it
print(live - sim.counter("events_live") >= 1, flush=True)
ok(drv.cuDevicePrimaryCtxReset(ok(drv.cuDeviceGet(0))))
make_current(0)
marking = t.Marking(Resources(), 10)
sim.set_delay_us(t.LATE_US)
producer = marking.producer()
view = StridedMemoryView(producer, stream_ptr=-1)
marking.mark(producer.last, t.Default(1))
view.record_stream(1)
del view
held = dict(marking.calls)
released = release_pending(wait=True)
print(held, released, marking.calls, marking.early)
"""


def test_a_default_stream_hand_over_after_a_reset_takes_a_fresh_event(gpu):
    """``release_driver_resources()`` destroys the pooled hand-over event before a primary
    context reset (which would kill it, and a real driver crashes on a killed event); after
    the reset a hand-over on the legacy stream records a fresh event: the hold goes after the
    stream's work, its deleter once.  In a child process: the reset takes every test's
    memory."""
    from simgpu.simgpu_support import child_paths, run_python

    result = run_python(RESET_DEFAULT_SCRIPT, args=child_paths())
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.splitlines() == ["True", "{} 1 {1: 1} []"], result.stdout


def test_a_context_destroyed_before_the_view_is_released_releases_it_at_once(gpu, simulator):
    """A view recorded on a stream of a created context, the context destroyed before the view is
    released (its work discarded): the hold goes at once, without a host wait, its deleter once."""
    from driver_support import create_context, drv, ok

    marking = Marking(gpu, 10)
    context = create_context(0)
    stream = ok(drv.cuStreamCreate(1))
    ok(drv.cuCtxPopCurrent())
    producer = marking.producer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    view.record_stream(int(stream))
    ok(drv.cuCtxDestroy(context))
    waits = simulator.calls("cuCtxSynchronize")
    del view
    assert marking.calls == {1: 1}
    assert simulator.calls("cuCtxSynchronize") == waits
    assert _view._pending_holds() == (0, 0, 0)
