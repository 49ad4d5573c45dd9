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
import sys
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


# --- the hold, released once the stream is done: each path, held by gates ----------------------
# These were tests/test_record_stream.py's tests against the Python fake of cuda-bindings (whose
# streams ran only when the test said so).  Here each stream that reads the memory is held by a
# Gate (a host function that waits until the test opens it), so "still running" is a fact, not a
# matter of timing, and the work queued behind the gate writes the marker byte the deleter reads
# (Marking), so a release before that work ran is seen.


class gated:
    """``with gated(stream, ...) as gates:`` each stream (a driver_support Stream, a Default or
    a handle of the current context) held by a Gate enqueued now; every gate opened on exit."""

    def __init__(self, *streams):
        from simgpu.simgpu_support import Gate

        self.gates = [Gate(timeout=30).enqueue(getattr(s, "handle", s)) for s in streams]

    def __enter__(self):
        return self.gates if len(self.gates) > 1 else self.gates[0]

    def __exit__(self, *exc):
        for gate in self.gates:
            gate.open()


class DeviceArray:
    """A CUDA Array Interface producer over device memory with no stream of its own,
    weak-referenceable, so that a test sees when the last reference to it goes."""

    def __init__(self, memory):
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (64,), "typestr": "|u1", "data": (memory.ptr, False),
            "strides": None, "stream": None,
        }
        self.keeps = None  # (a test puts a view here to make a cycle)


def hand_over(obj, stream):
    """A view of ``obj`` (stream -1: nothing ordered) recorded on ``stream``, dropped: its hold
    handed over."""
    view = StridedMemoryView(obj, stream_ptr=-1)
    view.record_stream(getattr(stream, "ptr", stream))
    del view


def marked_hand_over(marking, producer, stream):
    """A view of ``producer`` whose work on ``stream`` (behind its gate) writes the marker of
    the capsule the view holds, recorded on ``stream`` and dropped; the capsule's id."""
    view = StridedMemoryView(producer, stream_ptr=-1)
    marking.mark(producer.last, stream)
    view.record_stream(stream.ptr)
    del view
    return producer.last


def pending():
    """(entries, holds) pending now."""
    return _view._pending_holds()[:2]


def test_record_stream_with_an_unknown_handle_is_a_cuda_error(gpu, simulator):
    """A handle that names no stream (one the driver reports gone:
    ``Simulator.handle_report_gone``) fails at record_stream (the driver's cuStreamGetCtx), not
    silently at release; the view then records nothing, and its memory goes with it."""
    import weakref

    from driver_support import Stream

    from stridedview import CUDAError

    stream = Stream(0)
    simulator.handle_report_gone(stream.ptr)
    stream.handle = None  # (gone: nothing to destroy)
    array = DeviceArray(gpu.device(64))
    gone = weakref.ref(array)
    view = StridedMemoryView(array, stream_ptr=-1)
    with pytest.raises(CUDAError, match="^cuStreamGetCtx failed: CUDA_ERROR_INVALID_HANDLE$"):
        view.record_stream(stream.ptr)
    del array, view
    assert gone() is None and pending() == (0, 0)


def test_hold_released_only_once_the_stream_is_done(gpu, simulator):
    """The exporting object outlives the view until the work queued on the stream when the
    view was released is done (and no longer: work queued after is not waited for); one event
    recorded, nothing blocks the host."""
    import weakref

    from test_gpu_stream_ordering import CallLog
    from simgpu.simgpu_support import wait_until

    stream = gpu.stream()
    array = DeviceArray(gpu.device(64))
    gone = weakref.ref(array)
    with gated(stream) as first, CallLog(simulator) as log:
        hand_over(array, stream)
        del array
        assert gone() is not None and pending() == (1, 1)
        assert release_pending() == 0 and gone() is not None
        with gated(stream) as later:  # queued after the release: not waited for
            first.open()
            assert wait_until(later.entered.is_set)
            assert release_pending() == 1
            assert gone() is None and pending() == (0, 0)
    made = log.names()
    assert made.count("cuEventRecord") == 1 and "cuEventSynchronize" not in made


@pytest.mark.parametrize("kind", producers.KINDS)
def test_capsule_deleter_runs_once_after_the_stream(gpu, kind):
    """A consumed capsule's deleter runs exactly once, and only once the stream is done."""
    stream = gpu.stream()
    producer = producers.make_producer(kind, device=(2, 0), shape=(64,), dtype="uint8", data=gpu.device(64).ptr)
    with gated(stream):
        hand_over(producer, stream)
        assert producers.deleter_calls(producer) == 0
        gc.collect()
        assert release_pending() == 0 and producers.deleter_calls(producer) == 0
    assert release_pending(wait=True) == 1 and producers.deleter_calls(producer) == 1
    assert release_pending(wait=True) == 0 and producers.deleter_calls(producer) == 1


def test_several_streams_keep_the_hold_until_all_are_done(gpu, simulator):
    """Recorded on two streams (and one twice), the hold waits for both: one event each."""
    from test_gpu_stream_ordering import CallLog

    marking = Marking(gpu, 10)
    first, second = gpu.stream(), gpu.stream()
    producer = marking.producer()
    with gated(first, second) as (first_gate, second_gate):
        view = StridedMemoryView(producer, stream_ptr=-1)
        marking.mark(producer.last, second)
        view.record_stream(first)
        view.record_stream(second)
        view.record_stream(first)
        with CallLog(simulator) as log:
            del view
        records = [call.args[1] for call in log.calls if call.name == "cuEventRecord"]
        assert sorted(records) == sorted([first.ptr, second.ptr])
        first_gate.open()
        first.synchronize()
        assert release_pending() == 0 and marking.calls == {}
    assert release_pending(wait=True) == 1
    assert marking.calls == {1: 1} and marking.early == []


def test_completed_holds_are_released_by_later_view_creations(gpu, simulator):
    """Without release_pending: while the stream runs, making views checks the hold (an event
    query) and keeps it; once the stream is done, making views releases it."""
    marking = Marking(gpu, 10)
    stream = gpu.stream()
    producer = marking.producer()
    host = np.zeros(3)
    with gated(stream):
        marked_hand_over(marking, producer, stream)
        queries = simulator.calls("cuEventQuery")
        for _ in range(200):
            StridedMemoryView(host)
        assert simulator.calls("cuEventQuery") > queries  # checked, not done
        assert marking.calls == {}
    stream.synchronize()
    for _ in range(200):
        StridedMemoryView(host)
    assert marking.calls == {1: 1} and marking.early == [] and pending() == (0, 0)


def test_completed_holds_are_released_by_later_hand_overs(gpu, simulator):
    """Each hand-over that lists an entry checks the oldest pending ones: a finished hold goes
    at the next hand-over (on another stream: one on the same stream joins the pending entry
    of that stream instead, test_gpu_driver_door.py's
    test_c_hand_overs_on_one_stream_join_its_pending_entry_up_to_a_limit)."""
    marking = Marking(gpu, 10)
    first_stream, second_stream = gpu.stream(), gpu.stream()
    first, second = marking.producer(), marking.producer()
    with gated(first_stream):
        marked_hand_over(marking, first, first_stream)
    first_stream.synchronize()
    with gated(second_stream):
        marked_hand_over(marking, second, second_stream)
        assert marking.calls == {1: 1}  # the first, at the second's hand-over
    assert release_pending(wait=True) == 1
    assert marking.calls == {1: 1, 2: 1} and marking.early == []


def test_many_pending_holds_are_released_oldest_first_and_once(gpu, simulator):
    """With hundreds pending, the checks on view creation release the finished ones oldest
    first, stop at the first still running and keep it first; release_pending releases any
    finished one out of order; every hold goes exactly once, none before its stream is done
    (the registry's claimed slots are cut off as the count falls)."""
    import weakref

    from simgpu.simgpu_support import Gate

    count = 300
    memory = gpu.device(64)
    streams = [gpu.stream() for _ in range(count)]
    gates = [Gate(timeout=30).enqueue(stream.handle) for stream in streams]
    try:
        arrays = [DeviceArray(memory) for _ in range(count)]
        gone = [weakref.ref(array) for array in arrays]
        for stream, array in zip(streams, arrays):
            hand_over(array, stream)
        del arrays, array
        assert pending() == (count, count)
        host = np.zeros(3)

        def alive():
            return [i for i in range(count) if gone[i]() is not None]

        def create_views(number):
            for _ in range(number):
                StridedMemoryView(host)

        def finish(which):
            for i in which:
                gates[i].open()
            for i in which:
                streams[i].synchronize()

        finish(range(100))
        create_views(32 * 20)  # 20 checks of the 8 oldest: past the first 100, which stay first
        assert alive() == list(range(100, count)) and pending() == (200, 200)
        finish(range(150, count))
        create_views(32 * 4)  # the oldest (100) still runs: the checks release nothing
        assert alive() == list(range(100, count))
        assert release_pending() == 150  # every finished one, out of order
        assert alive() == list(range(100, 150)) and pending() == (50, 50)
        finish(range(100, 110))
        create_views(32 * 3)
        assert alive() == list(range(110, 150))
        finish(range(110, 150))
        assert release_pending() == 40 and alive() == [] and pending() == (0, 0)
    finally:
        for gate in gates:
            gate.open()


def test_derived_views_keep_the_root_until_the_stream_is_done(gpu):
    """A slice recorded on a stream keeps its root view, and so the capsule, past the root's
    and the slice's release."""
    marking = Marking(gpu, 10)
    stream = gpu.stream()
    producer = marking.producer()
    with gated(stream):
        root = StridedMemoryView(producer, stream_ptr=-1)
        marking.mark(producer.last, stream)
        part = root[4:]
        part.record_stream(stream.ptr)
        del root, part
        assert release_pending() == 0 and marking.calls == {}
    assert release_pending(wait=True) == 1
    assert marking.calls == {1: 1} and marking.early == []


def test_a_view_handed_on_hands_over_when_its_consumer_lets_go(gpu):
    """Re-exported through __dlpack__, the view lives as long as the consumer's capsule: the
    hand-over happens when that last reference goes, and the hold then waits for the stream."""
    marking = Marking(gpu, 10)
    stream = gpu.stream()
    producer = marking.producer()
    with gated(stream):
        view = StridedMemoryView(producer, stream_ptr=-1)
        view.record_stream(stream.ptr)
        capsule = view.__dlpack__(stream=-1, max_version=(1, 0))
        del view
        marking.mark(producer.last, stream)
        assert pending() == (0, 0)  # the capsule still holds the view
        del capsule  # never consumed: its destructor lets the view go
        assert pending() == (1, 1) and marking.calls == {}
        assert release_pending() == 0
    assert release_pending(wait=True) == 1
    assert marking.calls == {1: 1} and marking.early == []


@pytest.mark.parametrize("first_cleared", ["view", "producer"])
def test_a_view_in_a_collected_cycle_hands_over(gpu, first_cleared):
    """A view in a garbage cycle with its producer hands over when the collector breaks the
    cycle, whichever it clears first (the view's tp_clear would drop the exporting object):
    the capsule's deleter waits for the stream."""
    marking = Marking(gpu, 10)
    stream = gpu.stream()
    wrapper = Cycle(marking.producer())
    with gated(stream):
        view = StridedMemoryView(wrapper, stream_ptr=-1)
        marking.mark(wrapper.last, stream)
        view.record_stream(stream.ptr)
        wrapper.keeps = view  # wrapper -> view -> wrapper
        if first_cleared == "view":
            _view._clear_for_tests(view)  # what the collector does first when it picks the view
            assert view.exporting_obj is None and pending() == (1, 1)
        del wrapper, view
        gc.collect()
        assert pending() == (1, 1) and marking.calls == {}
        assert release_pending() == 0
    assert release_pending(wait=True) == 1
    assert marking.calls == {1: 1} and marking.early == []


def test_default_stream_with_no_current_context_is_the_data_devices(gpu, simulator, two_gpus):
    """Recorded and released in a thread with no current context, handle 1 means the data
    device's primary context's legacy stream (device 1's here): recorded there, with that
    context pushed, and the hold waits for that stream's work."""
    from driver_support import on_device, primary
    from test_gpu_stream_ordering import PUSH, CallLog, in_thread

    memory = gpu.device(64, device=1)
    producer = producers.make_producer(device=(2, 1), shape=(64,), dtype="uint8", data=memory.ptr)

    def release_here():
        # Made and dropped in this thread: a free-threaded build deallocates an object
        # dropped by another thread in the thread that made it.
        with CallLog(simulator) as log:
            hand_over(producer, 1)
        return log.calls

    with on_device(1):
        gate = gated(1)
    with gate:
        calls = in_thread(release_here, current=None)
        assert pending() == (1, 1) and producers.deleter_calls(producer) == 0
        assert release_pending() == 0
        recorded = [i for i, call in enumerate(calls) if call.name == "cuEventRecord"]
        assert len(recorded) == 1 and calls[recorded[0]].args[1] == 1
        pushes = [call.args[0] for call in calls[: recorded[0]] if call.name == PUSH]
        assert pushes[-1] == int(primary(1))
    assert release_pending(wait=True) == 1 and producers.deleter_calls(producer) == 1


def test_stream_destroyed_before_the_release_waits_for_its_context_then_releases(
    gpu, simulator, monkeypatch
):
    """A stream gone before the view is released (the driver reports it:
    ``Simulator.handle_report_gone``; its queued work still runs) cannot be recorded on: the
    host waits for its context (cuCtxSynchronize, with the context the stream had pushed, none
    being current), then the hold goes, after that work, with nothing reported."""
    from driver_support import Stream, primary
    from simgpu.simgpu_support import wait_until
    from test_gpu_stream_ordering import POP, PUSH, CallLog, in_thread

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    marking = Marking(gpu, 10)
    stream = Stream(0)
    producer = marking.producer()
    waits = simulator.calls("cuCtxSynchronize")

    def open_when_the_host_waits(gate):
        wait_until(lambda: simulator.calls("cuCtxSynchronize") > waits)
        gate.open()

    def record_then_release():
        # Made, recorded and released in one thread (with no context current): a
        # free-threaded build frees an object in the thread that made it.
        view = StridedMemoryView(producer, stream_ptr=-1)
        marking.mark(producer.last, stream)
        view.record_stream(stream.ptr)
        simulator.handle_report_gone(stream.ptr)  # destroyed as cuStreamDestroy: its work drains
        stream.handle = None
        opener = threading.Thread(target=open_when_the_host_waits, args=(gate,))
        opener.start()
        try:
            with CallLog(simulator) as log:
                del view
        finally:
            opener.join(30)
        return log.calls

    with gated(stream) as gate:
        calls = in_thread(record_then_release, current=None)
    assert marking.calls == {1: 1} and marking.early == [] and pending() == (0, 0)
    assert reported == []
    made = [call.name for call in calls]
    waited = made.index("cuCtxSynchronize")
    assert PUSH in made[:waited] and POP in made[waited:]
    push = max(i for i in range(waited) if made[i] == PUSH)
    assert calls[push].args[0] == int(primary(0))


def test_pending_hand_overs_are_bounded(gpu, simulator):
    """Past the bound a hand-over first checks every pending one, then waits on the host for
    the oldest (the only host wait, as a full launch queue makes): never more than the bound
    pending, and each hold released only after its stream's work."""
    from simgpu.simgpu_support import wait_until

    marking = Marking(gpu, 20)
    streams = [gpu.stream() for _ in range(7)]
    producer = marking.producer()
    waits = simulator.calls("cuEventSynchronize")
    previous = _view._set_pending_limit(3)
    with gated(*streams) as gates:

        def open_the_waited_for():
            # The oldest stream's gate, each time the host waits for one more event.
            for k in range(4):
                if not wait_until(lambda: simulator.calls("cuEventSynchronize") > waits + k, 20):
                    return
                gates[k].open()

        opener = threading.Thread(target=open_the_waited_for)
        opener.start()
        try:
            for count, stream in enumerate(streams, 1):
                marked_hand_over(marking, producer, stream)
                assert pending()[0] <= 3
                assert len(marking.calls) == max(0, count - 3)
            assert simulator.calls("cuEventSynchronize") - waits == 4
        finally:
            _view._set_pending_limit(previous)
            for gate in gates:
                gate.open()
            opener.join(30)
    release_pending(wait=True)
    assert set(marking.calls.values()) == {1} and len(marking.calls) == 7
    assert marking.early == []


# --- the decorator's record_stream=True, held by gates -------------------------------------------


@pytest.mark.parametrize("count", [1, 2, 4, 5, 7])
def test_decorator_holds_of_any_number_of_arguments_released_once_after_the_stream(
    gpu, simulator, count
):
    """A launch of ``count`` arguments (the group's first hold kept in its own fields, the
    next three in its slots, any more in hold objects): one event, every hold kept until
    the stream is done, each deleter run once after the stream's work, each temporary freed
    then; the next launch the same (its kept views filled again)."""
    import weakref

    from test_gpu_stream_ordering import CallLog

    marking = Marking(gpu, 20)
    memory = gpu.device(64)
    stream = gpu.stream()
    seen = []

    @args_viewable_as_strided_memory(tuple(range(7)), record_stream=True)
    def launch(a, b, c, d, e, f, g, stream):
        for arg in (a, b, c, d, e, f, g):
            if arg is not None:
                arg.view(stream.ptr)
                if isinstance(arg.obj, MarkedCapsules):
                    marking.mark(arg.obj.last, stream)

    def temporary():
        array = DeviceArray(memory)
        seen.append(weakref.ref(array))
        return array

    made = [marking.producer() for _ in range(0, count, 2)]  # even positions
    for round_ in (1, 2):
        seen.clear()
        arguments = [made[i // 2] if i % 2 == 0 else temporary() for i in range(count)]
        with gated(stream):
            with CallLog(simulator) as log:
                launch(*arguments, *[None] * (7 - count), stream)
            assert log.names().count("cuEventRecord") == 1
            del arguments
            assert pending() == (1, count)
            assert len(marking.calls) == (round_ - 1) * len(made)
            assert all(ref() is not None for ref in seen)
            assert release_pending() == 0
        assert release_pending(wait=True) == count
        assert len(marking.calls) == round_ * len(made) and set(marking.calls.values()) == {1}
        assert marking.early == []
        assert all(ref() is None for ref in seen)
        assert pending() == (0, 0)


def test_decorator_view_kept_past_the_launch_hands_over_on_its_own(gpu, simulator):
    """A view the function returns is not the launch's to hand over: it does so when it is
    released, with an event of its own, after the work queued until then."""
    from test_gpu_stream_ordering import CallLog

    marking = Marking(gpu, 10)
    stream = gpu.stream()

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def launch(a, b):
        b.view(stream.ptr)
        marking.mark(b.obj.last, stream)
        return a.view(stream.ptr)

    kept_producer, other = marking.producer(), marking.producer()
    with gated(stream):
        kept = launch(kept_producer, other)
        kept_id, other_id = kept_producer.last, other.last
        assert pending() == (1, 1)  # the other argument's view
    assert release_pending(wait=True) == 1
    assert marking.calls == {other_id: 1}
    with gated(stream):
        marking.mark(kept_id, stream)  # later work on the kept view
        with CallLog(simulator) as log:
            del kept
        assert log.names().count("cuEventRecord") == 1
        assert release_pending() == 0 and kept_id not in marking.calls
    assert release_pending(wait=True) == 1
    assert marking.calls == {other_id: 1, kept_id: 1} and marking.early == []


def test_explicit_record_stream_in_a_launch_lets_the_kept_view_go(gpu):
    """A launcher without the option whose body records its view: the proxy does not keep (and
    empty) that view, which hands over when released, after the stream's work; later launches
    view afresh and leave nothing behind."""
    marking = Marking(gpu, 10)
    stream = gpu.stream()

    @args_viewable_as_strided_memory((0,))
    def launch(a):
        view = a.view(stream.ptr)
        view.record_stream(stream.ptr)
        marking.mark(a.obj.last, stream)
        # (the view goes when the function returns, or at the launch's end)

    for launches in range(1, 5):
        producer = marking.producer()
        with gated(stream):
            launch(producer)
            assert pending() == (1, 1) and release_pending() == 0
            assert len(marking.calls) == launches - 1
        assert release_pending(wait=True) == 1
        assert len(marking.calls) == launches and set(marking.calls.values()) == {1}
    assert marking.early == []


def test_spare_proxies_do_not_carry_a_launch_into_the_next(gpu):
    """After a launch with the option, a launch without it (reusing its spare proxies) hands
    nothing over: its arguments go at its end, while the first launch's holds wait."""
    marking = Marking(gpu, 10, pinned=False)
    stream = gpu.stream()

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def recording(a, b):
        a.view(stream.ptr)
        b.view(stream.ptr)

    @args_viewable_as_strided_memory((0, 1))
    def plain(a, b):
        a.view(stream.ptr)
        b.view(stream.ptr)

    with gated(stream):
        recording(marking.producer(), marking.producer())
        made = [marking.producer() for _ in range(2)]
        plain(*made)
        assert marking.calls == {3: 1, 4: 1}
        assert pending() == (1, 2)
    assert release_pending(wait=True) == 2


def test_a_launch_that_raises_still_hands_over(gpu):
    """The kernel may have been enqueued before the function raised: the launch's views hand
    over all the same, released after the stream's work."""
    marking = Marking(gpu, 10)
    stream = gpu.stream()

    @args_viewable_as_strided_memory((0,), record_stream=True)
    def launch(a):
        a.view(stream.ptr)
        marking.mark(a.obj.last, stream)
        raise RuntimeError("after the kernel")

    producer = marking.producer()
    with gated(stream):
        with pytest.raises(RuntimeError, match="after the kernel"):
            launch(producer)
        assert marking.calls == {} and pending() == (1, 1)
        assert release_pending() == 0
    assert release_pending(wait=True) == 1
    assert marking.calls == {1: 1} and marking.early == []


def test_decorator_argument_viewed_by_another_thread_as_the_launch_ends(gpu):
    """2,000 launches hand their argument to a worker thread that views it on a stream while
    the launch returns: no crash, and once the stream is done every producer has been
    released, once (100 a stress round where STRIDEDVIEW_STRESS_ROUNDS sizes the run, as
    tools/tsan.sh does)."""
    import os
    import queue
    import weakref

    from driver_support import drv, make_current, ok

    stream = gpu.stream()
    memory, scratch = gpu.device(64), gpu.device(64)

    class Device:
        @property
        def __cuda_array_interface__(self):  # Python code, run while the view is made
            return {
                "version": 3, "shape": (64,), "typestr": "|u1",
                "data": (memory.ptr, False), "strides": None, "stream": None,
            }

    work = queue.Queue()
    viewing = threading.Semaphore(0)
    failures = []

    def worker():
        try:
            make_current(0)
            while (proxy := work.get()) is not None:
                viewing.release()
                view = proxy.view(stream_ptr=stream.ptr)
                ok(drv.cuMemsetD8Async(scratch.ptr, 0, 64, stream.handle))  # its "kernel"
                del view, proxy
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)
            viewing.release()

    @args_viewable_as_strided_memory((0,), record_stream=True)
    def launch(a):
        work.put(a)
        viewing.acquire()  # the worker is calling view() as the launch returns

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    thread = threading.Thread(target=worker)
    thread.start()
    released = []
    rounds = os.environ.get("STRIDEDVIEW_STRESS_ROUNDS")
    launches = 2000 if rounds is None else 100 * int(rounds)
    try:
        for i in range(launches):
            device = Device()
            weakref.finalize(device, released.append, i)
            launch(device)
            del device
    finally:
        work.put(None)
        thread.join(60)
        sys.setswitchinterval(interval)
    assert failures == []
    stream.synchronize()
    release_pending()
    assert sorted(released) == list(range(launches))
    assert _view._pending_holds() == (0, 0, 0)


@pytest.mark.parametrize("kind", ["cai", "dlpack"])
def test_decorator_view_made_after_the_launch_ended_hands_over_on_its_own(gpu, simulator, kind):
    """A view another thread was making while the launch ended (its producer's code ran) does
    not join the launch's sealed group: it hands over on its own stream, with one event there,
    and its memory is released once, when that stream is done."""
    import functools
    import weakref

    from driver_support import make_current
    from test_gpu_stream_ordering import CallLog

    first, second = gpu.stream(), gpu.stream()
    memory = gpu.device(64)
    asked, ended = threading.Event(), threading.Event()
    main = threading.main_thread()

    def let_the_launch_end():
        # Python code the view runs: on the worker, it waits for the launch to end.
        if threading.current_thread() is not main:
            asked.set()
            assert ended.wait(30)

    class LateCAI:
        @property
        def __cuda_array_interface__(self):
            let_the_launch_end()
            return {
                "version": 3, "shape": (16,), "typestr": "|u1",
                "data": (memory.ptr, False), "strides": None, "stream": None,
            }

    class LateDLPack(producers.DLPackProducer):
        def __dlpack__(self, **kwargs):
            let_the_launch_end()
            return super().__dlpack__(**kwargs)

    if kind == "cai":
        late = LateCAI()  # released: its last reference dropped
        released = []
        weakref.finalize(late, released.append, "late")
        late_releases = released.__len__
    else:
        late = LateDLPack("versioned", device=(2, 0), shape=(16,), dtype="uint8", data=memory.ptr)
        late_releases = functools.partial(producers.deleter_calls, late)  # its capsules'
    other = producers.make_producer(device=(2, 0), shape=(16,), dtype="uint8", data=memory.ptr)
    failures = []

    def worker(proxy):
        try:
            make_current(0)
            view = proxy.view(stream_ptr=second.ptr)
            del view
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def launch(a, b):
        a.view(first.ptr)
        thread = threading.Thread(target=worker, args=(b,))
        thread.start()
        assert asked.wait(30)
        return thread

    with gated(first, second) as (first_gate, second_gate):
        thread = launch(other, late)
        with CallLog(simulator, all_threads=True) as log:
            ended.set()
            thread.join(30)
        del late
        assert failures == []
        recorded = [call.args[1] for call in log.calls if call.name == "cuEventRecord"]
        assert recorded == [second.ptr], (recorded, first.ptr, second.ptr)
        assert late_releases() == 0 and producers.deleter_calls(other) == 0
        assert _view._pending_holds() == (2, 2, 0)
        second_gate.open()
        second.synchronize()
        assert release_pending() == 1
        assert late_releases() == 1 and producers.deleter_calls(other) == 0
    first.synchronize()
    assert release_pending() == 1
    assert late_releases() == 1 and producers.deleter_calls(other) == 1
    assert _view._pending_holds() == (0, 0, 0)
