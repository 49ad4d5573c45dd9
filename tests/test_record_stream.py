"""Hand-overs without a GPU: ``view.record_stream``, ``release_pending`` and the decorator's
``record_stream=True``, against the modelling fake driver (tests/fake_driver.py).

The fake's streams never run by themselves: a hold handed to a stream is pending until the
test says the stream's work is done (``fake.finish``), so each test can show that nothing is
released before then and everything exactly once after.  The same behaviour on the simulated
device, with real memory reused by real stream-ordered allocators, is proven in
tests/test_gpu_record_stream.py.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import textwrap
import threading
import weakref

import numpy as np
import pytest

import producers
from fake_driver import CUresult, FakeDriver
from stridedview import (
    CUDAError,
    StridedMemoryView,
    _driver,
    _view,
    args_viewable_as_strided_memory,
    release_pending,
)

HERE = os.path.dirname(os.path.abspath(__file__))


class Device:
    """A CUDA Array Interface producer the fake takes as device memory (no stream of its own),
    weak-referenceable, so a test can see when the last reference to it goes."""

    def __init__(self, nbytes=64, ptr=0x7F0000A00000):
        self.ptr = ptr
        self.__cuda_array_interface__ = {
            "version": 3, "shape": (nbytes,), "typestr": "|u1", "data": (ptr, False),
            "strides": None, "stream": None,
        }
        self.keeps = None  # a test puts a view here to make a cycle


def device_capsule_producer(kind="versioned"):
    """A ctypes DLPack producer exporting "CUDA" memory (its own host buffer: the fake never
    touches it), its deleter calls counted."""
    return producers.make_producer(kind, device=(2, 0), shape=(16,), dtype="uint8")


@pytest.fixture
def fake_streams(fake):
    """The fake driver; after the test every stream's work is done and nothing is pending."""
    yield fake
    fake.finish()
    release_pending()
    assert _view._pending_holds() == (0, 0, 0)


def handed(obj, stream, *, record=True):
    """A view of ``obj`` (stream -1: nothing ordered) recorded on ``stream``, dropped: its hold
    handed over; a weak reference to ``obj`` when it has one."""
    view = StridedMemoryView(obj, stream_ptr=-1)
    if record:
        view.record_stream(stream)
    del view


def pending():
    """(entries, holds) pending now."""
    return _view._pending_holds()[:2]


# --- arguments and memory that needs no hand-over -------------------------------------------


@pytest.mark.parametrize(
    "stream, error, message",
    [
        (None, TypeError, "record_stream: stream must be an int or an object with __cuda_stream__ (got None)"),
        (True, TypeError, "record_stream: stream must be an int or an object with __cuda_stream__ (got True)"),
        (1.5, TypeError, "record_stream: stream must be an int or an object with __cuda_stream__ (got 1.5)"),
        ("7", TypeError, "record_stream: stream must be an int or an object with __cuda_stream__ (got '7')"),
        (-1, ValueError, "record_stream: stream must be a stream handle >= 0 (got -1): -1 names no stream"),
        (-2, ValueError, "record_stream: stream must be a stream handle >= 0 (got -2)"),
        (1 << 64, ValueError, "record_stream: stream must be a stream handle >= 0 (got 18446744073709551616)"),
    ],
    ids=["None", "bool", "float", "str", "minus-one", "minus-two", "too-big"],
)
@pytest.mark.parametrize("memory", ["host", "device"])
def test_record_stream_refuses_what_is_not_a_stream(forbidden_driver, stream, error, message, memory):
    """A stream that is not a handle >= 0 or a __cuda_stream__ object is refused, before any
    driver call, whatever the memory; the view is unchanged and still releases normally."""
    array = np.zeros(4) if memory == "host" else Device()
    view = StridedMemoryView(array, stream_ptr=-1)
    with pytest.raises(error) as info:
        view.record_stream(stream)
    assert str(info.value) == message
    assert view.exporting_obj is array and pending() == (0, 0)


def test_record_stream_refuses_a_bad_cuda_stream_object(forbidden_driver):
    """``__cuda_stream__`` must return (version, handle), as for stream_ptr."""

    class Bad:
        def __cuda_stream__(self):
            return (0, "x")

    with pytest.raises(TypeError, match=r"^stream: __cuda_stream__\(\) must return \(version, handle\)"):
        StridedMemoryView(Device(), stream_ptr=-1).record_stream(Bad())


def test_host_view_records_nothing(forbidden_driver):
    """A view of host-only memory records nothing and calls no driver: the array goes with the
    view, as without record_stream."""
    array = np.arange(8)
    gone = weakref.ref(array)
    view = StridedMemoryView(array)
    view.record_stream(0x1234)
    del array, view
    assert gone() is None
    assert pending() == (0, 0)


def test_release_pending_with_nothing_pending(forbidden_driver):
    """release_pending() with nothing handed over releases nothing and calls no driver."""
    assert release_pending() == 0
    assert release_pending(wait=True) == 0


@pytest.mark.parametrize("wait", [1, None, "yes"])
def test_release_pending_wait_must_be_a_bool(forbidden_driver, wait):
    """wait is a bool: anything else is a TypeError quoting it."""
    with pytest.raises(TypeError, match=r"^release_pending: wait must be a bool \(got "):
        release_pending(wait=wait)


def test_record_stream_with_an_unknown_handle_is_a_cuda_error(fake_streams):
    """A handle that names no stream fails at record_stream (the driver's cuStreamGetCtx), not
    silently at release; the view then records nothing."""
    device = Device()
    gone = weakref.ref(device)
    view = StridedMemoryView(device, stream_ptr=-1)
    with pytest.raises(CUDAError, match="^cuStreamGetCtx failed: CUDA_ERROR_INVALID_HANDLE$"):
        view.record_stream(0xDEAD000)
    del device, view
    assert gone() is None


# --- the hold, released when the stream is done -----------------------------------------------


def test_hold_released_only_once_the_stream_is_done(fake_streams):
    """The exporting object outlives the view until the work queued on the stream when the
    view was released is done; one event recorded, nothing blocks the host."""
    fake = fake_streams
    stream = fake.new_stream()
    device = Device()
    gone = weakref.ref(device)
    fake.enqueue(stream)  # the kernel reading the memory
    before = len(fake.calls)
    handed(device, stream)
    del device
    assert gone() is not None and pending() == (1, 1)
    assert release_pending() == 0 and gone() is not None
    fake.enqueue(stream)  # queued after the release: not waited for
    fake.stream(stream).done = 1
    assert release_pending() == 1
    assert gone() is None and pending() == (0, 0)
    names = fake.names(fake.calls[before:])
    assert names.count("cuEventRecord") == 1 and "cuEventSynchronize" not in names


@pytest.mark.parametrize("kind", producers.KINDS)
def test_capsule_deleter_runs_once_after_the_stream(fake_streams, kind):
    """A consumed capsule's deleter runs exactly once, and only once the stream is done."""
    fake = fake_streams
    stream = fake.new_stream()
    producer = device_capsule_producer(kind)
    fake.enqueue(stream)
    handed(producer, stream)
    assert producers.deleter_calls(producer) == 0
    gc.collect()
    assert release_pending() == 0 and producers.deleter_calls(producer) == 0
    fake.finish(stream)
    assert release_pending() == 1 and producers.deleter_calls(producer) == 1
    assert release_pending(wait=True) == 0 and producers.deleter_calls(producer) == 1


def test_several_streams_keep_the_hold_until_all_are_done(fake_streams):
    """Recorded on two streams (and one twice), the hold waits for both: one event each."""
    fake = fake_streams
    first, second = fake.new_stream(), fake.new_stream()
    producer = device_capsule_producer()
    fake.enqueue(first)
    fake.enqueue(second)
    view = StridedMemoryView(producer, stream_ptr=-1)
    view.record_stream(first)
    view.record_stream(second)
    view.record_stream(first)
    before = len(fake.calls)
    del view
    assert fake.names(fake.calls[before:]).count("cuEventRecord") == 2
    fake.finish(first)
    assert release_pending() == 0 and producers.deleter_calls(producer) == 0
    fake.finish(second)
    assert release_pending() == 1 and producers.deleter_calls(producer) == 1


def test_cuda_stream_object_is_recorded_like_its_handle(fake_streams):
    """An object with __cuda_stream__ names the stream it returns."""
    fake = fake_streams
    stream = fake.new_stream()

    class Stream:
        def __cuda_stream__(self):
            return (0, stream)

    producer = device_capsule_producer()
    fake.enqueue(stream)
    handed(producer, Stream())
    assert producers.deleter_calls(producer) == 0
    fake.finish(stream)
    release_pending()
    assert producers.deleter_calls(producer) == 1


def test_events_come_from_a_pool(fake_streams):
    """Hand-overs one after another reuse one event: one created, however many hand-overs."""
    fake = fake_streams
    stream = fake.new_stream()
    producer = device_capsule_producer()
    for _ in range(20):
        fake.enqueue(stream)
        handed(producer, stream)
        fake.finish(stream)
        release_pending()
    assert producers.deleter_calls(producer) == 20
    created = [event for event in fake.created_events if event.records]
    assert len(created) == 1 and created[0].records == 20


def test_completed_holds_are_released_by_later_view_creations(fake_streams):
    """Without release_pending: once the stream is done, making views releases the hold."""
    fake = fake_streams
    stream = fake.new_stream()
    producer = device_capsule_producer()
    fake.enqueue(stream)
    handed(producer, stream)
    host = np.zeros(3)
    for _ in range(200):
        StridedMemoryView(host)
    assert producers.deleter_calls(producer) == 0  # checked, not done
    fake.finish(stream)
    for _ in range(200):
        StridedMemoryView(host)
    assert producers.deleter_calls(producer) == 1 and pending() == (0, 0)


def test_completed_holds_are_released_by_later_hand_overs(fake_streams):
    """Each hand-over checks the oldest pending one: a finished hold goes at the next one."""
    fake = fake_streams
    stream = fake.new_stream()
    first, second = device_capsule_producer(), device_capsule_producer()
    fake.enqueue(stream)
    handed(first, stream)
    fake.finish(stream)
    fake.enqueue(stream)
    handed(second, stream)
    assert producers.deleter_calls(first) == 1 and producers.deleter_calls(second) == 0


def test_many_pending_holds_are_released_oldest_first_and_once(fake_streams):
    """With hundreds pending, the checks on view creation release the finished ones oldest
    first, stop at the first still running and keep it first; release_pending releases any
    finished one out of order; every hold goes exactly once, none before its stream is done
    (the registry's claimed slots are cut off as the count falls)."""
    fake = fake_streams
    count = 300
    streams = [fake.new_stream() for _ in range(count)]
    devices = [Device() for _ in range(count)]
    gone = [weakref.ref(device) for device in devices]
    for stream, device in zip(streams, devices):
        fake.enqueue(stream)
        handed(device, stream)
    del devices, device
    assert pending() == (count, count)
    host = np.zeros(3)

    def alive():
        return [i for i in range(count) if gone[i]() is not None]

    def create_views(number):
        for _ in range(number):
            StridedMemoryView(host)

    for stream in streams[:100]:
        fake.finish(stream)
    create_views(32 * 20)  # 20 checks of the 8 oldest: past the first 100, which stay first
    assert alive() == list(range(100, count)) and pending() == (200, 200)
    for stream in streams[150:]:
        fake.finish(stream)
    create_views(32 * 4)  # the oldest (100) still runs: the checks release nothing
    assert alive() == list(range(100, count))
    assert release_pending() == 150  # every finished one, out of order
    assert alive() == list(range(100, 150)) and pending() == (50, 50)
    for stream in streams[100:110]:
        fake.finish(stream)
    create_views(32 * 3)
    assert alive() == list(range(110, 150))
    fake.finish()
    assert release_pending() == 40 and alive() == [] and pending() == (0, 0)


def test_derived_views_keep_the_root_until_the_stream_is_done(fake_streams):
    """A slice recorded on a stream keeps its root view, and so the capsule, past the root's
    and the slice's release."""
    fake = fake_streams
    stream = fake.new_stream()
    producer = device_capsule_producer()
    root = StridedMemoryView(producer, stream_ptr=-1)
    part = root[4:]
    part.record_stream(stream)
    fake.enqueue(stream)
    del root, part
    assert producers.deleter_calls(producer) == 0
    fake.finish(stream)
    assert release_pending() == 1 and producers.deleter_calls(producer) == 1


def test_a_view_handed_on_hands_over_when_its_consumer_lets_go(fake_streams):
    """Re-exported through __dlpack__, the view lives as long as the consumer's capsule: the
    hand-over happens when that last reference goes."""
    fake = fake_streams
    stream = fake.new_stream()
    producer = device_capsule_producer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    view.record_stream(stream)
    capsule = view.__dlpack__(stream=-1, max_version=(1, 0))
    del view
    fake.enqueue(stream)
    assert pending() == (0, 0)  # the capsule still holds the view
    del capsule  # never consumed: its destructor lets the view go
    assert pending() == (1, 1) and producers.deleter_calls(producer) == 0
    fake.finish(stream)
    release_pending()
    assert producers.deleter_calls(producer) == 1


class Wrapper:
    """A DLPack producer lending another's capsules: a view of it and the wrapper can make a
    cycle (``wrapper.keeps = view``), freed only by the collector."""

    def __init__(self, producer):
        self.producer = producer
        self.keeps = None

    def __dlpack__(self, **kwargs):
        return self.producer.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.producer.__dlpack_device__()


@pytest.mark.parametrize("first_cleared", ["view", "producer"])
def test_a_view_in_a_collected_cycle_hands_over(fake_streams, first_cleared):
    """A view in a garbage cycle with its producer hands over when the collector breaks the
    cycle, whichever it clears first (the view's tp_clear would drop the exporting object):
    the capsule's deleter waits for the stream."""
    fake = fake_streams
    stream = fake.new_stream()
    producer = device_capsule_producer()
    wrapper = Wrapper(producer)
    view = StridedMemoryView(wrapper, stream_ptr=-1)
    view.record_stream(stream)
    wrapper.keeps = view  # wrapper -> view -> wrapper
    fake.enqueue(stream)
    if first_cleared == "view":
        _view._clear_for_tests(view)  # what the collector does first when it picks the view
        assert view.exporting_obj is None and pending() == (1, 1)
    del wrapper, view
    gc.collect()
    assert pending() == (1, 1) and producers.deleter_calls(producer) == 0
    fake.finish(stream)
    assert release_pending() == 1
    assert producers.deleter_calls(producer) == 1


def test_default_stream_handles_resolve_in_the_current_context(fake_streams):
    """Handle 1 is the legacy stream of the context current where the view is released."""
    fake = fake_streams
    producer = device_capsule_producer()
    fake.stream(1).ops.append(("write", "kernel"))
    before = len(fake.calls)
    handed(producer, 1)
    records = [args for name, args in fake.calls[before:] if name == "cuEventRecord"]
    assert [int(stream) for _, stream in records] == [1]
    assert producers.deleter_calls(producer) == 0
    fake.finish()
    release_pending()
    assert producers.deleter_calls(producer) == 1


def test_default_stream_with_no_current_context_is_the_data_devices(fake_streams):
    """Released in a thread with no current context, handle 1 means the data device's primary
    context's legacy stream (device 1's here)."""
    fake = fake_streams
    producer = producers.make_producer(device=(2, 1), shape=(16,), dtype="uint8")
    legacy = fake.stream(1, fake.primary_contexts[1])
    legacy.ops.append(("write", "kernel"))

    def release_here():
        # Made and dropped in this thread: a free-threaded build deallocates an object
        # dropped by another thread in the thread that made it.
        view = StridedMemoryView(producer, stream_ptr=-1)
        view.record_stream(1)
        del view

    thread = threading.Thread(target=release_here)
    thread.start()
    thread.join()
    assert pending() == (1, 1) and producers.deleter_calls(producer) == 0
    recorded = [e for e in fake.created_events if e.records]
    assert recorded[-1].captured == (legacy, 1)
    legacy.done = 1
    assert release_pending() == 1 and producers.deleter_calls(producer) == 1


# --- streams and contexts that go away ---------------------------------------------------------


def test_stream_destroyed_before_the_release_waits_for_its_context_then_releases(
    fake_streams, monkeypatch
):
    """A stream destroyed before the view is released cannot be recorded on, and its queued
    work may still run: the host waits for its context (cuCtxSynchronize, with the context
    the stream had pushed), then the hold goes, with nothing reported."""
    fake = fake_streams
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    stream = fake.new_stream()
    producer = device_capsule_producer()
    view = StridedMemoryView(producer, stream_ptr=-1)
    view.record_stream(stream)
    fake.destroy_stream(stream)
    fake.set_current(None)  # released with no context current: the stream's is pushed
    before = len(fake.calls)
    del view
    assert producers.deleter_calls(producer) == 1 and pending() == (0, 0)
    assert reported == []
    names = fake.names(fake.calls[before:])
    assert "cuCtxSynchronize" in names and names.index("cuCtxPushCurrent") < names.index("cuCtxSynchronize")
    assert fake.violations == [("cuCtxSynchronize", ())]
    fake.violations.clear()  # the one host wait this case calls for
    fake.clear_calls()


def test_context_reset_under_a_pending_hold_releases_it(fake_streams):
    """cudaDeviceReset under a pending hold kills its event: the next check releases it (the
    reset discarded the work), and a later hand-over gets a fresh event."""
    fake = fake_streams
    stream = fake.new_stream()
    producer = device_capsule_producer()
    fake.enqueue(stream)
    handed(producer, stream)
    fake.reset_device(0)
    assert release_pending() == 1 and producers.deleter_calls(producer) == 1
    stream = fake.new_stream()
    fake.enqueue(stream)
    handed(producer, stream)
    assert producers.deleter_calls(producer) == 1
    fake.finish(stream)
    assert release_pending() == 1 and producers.deleter_calls(producer) == 2

# --- the bound, threads, exit ---------------------------------------------------------------


def test_pending_hand_overs_are_bounded():
    """Past the bound a hand-over first checks every pending one, then waits on the host for the
    oldest (the only host wait, as a full launch queue makes): never more than the bound."""
    fake = FakeDriver()
    _driver.use_api(fake)
    previous = _view._set_pending_limit(3)
    try:
        stream = fake.new_stream()
        producer = device_capsule_producer()
        for count in range(1, 8):
            fake.enqueue(stream)
            handed(producer, stream)
            assert pending()[0] <= 3
            assert producers.deleter_calls(producer) == max(0, count - 3)
        assert fake.names().count("cuEventSynchronize") == 4
    finally:
        _view._set_pending_limit(previous)
        fake.finish()
        release_pending()
        _driver.use_api(None)
    assert producers.deleter_calls(producer) == 7


def test_set_pending_limit_refuses_zero(forbidden_driver):
    """The bound is at least one hand-over."""
    with pytest.raises(ValueError, match=r"^_set_pending_limit: limit must be >= 1 \(got 0\)$"):
        _view._set_pending_limit(0)


def test_hand_overs_from_many_threads_release_each_hold_once(fake_streams, monkeypatch):
    """Eight threads hand over views of capsules on their own streams while the 'device'
    finishes work and the collector runs: every deleter runs exactly once, and never before
    the work queued on its stream when its view was released is done."""
    fake = fake_streams
    made = [device_capsule_producer() for _ in range(8)]
    streams = [fake.new_stream() for _ in range(8)]
    needed = {}  # tensor id -> (stream model, operations that must be done first)
    early = []
    release = producers._release

    def checked_release(tensor_id):
        stream, count = needed[tensor_id]
        if stream.done < count:
            early.append(tensor_id)
        release(tensor_id)

    monkeypatch.setattr(producers, "_release", checked_release)
    stop = threading.Event()

    def work(t):
        model = fake.stream(streams[t])
        for i in range(150):
            fake.enqueue(streams[t])
            view = StridedMemoryView(made[t], stream_ptr=-1)
            needed[made[t].tensor_ids[-1]] = (model, len(model.ops))
            view.record_stream(streams[t])
            if i % 10 == 0:
                del view
                wrapper = Wrapper(made[t])  # a view in a cycle: only the collector frees it
                view = StridedMemoryView(wrapper, stream_ptr=-1)
                needed[made[t].tensor_ids[-1]] = (model, len(model.ops))
                view.record_stream(streams[t])
                wrapper.keeps = view
                del wrapper
            del view

    def storm():
        while not stop.is_set():
            gc.collect()
            fake.finish()

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    collector = threading.Thread(target=storm)
    collector.start()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    stop.set()
    collector.join()
    gc.collect()
    fake.finish()
    release_pending()
    assert early == []
    assert [producers.deleter_calls(p) for p in made] == [165] * 8  # 150 views, 15 in cycles
    assert {producers.DELETER_CALLS[i] for p in made for i in p.tensor_ids} == {1}
    assert pending() == (0, 0)


def test_interpreter_exit_waits_for_pending_holds_then_releases_them(tmp_path):
    """At exit a pending hold's stream is waited for (cuEventSynchronize), then its deleter
    runs, once."""
    script = tmp_path / "exit.py"
    script.write_text(textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {HERE!r})
        import producers
        from fake_driver import FakeDriver
        from stridedview import StridedMemoryView, _driver

        fake = FakeDriver()
        _driver.use_api(fake)
        stream = fake.new_stream()
        producer = producers.make_producer(device=(2, 0), shape=(16,), dtype="uint8")
        fake.enqueue(stream)
        view = StridedMemoryView(producer, stream_ptr=-1)
        view.record_stream(stream)
        del view
        assert producers.deleter_calls(producer) == 0
        real = producers._release

        def release(tensor_id):
            print("deleter after", fake.names().count("cuEventSynchronize"), "waits", flush=True)
            real(tensor_id)

        producers._release = release
        print("exiting", flush=True)
    """))
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["exiting", "deleter after 1 waits"]


# --- the decorator's record_stream=True ----------------------------------------------------


def test_decorator_record_stream_must_be_a_bool():
    """record_stream is a keyword-only bool."""
    with pytest.raises(
        TypeError, match=r"^args_viewable_as_strided_memory: record_stream must be a bool \(got 1\)$"
    ):
        args_viewable_as_strided_memory((0,), record_stream=1)
    with pytest.raises(TypeError):
        args_viewable_as_strided_memory((0,), True)  # type: ignore[misc]


def test_decorator_records_one_event_per_launch(fake_streams):
    """With record_stream=True the views of one launch hand over together: one event for the
    three arguments, the holds released when the stream is done."""
    fake = fake_streams
    stream = fake.new_stream()

    @args_viewable_as_strided_memory((0, 1, 2), record_stream=True)
    def launch(a, b, c, stream):
        for arg in (a, b, c):
            arg.view(stream)
        fake.enqueue(stream)

    assert launch.record_stream
    made = [device_capsule_producer() for _ in range(3)]
    before = len(fake.calls)
    launch(made[0], made[1], made[2], stream)
    assert fake.names(fake.calls[before:]).count("cuEventRecord") == 1
    assert pending() == (1, 3)
    assert [producers.deleter_calls(p) for p in made] == [0, 0, 0]
    fake.finish(stream)
    assert release_pending() == 3
    assert [producers.deleter_calls(p) for p in made] == [1, 1, 1]


@pytest.mark.parametrize("count", [1, 2, 4, 5, 7])
def test_decorator_holds_of_any_number_of_arguments_released_once_after_the_stream(
    fake_streams, count
):
    """A launch of ``count`` arguments (the group's first hold kept in its own fields, the
    next three in its slots, any more in hold objects): one event, every hold kept until
    the stream is done, each deleter run once, each temporary freed then; the next launch
    the same (its kept views filled again)."""
    fake = fake_streams
    stream = fake.new_stream()
    seen = []

    @args_viewable_as_strided_memory(tuple(range(7)), record_stream=True)
    def launch(a, b, c, d, e, f, g, stream):
        for arg in (a, b, c, d, e, f, g):
            if arg is not None:
                arg.view(stream)
        fake.enqueue(stream)

    def temporary():
        device = Device()
        seen.append(weakref.ref(device))
        return device

    made = [device_capsule_producer() for _ in range(0, count, 2)]  # even positions
    for round_ in (1, 2):
        seen.clear()
        arguments = [made[i // 2] if i % 2 == 0 else temporary() for i in range(count)]
        before = len(fake.calls)
        launch(*arguments, *[None] * (7 - count), stream)
        assert fake.names(fake.calls[before:]).count("cuEventRecord") == 1
        del arguments
        assert pending() == (1, count)
        assert [producers.deleter_calls(p) for p in made] == [round_ - 1] * len(made)
        assert all(ref() is not None for ref in seen)
        fake.finish(stream)
        assert release_pending() == count
        assert [producers.deleter_calls(p) for p in made] == [round_] * len(made)
        assert all(ref() is None for ref in seen)
        assert pending() == (0, 0)


def test_decorator_without_the_option_hands_nothing_over(fake_streams):
    """The control: without record_stream the arguments are released when the launch ends."""
    fake = fake_streams
    stream = fake.new_stream()

    @args_viewable_as_strided_memory((0, 1, 2))
    def launch(a, b, c, stream):
        for arg in (a, b, c):
            arg.view(stream)
        fake.enqueue(stream)

    assert not launch.record_stream
    made = [device_capsule_producer() for _ in range(3)]
    launch(made[0], made[1], made[2], stream)
    assert [producers.deleter_calls(p) for p in made] == [1, 1, 1]
    assert pending() == (0, 0)


def test_decorator_temporary_argument_outlives_the_launch(fake_streams):
    """``launch(x + 1)``: a temporary nobody else holds stays alive until the stream is done."""
    fake = fake_streams
    stream = fake.new_stream()
    seen = []

    @args_viewable_as_strided_memory((0,), record_stream=True)
    def launch(a, stream):
        a.view(stream)
        fake.enqueue(stream)

    def temporary():
        device = Device()
        seen.append(weakref.ref(device))
        return device

    launch(temporary(), stream)
    assert seen[0]() is not None
    fake.finish(stream)
    release_pending()
    assert seen[0]() is None


def test_decorator_one_event_per_stream(fake_streams):
    """Views of one launch on two streams: one event on each."""
    fake = fake_streams
    first, second = fake.new_stream(), fake.new_stream()

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def launch(a, b):
        a.view(first)
        b.view(second)
        b.view(second)
        fake.enqueue(first)
        fake.enqueue(second)

    made = [device_capsule_producer() for _ in range(2)]
    before = len(fake.calls)
    launch(*made)
    assert fake.names(fake.calls[before:]).count("cuEventRecord") == 2
    fake.finish(first)
    assert release_pending() == 0
    fake.finish(second)
    assert release_pending() == 3


@pytest.mark.parametrize("how", ["minus-one", "host", "no-stream"])
def test_decorator_hands_over_only_views_on_a_stream_of_device_memory(fake_streams, how):
    """-1 (nothing the library knows is enqueued), host memory and view() with no stream (host
    memory) hand nothing over and record no event."""
    fake = fake_streams
    stream = fake.new_stream()
    made = np.zeros(4) if how != "minus-one" else device_capsule_producer()

    @args_viewable_as_strided_memory((0,), record_stream=True)
    def launch(a):
        if how == "minus-one":
            a.view(-1)
        elif how == "host":
            a.view(stream)
        else:
            a.view()

    before = len(fake.calls)
    launch(made)
    assert "cuEventRecord" not in fake.names(fake.calls[before:])
    assert pending() == (0, 0)


def test_decorator_view_kept_past_the_launch_hands_over_on_its_own(fake_streams):
    """A view the function returns is not the launch's to hand over: it does so when it is
    released, with events of its own, after the work queued until then."""
    fake = fake_streams
    stream = fake.new_stream()

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def launch(a, b):
        b.view(stream)
        fake.enqueue(stream)
        return a.view(stream)

    kept_producer, other = device_capsule_producer(), device_capsule_producer()
    kept = launch(kept_producer, other)
    assert pending() == (1, 1)  # the other argument's view
    fake.finish(stream)
    release_pending()
    assert producers.deleter_calls(other) == 1 and producers.deleter_calls(kept_producer) == 0
    fake.enqueue(stream)  # later work on the kept view
    before = len(fake.calls)
    del kept
    assert fake.names(fake.calls[before:]).count("cuEventRecord") == 1
    assert producers.deleter_calls(kept_producer) == 0
    fake.finish(stream)
    release_pending()
    assert producers.deleter_calls(kept_producer) == 1


def test_explicit_record_stream_in_a_launch_lets_the_kept_view_go(fake_streams):
    """A launcher without the option whose body records its view: the proxy does not keep (and
    empty) that view, which hands over when released."""
    fake = fake_streams
    stream = fake.new_stream()

    @args_viewable_as_strided_memory((0,))
    def launch(a):
        view = a.view(stream)
        view.record_stream(stream)
        fake.enqueue(stream)  # (the view goes when the function returns, or at the launch's end)

    device = Device()
    gone = weakref.ref(device)
    launch(device)
    del device
    assert gone() is not None and pending() == (1, 1)
    fake.finish(stream)
    release_pending()
    assert gone() is None
    for _ in range(3):  # later launches: fresh views, nothing left behind
        device = Device()
        gone = weakref.ref(device)
        launch(device)
        del device
        fake.finish(stream)
        release_pending()
        assert gone() is None


def test_spare_proxies_do_not_carry_a_launch_into_the_next(fake_streams):
    """After a launch with the option, a launch without it (reusing its spare proxies) hands
    nothing over."""
    fake = fake_streams
    stream = fake.new_stream()

    @args_viewable_as_strided_memory((0, 1), record_stream=True)
    def recording(a, b):
        a.view(stream)
        b.view(stream)
        fake.enqueue(stream)

    @args_viewable_as_strided_memory((0, 1))
    def plain(a, b):
        a.view(stream)
        b.view(stream)

    recording(device_capsule_producer(), device_capsule_producer())
    made = [device_capsule_producer() for _ in range(2)]
    plain(*made)
    assert [producers.deleter_calls(p) for p in made] == [1, 1]
    assert pending() == (1, 2)


def test_a_launch_that_raises_still_hands_over(fake_streams):
    """The kernel may have been enqueued before the function raised: the launch's views hand
    over all the same."""
    fake = fake_streams
    stream = fake.new_stream()

    @args_viewable_as_strided_memory((0,), record_stream=True)
    def launch(a):
        a.view(stream)
        fake.enqueue(stream)
        raise RuntimeError("after the kernel")

    producer = device_capsule_producer()
    with pytest.raises(RuntimeError, match="after the kernel"):
        launch(producer)
    assert producers.deleter_calls(producer) == 0 and pending() == (1, 1)
    fake.finish(stream)
    release_pending()
    assert producers.deleter_calls(producer) == 1


def run_with_fake_driver(tmp_path, body):
    """Run ``body`` in a fresh interpreter with the fake driver installed as ``fake`` (a crash
    fails the calling test instead of ending pytest); its stdout lines, once it exits cleanly
    with no host-blocking or cross-thread driver use."""
    script = tmp_path / "script.py"
    script.write_text(
        textwrap.dedent(f"""
            import sys
            sys.path.insert(0, {HERE!r})
            from fake_driver import HOST_BLOCKING_CALLS, FakeDriver
            from stridedview import _driver

            fake = FakeDriver()
            _driver.use_api(fake)
        """)
        + textwrap.dedent(body)
        + textwrap.dedent("""
            assert fake.violations == [], fake.violations
            assert not set(fake.names()) & set(HOST_BLOCKING_CALLS), fake.names()
        """)
    )
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"exit status {result.returncode}: {result.stderr}"
    assert result.stderr == ""
    return result.stdout.splitlines()


@pytest.mark.slow
def test_decorator_argument_viewed_by_another_thread_as_the_launch_ends(tmp_path):
    """2,000 launches hand their argument to a worker thread that views it on a stream while the
    launch returns: no crash, and once the stream is done every producer has been released
    (100 a stress round where STRIDEDVIEW_STRESS_ROUNDS sizes the run, as tools/tsan.sh does)."""
    lines = run_with_fake_driver(tmp_path, """
        import os
        import queue
        import threading
        import weakref
        from stridedview import _view, args_viewable_as_strided_memory, release_pending

        sys.setswitchinterval(1e-5)
        stream = fake.new_stream()

        class Device:
            @property
            def __cuda_array_interface__(self):  # Python code, run while the view is made
                return {
                    "version": 3, "shape": (64,), "typestr": "|u1",
                    "data": (0x7F0000A00000, False), "strides": None, "stream": None,
                }

        work = queue.Queue()
        viewing = threading.Semaphore(0)

        def worker():
            while (proxy := work.get()) is not None:
                viewing.release()
                view = proxy.view(stream_ptr=stream)
                fake.enqueue(stream)
                del view, proxy

        @args_viewable_as_strided_memory((0,), record_stream=True)
        def launch(a):
            work.put(a)
            viewing.acquire()  # the worker is calling view() as the launch returns

        thread = threading.Thread(target=worker)
        thread.start()
        released = []
        rounds = os.environ.get("STRIDEDVIEW_STRESS_ROUNDS")
        launches = 2000 if rounds is None else 100 * int(rounds)
        for i in range(launches):
            device = Device()
            weakref.finalize(device, released.append, i)
            launch(device)
            del device
        work.put(None)
        thread.join()
        fake.finish()
        release_pending()
        assert sorted(released) == list(range(launches))
        assert _view._pending_holds() == (0, 0, 0)
        print("done")
    """)
    assert lines == ["done"]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["cai", "dlpack"])
def test_decorator_view_made_after_the_launch_ended_hands_over_on_its_own(tmp_path, kind):
    """A view another thread was making while the launch ended (its producer's code ran) does
    not join the launch's sealed group: it hands over on its own stream, with one event there,
    and its memory is released once, when that stream is done."""
    lines = run_with_fake_driver(tmp_path, f"""
        import functools
        import threading
        import weakref

        import producers
        from stridedview import _view, args_viewable_as_strided_memory, release_pending

        first, second = fake.new_stream(), fake.new_stream()
        asked, ended = threading.Event(), threading.Event()

        def let_the_launch_end():
            # Python code the view runs: on the worker, it waits for the launch to end.
            if threading.current_thread() is not threading.main_thread():
                asked.set()
                assert ended.wait(30)

        class LateCAI:
            @property
            def __cuda_array_interface__(self):
                let_the_launch_end()
                return {{
                    "version": 3, "shape": (16,), "typestr": "|u1",
                    "data": (0x7F0000A00000, False), "strides": None, "stream": None,
                }}

        class LateDLPack(producers.DLPackProducer):
            def __dlpack__(self, **kwargs):
                let_the_launch_end()
                return super().__dlpack__(**kwargs)

        if {kind!r} == "cai":
            late = LateCAI()  # released: its last reference dropped
            released = []
            weakref.finalize(late, released.append, "late")
            late_releases = released.__len__
        else:
            late = LateDLPack("versioned", device=(2, 0), shape=(16,), dtype="uint8")
            late_releases = functools.partial(producers.deleter_calls, late)  # its capsules'
        other = producers.make_producer(device=(2, 0), shape=(16,), dtype="uint8")

        def worker(proxy):
            view = proxy.view(stream_ptr=second)
            fake.enqueue(second)
            del view

        @args_viewable_as_strided_memory((0, 1), record_stream=True)
        def launch(a, b):
            a.view(first)
            fake.enqueue(first)
            thread = threading.Thread(target=worker, args=(b,))
            thread.start()
            assert asked.wait(30)
            return thread

        thread = launch(other, late)
        records = len([name for name in fake.names() if name == "cuEventRecord"])
        ended.set()
        thread.join()
        del late
        recorded = [
            int(args[1]) for name, args in fake.calls if name == "cuEventRecord"
        ][records:]
        assert recorded == [second], (recorded, first, second)
        assert late_releases() == 0 and producers.deleter_calls(other) == 0
        assert _view._pending_holds() == (2, 2, 0)
        fake.finish(second)
        assert release_pending() == 1
        assert late_releases() == 1 and producers.deleter_calls(other) == 0
        fake.finish(first)
        assert release_pending() == 1
        assert late_releases() == 1 and producers.deleter_calls(other) == 1
        assert _view._pending_holds() == (0, 0, 0)
        print("done")
    """)
    assert lines == ["done"]


def test_use_api_releases_pending_holds_first():
    """Replacing the driver (the test seam) releases every pending hand-over, its events being
    the old driver's."""
    fake = FakeDriver()
    _driver.use_api(fake)
    try:
        stream = fake.new_stream()
        producer = device_capsule_producer()
        fake.enqueue(stream)
        handed(producer, stream)
        assert producers.deleter_calls(producer) == 0
    finally:
        _driver.use_api(None)
    assert producers.deleter_calls(producer) == 1 and pending() == (0, 0)


class _IntHandle(int):
    """An int subclass (not an exact int): read by a Python compare, not in C."""


@pytest.mark.parametrize(
    "value, kind",
    [(-1, "opt-out"), (0, "default"), (1, "default"), (2, "default"), (3, "ordinary"),
     (255, "ordinary"), (2**30 - 1, "ordinary"), (2**30, "ordinary"), (2**31 + 2, "ordinary"),
     (2**60, "ordinary"), (2**63 + 1, "ordinary"), (2**64 - 1, "ordinary")],
)
def test_a_launch_view_reads_a_stream_handle_in_c_as_its_value(value, kind):
    """sv_handle_kind (what _join_group reads a normalized stream as, without a Python
    compare) gives each int's value its kind, for the int itself and an equal one made
    anew, on either side of every size an int's storage changes at (one digit, compact);
    an int subclass is left to the Python compare (as every int is on 3.10, whose int
    internals it does not read)."""
    if sys.version_info < (3, 11):
        kind = "unknown"
    assert _view._stream_handle_kind(value) == kind
    assert _view._stream_handle_kind(int(str(value))) == kind
    assert _view._stream_handle_kind(_IntHandle(value)) == "unknown"
