"""Byte counts past int64 (a crash through the buffer protocol, reported and fixed).

A view's element count, its nbytes (``size * itemsize``) and the byte offset of each of
its elements from element 0 fit int64, numpy's rule ("array is too big").  Before, a
broadcast view of ``2**61 + 1`` float64 elements (stride 0) was made, exported a buffer
whose ``len`` had wrapped to 8 bytes and ``bytes(view)`` overran the heap.  Here: each
entry point refuses such a layout (BufferError naming it), each export refuses one that
slipped past (a view made without the checks, through a private test hook), strides that
never step are exported as 0 rather than wrapped, and the checked int64 helpers give the
exact answer in both their forms.
"""

from __future__ import annotations

import ctypes
import re
import subprocess
import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import producers
from stridedview import StridedMemoryView, _view
from test_exchange_export import DLTensor, _prototype, _to_view, api
from test_host import DuckBuffer

pytestmark = pytest.mark.usefixtures("forbidden_driver")

INT64_MAX = 2**63 - 1
BIG = 2**61 + 1  # float64 elements: 2**64 + 8 bytes, a len that wrapped to 8
NEGATIVE = 2**60 + 1  # float64 elements: 2**63 + 8 bytes, a len that wrapped negative


def _nbytes_message(prefix, shape, strides, itemsize):
    return re.escape(
        f"{prefix}: nbytes (size * itemsize) must fit in int64 (got shape {shape}, "
        f"strides {strides} in elements, itemsize {itemsize})"
    )


def _offsets_message(prefix, shape, strides, itemsize):
    return re.escape(
        f"{prefix}: byte offsets from element 0 must fit in int64 (got shape {shape}, "
        f"strides {strides} in elements, itemsize {itemsize})"
    )


# --- the crash, reproduced ---------------------------------------------------------------


def test_reported_crash_neither_crashes_nor_wraps():
    """The reported steps, in a child process (a heap overrun would kill it, not this run):
    broadcast_to is refused, so no buffer with a wrapped len is ever exported."""
    script = textwrap.dedent(
        """
        import numpy as np
        from stridedview import StridedMemoryView
        for extent in (2**61 + 1, 2**60 + 1):
            try:
                view = StridedMemoryView(np.arange(2.0)[:1]).broadcast_to((extent,))
            except BufferError as exc:
                print("refused:", exc)
                continue
            print("made, nbytes of its buffer:", memoryview(view).nbytes)
            bytes(view)
            print("read")
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, (result.returncode, result.stdout, result.stderr)
    assert result.stdout.splitlines() == [
        f"refused: layout: broadcast_to would have nbytes {extent * 8}, more than int64 holds "
        f"(shape ({extent},), strides (0,), itemsize 8)"
        for extent in (BIG, NEGATIVE)
    ]


# --- each entry point refuses the layout ---------------------------------------------------


@pytest.mark.parametrize("extent", [BIG, NEGATIVE])
def test_broadcast_to_past_int64_bytes_is_refused(extent):
    """broadcast_to refuses a result whose nbytes passes int64; one element fewer than that
    many bytes' worth is still made."""
    base = StridedMemoryView(np.arange(2.0)[:1])
    with pytest.raises(BufferError, match=re.escape(
        f"layout: broadcast_to would have nbytes {extent * 8}, more than int64 holds "
        f"(shape ({extent},), strides (0,), itemsize 8)"
    )):
        base.broadcast_to((extent,))
    largest = base.broadcast_to((INT64_MAX // 8,))
    assert (largest.size, largest.nbytes) == (INT64_MAX // 8, INT64_MAX // 8 * 8)
    assert memoryview(largest).nbytes == largest.nbytes


def test_view_with_a_broadcast_layout_past_int64_bytes_is_refused():
    """view(layout) with stride 0 lies within the view's bytes but may not pass int64 nbytes."""
    base = StridedMemoryView(np.arange(2.0))
    layout = SimpleNamespace(shape=(BIG,), strides=(0,), itemsize=8)
    with pytest.raises(BufferError, match=re.escape(
        f"layout: view would have nbytes {BIG * 8}, more than int64 holds"
    )):
        base.view(layout)


@pytest.mark.parametrize("kind", ["versioned", "legacy"])
@pytest.mark.parametrize("shape, strides", [((BIG,), (0,)), ((2**60,), None)], ids=["broadcast", "row-major"])
def test_dlpack_capsule_past_int64_bytes_is_refused(kind, shape, strides):
    """A capsule whose nbytes passes int64 (its element count and byte offsets fit) is refused,
    and its deleter still runs once."""
    producer = producers.make_producer(kind, shape=shape, strides=strides, dtype="float64", data=0x10000)
    shown = strides if strides is not None else (1,)
    with pytest.raises(BufferError, match=_nbytes_message("dlpack", shape, shown, 8)):
        StridedMemoryView(producer)
    assert producers.deleter_calls(producer) == 1


@pytest.mark.torch
def test_torch_expanded_tensor_past_int64_bytes_is_refused():
    """torch's expand makes a tensor of more than int64 bytes' worth of elements: refused on
    the direct path (the stable-ABI reader declines it) and on torch's exchange API."""
    torch = pytest.importorskip("torch")
    tensor = torch.zeros(1, dtype=torch.float64).expand(BIG)
    assert _view._view_from_torch_alone(tensor) is None
    with pytest.raises(BufferError, match=_nbytes_message("dlpack", (BIG,), (0,), 8)):
        StridedMemoryView(tensor)
    fine = torch.zeros(1, dtype=torch.float64).expand(INT64_MAX // 8)
    assert StridedMemoryView(fine).nbytes == INT64_MAX // 8 * 8


class _Interface:
    """An object exporting ``interface`` as its CUDA Array Interface or array interface."""

    def __init__(self, attribute, **interface):
        setattr(self, attribute, {"version": 3, "typestr": "<f8", "data": (0x10000, False), **interface})


@pytest.mark.parametrize("shape, byte_strides, element_strides", [
    ((BIG,), (0,), (0,)),
    ((2**60,), None, (1,)),
], ids=["broadcast", "row-major"])
def test_cuda_array_interface_past_int64_bytes_is_refused(shape, byte_strides, element_strides):
    """A CAI whose nbytes passes int64 is refused, before any stream is ordered."""
    producer = _Interface("__cuda_array_interface__", shape=shape, strides=byte_strides)
    with pytest.raises(BufferError, match=_nbytes_message("cuda array interface", shape, element_strides, 8)):
        StridedMemoryView.from_cuda_array_interface(producer, stream_ptr=-1)


@pytest.mark.parametrize("shape, byte_strides, element_strides", [
    ((BIG,), (0,), (0,)),
    ((2**60,), None, (1,)),
], ids=["broadcast", "row-major"])
def test_array_interface_past_int64_bytes_is_refused(shape, byte_strides, element_strides):
    """numpy's array interface whose nbytes passes int64 is refused, with a (ptr, readonly)
    data tuple and with a buffer whose few bytes the layout lies in."""
    message = _nbytes_message("array interface", shape, element_strides, 8)
    producer = _Interface("__array_interface__", shape=shape, strides=byte_strides)
    with pytest.raises(BufferError, match=message):
        StridedMemoryView.from_array_interface(producer)
    if byte_strides == (0,):
        over_buffer = _Interface("__array_interface__", shape=shape, strides=byte_strides, data=bytearray(8))
        with pytest.raises(BufferError, match=message):
            StridedMemoryView(over_buffer)


def test_array_interface_byte_offsets_past_int64_are_refused():
    """Three float32 elements 2**62 bytes apart reach 2**63 bytes: refused, as the CAI and
    DLPack refuse them (the array interface took them before)."""
    producer = _Interface("__array_interface__", shape=(3,), typestr="<f4", strides=(2**62,))
    with pytest.raises(BufferError, match=_offsets_message("array interface", (3,), (2**60,), 4)):
        StridedMemoryView(producer)


def test_numpy_array_byte_offsets_past_int64_are_refused():
    """numpy's as_strided makes three float64 elements 2**62 bytes apart (2**63 bytes from
    element 0): refused with the message that names the layout, not taken by the numpy
    adapter (which skips the element-by-element check only for a C-contiguous array)."""
    array = np.lib.stride_tricks.as_strided(np.zeros(2), (3,), (2**62,))
    with pytest.raises(BufferError, match=_offsets_message("dlpack", (3,), (2**59,), 8)):
        StridedMemoryView(array)


def test_buffer_protocol_past_int64_bytes_is_refused():
    """An exporter's broadcast buffer whose nbytes passes int64 (_testbuffer makes one) is
    refused, and the buffer released."""
    testbuffer = pytest.importorskip("_testbuffer")
    exporter = testbuffer.ndarray([1.0], shape=[BIG], strides=[0], format="d")
    with pytest.raises(BufferError, match=_nbytes_message("buffer", (BIG,), (0,), 8)):
        StridedMemoryView(exporter)
    exporter.push([2.0], shape=[1], format="d")  # refused while a buffer of it is held


def test_from_buffer_past_int64_bytes_is_refused():
    """from_buffer refuses a layout whose nbytes passes int64 (stride 0 over 8 bytes), and
    one over a Buffer claiming 2**64 bytes whose byte offsets pass int64."""
    with pytest.raises(BufferError, match=_nbytes_message("buffer", (BIG,), (0,), 8)):
        StridedMemoryView.from_buffer(bytearray(8), (BIG,), (0,), dtype=np.float64)
    huge = DuckBuffer(0x10000, 2**64)
    with pytest.raises(BufferError, match=_offsets_message("buffer", (2**62,), (1,), 4)):
        StridedMemoryView.from_buffer(huge, (2**62,), dtype=np.float32)
    with pytest.raises(BufferError, match=_nbytes_message("buffer", (2**62,), (1,), 2)):
        StridedMemoryView.from_buffer(DuckBuffer(0x10000, 2**63), itemsize=2)


# --- each export refuses a layout that slipped past ------------------------------------------


def _unchecked(base, layout):
    """A view of ``base``'s memory with ``layout`` ("nbytes" or "offsets") and no check."""
    if layout == "nbytes":
        return _view._view_with_unchecked_layout(base, (BIG,), (0,))
    return _view._view_with_unchecked_layout(base, (3,), (2**62,))


def _message(prefix, layout):
    if layout == "nbytes":
        return _nbytes_message(prefix, (BIG,), (0,), 8)
    return _offsets_message(prefix, (3,), (2**62,), 8)


HOST_EXPORTS = {
    "buffer": ("buffer", lambda v: memoryview(v)),
    "array interface": ("array interface", lambda v: v.__array_interface__),
    "numpy.asarray": ("array interface", lambda v: np.asarray(v)),
    "dlpack": ("dlpack", lambda v: v.__dlpack__(max_version=(1, 0))),
    "dlpack-legacy": ("dlpack", lambda v: v.__dlpack__()),
    "dltensor_from_py_object": (
        "dlpack", lambda v: api().dltensor_from_py_object_no_sync(v, ctypes.byref(DLTensor()))
    ),
    "managed_tensor_from_py_object": (
        "dlpack",
        lambda v: api().managed_tensor_from_py_object_no_sync(v, ctypes.byref(ctypes.c_void_p())),
    ),
    "nbytes": ("layout", lambda v: v.nbytes),
    "byte_strides": ("layout", lambda v: v.byte_strides),
    "byte_bounds": ("layout", lambda v: v.byte_bounds),
    "copy_from": ("copy", lambda v: v.copy_from(StridedMemoryView(np.zeros(1)), None)),
    "copy_to": ("copy", lambda v: v.copy_to(StridedMemoryView(np.zeros(1)), None)),
}


@pytest.mark.parametrize("layout", ["nbytes", "offsets"])
@pytest.mark.parametrize("export", list(HOST_EXPORTS))
def test_each_host_export_refuses_a_layout_that_slipped_past(export, layout):
    """A host view whose nbytes or byte offsets pass int64 (made without the checks, as if
    one had been missed) is refused by each export under its own prefix, before any byte
    count is handed on."""
    prefix, use = HOST_EXPORTS[export]
    view = _unchecked(StridedMemoryView(np.arange(2.0)), layout)
    with pytest.raises(BufferError, match=_message(prefix, layout)):
        use(view)


@pytest.mark.parametrize("layout", ["nbytes", "offsets"])
@pytest.mark.parametrize("export", ["cuda array interface", "tensor map"])
def test_each_device_export_refuses_a_layout_that_slipped_past(export, layout):
    """The same for a device view: the CAI it hands on, and a tensor map (refused before the
    driver is asked)."""
    base = StridedMemoryView.from_cuda_array_interface(
        _Interface("__cuda_array_interface__", shape=(2,)), stream_ptr=-1
    )
    view = _unchecked(base, layout)
    with pytest.raises(BufferError, match=_message(export, layout)):
        if export == "tensor map":
            view.as_tensor_map(box_dim=(8,))
        else:
            view.__cuda_array_interface__


def test_derived_view_of_a_layout_that_slipped_past_is_refused():
    """A view derived from such a view is checked as any derived view is."""
    view = _unchecked(StridedMemoryView(np.arange(2.0)), "nbytes")
    with pytest.raises(BufferError, match=re.escape("layout: the index would have nbytes")):
        view[...]


# --- strides that never step ---------------------------------------------------------------


def _huge_unit_stride_view(stride=BIG):
    """A float64 view of shape (1, 3) whose first stride (2**61 + 1 elements: 2**64 + 8
    bytes) never steps (extent 1)."""
    producer = producers.make_producer("versioned", shape=(1, 3), strides=(stride, 1), dtype="float64")
    view = StridedMemoryView(producer)
    values = np.array([1.0, 2.0, 3.0])  # held until copied: a temporary's address is freed
    ctypes.memmove(view.ptr, values.ctypes.data, 24)
    return view


# 2**64 + 8 bytes (wrapped to 8), and -2**63 bytes (int64's own minimum, past -(2**63 - 1)).
@pytest.mark.parametrize("stride", [BIG, -(2**60)], ids=["wraps", "int64-min"])
def test_exports_of_a_never_stepping_stride_past_int64_bytes_give_zero(stride):
    """The byte stride of an extent-1 axis whose bytes pass int64 is 0 in byte_strides, in
    the array interface and in a DLPack export, not a wrapped product; the buffer of such a
    (C-contiguous) view gives its order's strides, as numpy's buffer export does."""
    view = _huge_unit_stride_view(stride)
    assert view.strides == (stride, 1)
    buffer = memoryview(view)
    assert (buffer.shape, buffer.strides, buffer.nbytes) == ((1, 3), (24, 8), 24)
    assert buffer.c_contiguous
    assert buffer.tolist() == [[1.0, 2.0, 3.0]]
    assert view.byte_strides == (0, 8) == view.__array_interface__["strides"]
    assert np.asarray(view).strides == (24, 8)  # (numpy reads the buffer first)
    exported = np.from_dlpack(view)
    assert (exported.strides, exported.tolist()) == ((0, 8), [[1.0, 2.0, 3.0]])


def test_host_copy_between_views_with_never_stepping_strides_past_int64_bytes():
    """copy_from hands numpy byte strides within int64 (it raised OverflowError before)."""
    source = _huge_unit_stride_view()
    target = StridedMemoryView(
        producers.make_producer("versioned", shape=(1, 3), strides=(BIG, 1), dtype="float64")
    )
    target.copy_from(source, None)
    assert memoryview(target).tolist() == [[1.0, 2.0, 3.0]]


def test_allocator_strides_of_an_empty_prototype_never_wrap():
    """The exchange API's allocator gives an empty tensor's row-major strides that would
    pass int64 as 0 (they address nothing), not wrapped products; the view of it, being
    empty, has strides of 0."""
    from test_exchange_export import ManagedTensor

    out = ctypes.c_void_p()
    prototype = _prototype((0, 3**25, 3**25))
    assert api().managed_tensor_allocator(ctypes.byref(prototype), ctypes.byref(out), None, None) == 0
    tensor = ManagedTensor.from_address(out.value).dl_tensor
    assert [tensor.strides[i] for i in range(3)] == [0, 3**25, 1]
    view = _to_view(out.value)
    assert (view.shape, view.strides, view.nbytes) == ((0, 3**25, 3**25), (0, 0, 0), 0)


# --- the checked helpers -------------------------------------------------------------------


def _exact(value):
    return value if -(2**63) <= value <= INT64_MAX else None


int64s = st.one_of(
    st.integers(-(2**63), INT64_MAX),
    st.integers(-(2**32), 2**32),
    st.sampled_from([0, 1, -1, 2, -2, 2**31, 2**32, 2**62, -(2**62), INT64_MAX, -INT64_MAX, -(2**63)]),
)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None)
@given(a=int64s, b=int64s)
def test_checked_int64_helpers_agree_with_exact_integers(a, b):
    """sv_mul_i64 and sv_add_i64 (the builtins here) and their portable forms (other
    compilers') give the exact product and sum, or report the overflow."""
    expected = (_exact(a * b), _exact(a + b))
    fast, portable = _view._checked_int64_both_ways(a, b)
    assert fast == expected and portable == expected, (a, b, fast, portable)


@pytest.mark.parametrize("extents, strides, itemsize, fits", [
    ((2,), (-(2**63),), 1, False),  # one step of -2**63 bytes
    ((2, 2), (-(2**62), -(2**62)), 1, False),  # two of -2**62: -2**63 together
    ((2, 2), (-(2**62), -(2**62) + 1), 1, True),
    ((1, 3), (-(2**63), 1), 8, True),  # an extent-1 axis never steps
    ((3,), (2**62 - 1,), 2, False),
    ((2**60,), None, 8, True),  # row-major: the last element 2**63 - 8 bytes away
    ((2**60 + 1,), None, 8, False),
])
def test_byte_offsets_portable_form_at_the_limits(extents, strides, itemsize, fits):
    """The portable byte-offset check (now on the checked helpers) at int64's edges, the most
    negative stride included, agrees with the 128-bit one."""
    fast, portable = _view._byte_offsets_fit_both_ways(extents, strides, itemsize)
    assert portable == fits and fast in (-1, fits)
