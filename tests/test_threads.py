"""Threads: views made, read, exported and dropped by several threads at once.

The package is thread-safe under the GIL (docs/threads.md says why, cache by cache).  These
tests hammer it with the interpreter's switch interval at 1 us, so that threads interleave
between almost any two bytecodes:

- eight threads viewing the same numpy array, torch tensor (C exchange API), ctypes producer
  and CAI producer, plus one array of their own whose shape collides with the others' in
  the interned-tuple cache, reading every field, exporting (numpy.from_dlpack, a view of the
  view, a capsule dropped unconsumed) and dropping; every field right, every ctypes capsule
  released exactly once, every refcount back;
- the driver's per-(context, thread) event cache used concurrently against the modelling
  fake driver: each thread creates its own event per context and never records or waits on
  another thread's, the fake's violations list stays empty, and every consumer still sees
  its producer's writes;
- the extension declares free-threading support, and docs/threads.md says so and names every
  module-level cache in the sources (tests/test_free_threading.py holds the checks that
  matter on a free-threaded build).
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np
import pytest

from fake_driver import FakeDriver
from producers import DELETER_CALLS, make_producer
from stridedview import StridedMemoryView
from stridedview import _driver
from test_cai import CAIProducer

ROOT = Path(__file__).resolve().parent.parent
THREADS = 8


@pytest.fixture(autouse=True)
def fast_switching():
    """Switch threads every microsecond (the default is 5 ms): interleavings everywhere."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(interval)


def run_threads(targets, timeout=120):
    """Start ``targets`` together (a barrier), join them, re-raise the first failure."""
    errors = []
    barrier = threading.Barrier(len(targets), timeout=30)

    def wrap(target, index):
        def run():
            try:
                barrier.wait()
                target(index)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the main thread
                errors.append(exc)

        return run

    threads = [threading.Thread(target=wrap(t, i), name=f"worker-{i}") for i, t in enumerate(targets)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
        assert not thread.is_alive(), f"{thread.name} hung"
    if errors:
        raise errors[0]
    return threads


def expect(view, obj, ptr, shape, strides, dtype):
    """Fail (in the calling thread) unless the view has exactly these fields."""
    if (
        view.exporting_obj is not obj
        or view.ptr != ptr
        or view.shape != shape
        or view.strides != strides
        or view.dtype != dtype
    ):
        raise AssertionError(
            f"wrong view in {threading.current_thread().name}: {view!r} "
            f"(expected ptr={ptr:#x}, shape={shape}, strides={strides}, dtype={dtype})"
        )


def _own_shape(index):
    # Shapes of one ndim, all different, many of them colliding in the 64-slot cache.
    return (index + 1, 3, 2)


@pytest.mark.torch
@pytest.mark.interop
def test_threads_view_export_and_drop_shared_arrays():
    """Eight threads view, read, export and drop shared arrays: fields right, deleters once, refcounts back."""
    torch = pytest.importorskip("torch")
    shared = np.arange(24, dtype=np.float32).reshape(4, 6)
    tensor = torch.arange(24, dtype=torch.float64).reshape(6, 4)
    ctypes_producer = make_producer("versioned", shape=(3, 5), dtype="int16", hold_capsules=False)
    legacy_producer = make_producer("legacy", shape=(5,), strides=(2,), dtype="uint8", hold_capsules=False)
    cai_producer = CAIProducer(np.arange(10, dtype=np.int32).reshape(2, 5))
    own = [np.zeros(_own_shape(i), dtype=np.int8) for i in range(THREADS)]
    objects = [shared, tensor, ctypes_producer, legacy_producer, cai_producer, *own]
    refcounts = [sys.getrefcount(o) for o in objects]
    iterations = 400

    def work(index):
        mine = own[index]
        for _ in range(iterations):
            view = StridedMemoryView(shared)
            expect(view, shared, shared.ctypes.data, (4, 6), (6, 1), np.float32)
            out = np.from_dlpack(view)
            if out.ctypes.data != view.ptr or out.shape != (4, 6):
                raise AssertionError("numpy.from_dlpack of a view")
            again = StridedMemoryView(view)
            expect(again, shared, view.ptr, (4, 6), (6, 1), np.float32)  # views never chain
            view.__dlpack__(max_version=(1, 3))  # dropped unconsumed
            del view, out, again

            view = StridedMemoryView(tensor)
            expect(view, tensor, tensor.data_ptr(), (6, 4), (4, 1), np.float64)
            del view

            view = StridedMemoryView(ctypes_producer)
            expect(view, ctypes_producer, ctypes_producer.expected_ptr, (3, 5), (5, 1), np.int16)
            del view
            view = StridedMemoryView(legacy_producer)
            expect(view, legacy_producer, legacy_producer.expected_ptr, (5,), (2,), np.uint8)
            del view

            view = StridedMemoryView(cai_producer, stream_ptr=-1)
            expect(view, cai_producer, cai_producer.ptr, (2, 5), (5, 1), np.int32)
            del view

            view = StridedMemoryView(mine)
            expect(view, mine, mine.ctypes.data, _own_shape(index), (6, 2, 1), np.int8)
            del view

    run_threads([work] * THREADS)
    assert [sys.getrefcount(o) for o in objects] == refcounts
    for tensor_ids in (ctypes_producer.tensor_ids, legacy_producer.tensor_ids):
        counts = Counter(DELETER_CALLS[i] for i in tensor_ids)
        assert counts == Counter({1: THREADS * iterations}), f"deleter calls per capsule: {counts}"


def test_threads_share_one_view():
    """One view read and exported by eight threads at once; released once, exactly when the last capsule dies."""
    producer = make_producer("versioned", shape=(4, 4), dtype="float64", hold_capsules=False)
    view = StridedMemoryView(producer)
    before = sys.getrefcount(view)
    capsules = [[] for _ in range(THREADS)]

    def work(index):
        for _ in range(500):
            if view.shape != (4, 4) or view.strides != (4, 1) or view.ptr != producer.expected_ptr:
                raise AssertionError(repr(view))
            capsules[index].append(view.__dlpack__(max_version=(1, 3)))
            again = StridedMemoryView(view)
            if again.ptr != view.ptr:
                raise AssertionError(repr(again))
            del again
            if len(capsules[index]) > 50:
                capsules[index].clear()

    run_threads([work] * THREADS)
    for bucket in capsules:
        bucket.clear()
    assert sys.getrefcount(view) == before
    (tensor_id,) = producer.tensor_ids
    assert DELETER_CALLS[tensor_id] == 0
    del view
    assert DELETER_CALLS[tensor_id] == 1


def test_threads_release_views_made_by_other_threads():
    """Views made in one thread and dropped in another: each ctypes capsule released exactly once."""
    producer = make_producer("legacy", shape=(2, 2), hold_capsules=False)
    handoff: list[list] = [[] for _ in range(THREADS)]
    lock = threading.Lock()
    per_thread = 300

    def work(index):
        for _ in range(per_thread):
            view = StridedMemoryView(producer)
            with lock:
                handoff[(index + 1) % THREADS].append(view)  # the next thread drops it
                taken = handoff[index][:]
                handoff[index].clear()
            del view, taken

    run_threads([work] * THREADS)
    for bucket in handoff:
        bucket.clear()
    counts = Counter(DELETER_CALLS[i] for i in producer.tensor_ids)
    assert counts == Counter({1: THREADS * per_thread}), counts


def test_threads_with_many_producer_types():
    """Threads alternating many producer types (the last-type cache swapped constantly): every view is right."""
    kinds = [type(f"Array{i}", (np.ndarray,), {}) for i in range(12)]
    arrays = [np.arange(6, dtype=np.float32).reshape(2, 3).view(kind) for kind in kinds]
    cai = CAIProducer()

    def work(index):
        for round_ in range(300):
            array = arrays[(index + round_) % len(arrays)]
            view = StridedMemoryView(array)
            expect(view, array, array.ctypes.data, (2, 3), (3, 1), np.float32)
            view = StridedMemoryView(cai, stream_ptr=-1)
            expect(view, cai, cai.ptr, (2, 3), (3, 1), np.float32)

    run_threads([work] * THREADS)


# --- the event cache, against the fake driver ----------------------------------------------------

def test_threads_launching_one_launcher_keep_their_own_proxies():
    """Threads launching one decorated launcher at once (switching inside the function,
    while other threads return proxies to the spares) each see their own arrays."""
    from stridedview import args_viewable_as_strided_memory

    @args_viewable_as_strided_memory((0, 1))
    def launch(a, b, expected):
        for _ in range(3):
            sys._getframe()  # bytecode between the reads, where a switch can happen
            assert (a.obj, b.obj) == expected, "a proxy changed hands while in use"
            assert a.view(-1).ptr == expected[0].ctypes.data

    def worker(index):
        arrays = (np.arange(4.0) + index, np.arange(4.0) - index)
        for _ in range(300):
            launch(*arrays, arrays)

    run_threads([worker] * THREADS)


@pytest.mark.slow
def test_event_cache_per_thread_and_context(fake):
    """Eight threads order views after shared and own producer streams in two contexts: one event per (context, thread), none shared."""
    ctx0, ctx1 = fake.primary_contexts
    shared0, shared1 = fake.new_stream(ctx0), fake.new_stream(ctx1)
    streams = [
        {"own0": fake.new_stream(ctx0), "own1": fake.new_stream(ctx1),
         "consumer": fake.new_stream(ctx0), "export": fake.new_stream(ctx1)}
        for _ in range(THREADS)
    ]
    data = np.arange(6, dtype=np.float32)
    fake.register_pointer(data.ctypes.data, data.nbytes, device=0)
    # The fake's model of what a read sees grows with every operation; tools/tsan.sh sizes
    # it down with the stress tests (STRIDEDVIEW_STRESS_ROUNDS), as ThreadSanitizer runs
    # this Python model many times slower.
    rounds = int(os.environ.get("STRIDEDVIEW_STRESS_ROUNDS", "20"))

    def work(index):
        mine = streams[index]
        fake.set_current(ctx0)  # a new thread has no current context: real code makes one current
        for round_ in range(rounds):
            for name, producer in (("shared0", shared0), ("shared1", shared1), ("own0", mine["own0"]),
                                   ("own1", mine["own1"]), ("legacy", 1), ("per-thread", 2)):
                tag = (index, round_, name)
                fake.enqueue_write(producer, tag)
                view = StridedMemoryView(CAIProducer(data, stream=producer), stream_ptr=mine["consumer"])
                if tag not in fake.enqueue_read(mine["consumer"]):
                    raise AssertionError(f"consumer missed {tag}")
                # Exported to a consumer on another stream: ordered after the view's ready stream.
                capsule = view.__dlpack__(stream=mine["export"], max_version=(1, 3))
                if tag not in fake.enqueue_read(mine["export"]):
                    raise AssertionError(f"export consumer missed {tag}")
                del view, capsule

    threads = run_threads([work] * THREADS)
    assert fake.violations == []
    assert fake.names().count("cuInit") == 1
    owner = {}
    for thread in threads:
        calls = fake.thread_calls(thread.ident)
        created = [event for event in fake.created_events if event.created_by == thread.ident]
        contexts = Counter(int(event.context.handle) for event in created)
        # One event per context this thread used (ctx0 and ctx1), created by this thread ...
        assert contexts == Counter({int(ctx0): 1, int(ctx1): 1}), contexts
        for event in created:
            owner[event.handle] = thread.ident
        used = {int(args[0]) for name, args in calls if name == "cuEventRecord"}
        used |= {int(args[1]) for name, args in calls if name == "cuStreamWaitEvent"}
        assert used == {event.handle for event in created}, "a thread used an event it did not create"
        # ... and destroyed by it when it ended.
        destroyed = {int(args[0]) for name, args in calls if name == "cuEventDestroy"}
        assert destroyed == {event.handle for event in created}
    assert len(owner) == 2 * THREADS
    assert fake.live_events() == 0


def test_event_cache_with_exchange_api_producer(fake):
    """Views through the C exchange API (no_sync) from eight threads order after the producer's work stream with per-thread events."""
    import test_fuzz

    work_stream = fake.new_stream()
    test_fuzz._WORK_STREAM[0] = work_stream
    consumers = [fake.new_stream() for _ in range(THREADS)]
    spec = {"device": (2, 0), "dtype": (2, 32, 1), "shape": [4], "ndim": 1, "strides": None,
            "byte_offset": 0, "data": 0x10000, "work_stream": "fake"}
    lenders = [test_fuzz.ExchangeProducer(spec) for _ in range(THREADS)]

    def work(index):
        for round_ in range(40):
            tag = (index, round_)
            fake.enqueue_write(work_stream, tag)
            view = StridedMemoryView(lenders[index], stream_ptr=consumers[index])
            if view.ready_stream != consumers[index] or view.shape != (4,):
                raise AssertionError(repr(view))
            if tag not in fake.enqueue_read(consumers[index]):
                raise AssertionError(f"consumer missed {tag}")

    try:
        threads = run_threads([work] * THREADS)
    finally:
        for lender in lenders:
            lender.close()
        test_fuzz._WORK_STREAM[0] = 0
    assert fake.violations == []
    by_thread = defaultdict(set)
    for event in fake.created_events:
        by_thread[event.created_by].add(event.handle)
    for thread in threads:
        assert len(by_thread[thread.ident]) == 1
        records = [int(a[0]) for n, a in fake.thread_calls(thread.ident) if n == "cuEventRecord"]
        assert set(records) == by_thread[thread.ident]


@pytest.mark.slow
def test_interpreter_exit_with_live_events_is_quiet():
    """A process that exits with events held by its main thread and by a still-running thread prints nothing and exits 0 (the driver is not called at shutdown)."""
    import subprocess

    code = """
import sys, threading
sys.path.insert(0, {tests!r})
from fake_driver import FakeDriver
from stridedview import StridedMemoryView, _driver
from test_cai import CAIProducer
fake = FakeDriver()
_driver.use_api(fake)
def order():
    fake.set_current(fake.primary_contexts[0])
    StridedMemoryView(CAIProducer(stream=fake.new_stream()), stream_ptr=fake.new_stream())
order()
done = threading.Event()
def daemon():
    order()
    done.set()
    threading.Event().wait()
threading.Thread(target=daemon, daemon=True).start()
done.wait(10)
print(fake.live_events())
""".format(tests=str(ROOT / "tests"))
    # The installed package, as the test process imports it (not the source tree's copy,
    # which holds no extension built for this interpreter where the package was installed).
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "2"
    assert result.stderr == ""


def test_new_threads_after_use_api_start_clean(fake):
    """use_api forgets every thread's cache: threads started after it create fresh events in the new driver."""
    producer, consumer = fake.new_stream(), fake.new_stream()
    StridedMemoryView(CAIProducer(stream=producer), stream_ptr=consumer)
    second = FakeDriver()
    _driver.use_api(second)
    p2, c2 = second.new_stream(), second.new_stream()

    def work(index):
        second.enqueue_write(p2, index)
        StridedMemoryView(CAIProducer(stream=p2), stream_ptr=c2)

    try:
        run_threads([work] * 4)
        assert second.violations == []
        assert second.names().count("cuEventCreate") == 4
        assert fake.names().count("cuEventCreate") == 1  # nothing more in the first driver
    finally:
        _driver.use_api(fake)


# --- what docs/threads.md says ----------------------------------------------------------------

def _sources():
    return {p.name: p.read_text() for p in sorted((ROOT / "src" / "stridedview").iterdir())
            if p.suffix in (".py", ".pyx", ".pxi")}


def test_extension_declares_free_threading_and_the_doc_says_so():
    """setup.py builds the extension with freethreading_compatible (Py_MOD_GIL_NOT_USED), and docs/threads.md says so."""
    setup = (ROOT / "setup.py").read_text()
    assert re.search(r"""["']?freethreading_compatible["']?\s*[=:]\s*True""", setup), (
        "setup.py no longer declares free-threading support: revise docs/threads.md and this test"
    )
    doc = (ROOT / "docs" / "threads.md").read_text()
    assert "Py_MOD_GIL_NOT_USED" in doc and "sys._is_gil_enabled()" in doc


#: Module-level mutable state in the sources: `cdef dict/list/object/bint NAME = ...`, C arrays,
#: and the driver's module globals.
_STATE = re.compile(
    r"^(?:cdef\s+(?:dict|list|object|bint|_ProducerType)\s+(_[a-z][a-z_]*)\s*=|"
    r"cdef\s+\w+\s+\*?(_[a-z][a-z_]*)\[|"
    r"(_[a-z][a-z_]*)\s*(?::[^=\n]+)?=\s*(?:None|False|True|\{\}|\[\]|threading\.|weakref\.))",
    re.M,
)

#: Module-level names that are constants, not state (set once at import, never written).
_CONSTANTS = {"_member_defs", "_init_lock"}


@pytest.mark.slow
def test_threads_doc_names_every_module_level_cache():
    """docs/threads.md names each piece of module-level mutable state in the package, and nothing that is gone."""
    found = set()
    for name, text in _sources().items():
        for match in _STATE.finditer(text):
            found.add(next(g for g in match.groups() if g))
    found -= _CONSTANTS
    # The fast paths' caches (the last type, the interned tuples, ...) are no module
    # globals: they live in _thread_state.pxi's struct, per process or per thread.
    assert {"_producer_types", "_dtype_slots", "_cai_dtypes", "_primary_contexts",
            "_graph_entries"} <= found, found
    doc = (ROOT / "docs" / "threads.md").read_text()
    named = set(re.findall(r"`(_[a-z][a-z_]*)`", doc))
    missing = found - named
    assert not missing, f"docs/threads.md does not mention {sorted(missing)}"
    everything = "\n".join(_sources().values())
    stale = {name for name in named if not re.search(rf"\b{name}\b", everything)}
    assert not stale, f"docs/threads.md names what the sources no longer have: {sorted(stale)}"
