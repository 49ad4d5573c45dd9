"""Nothing lost: 100,000 views and 100,000 exports of each producer kind leave memory flat.

Each test runs one step (make a view and drop it, or export one and drop it) 2,000 times to
warm every cache (producer types, interned shape/stride tuples, dtype slots, the CAI dtype
cache), then 100,000 times while measuring, then 5,000 times more under tracemalloc:

- Python objects: ``sys.getallocatedblocks()`` (every block pymalloc hands out).  A step
  that leaks one object leaks >= 100,000 blocks; caches are warm and bounded, so the
  bound is ``MAX_BLOCKS`` = 256 blocks (measured here: 0 to 12).
- C heap: glibc's ``mallinfo2()`` bytes in use (``uordblks + hblkhd``): a leaked malloc
  block (the smallest chunk is 32 bytes, a capsule's block ~150) leaks >= 3.2 MB over
  100,000 steps; the bound is ``MAX_HEAP`` = 64 KiB (measured: 0 to 112 bytes).  This is the
  precise check for C-level leaks: RSS only grows once the free heap is used up.
- RSS (``/proc/self/statm``): the coarse process-level check, ``MAX_RSS`` = 2 MiB (a leak
  of 21 bytes a step passes it once the free heap is exhausted; measured: 0).
- tracemalloc over 5,000 more steps (tracemalloc makes each step 3-10x slower): the traced
  memory at the end within ``MAX_TRACED`` = 16 KiB of the start (one leaked object a step
  is >= 80 KiB) and the peak within ``MAX_TRACED_PEAK`` = 128 KiB (a step holds one
  view, one capsule, one array at a time: measured ~11 KiB; for the ctypes producer the
  harness's own peak, measured alone, is added).

Refcounts of the producer objects (and of views being exported) must be back to their
baseline, and every capsule of the ctypes producer must have had its deleter called once.
The whole file takes about 22-30 s here: the ctypes producer (~25 us a view, mostly the
harness's own cost), torch's general path (~16 us) and jax (~12 us) dominate.
"""

from __future__ import annotations

import ctypes
import gc
import os
import sys
import time
import tracemalloc

import numpy as np
import pytest

import producers
from producers import make_producer
from stridedview import StridedMemoryView
from stridedview import _view
from test_cai import CAIProducer

STEPS = 100_000
WARMUP = 2_000
TRACED_STEPS = 5_000

MAX_BLOCKS = 256
MAX_HEAP = 64 * 1024
MAX_RSS = 2 * 1024 * 1024
MAX_TRACED = 16 * 1024
MAX_TRACED_PEAK = 128 * 1024

_PAGE = os.sysconf("SC_PAGE_SIZE")


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in "arena ordblks smblks hblks hblkhd usmblks fsmblks uordblks fordblks keepcost".split()
    ]


def _load_mallinfo2():
    try:
        libc = ctypes.CDLL(None)
        function = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    function.argtypes = []
    return function


_mallinfo2 = _load_mallinfo2()


def heap_in_use() -> int:
    """Bytes malloc has handed out and not had back (0 where glibc's mallinfo2 is missing)."""
    if _mallinfo2 is None:
        return 0
    info = _mallinfo2()
    return info.uordblks + info.hblkhd


def rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * _PAGE


def traced_peak(step, steps, after_batch=None, batch=1000):
    """The tracemalloc peak over ``steps`` runs of ``step``, above the starting point."""
    tracemalloc.start()
    try:
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for i in range(steps):
            step()
            if after_batch is not None and i % batch == batch - 1:
                after_batch()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return peak - start


def assert_flat(step, steps=STEPS, *, objects=(), after_batch=None, batch=1000, harness_step=None):
    """Run ``step`` ``steps`` times; fail unless memory stays flat and refcounts return.

    ``objects`` are checked with sys.getrefcount before and after; ``after_batch`` runs
    every ``batch`` steps (the ctypes producer checks and forgets its capsules there).
    ``harness_step`` does the test harness's share of a step alone (the ctypes producer
    making a capsule): its traced peak is added to the peak bound.
    """
    for i in range(WARMUP):
        step()
        if after_batch is not None and i % batch == batch - 1:
            after_batch()
    if after_batch is not None:
        after_batch()
    gc.collect()
    refcounts = [sys.getrefcount(obj) for obj in objects]
    blocks, heap, resident = sys.getallocatedblocks(), heap_in_use(), rss()
    started = time.perf_counter()
    for i in range(steps):
        step()
        if after_batch is not None and i % batch == batch - 1:
            after_batch()
    elapsed = time.perf_counter() - started
    gc.collect()
    grown = {
        "python blocks": (sys.getallocatedblocks() - blocks, MAX_BLOCKS),
        "C heap bytes": (heap_in_use() - heap, MAX_HEAP),
        "RSS bytes": (rss() - resident, MAX_RSS),
    }

    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        start, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        for i in range(TRACED_STEPS):
            step()
            if after_batch is not None and i % batch == batch - 1:
                after_batch()
        # The steps' peak, read before the collection: free-threaded 3.13's gc.collect()
        # allocates about 8 traced bytes per live object for itself (1,000,000 live
        # objects: 8 MB; a GIL build's, 56 bytes), so a peak read after it grew with
        # whatever the rest of the test run kept alive (CI: 845188 against 816401).
        _, peak = tracemalloc.get_traced_memory()
        gc.collect()
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    # The harness's own bookkeeping (producers.py's dicts, resized as capsules come and go)
    # and the snapshots themselves are not the package's memory.
    harness = [tracemalloc.Filter(False, producers.__file__), tracemalloc.Filter(False, tracemalloc.__file__)]
    traced = sum(
        stat.size_diff
        for stat in after.filter_traces(harness).compare_to(before.filter_traces(harness), "filename")
    )
    grown["traced bytes"] = (traced, MAX_TRACED)
    peak_bound = MAX_TRACED_PEAK
    if harness_step is not None:
        peak_bound += traced_peak(harness_step, TRACED_STEPS, after_batch, batch)
    grown["traced peak bytes"] = (peak - start, peak_bound)

    problems = [f"{what}: +{value} (bound {bound})" for what, (value, bound) in grown.items() if value > bound]
    counts = [sys.getrefcount(obj) for obj in objects]
    if counts != refcounts:
        problems.append(f"refcounts {refcounts} -> {counts}")
    assert not problems, f"{steps} steps ({elapsed:.2f} s): " + "; ".join(problems)
    return elapsed


def check_view(view, obj, shape):
    """The view is right (so that the loop measures real views, not errors)."""
    assert view.exporting_obj is obj
    assert view.shape == shape


# --- views of each producer kind -------------------------------------------------------------

@pytest.mark.slow
def test_numpy_views_leave_memory_flat():
    """100,000 views of a numpy array: memory flat, the array's refcount back."""
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    check_view(StridedMemoryView(array), array, (3, 4))
    assert_flat(lambda: StridedMemoryView(array), objects=[array])


@pytest.mark.torch
@pytest.mark.interop
@pytest.mark.parametrize("fast_paths", [True, False], ids=["exchange-api", "general-path"])
def test_torch_views_leave_memory_flat(fast_paths):
    """100,000 views of a torch CPU tensor, through the C exchange API and through __dlpack__."""
    torch = pytest.importorskip("torch")
    tensor = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    _view._set_fast_paths_enabled(fast_paths)
    try:
        check_view(StridedMemoryView(tensor), tensor, (3, 4))
        assert_flat(lambda: StridedMemoryView(tensor), objects=[tensor])
    finally:
        _view._set_fast_paths_enabled(True)


@pytest.mark.jax
@pytest.mark.interop
def test_jax_views_leave_memory_flat():
    """100,000 views of a jax array (~12 us each: jax's __dlpack__ dominates)."""
    jnp = pytest.importorskip("jax.numpy")
    array = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    check_view(StridedMemoryView(array), array, (3, 4))
    assert_flat(lambda: StridedMemoryView(array), objects=[array])


class _CapsuleLedger:
    """Checks that each capsule of ``producer`` had its deleter called once, then forgets it.

    producers.py keeps a record of every capsule for the life of the process (so that a
    doubled deleter call is counted, not a use-after-free): forgetting them after the check
    keeps the harness itself flat.
    """

    def __init__(self, producer):
        self.producer = producer
        self.checked = 0

    def __call__(self):
        ids = self.producer.tensor_ids
        calls = producers.DELETER_CALLS  # read at each check: fresh_records() swaps it
        wrong = {i: calls[i] for i in ids if calls[i] != 1}
        assert not wrong, f"deleter calls (tensor id: count) {wrong}"
        self.checked += len(ids)
        producers.forget(self.producer)
        self.producer.calls.clear()


@pytest.mark.slow
@pytest.mark.parametrize("kind", producers.KINDS)
def test_ctypes_producer_views_leave_memory_flat(kind):
    """100,000 views of the ctypes producer's capsules: deleters balanced, memory flat."""
    producer = make_producer(kind, hold_capsules=False)
    ledger = _CapsuleLedger(producer)
    # producers.py keeps ~2 KiB per capsule until the ledger forgets it and its dicts
    # resize as capsules come and go (~190 KiB of traced peak): measured alone and added,
    # with records that hold none of the earlier tests' capsules (fresh_records).
    with producers.fresh_records():
        check_view(StridedMemoryView(producer), producer, (2, 3))
        assert_flat(
            lambda: StridedMemoryView(producer), objects=[producer], after_batch=ledger, batch=20,
            harness_step=producer.__dlpack__,
        )
        ledger()
    assert ledger.checked == 1 + WARMUP + STEPS + 2 * TRACED_STEPS


@pytest.mark.slow
def test_cai_views_leave_memory_flat():
    """100,000 views of a CUDA Array Interface producer (stream_ptr=-1: no driver)."""
    producer = CAIProducer(np.arange(12, dtype=np.float32).reshape(3, 4))
    check_view(StridedMemoryView(producer, stream_ptr=-1), producer, (3, 4))
    assert_flat(lambda: StridedMemoryView(producer, stream_ptr=-1), objects=[producer, producer.interface])


# --- exports -------------------------------------------------------------------------------------

@pytest.mark.slow
def test_numpy_from_dlpack_exports_leave_memory_flat():
    """100,000 numpy.from_dlpack(view): each capsule released when its array dies."""
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = StridedMemoryView(array)
    out = np.from_dlpack(view)
    assert out.__array_interface__["data"][0] == view.ptr
    del out
    assert_flat(lambda: np.from_dlpack(view), objects=[array, view])


@pytest.mark.torch
@pytest.mark.interop
def test_torch_from_dlpack_exports_leave_memory_flat():
    """100,000 torch.from_dlpack(view) (positive strides only: torch 2.13 aborts on negative ones)."""
    torch = pytest.importorskip("torch")
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = StridedMemoryView(array)
    assert torch.from_dlpack(view).data_ptr() == view.ptr
    assert_flat(lambda: torch.from_dlpack(view), objects=[array, view])


@pytest.mark.slow
@pytest.mark.parametrize("max_version", [(1, 3), None], ids=["versioned", "legacy"])
def test_unconsumed_capsules_leave_memory_flat(max_version):
    """100,000 capsules dropped unconsumed: the destructor frees each and releases the view."""
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = StridedMemoryView(array)
    assert_flat(lambda: view.__dlpack__(max_version=max_version), objects=[array, view])


@pytest.mark.slow
def test_views_of_views_leave_memory_flat():
    """100,000 views of a view (each sharing the view's memory owner, then dropped)."""
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    view = StridedMemoryView(array)
    check_view(StridedMemoryView(view), array, (3, 4))
    assert_flat(lambda: StridedMemoryView(view), objects=[array, view])


# --- refusals ----------------------------------------------------------------------------------

def _refused(make, exception):
    def step():
        try:
            make()
        except exception:
            return
        raise AssertionError("not refused")

    return step


@pytest.mark.slow
def test_refused_cai_leaves_memory_flat():
    """100,000 refused CAI dicts (a stride not a multiple of the item size): nothing kept."""
    producer = CAIProducer(strides=(6, 4))
    step = _refused(lambda: StridedMemoryView(producer, stream_ptr=-1), BufferError)
    assert_flat(step, objects=[producer, producer.interface])


@pytest.mark.slow
@pytest.mark.parametrize("kind", producers.KINDS)
def test_refused_capsules_leave_memory_flat(kind):
    """100,000 capsules refused after __dlpack__ (a negative extent), held by nobody else: each deleter runs once, memory flat."""
    producer = make_producer(kind, shape=(2, -3), strides=(1, 1), data=0x10000)
    ledger = _CapsuleLedger(producer)
    step = _refused(lambda: StridedMemoryView(producer), BufferError)
    with producers.fresh_records():  # see test_ctypes_producer_views_leave_memory_flat
        assert_flat(step, objects=[producer], after_batch=ledger, batch=20, harness_step=producer.__dlpack__)
        ledger()
    assert ledger.checked == WARMUP + STEPS + 2 * TRACED_STEPS


@pytest.mark.slow
def test_found_empty_view_with_huge_extents_exports_leave_memory_flat():
    """Found by the fuzzer: exporting an empty view of shape (0, 2**62, 2**62) failed after the
    capsule's block was allocated, leaking ~144 bytes a call (2.9 MB per 20,000, seen with
    mallinfo2).  Its strides now fit int64 and 100,000 exports leave memory flat."""
    producer = make_producer("versioned", shape=(0, 2**62, 2**62), strides=None, data=0)
    view = StridedMemoryView(producer)
    producer.release_capsules()
    assert_flat(lambda: view.__dlpack__(max_version=(1, 3)), objects=[view])


@pytest.mark.slow
def test_memory_measures_see_a_leak():
    """The measures are not blind: a step leaking one object and 64 malloc'd bytes is caught."""
    if _mallinfo2 is None:
        pytest.skip("glibc mallinfo2 is not available")
    kept = []
    libc = ctypes.CDLL(None)
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    blocks = []

    def leaky():
        kept.append(object())
        blocks.append(libc.malloc(64))

    try:
        with pytest.raises(AssertionError, match="python blocks.*C heap bytes"):
            assert_flat(leaky, steps=10_000)
    finally:
        for block in blocks:
            libc.free(block)
