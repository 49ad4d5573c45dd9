"""Views of arrays from real producers on the CPU: numpy, torch, jax, array-api-strict, ml_dtypes.

Every field of every view is checked against the truth read from the producer itself (its own
data pointer, shape, strides and dtype), never against another consumer, by one helper,
``check_view``. The hypothesis test at the end also compares each field with cuda-core's
``StridedMemoryView``, the reference implementation of the same product, and says where and why
the spec departs from it.

Producer quirk (docs/interop.md): torch 2.13.0 aborts the process on negative-stride DLPack input,
so no negative-stride array is ever handed to ``torch.from_dlpack`` here (torch only exports).
"""

from __future__ import annotations

import ctypes
import gc
import math
import re
import sys
import weakref

import numpy as np
import pytest

from jax_dlpack import jax_exports_versioned
from numpy_export import addressing_strides
from stridedview import StridedMemoryView

pytestmark = pytest.mark.interop

MAKERS = [
    pytest.param(StridedMemoryView, id="constructor"),
    pytest.param(StridedMemoryView.from_dlpack, id="from_dlpack"),
]

# Every dtype numpy itself can export through DLPack.
NUMPY_DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    np.complex128,
]


class CudaStreamLike:
    """An object following the __cuda_stream__ protocol (version 0, a made-up handle)."""

    def __cuda_stream__(self):
        return (0, 7)


# Host memory has no stream to order: whatever stream_ptr says, the producer gets stream=None.
HOST_STREAMS = [
    pytest.param(-1, id="minus1"),
    pytest.param(0, id="zero"),
    pytest.param(1, id="legacy"),
    pytest.param(7, id="handle"),
    pytest.param(CudaStreamLike(), id="cuda_stream_obj"),
]


# --------------------------------------------------------------------------------------------
# Helpers


def numpy_contiguity(shape, strides):
    """(C, F) contiguity of an element-stride layout by numpy's rules.

    Extent-1 dimensions are ignored and a size-0 array is both.
    """
    if 0 in shape:
        return True, True

    def contiguous(dims):
        expected = 1
        for extent, stride in dims:
            if extent == 1:
                continue
            if stride != expected:
                return False
            expected *= extent
        return True

    dims = list(zip(shape, strides))
    return contiguous(reversed(dims)), contiguous(dims)


def read_view(view) -> np.ndarray:
    """Copy the elements the view describes out of raw memory at ``view.ptr``.

    Only ptr, shape, strides and dtype of the view are used, so a value match proves that
    they address the producer's elements.
    """
    dtype = view.dtype
    shape, strides = tuple(view.shape), tuple(view.strides)
    if math.prod(shape) == 0:
        return np.empty(shape, dtype)
    low = sum((n - 1) * s for n, s in zip(shape, strides) if s < 0)
    high = sum((n - 1) * s for n, s in zip(shape, strides) if s > 0)
    nbytes = (high - low + 1) * dtype.itemsize
    buffer = (ctypes.c_char * nbytes).from_address(view.ptr + low * dtype.itemsize)
    array = np.ndarray(
        shape,
        dtype,
        buffer=buffer,
        offset=-low * dtype.itemsize,
        strides=tuple(s * dtype.itemsize for s in strides),
    )
    return array.copy()


def same_bits(actual: np.ndarray, expected: np.ndarray) -> bool:
    """Whether two arrays of one dtype and shape hold bit-identical elements."""
    assert actual.dtype == expected.dtype and actual.shape == expected.shape
    return np.ascontiguousarray(actual).tobytes() == np.ascontiguousarray(expected).tobytes()


def view_fields(view) -> tuple:
    """The seven value fields of a view, for comparing two views of one array."""
    return (
        view.ptr,
        view.shape,
        view.strides,
        view.dtype,
        view.device_id,
        view.is_device_accessible,
        view.readonly,
    )


def check_view(view, obj, *, ptr, shape, strides, dtype, readonly, values=None, contiguity=None):
    """Assert every field of a host view against the producer's truth.

    ``contiguity`` is the producer's own (C, F) flags when it has them (numpy); otherwise they
    are computed from shape and strides by numpy's rules.
    """
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    strides = (0,) * len(shape) if 0 in shape else tuple(strides)  # an empty view's are all 0

    assert type(view.ptr) is int
    assert view.ptr == ptr
    assert type(view.shape) is tuple and all(type(n) is int for n in view.shape)
    assert view.shape == shape
    assert type(view.strides) is tuple and all(type(s) is int for s in view.strides)
    assert view.strides == strides
    assert isinstance(view.dtype, np.dtype)
    assert view.dtype == dtype
    assert view.device_id == -1
    assert view.is_device_accessible is False
    assert view.readonly is readonly
    assert view.exporting_obj is obj

    assert view.ndim == len(shape)
    assert view.size == math.prod(shape)
    assert view.itemsize == dtype.itemsize
    assert view.nbytes == math.prod(shape) * dtype.itemsize
    if contiguity is None:
        contiguity = numpy_contiguity(shape, strides)
    assert (view.is_c_contiguous, view.is_f_contiguous) == tuple(contiguity)

    text = repr(view)
    assert "\n" not in text
    assert text.startswith(f"StridedMemoryView(ptr={ptr:#x}, shape={shape}, strides={strides}, ")

    if values is not None:
        assert same_bits(read_view(view), np.asarray(values))


def numpy_truth(a: np.ndarray) -> dict:
    """The expected fields of a view of a numpy array, read from the array itself."""
    return dict(
        ptr=a.ctypes.data,
        shape=a.shape,
        strides=tuple(s // a.itemsize for s in a.strides),
        dtype=a.dtype,
        readonly=not a.flags.writeable,
        values=a,
        contiguity=(a.flags.c_contiguous, a.flags.f_contiguous),
    )


def check_numpy_view(view, a: np.ndarray) -> None:
    """Check a view of a numpy array against the array."""
    check_view(view, a, **numpy_truth(a))


# --------------------------------------------------------------------------------------------
# numpy


def _readonly(a):
    a.flags.writeable = False
    return a


NUMPY_LAYOUTS = {
    "c_order": lambda: np.arange(12, dtype=np.float32).reshape(3, 4),
    "f_order": lambda: np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4)),
    "sliced": lambda: np.arange(30, dtype=np.float64).reshape(5, 6)[1:, ::2],
    "negative_1d": lambda: np.arange(10, dtype=np.int32)[::-1],
    "negative_2d": lambda: np.arange(30, dtype=np.int16).reshape(5, 6)[::-2, 4:0:-3],
    "zero_strides": lambda: np.broadcast_to(np.arange(3, dtype=np.float64), (4, 3)),
    "zero_strides_inner": lambda: np.broadcast_to(
        np.arange(4, dtype=np.int64).reshape(4, 1), (4, 5)
    ),
    "zero_d": lambda: np.array(3.5, dtype=np.float64),
    "zero_d_from_index": lambda: np.arange(6.0).reshape(2, 3)[1, 2, ...],
    "empty": lambda: np.empty((0, 3), dtype=np.float32),
    "empty_sliced": lambda: np.arange(12.0).reshape(3, 4)[:, 4:],
    "extent_one_odd_stride": lambda: np.arange(12.0).reshape(3, 4)[:1, ::2],
    "transposed_3d": lambda: np.arange(24, dtype=np.uint8).reshape(2, 3, 4).transpose(1, 2, 0),
    "read_only": lambda: _readonly(np.arange(6, dtype=np.float32).reshape(2, 3)),
    "read_only_negative": lambda: _readonly(np.arange(6, dtype=np.float32)[::-2]),
}


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("layout", list(NUMPY_LAYOUTS))
def test_numpy_layouts(make, layout):
    """A view of a numpy array of any layout has the array's pointer, shape, element strides, dtype and flags."""
    a = NUMPY_LAYOUTS[layout]()
    check_numpy_view(make(a), a)


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("dtype", NUMPY_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_dtypes(make, dtype):
    """Every dtype numpy can export arrives as the same numpy dtype with the same element bytes."""
    a = (np.arange(-3, 9) % 7).astype(dtype).reshape(3, 4)[:, ::-1]
    check_numpy_view(make(a), a)


@pytest.mark.parametrize("make", MAKERS)
def test_numpy_read_only_flag(make):
    """numpy exports a non-writeable array as a versioned capsule with READ_ONLY, seen as readonly=True."""
    a = np.arange(4.0)
    assert make(a).readonly is False
    a.flags.writeable = False
    view = make(a)
    assert view.readonly is True
    check_numpy_view(view, a)


def test_numpy_broadcast_is_read_only():
    """np.broadcast_to returns a read-only array, so its view is readonly with zero strides."""
    a = np.broadcast_to(np.arange(3.0), (2, 3))
    view = StridedMemoryView(a)
    assert view.readonly is True and view.strides == (0, 1)


@pytest.mark.slow
def test_numpy_view_holds_references_and_releases_them():
    """A view holds references to the array while alive and drops them all (deleter run) when it dies."""
    a = np.arange(10.0)
    baseline = sys.getrefcount(a)
    view = StridedMemoryView(a)
    assert sys.getrefcount(a) > baseline
    del view
    gc.collect()
    assert sys.getrefcount(a) == baseline


@pytest.mark.slow
def test_numpy_views_are_independent():
    """Two views of one array hold their own capsules; deleting one leaves the other valid."""
    a = np.arange(8, dtype=np.int64)
    baseline = sys.getrefcount(a)
    first = StridedMemoryView(a)
    second = StridedMemoryView.from_dlpack(a)
    assert view_fields(first) == view_fields(second)
    del first
    gc.collect()
    check_numpy_view(second, a)
    del second
    gc.collect()
    assert sys.getrefcount(a) == baseline


@pytest.mark.slow
def test_numpy_lifetime_after_del():
    """With the array's last name deleted the view still reads its bytes, and the array dies with the view."""
    a = np.arange(12, dtype=np.float64).reshape(3, 4)[::-1, 1::2]
    expected = a.copy()
    ref = weakref.ref(a)
    view = StridedMemoryView(a)
    del a
    gc.collect()
    assert ref() is not None
    assert same_bits(read_view(view), expected)
    # A contiguous read through numpy's own ctypes bridge, at the address of element [0, 0].
    first_row_start = np.ctypeslib.as_array(
        ctypes.cast(view.ptr, ctypes.POINTER(ctypes.c_double)), shape=(1,)
    )
    assert first_row_start[0] == expected[0, 0]
    del first_row_start
    del view
    gc.collect()
    assert ref() is None


# --------------------------------------------------------------------------------------------
# Host streams


def _numpy_producer():
    return np.arange(6.0).reshape(2, 3)


def _array_api_strict_producer():
    xp = pytest.importorskip("array_api_strict")
    return xp.reshape(xp.arange(6, dtype=xp.float64), (2, 3))


def _torch_producer():
    torch = pytest.importorskip("torch")
    return torch.arange(6.0).reshape(2, 3)


def _jax_producer():
    jnp = pytest.importorskip("jax.numpy")
    return jnp.arange(6.0).reshape(2, 3)


HOST_PRODUCERS = {
    "numpy": _numpy_producer,
    "array_api_strict": _array_api_strict_producer,
    "torch": _torch_producer,
    "jax": _jax_producer,
}


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("stream", HOST_STREAMS)
@pytest.mark.parametrize(
    "producer",
    [pytest.param(name, marks=[getattr(pytest.mark, name)] if name in ("torch", "jax") else [])
     for name in HOST_PRODUCERS],
)
def test_host_stream_ptr_is_not_passed_to_the_producer(producer, stream, make):
    """For host memory every stream_ptr gives the view stream_ptr=None gives (the producer always gets stream=None).

    numpy and array-api-strict raise RuntimeError for any stream but None, torch raises
    AssertionError for 0 and jax raises for any stream, so a success proves stream=None was sent.
    """
    obj = HOST_PRODUCERS[producer]()
    reference = make(obj, stream_ptr=None)
    view = make(obj, stream_ptr=stream)
    assert view_fields(view) == view_fields(reference)
    assert view.exporting_obj is obj


# --------------------------------------------------------------------------------------------
# torch


def _torch_numpy_dtype(torch, dtype):
    import ml_dtypes

    table = {
        torch.bool: np.dtype(np.bool_),
        torch.uint8: np.dtype(np.uint8),
        torch.int8: np.dtype(np.int8),
        torch.int16: np.dtype(np.int16),
        torch.int32: np.dtype(np.int32),
        torch.int64: np.dtype(np.int64),
        torch.float16: np.dtype(np.float16),
        torch.float32: np.dtype(np.float32),
        torch.float64: np.dtype(np.float64),
        torch.complex64: np.dtype(np.complex64),
        torch.complex128: np.dtype(np.complex128),
        torch.bfloat16: np.dtype(ml_dtypes.bfloat16),
        torch.float8_e4m3fn: np.dtype(ml_dtypes.float8_e4m3fn),
        torch.float8_e5m2: np.dtype(ml_dtypes.float8_e5m2),
        torch.float8_e4m3fnuz: np.dtype(ml_dtypes.float8_e4m3fnuz),
        torch.float8_e5m2fnuz: np.dtype(ml_dtypes.float8_e5m2fnuz),
        torch.float8_e8m0fnu: np.dtype(ml_dtypes.float8_e8m0fnu),
    }
    return table[dtype]


def torch_truth(t) -> dict:
    """The expected fields of a view of a CPU tensor, read from the tensor itself.

    For dtypes numpy lacks (bfloat16, float8) the elements come from the tensor reinterpreted
    as a same-size integer type, so they compare bit for bit.
    """
    import torch

    dtype = _torch_numpy_dtype(torch, t.dtype)
    if dtype.type.__module__ == "numpy":
        values = t.numpy()
    else:
        as_int = {1: torch.uint8, 2: torch.int16}[t.element_size()]
        values = t.view(as_int).numpy().view(dtype)
    return dict(
        ptr=t.data_ptr(),
        shape=tuple(t.shape),
        strides=tuple(t.stride()),
        dtype=dtype,
        readonly=False,
        values=values,
    )


def _torch_cases():
    torch = pytest.importorskip("torch")
    base = torch.arange(12.0).reshape(3, 4)
    return {
        "float32": base,
        "float64": base.double(),
        "int64": base.long(),
        "uint8": base.to(torch.uint8),
        "bool": (base.long() % 3 == 0),
        "complex64": torch.complex(base, -base),
        "bfloat16": base.to(torch.bfloat16),
        "float16": base.half(),
        "float8_e4m3fn": base.to(torch.float8_e4m3fn),
        "float8_e5m2": base.to(torch.float8_e5m2),
        "float8_e4m3fnuz": base.to(torch.float8_e4m3fnuz),
        "float8_e5m2fnuz": base.to(torch.float8_e5m2fnuz),
        "float8_e8m0fnu": (base + 1).to(torch.float8_e8m0fnu),
        "storage_offset": base.flatten()[2:],
        "storage_offset_2d": base[1:, 1:],
        "transposed": base.T,
        "transposed_bfloat16": base.to(torch.bfloat16).T,
        "expanded": torch.arange(3.0).expand(4, 3),
        "expanded_inner": torch.arange(4.0).reshape(4, 1).expand(4, 5),
        "stepped": base[::2, 1::2],
        "zero_d": torch.tensor(2.5),
        "zero_d_bool": torch.tensor(True),
        "empty": torch.empty(0, 3),
    }


TORCH_CASES = [
    "float32",
    "float64",
    "int64",
    "uint8",
    "bool",
    "complex64",
    "bfloat16",
    "float16",
    "float8_e4m3fn",
    "float8_e5m2",
    "float8_e4m3fnuz",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "storage_offset",
    "storage_offset_2d",
    "transposed",
    "transposed_bfloat16",
    "expanded",
    "expanded_inner",
    "stepped",
    "zero_d",
    "zero_d_bool",
    "empty",
]


@pytest.mark.torch
@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("case", TORCH_CASES)
def test_torch(case, make):
    """A view of a torch CPU tensor has its data_ptr (storage offset included), shape, strides, dtype and bytes."""
    t = _torch_cases()[case]
    check_view(make(t), t, **torch_truth(t))


@pytest.mark.torch
def test_torch_low_precision_dtypes_are_ml_dtypes():
    """torch's bfloat16 and float8 tensors arrive as ml_dtypes' numpy dtypes."""
    torch = pytest.importorskip("torch")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    pairs = {
        torch.bfloat16: ml_dtypes.bfloat16,
        torch.float8_e4m3fn: ml_dtypes.float8_e4m3fn,
        torch.float8_e5m2: ml_dtypes.float8_e5m2,
    }
    for torch_dtype, ml_dtype in pairs.items():
        view = StridedMemoryView(torch.zeros(2, dtype=torch_dtype))
        assert view.dtype == np.dtype(ml_dtype)
        assert view.dtype.type is ml_dtype


@pytest.mark.torch
def test_torch_storage_offset_pointer():
    """A slice t[2:] is viewed at t[2:].data_ptr(), two elements past t.data_ptr()."""
    torch = pytest.importorskip("torch")
    t = torch.arange(10, dtype=torch.float32)
    s = t[2:]
    view = StridedMemoryView(s)
    assert view.ptr == s.data_ptr() == t.data_ptr() + 2 * t.element_size()
    assert view.exporting_obj is s


@pytest.mark.torch
def test_torch_lifetime_after_del():
    """With the tensor's last name deleted the view still reads its bytes, and the tensor dies with the view."""
    torch = pytest.importorskip("torch")
    t = torch.arange(20, dtype=torch.float32).reshape(4, 5)[1:, ::2]
    truth = torch_truth(t)
    ref = weakref.ref(t)
    view = StridedMemoryView(t)
    del t
    gc.collect()
    assert ref() is not None
    assert same_bits(read_view(view), truth["values"])
    assert view.ptr == truth["ptr"]
    del view
    gc.collect()
    assert ref() is None


# --------------------------------------------------------------------------------------------
# jax


def jax_truth(x) -> dict:
    """The expected fields of a view of a jax CPU array.

    jax arrays are row-major on the CPU; jax exports legacy capsules (no READ_ONLY flag), which
    the view takes as read-only: jax arrays are immutable.
    """
    shape = tuple(x.shape)
    strides = []
    step = 1
    for extent in reversed(shape):
        strides.append(step)
        step *= extent
    return dict(
        ptr=x.unsafe_buffer_pointer(),
        shape=shape,
        strides=tuple(reversed(strides)),
        dtype=np.dtype(x.dtype),
        readonly=True,
        values=np.asarray(x),
    )


JAX_DTYPES = [
    "float32",
    "int32",
    "int8",
    "uint16",
    "float16",
    "bool",
    "complex64",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
]


@pytest.mark.jax
@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("dtype", JAX_DTYPES)
def test_jax(dtype, make):
    """A view of a jax CPU array has its buffer pointer, row-major strides, dtype, and readonly=True (legacy capsule)."""
    jnp = pytest.importorskip("jax.numpy")
    x = (jnp.arange(12) % 5).astype(getattr(jnp, dtype)).reshape(3, 4)
    check_view(make(x), x, **jax_truth(x))


@pytest.mark.jax
@pytest.mark.parametrize("shape", [(), (0,), (2, 0, 3), (1, 1), (2, 3, 4)], ids=str)
def test_jax_shapes(shape):
    """jax arrays of 0-d, zero-size and n-d shapes are viewed with C-order strides; readonly=True (legacy capsule)."""
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.ones(shape, dtype=jnp.float32)
    check_view(StridedMemoryView(x), x, **jax_truth(x))


@pytest.mark.jax
def test_jax_arrays_are_read_only():
    """jax returns a legacy capsule even when asked for max_version, and its arrays are
    immutable: a jax view reports readonly=True, so a launcher checking it never writes one."""
    jnp = pytest.importorskip("jax.numpy")
    x = jnp.arange(4.0)
    assert StridedMemoryView(x).readonly is True
    assert StridedMemoryView.from_dlpack(x, stream_ptr=-1).readonly is True


@pytest.mark.jax
def test_jax_float4_is_viewed_packed():
    """jax exports float4_e2m1fn in a legacy capsule, with no padded flag: packed, as jax
    stores it on the host (two values a byte; tests/test_dtypes.py checks the bits)."""
    jnp = pytest.importorskip("jax.numpy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    x = jnp.asarray(np.zeros(4, dtype=ml_dtypes.float4_e2m1fn))
    view = StridedMemoryView.from_dlpack(x)
    assert view.dtype is None and view.dlpack_dtype == (17, 4, 1)
    assert (view.shape, view.nbytes, view.readonly) == ((4,), 2, True)


# --------------------------------------------------------------------------------------------
# array-api-strict


ARRAY_API_STRICT_DTYPES = ["bool", "int8", "uint64", "float32", "float64", "complex128"]


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("dtype", ARRAY_API_STRICT_DTYPES)
def test_array_api_strict(dtype, make):
    """An array-api-strict array is viewed with the values and dtype of the numpy memory it wraps."""
    xp = pytest.importorskip("array_api_strict")
    rows = [[0, 1, 2, 3], [4, 0, 1, 2], [3, 4, 0, 1]]
    x = xp.asarray(rows, dtype=getattr(xp, dtype))
    view = make(x)
    # np.from_dlpack gives a numpy array over the same memory: the producer's own truth.
    check_view(view, x, **numpy_truth(np.from_dlpack(x)))
    assert view.dtype == np.dtype(dtype)
    assert same_bits(read_view(view), np.array(rows, dtype=dtype))


# --------------------------------------------------------------------------------------------
# ml_dtypes


ML_DTYPES_VIA_JAX = [
    "bfloat16",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
]


@pytest.mark.parametrize("make", MAKERS)
@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "int4"])
def test_ml_dtypes_through_numpy_are_read_from_the_array(name, make):
    """numpy 2.4 cannot export ml_dtypes arrays (its __dlpack__ raises; 2.5 with ml_dtypes
    0.7 exports those of a byte or more, with the same DLPack type); a view, through the
    constructor or from_dlpack, reads them from the array itself: its dtype, memory, bits."""
    from test_dtypes import ML_DTYPES, numpy_dlpack_type

    ml_dtypes = pytest.importorskip("ml_dtypes")
    a = np.arange(4).astype(getattr(ml_dtypes, name))
    assert numpy_dlpack_type(a) in (None, ML_DTYPES[name])
    view = make(a)
    assert view.dtype == a.dtype and view.ptr == a.ctypes.data and view.shape == (4,)
    assert ctypes.string_at(view.ptr, view.nbytes) == a.tobytes()


@pytest.mark.jax
@pytest.mark.parametrize("name", ML_DTYPES_VIA_JAX)
def test_ml_dtypes_through_jax(name):
    """An ml_dtypes array handed to jax is viewed with the same ml_dtypes dtype and the same bits."""
    jnp = pytest.importorskip("jax.numpy")
    ml_dtypes = pytest.importorskip("ml_dtypes")
    dtype = np.dtype(getattr(ml_dtypes, name))
    a = np.array([1, 2, 4, 0.5, 8, 0.25], dtype=np.float32).astype(dtype).reshape(2, 3)
    x = jnp.asarray(a)
    view = StridedMemoryView(x)
    check_view(view, x, **jax_truth(x))
    assert view.dtype == dtype and view.dtype.type is dtype.type
    assert same_bits(read_view(view), a)


# --------------------------------------------------------------------------------------------
# Comparison with cuda-core


def _core_view_class():
    pytest.importorskip("cuda.bindings")
    utils = pytest.importorskip("cuda.core.utils")
    return utils.StridedMemoryView


def assert_matches_cuda_core(view, core, *, legacy_capsule=False) -> None:
    """Compare each field of our view with cuda-core's view of the same object.

    Known departures of cuda-core 1.2.2 from the spec, checked against the spec instead:
    - strides: cuda-core returns None at 0-d (the capsule has NULL strides); the spec says ().
    - dtype: cuda-core raises TypeError for the float8 codes; the spec maps them to ml_dtypes.
    - readonly: numpy and torch send versioned capsules whose READ_ONLY flag both read; a legacy
      capsule (``legacy_capsule``: jax's) cannot say, and cuda-core takes it as writable where
      the view, like numpy, takes it as read-only (docs/cuda-core.md).
    """
    assert view.ptr == core.ptr
    assert view.shape == tuple(core.shape)
    if view.ndim == 0:
        assert core.strides in (None, ())
        assert view.strides == ()
    elif core.strides is None:  # cuda-core's "C-contiguous" (numpy 2.0 to 2.3's empty arrays)
        row_major = tuple(math.prod(view.shape[i + 1:]) for i in range(view.ndim))
        assert addressing_strides(view.shape, view.strides) == addressing_strides(view.shape, row_major)
    else:
        assert addressing_strides(view.shape, view.strides) == addressing_strides(
            view.shape, tuple(core.strides))
    try:
        core_dtype = core.dtype
    except TypeError:
        assert view.dtype.name.startswith("float8_"), view.dtype
    else:
        assert view.dtype == core_dtype
    assert view.device_id == core.device_id == -1
    assert view.is_device_accessible is bool(core.is_device_accessible) is False
    if legacy_capsule:
        assert view.readonly is True and bool(core.readonly) is False
    else:
        assert view.readonly is bool(core.readonly)


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
except ImportError:  # the test below then skips via importorskip
    given = None


if given is not None:

    @st.composite
    def numpy_layouts(draw):
        """A numpy array of any dtype, 0-d or zero-size, sliced with any steps, transposed, broadcast, read-only."""
        dtype = np.dtype(draw(st.sampled_from(NUMPY_DTYPES)))
        base_shape = draw(hnp.array_shapes(min_dims=0, max_dims=4, min_side=0, max_side=6))
        a = (np.arange(math.prod(base_shape)) % 7).astype(dtype).reshape(base_shape)
        index = []
        for extent in base_shape:
            step = draw(st.sampled_from([1, 1, 2, 3, -1, -2, -3]))
            start = draw(st.none() | st.integers(-extent - 1, extent + 1))
            stop = draw(st.none() | st.integers(-extent - 1, extent + 1))
            index.append(slice(start, stop, step))
        a = a[(*index, Ellipsis)]  # the Ellipsis keeps a 0-d result an array, not a scalar
        if a.ndim > 1 and draw(st.booleans()):
            a = a.transpose(draw(st.permutations(range(a.ndim))))
        if a.ndim < 4 and draw(st.booleans()):
            extent = draw(st.integers(0, 3))
            a = np.broadcast_to(a[np.newaxis], (extent, *a.shape))
        if a.flags.writeable and draw(st.booleans()):
            a.flags.writeable = False
        return a

    @pytest.mark.slow
    @settings(
        max_examples=200,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )
    @given(a=numpy_layouts(), use_constructor=st.booleans())
    def test_numpy_layouts_match_cuda_core(a, use_constructor):
        """On generated numpy layouts every field equals numpy's truth and cuda-core's view (spec where it differs)."""
        core_class = _core_view_class()
        make = StridedMemoryView if use_constructor else StridedMemoryView.from_dlpack
        view = make(a)
        check_numpy_view(view, a)
        assert_matches_cuda_core(view, core_class.from_dlpack(a, stream_ptr=-1))

else:

    @pytest.mark.slow
    def test_numpy_layouts_match_cuda_core():
        """On generated numpy layouts every field equals numpy's truth and cuda-core's view."""
        pytest.importorskip("hypothesis")


@pytest.mark.torch
@pytest.mark.parametrize(
    "case", ["float32", "bfloat16", "float8_e4m3fn", "float8_e5m2", "transposed", "expanded",
             "storage_offset_2d", "zero_d", "empty", "bool", "complex64"]
)
def test_torch_matches_cuda_core(case):
    """Views of torch tensors equal cuda-core's views, except where the spec departs from cuda-core."""
    core_class = _core_view_class()
    t = _torch_cases()[case]
    view = StridedMemoryView(t)
    check_view(view, t, **torch_truth(t))
    assert_matches_cuda_core(view, core_class.from_dlpack(t, stream_ptr=-1))


@pytest.mark.jax
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "int8", "bool"])
def test_jax_matches_cuda_core(dtype):
    """Views of jax arrays equal cuda-core's but for readonly: cuda-core reads the legacy capsule
    as writable, the view as read-only."""
    jnp = pytest.importorskip("jax.numpy")
    core_class = _core_view_class()
    x = (jnp.arange(6) % 3).astype(getattr(jnp, dtype)).reshape(2, 3)
    view = StridedMemoryView(x)
    check_view(view, x, **jax_truth(x))
    assert_matches_cuda_core(view, core_class.from_dlpack(x, stream_ptr=-1),
                             legacy_capsule=not jax_exports_versioned())
