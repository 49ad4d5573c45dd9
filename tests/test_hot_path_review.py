"""Adversarial checks of the launch and numpy hot paths.

Each rewritten path is pushed where it could go wrong: the view's own
deallocation (deleters written in Python that raise, collect garbage or make
views; views freed while an exception propagates, in reference cycles, in other
threads, through the freelist), the numpy adapter and the exchange-API copy at
every number of dimensions, the interned caches under threads and at shutdown,
the 128-bit byte-offset check at its boundary through real entry points, and
``ViewableArgument.view`` as a plain method descriptor.  Every view is compared
with the general path's, and the C-level layout (read back through the view's
own exchange API, which lends its C arrays) with the Python one.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import itertools
import os
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.lib.stride_tricks import as_strided

import producers
import test_fuzz
from numpy_export import NUMPY_REWRITES_DEGENERATE_STRIDES, addressing_strides
from producers import DLManagedTensor, DLManagedTensorVersioned, DLTensor
from stridedview import StridedMemoryView, _view, args_viewable_as_strided_memory
from stridedview._view import ViewableArgument
from test_fast_paths import general_path
from torch_expectations import expected_bits_reader

pytestmark = pytest.mark.usefixtures("forbidden_driver")


# --- reading a view's C layout back -----------------------------------------------------

_GetPointer = ctypes.pythonapi.PyCapsule_GetPointer
_GetPointer.argtypes = (ctypes.py_object, ctypes.c_char_p)
_GetPointer.restype = ctypes.c_void_p
_LEND = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, ctypes.POINTER(DLTensor))


def _lend_function():
    table = _GetPointer(StridedMemoryView.__dlpack_c_exchange_api__, b"dlpack_exchange_api")
    # dltensor_from_py_object_no_sync: the sixth pointer after the 16-byte header.
    address = ctypes.c_void_p.from_address(table + 16 + 3 * ctypes.sizeof(ctypes.c_void_p)).value
    return _LEND(address)


LEND = _lend_function()


def c_layout(view):
    """(ndim, shape, strides, data) as the view's C arrays hold them (a writable view)."""
    out = DLTensor()
    if LEND(view, ctypes.byref(out)) != 0:
        raise AssertionError("the view's exchange API refused to lend its layout")
    ndim = out.ndim
    return (
        ndim,
        tuple(out.shape[i] for i in range(ndim)),
        tuple(out.strides[i] for i in range(ndim)),
        out.data or 0,
    )


def assert_c_layout_matches(view):
    """The C-level arrays hold exactly the Python shape and strides."""
    if view.readonly:
        return
    ndim, shape, strides, data = c_layout(view)
    expected = (view.ndim, view.shape, view.strides)
    if (ndim, shape, strides) != expected:
        raise AssertionError(f"C layout {(ndim, shape, strides)} != Python {expected}")
    if view.size and data != view.ptr:
        raise AssertionError(f"C data {data:#x} != ptr {view.ptr:#x}")


# --- producers whose deleter runs arbitrary Python ----------------------------------------

_HOOKS = {}  # tensor id -> what its deleter runs after counting the call


def _hooked_deleter(struct_type):
    def deleter(address):
        tensor_id = struct_type.from_address(address).manager_ctx
        hook = _HOOKS.pop(tensor_id, None)
        producers._release(tensor_id)
        if hook is not None:
            hook()

    return producers.DLPackDeleter(deleter)


# Module-level: a thunk must outlive every capsule (a producer in a cycle dies first).
_HOOKED_VERSIONED = _hooked_deleter(DLManagedTensorVersioned)
_HOOKED_LEGACY = _hooked_deleter(DLManagedTensor)


class HookedProducer(producers.DLPackProducer):
    """A ctypes producer whose deleter, after counting itself, calls ``hook()``."""

    def __init__(self, kind="versioned", *, hook=None, **fields):
        super().__init__(kind, **fields)
        self.hook = hook

    def _new_capsule(self):
        capsule = super()._new_capsule()
        tensor_id = self.tensor_ids[-1]
        record = producers._LIVE[tensor_id]
        record.managed.deleter = _HOOKED_VERSIONED if self.kind == "versioned" else _HOOKED_LEGACY
        if self.hook is not None:
            _HOOKS[tensor_id] = self.hook
        return capsule


SHAPES = {"2d": (2, 3), "12d": (1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1)}


@contextlib.contextmanager
def unraisables():
    """Collect what reaches sys.unraisablehook (a deleter's exception) instead of printing it."""
    seen = []
    previous = sys.unraisablehook
    sys.unraisablehook = seen.append
    try:
        yield seen
    finally:
        sys.unraisablehook = previous


def _raise_holding(producer, derive, zero=0):
    # The view is a value on the frame's stack when the division fails: the
    # interpreter drops it with the ZeroDivisionError pending (a local would live
    # on in the traceback).
    return [derive(StridedMemoryView(producer)), 1 // zero]


DERIVE = {
    "itself": lambda v: v,
    "T": lambda v: v.T,
    "index": lambda v: v[0],
    "reshape": lambda v: v.reshape(-1),
    "dtype": lambda v: v.view(dtype=np.int32),
}


def _make_views_and_collect():
    """A deleter's hook: views of every kind made and dropped, then a full collection."""
    views = [
        StridedMemoryView(np.zeros((1,) * 12)),
        StridedMemoryView(np.zeros(3)),
        StridedMemoryView(producers.make_producer(shape=SHAPES["12d"])),
        StridedMemoryView(bytearray(8)),
    ]
    views.append(views[0].T)
    del views
    gc.collect()


def _raise_in_deleter():
    raise RuntimeError("deleter hook failed")


@pytest.mark.slow
@pytest.mark.parametrize("kind", producers.KINDS)
@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
@pytest.mark.parametrize("derive", list(DERIVE), ids=list(DERIVE))
@pytest.mark.parametrize(
    "hook", [_make_views_and_collect, _raise_in_deleter], ids=["views-and-gc", "raises"]
)
def test_deleter_running_python_while_an_error_propagates(kind, shape, derive, hook):
    """A Python deleter that makes views, collects or raises, run as an exception unwinds
    a frame, leaves that exception intact and runs once."""
    producer = HookedProducer(kind, shape=SHAPES[shape], hook=hook)
    with unraisables() as seen:
        with pytest.raises(ZeroDivisionError) as info:
            _raise_holding(producer, DERIVE[derive])
        gc.collect()
    assert info.value.__context__ is None
    assert producers.deleter_calls(producer) == 1
    expected = [RuntimeError] if hook is _raise_in_deleter else []
    assert [type(u.exc_value) for u in seen] == expected


@pytest.mark.slow
@pytest.mark.parametrize("kind", producers.KINDS)
@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
@pytest.mark.parametrize(
    "entry",
    [StridedMemoryView, StridedMemoryView.from_dlpack, lambda obj: ViewableArgument(obj).view()],
    ids=["constructor", "from_dlpack", "viewable-argument"],
)
def test_refused_capsule_deleter_running_python_keeps_the_refusal(kind, shape, entry):
    """A capsule refused after it was consumed (lanes 0) is freed with the BufferError pending:
    its Python deleter (making views, collecting) runs once and the error reaches the caller intact."""
    producer = HookedProducer(kind, shape=SHAPES[shape], dtype=(2, 32, 0), hook=_make_views_and_collect)
    with unraisables() as seen:
        with pytest.raises(BufferError, match=r"^dlpack: dtype lanes must be >= 1 \(got 0\)$") as info:
            entry(producer)
    assert type(info.value) is BufferError and info.value.__context__ is None
    assert producers.deleter_calls(producer) == 1
    assert seen == []


@pytest.mark.slow
@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_views_freed_while_a_generator_closes(shape):
    """Views local to a generator are freed once each as it is closed, collected, or raises."""

    def holding(producer):
        view = StridedMemoryView(producer)
        also = view.T  # noqa: F841
        yield view.shape
        raise KeyError("from the generator")

    producer = HookedProducer(shape=SHAPES[shape], hook=_make_views_and_collect)
    closed = holding(producer)
    assert next(closed) == SHAPES[shape]
    closed.close()
    dropped = holding(producer)
    next(dropped)
    del dropped
    gc.collect()
    raising = holding(producer)
    next(raising)
    with pytest.raises(KeyError, match="from the generator"):
        next(raising)
    assert len(producer.tensor_ids) == 3
    assert producers.deleter_calls(producer) == 3


@pytest.mark.slow
def test_views_dropped_in_del_while_an_error_propagates():
    """An object whose __del__ drops views (capsule, >8 dims, buffer) as an error unwinds
    keeps the error and releases each view once."""
    data = bytearray(16)
    producer = HookedProducer(shape=SHAPES["12d"], hook=_make_views_and_collect)

    class Holder:
        def __init__(self):
            self.views = [
                StridedMemoryView(producer),
                StridedMemoryView(data),
                StridedMemoryView(np.zeros((1,) * 10)),
            ]

        def __del__(self):
            del self.views
            gc.collect()

    def fail():
        holder = Holder()  # noqa: F841
        raise IndexError("kept")

    with pytest.raises(IndexError, match="^kept$"):
        fail()
    assert producers.deleter_calls(producer) == 1
    data.extend(b"x")  # no view holds the buffer any more


@pytest.mark.slow
@pytest.mark.parametrize("kind", producers.KINDS)
@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
def test_views_in_reference_cycles_are_collected_once(kind, shape):
    """view -> exporting_obj -> view cycles (with derived views in them) are collected,
    every deleter running exactly once."""
    producers_made = []
    for derive in DERIVE.values():
        producer = HookedProducer(kind, shape=SHAPES[shape], hook=gc.collect)
        view = StridedMemoryView(producer)
        producer.cycle = [view, derive(view)]
        producers_made.append(producer)
    del producer, view
    assert [producers.deleter_calls(p) for p in producers_made] == [0] * len(DERIVE)
    tensor_ids = [i for p in producers_made for i in p.tensor_ids]
    del producers_made
    gc.collect()
    assert len(tensor_ids) == len(DERIVE)
    assert [producers.DELETER_CALLS[i] for i in tensor_ids] == [1] * len(DERIVE)


@pytest.mark.slow
def test_cycle_collection_runs_each_deleter_once_counted_per_tensor():
    """A cycle through a >8-dim capsule view and a buffer view: one deleter call, one release."""
    data = bytearray(24)
    producer = HookedProducer(shape=SHAPES["12d"])
    tensor_ids = producer.tensor_ids
    holder = [StridedMemoryView(producer), StridedMemoryView(data)]
    holder.append(holder)
    producer.holder = holder
    del holder, producer
    gc.collect()
    assert [producers.DELETER_CALLS[i] for i in tensor_ids] == [1]
    data.extend(b"x")


@pytest.mark.slow
def test_views_made_and_freed_in_other_threads():
    """Capsule, buffer and numpy views made in one thread and freed in another release once each."""
    data = bytearray(64)
    producer = HookedProducer(shape=SHAPES["12d"])
    made = []
    errors = []

    def make():
        try:
            for _ in range(50):
                made.append(StridedMemoryView(producer))
                made.append(StridedMemoryView(data))
                made.append(StridedMemoryView(np.zeros((1,) * 9)).T)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def free():
        while made:
            made.pop()

    threads = [threading.Thread(target=make) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    freeing = [threading.Thread(target=free) for _ in range(3)]
    for t in freeing:
        t.start()
    for t in freeing:
        t.join()
    assert errors == [] and made == []
    gc.collect()
    assert len(producer.tensor_ids) == 150
    assert all(producers.DELETER_CALLS[i] == 1 for i in producer.tensor_ids)
    data.extend(b"x")
    producers.forget(producer)


def test_freelist_reuse_between_many_and_few_dimensions_keeps_c_layouts():
    """Views of >8 and <=8 dimensions made and freed in turn (the freelist hands one's memory
    to the other) each hold their own C layout."""
    arrays = [
        np.zeros((2, 1, 3, 1, 1, 1, 1, 1, 1, 1, 4, 1)),
        np.zeros((3, 5))[::2, ::-1],
        np.zeros((1,) * 9 + (2,)),
        np.zeros(()),
        np.zeros((4,) * 8),
        np.zeros((2,) * 20),
    ]
    kept = []
    for round_ in range(200):
        for array in arrays:
            view = StridedMemoryView(array)
            assert_c_layout_matches(view)
            derived = view.T if round_ % 2 else view.view(dtype=np.int64)
            assert_c_layout_matches(derived)
            if round_ % 7 == 0:
                kept.append(view)  # some outlive later ones
    for view, array in zip(kept, arrays * len(kept)):
        assert_c_layout_matches(view)
        assert view.shape == array.shape


# --- no leak of shape blocks, buffers or capsules -------------------------------------------

class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost",
    )]


def _malloc_in_use():
    libc = ctypes.CDLL(None)
    mallinfo2 = getattr(libc, "mallinfo2", None)
    if mallinfo2 is None:
        pytest.skip("needs glibc's mallinfo2")
    mallinfo2.restype = _MallInfo2
    return mallinfo2().uordblks


@pytest.mark.slow
def test_many_dimension_views_leak_no_malloc_memory():
    """20000 views of 12 and 30 dimensions (numpy adapter, capsule, buffer, derived) return
    every malloc'd shape block."""
    twelve = np.zeros((1, 2, 1, 1, 1, 1, 1, 1, 1, 1, 3, 1))
    thirty = memoryview(bytearray(8)).cast("B", (1,) * 29 + (8,))
    producer = producers.make_producer(shape=(1,) * 12)

    def churn(n):
        for _ in range(n):
            view = StridedMemoryView(twelve)
            view.T, view[0], view.reshape(-1), view.view(dtype=np.int64)
            StridedMemoryView(thirty).T
            StridedMemoryView(producer)
            producers.forget(producer)  # its records of released tensors would count

    # With records that hold no earlier test's capsules (producers.fresh_records): the
    # dicts those fill resize their tables as the churn adds and forgets, which counted
    # 662240 bytes here after tests/test_free_threading.py.
    with producers.fresh_records():
        churn(200)
        gc.collect()
        before = _malloc_in_use()
        churn(4000)
        gc.collect()
        grown = _malloc_in_use() - before
    # A leak of one block per view would be 20000 * >= 192 bytes.
    assert grown < 256 * 1024, grown


# --- the numpy adapter at every number of dimensions and any strides ----------------------

def _outcome(make_view):
    """The view's fields, byte strides, density, C layout and numpy re-export, or the
    type and message of the exception it raises."""
    try:
        view = make_view()
    except Exception as exc:  # noqa: BLE001 - any refusal is compared
        return ("raised", type(exc), str(exc))
    fields = tuple(getattr(view, name) for name in (
        "ptr", "shape", "dtype", "device_id", "is_device_accessible", "readonly",
        "size", "itemsize", "nbytes",
    )) + (addressing_strides(view.shape, view.strides),)
    assert_c_layout_matches(view)
    try:
        again = np.from_dlpack(view)
        # An empty view is exported with a NULL data pointer, for which numpy allocates a
        # buffer of its own: its address says nothing (and may differ between two imports).
        address = again.__array_interface__["data"][0] if view.size else None
        exported = (again.shape, again.strides, address, again.dtype)
    except Exception as exc:  # noqa: BLE001
        exported = ("raised", type(exc), str(exc))
    if NUMPY_REWRITES_DEGENERATE_STRIDES:  # numpy_export.py: only strides that address memory
        return ("view", fields, addressing_strides(view.shape, view.byte_strides), view.is_dense,
                view.exporting_obj is not None, exported[:1] + exported[2:])
    return ("view", fields, view.byte_strides, view.is_dense, view.exporting_obj is not None,
            repr(view), exported)


def assert_numpy_both_ways(layout):
    """The adapter and numpy's own capsule give the same view of ``layout.array`` (or the
    same refusal)."""
    array = layout.array  # never an argument: a failure's traceback shows those, and an
    # as_strided array's repr reads memory far past its buffer
    fast = _outcome(lambda: StridedMemoryView(array))
    with general_path():
        general = _outcome(lambda: StridedMemoryView(array))
    if fast != general:
        raise AssertionError(f"adapter {fast!r} != general {general!r}")
    return fast


_STRIDE_EDGES = [0, 1, -1, 3, -3, 2**31, -(2**31), 2**61, -(2**61), 2**62, -(2**62),
                 2**63 - 1, -(2**63), 2**62 + 8, 2**60 * 3]


class _Sub(np.ndarray):
    """A numpy subclass keeping ndarray's DLPack methods."""


class Layout:
    """An as_strided array whose repr names its layout (the array's own would read
    memory its strides point far past)."""

    def __init__(self, array):
        self.array = array

    def __repr__(self):
        a = self.array
        return (f"Layout({type(a).__name__}, shape={a.shape}, strides={a.strides}, "
                f"dtype={a.dtype.str}, writeable={a.flags.writeable})")


@st.composite
def strided_arrays(draw):
    """as_strided arrays of 0..64 dimensions over a small buffer: zero, negative, huge and
    inexact strides, empty and extent-1 axes, read-only, byte-swapped, subclass."""
    dtype = np.dtype(draw(st.sampled_from(["f8", "f4", "i2", "u1", "?", "c16", "e", ">f4", "<i8", "g"])))
    ndim = draw(st.one_of(st.sampled_from([0, 1, 8, 9, 16, 32, 63, 64]), st.integers(0, 64)))
    big_axes = draw(st.sets(st.integers(0, max(ndim - 1, 0)), max_size=min(ndim, 5)))
    shape = [1] * ndim
    for axis in big_axes:
        shape[axis] = draw(st.sampled_from([0, 2, 3, 7]))
    strides = [
        draw(st.one_of(
            st.sampled_from(_STRIDE_EDGES),
            st.integers(-4, 4).map(lambda n, size=dtype.itemsize: n * size),
            st.integers(-(2**63), 2**63 - 1),
        ))
        for _ in range(ndim)
    ]
    base = np.zeros(4, dtype=dtype)
    try:
        array = as_strided(base[1:], shape=shape, strides=strides,
                           writeable=draw(st.booleans()))
    except (ValueError, OverflowError):
        array = base.reshape(())
    if draw(st.booleans()):
        array = array.view(_Sub)
    return Layout(array)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layout=strided_arrays())
def test_numpy_adapter_matches_general_path_at_any_ndim_and_stride(layout):
    """Any as_strided layout of up to 64 dimensions: the adapter's view, byte strides,
    density, C layout and re-export equal the capsule path's, or both refuse alike."""
    assert_numpy_both_ways(layout)


@pytest.mark.parametrize("ndim", [8, 9, 32, 64])
@pytest.mark.parametrize("stride", [2**62, 2**63 - 8, -(2**62), -(2**63) + 8])
def test_numpy_adapter_byte_offsets_at_the_int64_edge(ndim, stride):
    """Byte offsets just inside and past int64 (one or two steps of a huge stride) give the
    general path's answer at every ndim."""
    for extent in (2, 3):
        shape = [1] * ndim
        shape[ndim // 2] = extent
        strides = [8] * ndim
        strides[ndim // 2] = stride
        assert_numpy_both_ways(Layout(as_strided(np.zeros(1), shape=shape, strides=strides)))


# --- the exchange-API copy into the view's own C arrays ------------------------------------

def _torch_layouts(torch):
    """torch tensors of 0..100 dimensions: contiguous, strided, expanded, permuted."""
    def spread(ndim):
        shape = [1] * ndim
        for axis in range(0, ndim, max(ndim // 3, 1)):
            shape[axis] = 2
        return shape

    cases = {}
    for ndim in (0, 1, 8, 9, 16, 25, 64, 100):
        base = torch.arange(float(2 ** sum(1 for n in spread(ndim) if n == 2))).reshape(spread(ndim))
        cases[f"{ndim}d"] = base
        if ndim:
            cases[f"{ndim}d-permuted"] = base.permute(*reversed(range(ndim)))
            cases[f"{ndim}d-expanded"] = base[..., :1].expand(*base.shape[:-1], 5)
            cases[f"{ndim}d-strided"] = torch.zeros([3] + spread(ndim)[1:])[::2]
    return cases


@pytest.mark.torch
@pytest.mark.interop
def test_torch_exchange_api_at_any_ndim_matches_dlpack():
    """torch tensors of 0..100 dimensions, strided, expanded and permuted: the exchange API's
    view (its layout copied into the view's C arrays) equals __dlpack__'s, C layout included."""
    torch = pytest.importorskip("torch")
    for name, tensor in _torch_layouts(torch).items():
        fast = _outcome(lambda: StridedMemoryView(tensor))
        with general_path():
            general = _outcome(lambda: StridedMemoryView(tensor))
        assert fast[0] == "view", (name, fast)
        assert fast == general, name
        # Views made one after the other reuse freed objects: each keeps its own layout.
        views = [StridedMemoryView(t) for t in (tensor, torch.zeros(2, 3), tensor[:1] if tensor.dim() else tensor)]
        for view in views:
            assert_c_layout_matches(view)


_LENT_BUFFER = (ctypes.c_double * 8)()  # the memory every lent tensor points into


@pytest.fixture
def lend():
    """``lend(ndim, shape, strides, data=None)``: an exchange-API-only producer (test_fuzz's)
    lending a float64 DLTensor of that layout, NULL arrays included; closed at teardown."""
    made = []

    def make(ndim, shape, strides, data=None):
        producer = test_fuzz.ExchangeProducer({
            "data": ctypes.addressof(_LENT_BUFFER) if data is None else data,
            "device": (1, 0), "ndim": ndim, "dtype": (2, 64, 1), "shape": shape,
            "strides": strides, "byte_offset": 0,
        })
        made.append(producer)
        return producer

    yield make
    for producer in made:
        producer.close()


@pytest.mark.parametrize(
    "ndim, shape, strides, error, says",
    [
        (-1, None, None, BufferError, r"^dlpack: ndim must be >= 0 \(got -1\)$"),
        (-(2**31), (2,), (1,), BufferError, r"^dlpack: ndim must be >= 0"),
        (3, None, (1, 1, 1), BufferError, r"^dlpack: shape is NULL with ndim 3$"),
        (12, None, None, BufferError, r"^dlpack: shape is NULL with ndim 12$"),
        (2, (2, -3), None, BufferError, r"^dlpack: shape\[1\] must be >= 0 \(got -3\)$"),
        (12, (1,) * 11 + (-1,), (0,) * 12, BufferError, r"^dlpack: shape\[11\] must be >= 0"),
        (2**31 - 1, None, None, BufferError, r"^dlpack: shape is NULL with ndim 2147483647$"),
    ],
    ids=["ndim-1", "ndim-min", "null-shape-3", "null-shape-12", "negative-extent",
         "negative-extent-12", "ndim-max-null-shape"],
)
def test_lent_tensor_with_a_bad_layout_is_a_clean_error(lend, ndim, shape, strides, error, says):
    """A lent DLTensor with negative or huge ndim, a NULL shape or a negative extent is
    refused with the BufferError that names it, never a crash (a NULL shape is refused
    before anything is allocated for its ndim)."""
    with pytest.raises(error, match=says):
        StridedMemoryView(lend(ndim, shape, strides))


@pytest.mark.parametrize("ndim", [1, 8, 9, 16, 1000])
@pytest.mark.parametrize("with_strides", [True, False], ids=["strides", "null-strides"])
def test_lent_tensor_of_any_ndim_is_copied_into_the_view(lend, ndim, with_strides):
    """A lent layout of 1..1000 dimensions, with or without strides, ends up in the view's
    tuples and C arrays alike (row-major for NULL strides)."""
    shape = [1] * ndim
    shape[0] = 2
    shape[-1] = 3 if ndim > 1 else 2
    row_major = [1] * ndim
    for axis in range(ndim - 2, -1, -1):
        row_major[axis] = row_major[axis + 1] * shape[axis + 1]
    view = StridedMemoryView(lend(ndim, shape, row_major if with_strides else None))
    assert view.shape == tuple(shape)
    assert view.strides == tuple(row_major)
    assert_c_layout_matches(view)


def test_failing_lent_tensors_leak_no_shape_blocks(lend):
    """A 12-dimension lent layout refused after its copy into the view (NULL data) frees the
    view's block each time."""
    producer = lend(12, (2,) + (1,) * 11, (1,) * 12, data=0)

    def churn(n):
        for _ in range(n):
            with contextlib.suppress(BufferError):
                StridedMemoryView(producer)

    churn(100)
    before = _malloc_in_use()
    churn(5000)
    assert _malloc_in_use() - before < 64 * 1024


# --- the interned address ints and shape tuples ----------------------------------------------

def test_threads_viewing_different_arrays_each_get_their_own_layout():
    """Threads viewing arrays of different addresses and layouts at once (switching every few
    microseconds) each get their own array's ptr, shape, strides and C layout."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    errors = []

    def hammer(seed):
        rng = np.random.default_rng(seed)
        arrays = []
        for _ in range(40):
            ndim = int(rng.integers(0, 12))
            shape = tuple(int(n) for n in rng.integers(1, 3, size=ndim))
            array = np.zeros(shape, dtype=rng.choice(["f4", "i8", "u1"]))
            arrays.append(array if ndim < 2 else array.swapaxes(0, -1))
        try:
            for _ in range(25):
                for array in arrays:
                    view = StridedMemoryView(array)
                    expected = (array.ctypes.data, array.shape,
                                tuple(s // array.itemsize for s in array.strides))
                    if (view.ptr, view.shape, view.strides) != expected:
                        errors.append((expected, (view.ptr, view.shape, view.strides)))
                    assert_c_layout_matches(view)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(seed,)) for seed in range(4)]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    assert errors == []


def test_interned_ints_and_tuples_keep_stable_reference_counts():
    """10000 views of one array give back every reference they take to the cached ptr int and
    shape/strides tuples."""
    array = np.zeros((3, 4, 5))[:, ::2]
    first = StridedMemoryView(array)
    shape, strides, ptr = first.shape, first.strides, first.ptr
    counts = (sys.getrefcount(shape), sys.getrefcount(strides), sys.getrefcount(ptr))
    for _ in range(10000):
        view = StridedMemoryView(array)
        if _view.fast_paths:  # interned: the same objects
            assert view.shape is shape and view.strides is strides and view.ptr is ptr
        else:  # no caches in this build: equal new objects
            assert (view.shape, view.strides, view.ptr) == (shape, strides, ptr)
            assert view.shape is not shape and view.strides is not strides and view.ptr is not ptr
    del view
    assert (sys.getrefcount(shape), sys.getrefcount(strides), sys.getrefcount(ptr)) == counts


def test_evicted_cache_entries_are_freed():
    """Views of 20000 distinct addresses and shapes evict cache entries without keeping them
    alive (the Python memory in use does not grow with the count)."""
    import tracemalloc

    big = np.zeros(20000, dtype=np.uint8)
    shapes = [np.zeros((1, n % 97 + 1, n // 97 + 1), dtype=np.uint8) for n in range(2000)]

    def churn():
        for offset in range(0, 20000, 1):
            StridedMemoryView(big[offset:])
        for array in shapes:
            for _ in range(10):
                StridedMemoryView(array)

    churn()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        churn()
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # A leaked int per address and tuple pair per shape would be >= 20000 * 32 bytes.
    assert grown < 64 * 1024, grown


@pytest.mark.slow
def test_interpreter_exits_cleanly_with_cached_objects():
    """A process that fills the caches (numpy, torch, capsule and many-dimension views, some
    alive at exit) exits with status 0 and nothing on stderr."""
    code = textwrap.dedent(
        """
        import numpy as np
        try:
            import torch  # where torch is installed: its tensors' views too
        except ModuleNotFoundError:
            torch = None
        import producers
        from stridedview import StridedMemoryView

        kept = []
        for n in range(200):
            kept.append(StridedMemoryView(np.zeros((n % 7 + 1, n % 5 + 1))[::2]))
            StridedMemoryView(np.zeros((1,) * (n % 20)))
            if torch is not None:
                StridedMemoryView(torch.zeros(n % 3 + 1, 2).t())
        kept.append(StridedMemoryView(producers.make_producer(shape=(1,) * 12)))
        kept.append(kept)  # a cycle, left to the final collection
        print("ok")
        """
    )
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-X", "dev", "-c", code], capture_output=True,
                            text=True, env=env, timeout=120)
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, "ok", "")


# --- the int64 byte-offset check at its boundary, through every entry point ----------------

_EDGE = 2**63 - 1
#: (shape, byte strides, itemsize, accepted): the largest offset above or below element 0 is
#: exactly 2**63 - 1 (accepted) or 2**63 (refused); spans above and below count apart.
BYTE_OFFSET_EDGES = [
    ((2,), (_EDGE,), 1, True),
    ((2,), (-_EDGE,), 1, True),
    ((3,), (2**62,), 1, False),
    ((2,), (-(2**63),), 1, False),
    ((2, 2), (2**62, 2**62 - 1), 1, True),
    ((2, 2), (2**62, 2**62), 1, False),
    ((2, 2), (2**62, -(2**62)), 1, True),
    ((2, 2), (-(2**62), -(2**62 - 1)), 1, True),
    ((2, 2), (-(2**62), -(2**62)), 1, False),
    ((1, 2, 1), (8, _EDGE - 7, -8), 8, True),
    ((2,), (2**63 - 8,), 8, True),
    ((2,), (-(2**63 - 8),), 8, True),
    ((3,), (2**62,), 8, False),
    ((3,), (-(2**62),), 8, False),
    ((2, 2, 2), (2**62, 2**62 - 2, -2), 2, True),
    ((2, 2, 2), (2**62, 2**62, -2), 2, False),
]
_EDGE_IDS = [f"{shape}-{strides}-{itemsize}" for shape, strides, itemsize, _ in BYTE_OFFSET_EDGES]
_UNSIGNED = {1: "|u1", 2: "<u2", 8: "<u8"}


def _expect(accepted, protocol):
    if accepted:
        return contextlib.nullcontext()
    return pytest.raises(BufferError, match=f"^{protocol}: byte offsets from")


class _CAI:
    def __init__(self, interface):
        self.__cuda_array_interface__ = interface


@pytest.mark.parametrize("shape, strides, itemsize, accepted", BYTE_OFFSET_EDGES, ids=_EDGE_IDS)
def test_cai_byte_offsets_at_the_int64_boundary(fake, shape, strides, itemsize, accepted):
    """A CAI dict whose largest byte offset is 2**63 - 1 is viewed; one reaching 2**63 is refused."""
    base = np.zeros(8, dtype=np.uint8)
    fake.register_pointer(base.ctypes.data, 8, 0)
    obj = _CAI({"version": 3, "shape": shape, "typestr": _UNSIGNED[itemsize],
                "data": (base.ctypes.data, False), "strides": strides})
    with _expect(accepted, "cuda array interface"):
        view = StridedMemoryView(obj, -1)
        assert view.byte_strides == strides and view.shape == shape
        assert_c_layout_matches(view)


@pytest.mark.slow
@pytest.mark.parametrize("kind", producers.KINDS)
@pytest.mark.parametrize("shape, strides, itemsize, accepted", BYTE_OFFSET_EDGES, ids=_EDGE_IDS)
def test_dlpack_byte_offsets_at_the_int64_boundary(kind, shape, strides, itemsize, accepted):
    """A DLPack tensor whose largest byte offset is 2**63 - 1 is viewed, one reaching 2**63 is
    refused, and its deleter runs once either way."""
    if any(s % itemsize for s in strides):
        pytest.skip("element strides cannot express this byte stride")
    base = np.zeros(8, dtype=np.uint8)
    producer = producers.make_producer(
        kind, shape=shape, strides=tuple(s // itemsize for s in strides),
        dtype={1: "uint8", 2: "uint16", 8: "uint64"}[itemsize], data=base.ctypes.data,
    )
    with _expect(accepted, "dlpack"):
        view = StridedMemoryView(producer)
        assert view.byte_strides == strides
        assert_c_layout_matches(view)
        del view
    gc.collect()
    assert producers.deleter_calls(producer) == 1


@pytest.mark.parametrize("shape, strides, itemsize, accepted", BYTE_OFFSET_EDGES, ids=_EDGE_IDS)
def test_numpy_and_lent_byte_offsets_at_the_int64_boundary(lend, shape, strides, itemsize, accepted):
    """The numpy adapter (and numpy's capsule) and a lent exchange-API tensor draw the int64
    line where the other protocols do."""
    dtype = np.dtype(_UNSIGNED[itemsize])
    array = as_strided(np.zeros(1, dtype=dtype), shape=shape, strides=strides)
    for path in (contextlib.nullcontext, general_path):
        with path(), _expect(accepted, "dlpack"):
            got = StridedMemoryView(array).byte_strides
            assert got == strides  # (never the array itself in an assertion: its repr reads it)
    if itemsize == 8:  # the lent tensors are float64
        lent = lend(len(shape), shape, [s // 8 for s in strides])
        with _expect(accepted, "dlpack"):
            assert_c_layout_matches(StridedMemoryView(lent))


# --- ViewableArgument.view as a plain method descriptor -------------------------------------

def _fields(view):
    return (view.ptr, view.shape, view.strides, view.dtype, view.device_id, view.readonly,
            view.exporting_obj, view.ready_stream)


def _captured_argument(obj):
    captured = []

    @args_viewable_as_strided_memory((0,))
    def launch(arg):
        captured.append(arg)

    launch(obj)
    return captured[0]


ARGUMENT_OBJECTS = {
    "numpy": lambda: np.arange(12.0).reshape(3, 4)[:, ::2],
    "numpy-10d": lambda: np.zeros((1,) * 9 + (3,)),
    "capsule": lambda: producers.make_producer(shape=(1,) * 12),
    "buffer": lambda: bytearray(b"abcd"),
}


@pytest.mark.parametrize("name", list(ARGUMENT_OBJECTS))
def test_view_called_every_way_gives_the_constructors_view(name):
    """view() bound, unbound, by keyword, through functools.partial (of the method or of the
    unbound descriptor) gives the constructor's view."""
    obj = ARGUMENT_OBJECTS[name]()
    arg = _captured_argument(obj)
    expected = _fields(StridedMemoryView(obj, -1))
    calls = [
        lambda: arg.view(-1),
        lambda: arg.view(stream_ptr=-1),
        lambda: ViewableArgument.view(arg, -1),
        lambda: ViewableArgument.view(arg, stream_ptr=-1),
        lambda: ViewableArgument.view(ViewableArgument(obj), -1),
        functools.partial(ViewableArgument.view, arg, -1),
        functools.partial(ViewableArgument.view, arg, stream_ptr=-1),
        functools.partial(arg.view, -1),
        functools.partial(arg.view, stream_ptr=-1),
        lambda: ViewableArgument.view.__get__(arg, ViewableArgument)(-1),
    ]
    for call in calls:
        assert _fields(call()) == expected
    assert _fields(arg.view()) == _fields(StridedMemoryView(obj))


@pytest.mark.parametrize(
    "call, says",
    [
        (lambda arg: arg.view(-1, -1), "at most 1"),
        (lambda arg: arg.view(-1, stream_ptr=-1), "stream_ptr"),
        (lambda arg: arg.view(stream=-1), "stream"),
        (lambda arg: ViewableArgument.view(), "needs an argument"),
        (lambda arg: ViewableArgument.view(np.zeros(3), -1), "ViewableArgument"),
        (lambda arg: ViewableArgument.view(None), "ViewableArgument"),
        (lambda arg: ViewableArgument.view(stream_ptr=-1), "needs an argument"),
        (lambda arg: functools.partial(ViewableArgument.view, arg, -1, -1)(), "at most 1"),
    ],
    ids=["two-positional", "positional-and-keyword", "unknown-keyword", "no-self",
         "foreign-self", "none-self", "keyword-no-self", "partial-too-many"],
)
def test_view_with_wrong_arguments_is_a_type_error(call, says):
    """Wrong argument counts, unknown keywords and a foreign self are TypeErrors, never a crash."""
    arg = _captured_argument(np.zeros(3))
    with pytest.raises(TypeError, match=says):
        call(arg)


def test_view_signature_is_introspectable():
    """inspect sees view(self, stream_ptr=None), through the class and an instance."""
    import inspect

    unbound = inspect.signature(ViewableArgument.view).parameters
    assert [(p.name, p.default) for p in unbound.values()] == [
        ("self", inspect.Parameter.empty), ("stream_ptr", None)]
    assert str(inspect.signature(_captured_argument(np.zeros(1)).view)) == "(stream_ptr=None)"


class _Launcher:
    """A launcher class: views of its arguments taken in a method, by position or keyword."""

    def __init__(self):
        self.views = []

    @args_viewable_as_strided_memory((1, "out"))
    def launch(self, src, out=None, *, stream_ptr=-1):
        self.views.append((src.view(stream_ptr), None if out is None else out.view(stream_ptr=stream_ptr)))


@pytest.mark.parametrize(
    "call",
    [
        lambda launcher, a, b: launcher.launch(a, b),
        lambda launcher, a, b: launcher.launch(a, out=b),
        lambda launcher, a, b: launcher.launch(src=a, out=b, stream_ptr=-1),
        lambda launcher, a, b: _Launcher.launch(launcher, a, b),
        lambda launcher, a, b: functools.partial(launcher.launch, out=b)(a),
    ],
    ids=["positional", "keyword", "all-keywords", "through-class", "partial"],
)
def test_bound_launcher_views_equal_constructor_views(call):
    """A decorated method hands over, for positional and keyword arguments, views equal to
    the constructor's on both paths."""
    a = np.arange(24.0).reshape(2, 3, 4)[:, ::-1]
    b = np.zeros((1,) * 10 + (4,), dtype=np.int16)
    for path in (contextlib.nullcontext, general_path):
        launcher = _Launcher()
        with path():
            call(launcher, a, b)
            expected = (_fields(StridedMemoryView(a, -1)), _fields(StridedMemoryView(b, -1)))
        (src, out), = launcher.views
        assert (_fields(src), _fields(out)) == expected
        assert_c_layout_matches(src)
        assert_c_layout_matches(out)


# --- torch's bits, read directly -------------------------------------------------------------

@pytest.mark.torch
@pytest.mark.interop
def test_torch_bits_follow_in_place_changes_and_class_changes():
    """A tensor's negative/conjugate bit set in place after an earlier view, or a tensor whose
    class changes to a subclass (or back), is still refused on every path."""
    torch = pytest.importorskip("torch")

    class Sub(torch.Tensor):
        pass

    _view._reset_torch_bits_calibration()  # calibrated afresh with torch's own symbols
    plain = torch.arange(3.0)
    assert StridedMemoryView(plain).shape == (3,)
    complex_tensor = torch.arange(3.0).to(torch.complex64)
    StridedMemoryView(complex_tensor)
    assert _view._torch_bits_reader() == expected_bits_reader(torch)
    torch._C._set_neg(plain, True)
    torch._C._set_conj(complex_tensor, True)
    for path, direct in itertools.product((contextlib.nullcontext, general_path), (True, False)):
        _view._set_torch_bits_direct_enabled(direct)
        with path(), contextlib.ExitStack() as stack:
            stack.callback(_view._set_torch_bits_direct_enabled, True)
            for tensor, bit in ((plain, "negative"), (complex_tensor, "conjugate")):
                for each in (tensor, tensor.as_subclass(Sub), torch.nn.Parameter(tensor, requires_grad=False)):
                    with pytest.raises(BufferError, match=f"has its {bit} bit set"):
                        StridedMemoryView(each)
                    with pytest.raises(BufferError, match=f"has its {bit} bit set"):
                        _captured_argument(each).view(-1)
    torch._C._set_neg(plain, False)
    torch._C._set_conj(complex_tensor, False)
    assert StridedMemoryView(plain).shape == StridedMemoryView(complex_tensor).shape == (3,)


@pytest.mark.torch
@pytest.mark.interop
def test_torch_subclass_redefining_is_neg_after_its_first_view_is_described_anew():
    """A subclass first viewed with torch's own methods, then given an is_neg, is treated as
    a subclass defined with that is_neg from the start: its type changed, so its first
    description is not used again (the per-type cache was once never refreshed)."""
    torch = pytest.importorskip("torch")

    def lying_is_neg(self):
        return False

    class Late(torch.Tensor):
        pass

    class Early(torch.Tensor):
        is_neg = lying_is_neg

    StridedMemoryView(torch.zeros(2).as_subclass(Late))
    Late.is_neg = lying_is_neg
    base = torch._neg_view(torch.arange(3.0))
    late = StridedMemoryView(base.as_subclass(Late))
    early = StridedMemoryView(base.as_subclass(Early))
    assert (late.ptr, late.shape, late.strides, late.dtype) == (
        early.ptr, early.shape, early.strides, early.dtype
    )
    # The class asked is the one that answers: torch's own is_neg back, the bit is refused.
    del Late.is_neg
    with pytest.raises(BufferError, match="has its negative bit set"):
        StridedMemoryView(base.as_subclass(Late))


@pytest.mark.slow
def test_byte_offsets_hook_takes_layouts_of_any_ndim():
    """The 128-bit check's test hook answers exactly for layouts past 64 dimensions (it once
    wrote them into 64-entry stack arrays and crashed)."""
    code = textwrap.dedent(
        """
        from stridedview import _view
        from test_fast_paths import exact_byte_offsets_fit

        layouts = [
            ([1] * 100, [1] * 100, 1),
            ([2] * 65, [2**57] * 65, 1),
            ([2] * 65, [2**56] * 65, 2),
            ([2] * 65, [-(2**56)] * 65, 1),
            ([3] * 200, None, 8),
        ]
        for extents, strides, itemsize in layouts:
            expected = exact_byte_offsets_fit(extents, strides, itemsize)
            got = _view._byte_offsets_fit_both_ways(extents, strides, itemsize)
            if strides is None:
                continue  # more than int64 elements: only "no crash" is asked
            if not (got[0] in (-1, expected) and got[1] == expected):
                raise SystemExit(f"{extents[:2]} {strides[:2]} {itemsize}: {got} != {expected}")
        print("ok")
        """
    )
    tests_dir = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tests_dir, os.environ.get("PYTHONPATH", "")]))
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            env=env, timeout=120)
    assert (result.returncode, result.stdout.strip()) == (0, "ok"), result.stderr[-2000:]
