"""Layouts and derived views: indexing, transpose, reshape, view, squeeze, broadcast_to and
the layout facts, each checked against numpy on random layouts (hypothesis), including
zero-size, 0-d, negative and zero strides and extent-1 axes.

Every view here is made from the numpy array it is compared with (numpy's ``__dlpack__``
exports its exact strides), so both have the same layout, element for element; an empty
layout's strides are all 0 in a view (whatever numpy's are: they address nothing). The random tests use no ctypes producer: each of those stays
recorded in producers.py for the life of the process.
"""

from __future__ import annotations

import gc
import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import basic_indices
from numpy.lib.array_utils import byte_bounds as numpy_byte_bounds
from numpy.lib.stride_tricks import as_strided

from producers import deleter_calls, make_producer
from strategies import LAYOUT_DTYPES, shapes_of_size, strided_layouts
from stridedview import StridedMemoryView
from test_export import HostCAI

pytestmark = pytest.mark.usefixtures("forbidden_driver")

SETTINGS = settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


# --- helpers --------------------------------------------------------------------------


def numpy_array(shape, strides, dtype):
    """A numpy array with exactly this layout (strides in elements) over its own buffer of
    distinct bytes; every element it addresses lies inside the buffer."""
    dtype = np.dtype(dtype)
    low = high = 0
    if all(shape):
        for extent, stride in zip(shape, strides):
            reach = (extent - 1) * stride
            low, high = (low + reach, high) if reach < 0 else (low, high + reach)
    count = high - low + 1
    raw = (np.arange(count * dtype.itemsize) % 251).astype(np.uint8)
    buffer = raw.view(dtype)
    return as_strided(
        buffer[-low:], shape=shape, strides=tuple(s * dtype.itemsize for s in strides)
    )


def numpy_byte_strides(array):
    """``array.strides`` as a view of it has them: all 0 when the array is empty."""
    return (0,) * array.ndim if array.size == 0 else array.strides


def view_of(array):
    """A view of ``array`` through numpy's own DLPack export, which keeps its exact strides."""
    view = StridedMemoryView(array)
    assert (view.shape, view.byte_strides, view.ptr) == (
        array.shape, numpy_byte_strides(array), array.__array_interface__["data"][0]
    )
    return view


def array_and_view(shape, strides, dtype):
    """``numpy_array(shape, strides, dtype)`` and its view."""
    array = numpy_array(shape, strides, dtype)
    return array, view_of(array)


def layout_of(view, base):
    """``(byte offset from base, shape, byte strides)`` of a view or a numpy array; the offset
    of an empty one is None, since it addresses nothing (a view of an empty view stays at its
    base's pointer, where numpy may step by strides a view has as 0)."""
    if isinstance(view, np.ndarray):
        offset = view.ctypes.data - base.ctypes.data if view.size else None
        return (offset, view.shape, numpy_byte_strides(view))
    return (view.ptr - base.ptr if view.size else None, view.shape, view.byte_strides)


def same_values(view, expected):
    """The view re-exported through DLPack holds exactly ``expected``'s elements."""
    got = np.from_dlpack(view)
    assert got.shape == expected.shape
    assert got.dtype == expected.dtype
    assert np.array_equal(got, expected, equal_nan=True)
    if got.size:  # numpy normalises the strides of an empty import
        assert got.strides == view.byte_strides


def brute_offsets(shape, strides):
    """Every element offset of the layout, one per index, in C order."""
    return [
        sum(i * s for i, s in zip(index, strides))
        for index in itertools.product(*(range(e) for e in shape))
    ]


# --- basic indexing ---------------------------------------------------------------------


@st.composite
def layouts_and_indices(draw):
    shape, strides, dtype = draw(strided_layouts())
    key = draw(basic_indices(shape, min_dims=0, allow_newaxis=True, allow_ellipsis=True))
    return shape, strides, dtype, key


@pytest.mark.slow
@SETTINGS
@given(layouts_and_indices())
def test_index_matches_numpy(case):
    """``view[key]`` has exactly numpy's pointer, shape and strides, and re-exports its elements."""
    shape, strides, dtype, key = case
    array, view = array_and_view(shape, strides, dtype)
    derived = view[key]
    expected = array[key]
    if not isinstance(expected, np.ndarray):  # numpy gives a scalar for a full int index
        expected = array[key + (Ellipsis,) if isinstance(key, tuple) else (key, Ellipsis)]
    assert layout_of(derived, view) == layout_of(expected, array)
    assert derived.size == expected.size and derived.dtype == view.dtype
    same_values(derived, expected)


def test_int_on_every_axis_gives_0d_view():
    """An int index on every axis gives a 0-d view of that element."""
    array = np.arange(24, dtype=np.int32).reshape(2, 3, 4)
    view = view_of(array)
    element = view[1, -1, 2]
    assert (element.shape, element.strides, element.size) == ((), (), 1)
    assert element.ptr == array[1, -1, 2:].ctypes.data
    assert np.from_dlpack(element) == array[1, -1, 2]


def test_iteration_goes_along_the_first_axis_like_numpy():
    """Iterating a view yields its sub-views along axis 0 as numpy's rows; a 0-d view refuses."""
    array = np.arange(12, dtype=np.int16).reshape(3, 4)[::-1, 1:]
    rows = list(view_of(array))
    assert [(row.ptr, row.shape, row.strides) for row in rows] == [
        (sub.ctypes.data, sub.shape, tuple(s // sub.itemsize for s in sub.strides)) for sub in array
    ]
    assert list(view_of(np.zeros((0, 2)))) == []
    with pytest.raises(TypeError, match=r"^iteration over a 0-d view$"):
        iter(view_of(np.array(1.0)))


@SETTINGS
@given(st.integers(0, 5), st.integers(-12, 12))
def test_int_index_out_of_range_like_numpy(extent, index):
    """An int index is an IndexError exactly when numpy's is."""
    array = numpy_array((extent, 2), (2, 1), "int16")
    view = view_of(array)
    try:
        array[index]
    except IndexError:
        with pytest.raises(IndexError, match=r"^index: index -?\d+ is out of bounds for axis 0"):
            view[index]
    else:
        assert layout_of(view[index], view) == layout_of(array[index], array)


@pytest.mark.parametrize(
    "key",
    [[0], (0, [1]), np.array([0, 1]), True, np.bool_(False), 1.5, "0", (slice(None), 0.0)],
    ids=["list", "tuple-list", "array", "bool", "numpy-bool", "float", "str", "tuple-float"],
)
def test_advanced_index_is_type_error(key):
    """Lists, arrays, bools and other non-basic indices are a TypeError saying basic indexing only."""
    view = view_of(np.arange(6.0).reshape(2, 3))
    with pytest.raises(TypeError, match=r"^index: basic indexing only"):
        view[key]


def test_index_structure_errors():
    """Two Ellipses, or more indices than axes, are an IndexError as in numpy."""
    view = view_of(np.arange(6.0).reshape(2, 3))
    with pytest.raises(IndexError, match=r"^index: an index can hold one Ellipsis only"):
        view[..., 0, ...]
    with pytest.raises(IndexError, match=r"^index: too many indices: the view is 2-d, 3 were"):
        view[0, 0, 0]
    with pytest.raises(ValueError):
        view[::0]


# --- transpose ---------------------------------------------------------------------------


@pytest.mark.slow
@SETTINGS
@given(strided_layouts(), st.data())
def test_transpose_matches_numpy(layout, data):
    """``transpose`` in each argument form, and ``.T``, give numpy's layout."""
    shape, strides, dtype = layout
    array, view = array_and_view(shape, strides, dtype)
    assert layout_of(view.T, view) == layout_of(array.T, array)
    assert layout_of(view.transpose(), view) == layout_of(array.transpose(), array)
    order = data.draw(st.permutations(range(len(shape))))
    negative = [axis - len(shape) if data.draw(st.booleans()) else axis for axis in order]
    expected = layout_of(array.transpose(order), array)
    assert layout_of(view.transpose(tuple(negative)), view) == expected
    assert layout_of(view.transpose(*negative), view) == expected
    same_values(view.transpose(order), array.transpose(order))


@pytest.mark.parametrize(
    "axes, exc, start",
    [
        ((0, 0, 1), ValueError, "transpose: axes (0, 0, 1) repeat an axis"),
        ((0, 1, 3), ValueError, "transpose: axis 3 is out of bounds for 3 dimensions"),
        ((0, -4, 1), ValueError, "transpose: axis -4 is out of bounds"),
        ((0, 1), ValueError, "transpose: axes (0, 1) do not match the view's 3 dimensions"),
        ((0, 1.0, 2), TypeError, "transpose: axis must be an int (got 1.0)"),
    ],
)
def test_transpose_errors(axes, exc, start):
    """Repeated, out-of-range, missing or non-int axes are refused as numpy refuses them."""
    view = view_of(np.zeros((2, 3, 4)))
    with pytest.raises(exc) as info:
        view.transpose(*axes)
    assert str(info.value).startswith(start)
    with pytest.raises(Exception):
        np.zeros((2, 3, 4)).transpose(*axes)


# --- reshape -------------------------------------------------------------------------------


@pytest.mark.slow
@SETTINGS
@given(strided_layouts(max_ndim=4), st.data(), st.sampled_from("CF"))
def test_reshape_matches_numpy(layout, data, order):
    """``reshape`` succeeds exactly when numpy's ``copy=False`` reshape does, with numpy's strides."""
    shape, strides, dtype = layout
    array, view = array_and_view(shape, strides, dtype)
    new_shape = data.draw(shapes_of_size(array.size))
    try:
        expected = array.reshape(new_shape, order=order, copy=False)
    except ValueError as error:
        if "copy" not in str(error):
            raise
        with pytest.raises(BufferError, match=r"^reshape: shape .* without a copy$"):
            view.reshape(new_shape, order=order)
        return
    derived = view.reshape(new_shape, order=order)
    assert layout_of(derived, view) == layout_of(expected, array)
    if new_shape:  # reshape() with no shape at all is a TypeError, as in numpy
        assert layout_of(view.reshape(*new_shape, order=order), view) == layout_of(expected, array)
    same_values(derived, expected)


def test_reshape_gives_numpy_error_types():
    """Impossible shapes are a ValueError, a missing shape a TypeError, a needed copy a BufferError."""
    view = view_of(np.zeros((4, 6)))
    for shape in [(5, 5), (-1, -1), (0, -1)]:
        with pytest.raises(ValueError, match=r"^reshape: "):
            view.reshape(shape)
        with pytest.raises(ValueError):
            np.zeros((4, 6)).reshape(shape)
    # numpy takes any negative extent for the unknown one; only -1 is accepted here.
    with pytest.raises(ValueError, match=r"^reshape: extents must be >= 0, with one -1 at most"):
        view.reshape(-2, 12)
    with pytest.raises(ValueError, match=r"^reshape: order must be 'C' or 'F' \(got 'A'\)"):
        view.reshape(24, order="A")
    with pytest.raises(TypeError, match=r"^reshape: a shape is required"):
        view.reshape()
    with pytest.raises(TypeError, match=r"^reshape: extent must be an int \(got 2.5\)"):
        view.reshape(2.5, 2)
    with pytest.raises(BufferError, match=r"^reshape: shape \(4, 3\) with strides \(6, 1\)"):
        view[:, :3].reshape(12)
    assert view[:, ::2].reshape(12).strides == (2,)  # gaps are fine when evenly spaced


# --- view(layout, dtype) -----------------------------------------------------------------------


@pytest.mark.slow
@SETTINGS
@given(strided_layouts(), st.sampled_from(LAYOUT_DTYPES))
def test_view_dtype_matches_numpy(layout, new_dtype):
    """``view(dtype=...)`` reinterprets the bytes as numpy's ``ndarray.view`` does, or refuses."""
    shape, strides, dtype = layout
    array, view = array_and_view(shape, strides, dtype)
    try:
        expected = array.view(new_dtype)
    except ValueError:
        with pytest.raises(BufferError, match=r"^view: "):
            view.view(dtype=new_dtype)
        return
    itemsize = np.dtype(new_dtype).itemsize
    if expected.size and any(s % itemsize and e > 1 for s, e in zip(expected.strides, expected.shape)):
        # numpy keeps a byte stride no element stride can express: refused, saying why.
        with pytest.raises(BufferError, match=r"strides in elements are impossible"):
            view.view(dtype=new_dtype)
        return
    derived = view.view(dtype=new_dtype)
    assert derived.dtype == expected.dtype
    assert derived.shape == expected.shape and derived.ptr == view.ptr
    for mine, theirs in zip(derived.byte_strides, numpy_byte_strides(expected)):
        # A stride no element stride expresses (extent 1, or an empty view) is given as 0.
        assert mine == (0 if theirs % itemsize else theirs)
    same_values(derived, expected)


def test_view_without_arguments_is_the_view_itself():
    """``view()`` returns the very same object, as cuda.core's does."""
    cuda_utils = pytest.importorskip("cuda.core.utils")
    array = np.arange(6.0)
    theirs = cuda_utils.StridedMemoryView.from_dlpack(array, -1)
    view = view_of(array)
    assert (view.view() is view) == (theirs.view() is theirs) == True  # noqa: E712


def test_view_dtype_of_ml_dtypes():
    """ml_dtypes' bfloat16 and float8 reinterpret the bytes by numpy's rules too."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    array = np.arange(12, dtype=np.float32).reshape(3, 4)[::-1]
    view = view_of(array)
    for new in (ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn):
        derived = view.view(dtype=new)
        expected = array.view(new)
        assert (derived.dtype, derived.shape, derived.byte_strides) == (
            expected.dtype, expected.shape, expected.strides
        )
        back = derived.view(dtype=np.float32)
        assert (back.shape, back.strides, back.ptr) == (view.shape, view.strides, view.ptr)
        same_values(back, array)


def test_view_dtype_errors():
    """A 0-d item-size change, a gapped last axis, a stride no element stride can express,
    and object or subarray dtypes are refused."""
    view = view_of(np.arange(12, dtype=np.float32).reshape(3, 4))
    with pytest.raises(BufferError, match=r"^view: a 0-d view keeps its item size \(4 bytes, not 8\)"):
        view[0, 0].view(dtype=np.float64)
    assert view[0, 0].view(dtype=np.int32).shape == ()
    with pytest.raises(BufferError, match=r"^view: the last axis must be contiguous"):
        view[:, ::2].view(dtype=np.int16)
    with pytest.raises(BufferError, match=r"^view: the last axis holds 12 bytes, not a multiple"):
        view[:, :3].view(dtype=np.float64)
    with pytest.raises(BufferError, match=r"^view: stride 12 bytes of axis 0 is not a multiple"):
        view_of(np.zeros((3, 6), np.int16)[:, :4]).view(dtype=np.float64)
    for bad in (object, "(2,)i4", "V0", ">f4"):
        with pytest.raises(TypeError, match=r"^view: dtype must be native-endian"):
            view.view(dtype=bad)


def test_view_with_cuda_core_layout():
    """A cuda.core ``_StridedLayout`` (repacked, sliced) places its elements as numpy would."""
    layouts = pytest.importorskip("cuda.core._layout")
    array = np.arange(24, dtype=np.float32).reshape(4, 6)
    view = view_of(array)
    dense = layouts._StridedLayout(array.shape, None, 4)
    complex_view = view.view(dense.repacked(8), np.complex64)
    same_values(complex_view, array.view(np.complex64))
    sliced = view.view(dense[1:, ::-2])
    same_values(sliced, array[1:, ::-2])
    assert sliced.ptr == array[1:, ::-2].ctypes.data
    same_values(view.view(dense.permuted((1, 0))), array.T)


def test_view_layout_errors():
    """A layout reaching outside the view's bytes, of another itemsize, or not a layout is refused."""
    layouts = pytest.importorskip("cuda.core._layout")
    view = view_of(np.arange(24, dtype=np.float32).reshape(4, 6))
    with pytest.raises(BufferError, match=r"^view: layout \(shape \(5, 6\)"):
        view.view(layouts._StridedLayout((5, 6), None, 4))
    with pytest.raises(BufferError, match=r"reaches outside the view's bytes"):
        view[1:].view(layouts._StridedLayout((4, 6), (-6, 1), 4))
    with pytest.raises(ValueError, match=r"^view: layout itemsize 8 differs"):
        view.view(layouts._StridedLayout((4, 3), None, 8))
    with pytest.raises(TypeError, match=r"^view: layout must have shape, strides and itemsize"):
        view.view((4, 6))


class Layout:
    """A minimal layout object: what ``view(layout=...)`` reads."""

    def __init__(self, shape, strides, itemsize, slice_offset=0):
        self.shape, self.strides, self.itemsize = shape, strides, itemsize
        self.slice_offset = slice_offset


@pytest.mark.slow
@SETTINGS
@given(strided_layouts(max_ndim=3))
def test_view_with_own_layout_is_the_view(layout):
    """A view's own layout, given back to ``view``, describes the same elements."""
    shape, strides, dtype = layout
    array, view = array_and_view(shape, strides, dtype)
    again = view.view(Layout(view.shape, view.strides, view.itemsize))
    assert (again.ptr, again.shape, again.strides) == (view.ptr, view.shape, view.strides)
    same_values(again, array)


def test_view_layout_value_errors():
    """Negative extents, mismatched lengths and non-int strides in a layout are refused."""
    view = view_of(np.arange(6.0))
    with pytest.raises(ValueError, match=r"^view: layout extents must be >= 0"):
        view.view(Layout((-1,), (1,), 8))
    with pytest.raises(ValueError, match=r"^view: layout strides \(1, 1\) and shape \(6,\)"):
        view.view(Layout((6,), (1, 1), 8))
    with pytest.raises(TypeError, match=r"^view: layout stride must be an int"):
        view.view(Layout((6,), (1.0,), 8))


# --- squeeze, broadcast_to -----------------------------------------------------------------------


@pytest.mark.slow
@SETTINGS
@given(strided_layouts(), st.data())
def test_squeeze_matches_numpy(layout, data):
    """``squeeze`` with no axis, one axis or a tuple of extent-1 axes gives numpy's layout."""
    shape, strides, dtype = layout
    array, view = array_and_view(shape, strides, dtype)
    assert layout_of(view.squeeze(), view) == layout_of(array.squeeze(), array)
    ones = [i for i, e in enumerate(shape) if e == 1]
    chosen = tuple(data.draw(st.lists(st.sampled_from(ones), unique=True))) if ones else ()
    assert layout_of(view.squeeze(chosen), view) == layout_of(array.squeeze(chosen), array)
    if ones:
        assert layout_of(view.squeeze(ones[0] - len(shape)), view) == layout_of(
            array.squeeze(ones[0]), array
        )
    same_values(view.squeeze(), array.squeeze())


def test_squeeze_errors():
    """An axis of extent > 1, out of range, or repeated cannot be squeezed."""
    view = view_of(np.zeros((1, 3, 1)))
    with pytest.raises(ValueError, match=r"^squeeze: axis 1 has extent 3, not 1"):
        view.squeeze(1)
    with pytest.raises(ValueError, match=r"^squeeze: axis 3 is out of bounds"):
        view.squeeze(3)
    with pytest.raises(ValueError, match=r"^squeeze: axis \(0, -3\) repeats an axis"):
        view.squeeze((0, -3))


@st.composite
def broadcast_targets(draw):
    shape, strides, dtype = draw(strided_layouts(max_ndim=3))
    target = tuple(
        draw(st.integers(0, 3)) if e == 1 else e for e in shape
    )
    lead = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    return shape, strides, dtype, lead + target


@pytest.mark.slow
@SETTINGS
@given(broadcast_targets())
def test_broadcast_to_matches_numpy(case):
    """``broadcast_to`` gives numpy's layout (stride 0 on broadcast axes) and is read-only."""
    shape, strides, dtype, target = case
    array, view = array_and_view(shape, strides, dtype)
    derived = view.broadcast_to(target)
    expected = np.broadcast_to(array, target)
    assert layout_of(derived, view) == layout_of(expected, array)
    assert derived.readonly and not view.readonly
    got = np.from_dlpack(derived)
    assert got.flags.writeable == (got.size == 0)  # numpy imports an empty array as a new one
    assert np.array_equal(got, expected, equal_nan=True)


def test_broadcast_to_errors():
    """Incompatible shapes, fewer dimensions and negative extents are refused as in numpy."""
    view = view_of(np.zeros((2, 3)))
    for target, start in [
        ((2, 4), "broadcast_to: shape (2, 3) cannot be broadcast to (2, 4)"),
        ((3,), "broadcast_to: shape (2, 3) has more dimensions than (3,)"),
        ((2, -3), "broadcast_to: extents must be >= 0 (got (2, -3))"),
    ]:
        with pytest.raises(ValueError) as info:
            view.broadcast_to(target)
        assert str(info.value).startswith(start)
        with pytest.raises(ValueError):
            np.broadcast_to(np.zeros((2, 3)), target)
    assert view[0, :1].broadcast_to(4).shape == (4,)


# --- facts -------------------------------------------------------------------------------------


@pytest.mark.slow
@SETTINGS
@given(strided_layouts())
def test_byte_strides_and_bounds_match_numpy(layout):
    """``byte_strides`` are numpy's strides (0s if empty) and ``byte_bounds`` numpy's byte_bounds ((ptr, ptr) if empty)."""
    shape, strides, dtype = layout
    array, view = array_and_view(shape, strides, dtype)
    assert view.byte_strides == numpy_byte_strides(array)
    if array.size:
        assert view.byte_bounds == numpy_byte_bounds(array)
    else:
        assert view.byte_bounds == (view.ptr, view.ptr)


@pytest.mark.slow
@SETTINGS
@given(strided_layouts(max_ndim=4, max_extent=5, max_stride=9))
def test_has_overlap_is_exact_on_small_layouts(layout):
    """``has_overlap`` is True exactly when two indices share an offset (counted by brute force)."""
    shape, strides, _ = layout
    array = numpy_array(shape, strides, "int8")
    offsets = brute_offsets(shape, strides)
    assert view_of(array).has_overlap == (len(set(offsets)) != len(offsets))


def test_has_overlap_is_conservative_past_the_limit():
    """Past 2**16 elements an undecided layout says True; below it the same pattern is exact."""
    producers = [
        make_producer(shape=(3, 2**10), strides=(2, 3), dtype="int8", data=0x10000),
        make_producer(shape=(3, 2**16), strides=(2, 3), dtype="int8", data=0x10000),
        make_producer(shape=(2**12, 2**12), strides=(2**12, 1), dtype="int8", data=0x10000),
    ]
    try:
        small, large, separated = (StridedMemoryView(p) for p in producers)
        assert small.has_overlap is False  # 2i + 3j is one-to-one for i < 3
        assert large.has_overlap is True
        assert separated.has_overlap is False
    finally:
        for producer in producers:
            producer.release_capsules()


@pytest.mark.slow
@SETTINGS
@given(strided_layouts(max_extent=5))
def test_is_dense_matches_brute_force_and_cuda_core(layout):
    """``is_dense`` is True exactly when the offsets are 0 .. size-1 once each, as cuda.core says."""
    shape, strides, dtype = layout
    array, view = array_and_view(shape, strides, dtype)
    offsets = sorted(brute_offsets(shape, strides))
    assert view.is_dense == (offsets == list(range(len(offsets))) or not offsets)
    layouts = pytest.importorskip("cuda.core._layout")
    assert view.is_dense == layouts._StridedLayout(shape, strides, array.itemsize).is_dense


# --- the derived view as a view ---------------------------------------------------------------------


@pytest.mark.slow
def test_derived_views_share_the_owner_and_release_once(kind="versioned"):
    """Views derived from views keep the memory; the deleter runs once, when the last one goes."""
    producer = make_producer(kind, shape=(4, 6), dtype="float32")
    view = StridedMemoryView(producer)
    chain = view[1:].T.reshape(-1, order="F").view(dtype=np.int32)[::2]
    assert chain.exporting_obj is producer
    del view
    gc.collect()
    assert deleter_calls(producer) == 0
    del chain
    gc.collect()
    assert deleter_calls(producer) == 1
    producer.release_capsules()


def test_derived_device_view_keeps_device_stream_and_readonly(fake):
    """A derived device view keeps device, ready_stream and readonly, and its CAI is its own layout."""
    array = np.arange(24, dtype=np.float32).reshape(4, 6)
    producer = HostCAI(array, stream=fake.new_stream())
    producer.interface["data"] = (producer.ptr, True)
    fake.register_pointer(producer.ptr, array.nbytes, device=0)
    view = StridedMemoryView(producer, -1)
    derived = view[::-1, 1::2]
    assert (derived.device_id, derived.ready_stream, derived.readonly) == (0, view.ready_stream, True)
    assert derived.exporting_obj is producer and derived.is_device_accessible
    interface = derived.__cuda_array_interface__
    expected = array[::-1, 1::2]
    assert interface["data"] == (expected.ctypes.data, True)
    assert (interface["shape"], interface["strides"]) == (expected.shape, expected.strides)


def test_derived_view_is_writable_through_dlpack():
    """Writing through a derived view's export writes the original array's elements."""
    array = np.zeros((3, 4), dtype=np.int64)
    view = view_of(array)
    np.from_dlpack(view[1:, ::-2])[...] = 7
    expected = np.zeros((3, 4), dtype=np.int64)
    expected[1:, ::-2] = 7
    assert np.array_equal(array, expected)


def test_derived_layout_past_int64_is_refused():
    """A derived stride, address, element count or rank past the limits is a BufferError.

    (A source layout whose byte offsets pass int64 is refused by the parsers
    themselves, so derived views start from offsets that fit.)
    """
    producers = [
        make_producer(shape=(3,), strides=(2**61,), dtype="int8", data=0x10000),
        make_producer(shape=(3,), strides=(-(2**40),), dtype="int8", data=0x10000),
    ]
    try:
        view, backwards = (StridedMemoryView(p) for p in producers)
        with pytest.raises(BufferError, match=r"^layout: a stride of the index passes int64"):
            view[::4]
        with pytest.raises(BufferError, match=r"^layout: an address in the index passes"):
            backwards[2:]
        with pytest.raises(BufferError, match=r"^layout: broadcast_to would have \d+ elements"):
            view[:1].broadcast_to((2**40, 2**40))
        with pytest.raises(BufferError, match=r"^layout: the index would have 65 dimensions"):
            view[(None,) * 64]
    finally:
        for producer in producers:
            producer.release_capsules()


def test_layouts_page_example_holds():
    """The example at the top of docs/layouts.md runs and its commented results hold."""
    from pathlib import Path

    page = (Path(__file__).resolve().parent.parent / "docs" / "layouts.md").read_text()
    code = page.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict = {}
    exec(compile(code, "layouts.md", "exec"), namespace)
    view = namespace["view"]
    assert view[1:, ::-2].strides == (6, -2)
    assert (view.T.shape, view.reshape(2, -1).shape) == ((6, 4), (2, 12))
    assert view.view(dtype=np.complex64).shape == (4, 3)
    assert view[0].broadcast_to((3, 6)).strides == (0, 1)
    assert view[:, :3].byte_bounds == (view.ptr, view.ptr + 84)
    assert (view[:, :3].is_dense, view[0].broadcast_to((3, 6)).has_overlap) == (False, True)
