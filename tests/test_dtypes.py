"""Every element type a kernel takes, from real producers and ctypes ones, viewed exactly
and handed on unchanged (issue 38; docs/api.md, "Element types").

The DLPack type (code, bits, lanes) a producer gives is the view's ``dlpack_dtype`` and
what its DLPack export gives back; ``view.dtype`` is the numpy or ml_dtypes dtype where
one is exact, a void dtype of the element's size for vector types, None for packed
sub-byte elements.  Values are compared as the bytes holding them.
"""

from __future__ import annotations

import contextlib
import ctypes
import re

import ml_dtypes
import numpy as np
import pytest

from producers import IS_SUBBYTE_TYPE_PADDED, make_producer
from stridedview import DLPackDType, StridedMemoryView
from stridedview import _view
from test_buffer_export import PyBUF_FORMAT, PyBUF_SIMPLE, PyBUF_STRIDES, get_buffer
from test_export import read_capsule
from test_fast_paths import general_path

#: ml_dtypes' types and the DLPack type of each (numpy's __dlpack__ refuses all of them),
#: those the installed ml_dtypes has (0.5.4, the newest with a free-threaded 3.13 wheel, has
#: no int1, uint1, complex32 or bcomplex32: no numpy array of them can be made there).
ML_DTYPES = {
    "bfloat16": (4, 16, 1),
    "float8_e3m4": (7, 8, 1),
    "float8_e4m3": (8, 8, 1),
    "float8_e4m3b11fnuz": (9, 8, 1),
    "float8_e4m3fn": (10, 8, 1),
    "float8_e4m3fnuz": (11, 8, 1),
    "float8_e5m2": (12, 8, 1),
    "float8_e5m2fnuz": (13, 8, 1),
    "float8_e8m0fnu": (14, 8, 1),
    "float6_e2m3fn": (15, 6, 1),
    "float6_e3m2fn": (16, 6, 1),
    "float4_e2m1fn": (17, 4, 1),
    "int1": (0, 1, 1), "int2": (0, 2, 1), "int4": (0, 4, 1),
    "uint1": (1, 1, 1), "uint2": (1, 2, 1), "uint4": (1, 4, 1),
    "complex32": (5, 32, 1),
    "bcomplex32": (18, 32, 1),
}
ML_DTYPES = {name: dl_type for name, dl_type in ML_DTYPES.items() if hasattr(ml_dtypes, name)}


def raw_bytes(view):
    """The bytes a whole-byte, C-contiguous host view's elements occupy."""
    return ctypes.string_at(view.ptr, view.nbytes)


def ml_array(name, shape=(3, 4)):
    """An array of ml_dtypes' ``name`` holding distinct bit patterns, one element a byte
    or more (its item size), so that a view reading other bytes is caught."""
    dtype = np.dtype(getattr(ml_dtypes, name))
    count = int(np.prod(shape))
    raw = np.arange(count * dtype.itemsize, dtype=np.uint8)
    if dtype.itemsize == 1 and DLPackDType(*ML_DTYPES[name]).bits < 8:
        raw &= (1 << ML_DTYPES[name][1]) - 1  # a padded element's value bits only
    return raw.view(dtype).reshape(shape)


# --- numpy arrays of ml_dtypes types: read from the array, not numpy's __dlpack__ -----------

def numpy_dlpack_type(array):
    """The DLPack type numpy's own __dlpack__ gives ``array``, or None where it refuses it
    (numpy 2.4 refuses every ml_dtypes type; numpy 2.5 with ml_dtypes 0.7 exports the types
    of a byte or more: bfloat16, the float8 kinds, complex32 and bcomplex32)."""
    try:
        capsule = array.__dlpack__()
    except BufferError:
        return None
    from test_export import read_capsule

    return read_capsule(capsule)["dtype"]


@pytest.mark.parametrize("name", list(ML_DTYPES))
@pytest.mark.parametrize("path", ["fast", "general"])
def test_numpy_ml_dtypes_array_viewed_exactly(name, path):
    """A numpy array of each ml_dtypes type: its own dtype, its DLPack type, numpy's strides
    (in elements) and read-only flag, the same bytes; numpy's own __dlpack__ refuses it, or
    (newer numpy) gives the same DLPack type."""
    base = ml_array(name, (4, 6))
    array = base[1:, ::2]  # strided: element strides (6, 2)
    assert numpy_dlpack_type(array) in (None, ML_DTYPES[name])  # what the view does not go through
    readonly = base.copy()
    readonly.setflags(write=False)
    with general_path() if path == "general" else contextlib.nullcontext():
        view = StridedMemoryView(array)
        frozen = StridedMemoryView(readonly)
    assert view.dtype == array.dtype and view.dtype.name == name
    assert view.dlpack_dtype == ML_DTYPES[name]
    assert (view.ptr, view.shape, view.strides) == (array.ctypes.data, (3, 3), (6, 2))
    assert view.itemsize == array.itemsize and view.itemsize_bits == 8 * array.itemsize
    assert view.readonly is False and frozen.readonly is True
    assert view.exporting_obj is array
    assert raw_bytes(frozen) == readonly.tobytes()


@pytest.mark.parametrize("name", list(ML_DTYPES))
def test_numpy_ml_dtypes_view_hands_its_type_on(name):
    """The view's DLPack export carries the type, and IS_SUBBYTE_TYPE_PADDED for the one-byte
    sub-byte kinds; viewing the capsule again gives the same dtype and memory."""
    array = ml_array(name)
    view = StridedMemoryView(array)
    capsule = view.__dlpack__(max_version=(1, 3))
    fields = read_capsule(capsule)
    assert fields["dtype"] == ML_DTYPES[name]
    padded = ML_DTYPES[name][1] < 8
    assert fields["flags"] == (IS_SUBBYTE_TYPE_PADDED if padded else 0)
    again = StridedMemoryView.from_dlpack(view)
    assert (again.dtype, again.dlpack_dtype, again.ptr) == (view.dtype, view.dlpack_dtype, view.ptr)
    if padded:  # a legacy capsule cannot say "padded"
        with pytest.raises(BufferError, match="padded sub-byte view cannot be exported as a legacy"):
            view.__dlpack__()
    else:
        assert read_capsule(view.__dlpack__())["dtype"] == ML_DTYPES[name]


def test_numpy_user_type_other_than_ml_dtypes_is_left_to_numpy():
    """A user-defined numpy type that is not ml_dtypes' (here: a structured dtype, a
    non-user type, for contrast) keeps numpy's own answer: refused with the hint."""
    array = np.zeros(2, dtype=[("a", "<f4")])
    with pytest.raises(BufferError, match="from_array_interface"):
        StridedMemoryView(array)


# --- torch: fp4 pairs, fp8, complex32, bfloat16 --------------------------------------------

TORCH_TYPES = {
    "bfloat16": ((4, 16, 1), "bfloat16"),
    "float8_e4m3fn": ((10, 8, 1), "float8_e4m3fn"),
    "float8_e5m2": ((12, 8, 1), "float8_e5m2"),
    "float8_e4m3fnuz": ((11, 8, 1), "float8_e4m3fnuz"),
    "float8_e5m2fnuz": ((13, 8, 1), "float8_e5m2fnuz"),
    "float8_e8m0fnu": ((14, 8, 1), "float8_e8m0fnu"),
    "complex32": ((5, 32, 1), "complex32"),
    "float4_e2m1fn_x2": ((17, 4, 2), None),
}


def torch_tensor(name, shape=(3, 4)):
    """A torch tensor of ``name`` holding distinct bytes."""
    torch = pytest.importorskip("torch")
    dtype = getattr(torch, name)
    size = torch.empty(0, dtype=dtype).element_size()
    count = int(np.prod(shape))
    raw = torch.arange(count * size, dtype=torch.int64).remainder(251).to(torch.uint8)
    return raw.view(dtype).reshape(shape)


@pytest.mark.torch
@pytest.mark.parametrize("name", list(TORCH_TYPES))
@pytest.mark.parametrize("path", ["fast", "general"])
def test_torch_types_viewed_exactly(name, path):
    """Each torch type, through its exchange API and through __dlpack__: its DLPack type,
    the ml_dtypes dtype where one is exact, else a void dtype of the element's size."""
    tensor = torch_tensor(name)[:, 1:]
    dl_type, ml_name = TORCH_TYPES[name]
    with general_path() if path == "general" else contextlib.nullcontext():
        view = StridedMemoryView(tensor)
    assert view.dlpack_dtype == dl_type
    if ml_name is None or not hasattr(ml_dtypes, ml_name):  # none, or not in this ml_dtypes
        assert view.dtype == np.dtype(f"V{tensor.element_size()}")
        assert view.dtype.metadata["dlpack_dtype"] == dl_type
    else:
        assert view.dtype == np.dtype(getattr(ml_dtypes, ml_name))
    assert view.itemsize == tensor.element_size()
    assert (view.ptr, view.shape, view.strides) == (tensor.data_ptr(), (3, 3), (4, 1))
    assert view.nbytes == 9 * tensor.element_size()


@pytest.mark.torch
@pytest.mark.parametrize("name", list(TORCH_TYPES))
def test_torch_types_round_trip_through_the_view(name):
    """torch.from_dlpack(view) is the same tensor type over the same memory, and the bytes
    are the tensor's: the (code, bits, lanes) triple goes out as it came in."""
    torch = pytest.importorskip("torch")
    tensor = torch_tensor(name)
    view = StridedMemoryView(tensor)
    back = torch.from_dlpack(view)
    assert back.dtype == tensor.dtype and back.data_ptr() == tensor.data_ptr()
    assert back.shape == tensor.shape and back.stride() == tensor.stride()
    assert read_capsule(view.__dlpack__(max_version=(1, 3)))["dtype"] == TORCH_TYPES[name][0]
    assert raw_bytes(view) == tensor.view(torch.uint8).numpy().tobytes()


@pytest.mark.torch
def test_torch_fp4_pairs_seen_as_bytes_and_as_packed_values():
    """A view of torch's fp4 pairs seen as uint8 (one byte a pair) and as packed
    float4_e2m1fn (two values a pair, low nibble first): the same bytes."""
    tensor = torch_tensor("float4_e2m1fn_x2", (2, 3))
    view = StridedMemoryView(tensor)
    as_bytes = view.view(dtype=np.uint8)
    assert (as_bytes.shape, as_bytes.strides, as_bytes.ptr) == ((2, 3), (3, 1), view.ptr)
    assert np.asarray(as_bytes).tobytes() == raw_bytes(view)
    packed = view.view(dtype=DLPackDType(17, 4, 1))
    assert packed.dtype is None and packed.dlpack_dtype == (17, 4, 1)
    assert (packed.shape, packed.strides, packed.nbytes) == ((2, 6), (6, 1), 6)
    pairs = packed.view(dtype=view.dtype)  # the void dtype names the pair type
    assert (pairs.dlpack_dtype, pairs.shape) == ((17, 4, 2), (2, 3))


@pytest.mark.torch
def test_torch_complex32_values_read_through_ml_dtypes():
    """torch's complex32 viewed as ml_dtypes' complex32: numpy reads the same values."""
    torch = pytest.importorskip("torch")
    tensor = torch.tensor([1 + 2j, -3.5 + 0.25j], dtype=torch.complex64).to(torch.complex32)
    view = StridedMemoryView(tensor)
    halves = np.asarray(view.view(dtype=np.float16))
    assert halves.tolist() == [1.0, 2.0, -3.5, 0.25]
    if hasattr(ml_dtypes, "complex32"):  # ml_dtypes 0.6 on
        assert np.frombuffer(raw_bytes(view), dtype=ml_dtypes.complex32).astype(np.complex64).tolist() == [
            1 + 2j, -3.5 + 0.25j
        ]


# --- JAX: bfloat16, fp8, packed fp4 ------------------------------------------------------------

@pytest.mark.jax
@pytest.mark.parametrize(
    "name, dl_type", [("bfloat16", (4, 16, 1)), ("float8_e4m3fn", (10, 8, 1)), ("float8_e5m2", (12, 8, 1))]
)
def test_jax_types_viewed_exactly(name, dl_type):
    """jax's bfloat16 and fp8 arrays: ml_dtypes' dtype, read-only (jax's legacy capsules
    cannot say, and its arrays are immutable), the same bytes."""
    jnp = pytest.importorskip("jax.numpy")
    values = np.arange(12, dtype=np.float32).reshape(3, 4)
    array = jnp.asarray(values, dtype=getattr(jnp, name))
    view = StridedMemoryView(array)
    assert view.dlpack_dtype == dl_type
    assert view.dtype == np.dtype(getattr(ml_dtypes, name))
    assert view.readonly is True and view.shape == (3, 4)
    assert raw_bytes(view) == np.asarray(array).tobytes()


@pytest.mark.jax
def test_jax_float4_is_packed_two_values_a_byte():
    """jax stores float4_e2m1fn packed on the host, as DLPack's default says: the view's
    dtype is None, its bits in itemsize_bits, and the byte holds two values, the first in
    the low nibble."""
    jnp = pytest.importorskip("jax.numpy")
    values = np.array([0.5, 1, 1.5, 2, 3, 4, 6, -1], dtype=ml_dtypes.float4_e2m1fn)
    view = StridedMemoryView(jnp.asarray(values))
    assert view.dtype is None and view.dlpack_dtype == (17, 4, 1)
    assert (view.shape, view.strides, view.itemsize_bits, view.nbytes) == ((8,), (1,), 4, 4)
    codes = values.view(np.uint8)
    want = bytes(int(codes[i]) | int(codes[i + 1]) << 4 for i in range(0, 8, 2))
    assert ctypes.string_at(view.ptr, 4) == want


# --- tvm-ffi: packed types handed on and back ----------------------------------------------------

@pytest.mark.parametrize("dl_type", [(17, 4, 1), (0, 4, 1), (1, 2, 1)], ids=["float4", "int4", "uint2"])
def test_tvm_ffi_takes_packed_views_and_hands_them_back(dl_type):
    """tvm-ffi takes packed sub-byte types: a packed view handed to it and viewed again is
    the same memory, type and shape."""
    tvm_ffi = pytest.importorskip("tvm_ffi")
    data = np.arange(8, dtype=np.uint8).reshape(2, 4)
    packed = StridedMemoryView(data).view(dtype=DLPackDType(*dl_type))
    tensor = tvm_ffi.from_dlpack(packed)
    again = StridedMemoryView(tensor)
    assert (again.ptr, again.dlpack_dtype, again.shape) == (packed.ptr, dl_type, packed.shape)
    assert again.dtype is None and again.nbytes == 8


@pytest.mark.torch
def test_tvm_ffi_takes_torch_fp4_pairs():
    """torch's fp4 pairs, through a view, to tvm-ffi and back: the (17, 4, 2) type kept."""
    tvm_ffi = pytest.importorskip("tvm_ffi")
    tensor = torch_tensor("float4_e2m1fn_x2")
    again = StridedMemoryView(tvm_ffi.from_dlpack(StridedMemoryView(tensor)))
    assert (again.ptr, again.dlpack_dtype, again.shape) == (tensor.data_ptr(), (17, 4, 2), (3, 4))


# --- ctypes producers: the rest -------------------------------------------------------------

@pytest.mark.parametrize("kind", ["versioned", "legacy"])
@pytest.mark.parametrize(
    "dl_type, shape, nbytes",
    [
        ((17, 4, 1), (2, 8), 8), ((0, 4, 1), (3, 2), 3), ((1, 2, 1), (4, 4), 4),
        ((0, 1, 1), (16,), 2), ((15, 6, 1), (2, 4), 6), ((16, 6, 1), (4,), 3),
        ((17, 4, 1), (3,), 2),  # an odd count: the last byte half used
        ((1, 2, 3), (8,), 6),  # lanes of a few bits: 6-bit elements, packed
    ],
)
def test_packed_subbyte_from_a_ctypes_producer(kind, dl_type, shape, nbytes):
    """Packed sub-byte elements (no IS_SUBBYTE_TYPE_PADDED; legacy capsules cannot set it):
    dtype None, the type exact, nbytes their bits rounded up to bytes, handed on unchanged."""
    producer = make_producer(kind, dtype=dl_type, shape=shape, byte_offset=3)
    view = StridedMemoryView(producer)
    assert view.dtype is None and view.dlpack_dtype == dl_type
    assert (view.ptr, view.shape) == (producer.expected_ptr, shape)
    assert view.itemsize_bits == dl_type[1] * dl_type[2] and view.nbytes == nbytes
    with pytest.raises(BufferError, match="has no whole-byte item size"):
        view.itemsize
    # (A view of a legacy capsule is read-only: no legacy capsule of it.)
    capsules = [view.__dlpack__(max_version=(1, 3))] + ([] if view.readonly else [view.__dlpack__()])
    for capsule in capsules:
        fields = read_capsule(capsule)
        assert (fields["dtype"], fields["shape"], fields["data"]) == (dl_type, shape, view.ptr)
        assert not (fields["flags"] or 0) & IS_SUBBYTE_TYPE_PADDED  # packed: no padded flag
    assert "dlpack_dtype=DLPackDType(code=" in repr(view) and "dtype=None" in repr(view)


@pytest.mark.parametrize(
    "dl_type, itemsize",
    [((2, 32, 4), 16), ((0, 8, 4), 4), ((17, 4, 2), 1), ((2, 16, 2), 4), ((1, 4, 4), 2),
     ((18, 32, 2), 8)],
)
def test_vector_types_from_a_ctypes_producer(dl_type, itemsize):
    """Vector types (lanes > 1) of whole bytes: a void dtype of the element's size naming
    the type; shape and strides count vectors; the type goes out unchanged."""
    producer = make_producer(dtype=dl_type, shape=(3, 2), strides=(4, 1))
    view = StridedMemoryView(producer)
    assert view.dtype == np.dtype(f"V{itemsize}") and view.itemsize == itemsize
    assert view.dtype.metadata == {"dlpack_dtype": dl_type}
    assert (view.shape, view.strides, view.byte_strides) == ((3, 2), (4, 1), (4 * itemsize, itemsize))
    assert read_capsule(view.__dlpack__(max_version=(1, 3)))["dtype"] == dl_type
    row = view[1]
    assert (row.dlpack_dtype, row.ptr) == (dl_type, view.ptr + 4 * itemsize)
    assert view.T.dlpack_dtype == dl_type
    assert view.view(dtype=view.dtype).dlpack_dtype == dl_type


def test_bcomplex_from_a_ctypes_producer():
    """DLPack 1.3's Bcomplex (code 18): ml_dtypes' bcomplex32, values as a pair of bfloat16."""
    data = np.array([1.0, -2.0, 0.5, 4.0], dtype=ml_dtypes.bfloat16)
    producer = make_producer(dtype="bcomplex32", shape=(2,), data=data.ctypes.data, buffer=data)
    view = StridedMemoryView(producer)
    assert view.dlpack_dtype == (18, 32, 1)
    if hasattr(ml_dtypes, "bcomplex32"):
        assert view.dtype == np.dtype(ml_dtypes.bcomplex32)
    else:  # an ml_dtypes older than 0.6: the void fallback, which keeps the DLPack type
        assert (view.dtype.kind, view.dtype.itemsize) == ("V", 4)
    assert np.asarray(view.view(dtype=np.uint16)).view(ml_dtypes.bfloat16).tolist() == [1.0, -2.0, 0.5, 4.0]
    assert read_capsule(view.__dlpack__(max_version=(1, 3)))["dtype"] == (18, 32, 1)


@pytest.mark.parametrize("dl_type", [(0, 4, 1), (1, 1, 1), (15, 6, 1), (17, 4, 1)])
def test_padded_subbyte_from_a_ctypes_producer(dl_type):
    """IS_SUBBYTE_TYPE_PADDED: one element a byte, ml_dtypes' dtype, the flag handed on."""
    producer = make_producer(dtype=dl_type, flags=IS_SUBBYTE_TYPE_PADDED)
    view = StridedMemoryView(producer)
    assert view.itemsize == 1 and view.itemsize_bits == 8 and view.dtype.itemsize == 1
    assert read_capsule(view.__dlpack__(max_version=(1, 3)))["flags"] == IS_SUBBYTE_TYPE_PADDED


def test_vector_type_without_ml_dtypes_lane_type():
    """A vector of a type ml_dtypes has no lanes for is still exactly its bytes: (8, 8, 3)."""
    view = StridedMemoryView(make_producer(dtype=(8, 8, 3), shape=(5,)))
    assert view.dtype == np.dtype("V3") and view.nbytes == 15


WITHOUT_ML_DTYPES = """
import sys
sys.modules["ml_dtypes"] = None  # as if not installed (or too old for every type here)
from producers import IS_SUBBYTE_TYPE_PADDED, make_producer
from stridedview import StridedMemoryView
from test_export import read_capsule
for dl_type, flags, itemsize in [((5, 32, 1), 0, 4), ((4, 16, 1), 0, 2), ((0, 4, 1), IS_SUBBYTE_TYPE_PADDED, 1)]:
    view = StridedMemoryView(make_producer(dtype=dl_type, flags=flags, shape=(2, 3)))
    again = view.view(dtype=view.dtype)
    print(dl_type, view.dtype.str, view.dlpack_dtype == dl_type, again.dlpack_dtype == dl_type,
          again.itemsize == itemsize, read_capsule(again.__dlpack__(max_version=(1, 3)))["dtype"] == dl_type)
"""


def test_without_ml_dtypes_a_void_dtype_keeps_the_dlpack_type():
    """With no ml_dtypes (or one too old for the type), a view's dtype is a void of the
    element's bytes that names its DLPack type: a view of that dtype (padded sub-byte
    included) and its export keep the type."""
    import subprocess
    import sys
    from pathlib import Path

    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_ML_DTYPES], capture_output=True, text=True,
        cwd=Path(__file__).parent, timeout=120,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.splitlines() == [
        "(5, 32, 1) |V4 True True True True",
        "(4, 16, 1) |V2 True True True True",
        "(0, 4, 1) |V1 True True True True",
    ]


# --- one field corrupted ---------------------------------------------------------------------

@pytest.mark.parametrize("kind", ["versioned", "legacy"])
@pytest.mark.parametrize(
    "fields, message",
    [
        ({"dtype": (17, 4, 0)}, "dlpack: dtype lanes must be >= 1 (got 0)"),
        ({"dtype": (17, 8, 2)}, "dlpack: dtype Float4_e2m1fn must have 4 bits (got 8)"),
        ({"dtype": (18, 64, 1)}, "dlpack: dtype Bcomplex must have 32 bits (got 64)"),
        ({"dtype": (5, 16, 1)}, "dlpack: dtype Complex must have 32, 64 or 128 bits (got 16)"),
        ({"dtype": (19, 8, 1)}, "dlpack: unsupported dtype code 19 (unknown)"),
        ({"dtype": (3, 64, 2)}, "dlpack: unsupported dtype code 3 (OpaqueHandle)"),
        ({"dtype": (0, 4, 1), "strides": (1, 2)}, "dlpack: packed sub-byte dtype Int (bits 4, lanes 1) must be row-major and gap-free"),
        ({"dtype": (17, 4, 1), "strides": (3, -1), "shape": (2, 3)}, "dlpack: packed sub-byte dtype Float4_e2m1fn (bits 4, lanes 1) must be row-major"),
        ({"device": (19, 0)}, "dlpack: unsupported device type 19 (TPU)"),
        ({"device": (20, 0)}, "dlpack: unsupported device type 20 (TPUHost)"),
        ({"device": (21, 0)}, "dlpack: unsupported device type 21 (Ascend)"),
    ],
    ids=["lanes-0", "fp4-bits", "bcomplex-bits", "complex-bits", "code-19", "opaque-lanes",
         "packed-strided", "packed-reversed", "TPU", "TPUHost", "Ascend"],
)
def test_one_field_corrupted(kind, fields, message):
    """Each corrupted field is a BufferError naming it; the capsule's deleter runs once."""
    producer = make_producer(kind, **fields)
    with pytest.raises(BufferError, match=re.escape(message)):
        StridedMemoryView(producer, stream_ptr=-1)
    producer.release_capsules()


@pytest.mark.parametrize(
    "dl_type", [(17, 4, 2), (0, 8, 1), (15, 6, 2), (2, 32, 1)], ids=["pairs", "int8", "float6x2", "float32"]
)
def test_padded_flag_only_on_one_lane_sub_byte_types(dl_type):
    """IS_SUBBYTE_TYPE_PADDED on a vector of sub-byte lanes is refused; on whole-byte
    one-lane types it says nothing and changes nothing."""
    producer = make_producer(dtype=dl_type, flags=IS_SUBBYTE_TYPE_PADDED)
    if dl_type[2] > 1:
        with pytest.raises(BufferError, match=re.escape("dlpack: IS_SUBBYTE_TYPE_PADDED is set on dtype")):
            StridedMemoryView(producer)
    else:
        assert StridedMemoryView(producer).itemsize == dl_type[1] // 8
    producer.release_capsules()


# --- derived views, copies and the other exports -----------------------------------------------

def packed(count=16, dl_type=(17, 4, 1)):
    data = np.arange(count * dl_type[1] // 8, dtype=np.uint8)
    return data, StridedMemoryView(data).view(dtype=DLPackDType(*dl_type))


def test_packed_derived_views():
    """A packed view reshapes, squeezes and indexes where the result stays row-major,
    gap-free and starts on a byte; a transpose, a step or a broadcast is refused."""
    data, view = packed(16)
    grid = view.reshape(4, 4)
    assert (grid.shape, grid.strides, grid.dtype, grid.dlpack_dtype) == ((4, 4), (4, 1), None, (17, 4, 1))
    row = grid[1]
    assert (row.ptr, row.shape, row.nbytes) == (view.ptr + 2, (4,), 2)
    assert grid[2:].ptr == view.ptr + 4 and grid[:, :].shape == (4, 4)
    assert grid.reshape(1, 16).squeeze().shape == (16,)
    for refused in (lambda: grid.T, lambda: grid[:, ::2], lambda: grid[:, 1:],
                    lambda: view[0:1].broadcast_to((3, 1)), lambda: view[1]):
        with pytest.raises(BufferError):
            refused()
    with pytest.raises(BufferError, match="has no whole-byte item size"):
        grid.byte_strides
    assert grid.byte_bounds == (view.ptr, view.ptr + 8)


def test_packed_bytes_round_trip_through_view_dtype():
    """Bytes seen as packed values and back: the same pointer, the last axis scaled in bits."""
    data, view = packed(32, (1, 2, 1))
    assert view.shape == (32,)
    back = view.view(dtype=np.uint16)
    assert (back.shape, back.dtype, back.ptr) == ((4,), np.dtype(np.uint16), view.ptr)
    assert np.asarray(back).tobytes() == data.tobytes()
    with pytest.raises(BufferError, match="not a multiple of the new element's 16 bits"):
        view[:4].view(dtype=np.uint16)


def test_copies_of_the_new_types():
    """Packed views copy as their bytes (a whole number of them); vector types of one size
    but other DLPack types are not copied into each other."""
    src_data, src = packed(8)
    dst_data = np.zeros(4, np.uint8)
    dst = StridedMemoryView(dst_data).view(dtype=DLPackDType(17, 4, 1))
    dst.copy_from(src)
    assert dst_data.tobytes() == src_data.tobytes()
    pairs = StridedMemoryView(np.zeros(4, np.uint8)).view(dtype=DLPackDType(17, 4, 2))
    quads = StridedMemoryView(np.arange(4, dtype=np.uint8)).view(dtype=DLPackDType(1, 2, 4))
    assert pairs.dtype == quads.dtype  # numpy's V1 either way
    with pytest.raises(ValueError, match="copy: dtypes differ"):
        pairs.copy_from(quads)
    other_pairs = StridedMemoryView(np.arange(4, dtype=np.uint8)).view(dtype=DLPackDType(17, 4, 2))
    pairs.copy_from(other_pairs)
    assert raw_bytes(pairs) == bytes(range(4))
    with pytest.raises(ValueError, match="copy: dtypes differ"):
        dst.copy_from(StridedMemoryView(np.zeros(8, ml_dtypes.float4_e2m1fn)))  # padded vs packed


def test_buffer_and_array_interface_exports():
    """A vector type's bytes go out raw (no format numpy could name them by); packed views
    have no buffer and no typestr."""
    pairs = StridedMemoryView(np.arange(4, dtype=np.uint8)).view(dtype=DLPackDType(17, 4, 2))
    buffer = get_buffer(pairs, PyBUF_SIMPLE)
    assert (buffer["len"], buffer["itemsize"], buffer["buf"]) == (4, 1, pairs.ptr)
    with pytest.raises(BufferError, match=re.escape("buffer: dtype Float4_e2m1fn (bits 4, lanes 2) has no PEP 3118 format")):
        get_buffer(pairs, PyBUF_FORMAT | PyBUF_STRIDES)
    with pytest.raises(BufferError, match=re.escape("array interface: dtype Float4_e2m1fn (bits 4, lanes 2) has no typestr")):
        pairs.__array_interface__
    _, view = packed()
    with pytest.raises(BufferError, match="buffer: packed sub-byte dtype"):
        get_buffer(view, PyBUF_SIMPLE)
    with pytest.raises(BufferError, match="array interface: packed sub-byte dtype"):
        view.__array_interface__


@pytest.mark.parametrize(
    "dtype, typestr",
    [("float32x4", None), ("fp4-pairs", None), ("packed", None), ("complex32", None),
     ("bfloat16", None), ("float16", "<f2")],
)
def test_cuda_array_interface_says_the_type_or_refuses(fake, dtype, typestr):
    """A device view's CAI carries a typestr only where numpy reads it back as the same type;
    otherwise a BufferError names the DLPack type."""
    dl_type = {"float32x4": (2, 32, 4), "fp4-pairs": (17, 4, 2), "packed": (17, 4, 1),
               "complex32": (5, 32, 1), "bfloat16": (4, 16, 1), "float16": (2, 16, 1)}[dtype]
    producer = make_producer(dtype=dl_type, device=(2, 0), shape=(2, 4))
    view = StridedMemoryView(producer, stream_ptr=-1)
    if typestr is None:
        with pytest.raises(BufferError, match="cuda array interface: .*has no typestr"):
            view.__cuda_array_interface__
    else:
        assert view.__cuda_array_interface__["typestr"] == typestr
    del view
    producer.release_capsules()


@pytest.mark.parametrize("which", ["fp4-pairs", "packed"])
def test_exchange_api_lends_the_exact_type(which):
    """The view's own C exchange API lends a DLTensor with the producer's triple (packed
    types need no flag: DLPack's default)."""
    from test_exchange_export import DLTensor, api

    if which == "packed":
        _, view = packed()
    else:
        view = StridedMemoryView(make_producer(dtype=(17, 4, 2), shape=(3,)))
    out = DLTensor()
    assert api().dltensor_from_py_object_no_sync(view, ctypes.byref(out)) == 0
    assert (out.dtype.code, out.dtype.bits, out.dtype.lanes) == tuple(view.dlpack_dtype)
    assert [out.shape[i] for i in range(out.ndim)] == list(view.shape)


@pytest.mark.parametrize("name, unsigned", [("float8_e4m3fn", "uint8"), ("bfloat16", "uint16"), ("float8_e5m2", "uint8")])
def test_a_hint_to_reinterpret_names_the_unsigned_type_of_the_item_size(name, unsigned):
    """The buffer and array-interface refusals of an ml_dtypes view name the numpy unsigned
    type of its item size (not uint16 for every type), and following the hint on a strided
    view keeps its elements."""
    dtype = np.dtype(getattr(ml_dtypes, name))
    data = np.arange(12, dtype=np.float32).astype(dtype)[::2]
    view = StridedMemoryView(data)
    with pytest.raises(BufferError, match=rf"view\.view\(dtype=numpy\.{unsigned}\)"):
        memoryview(view)
    with pytest.raises(BufferError, match=rf"view\.view\(dtype=numpy\.{unsigned}\)\)\.view\(dtype\)"):
        view.__array_interface__
    followed = np.asarray(view.view(dtype=getattr(np, unsigned))).view(dtype)
    assert followed.tolist() == data.tolist()


PADDED_SUB_BYTE = [
    name for name in ("int4", "uint4", "int2", "uint2", "int1", "uint1", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn")
    if hasattr(ml_dtypes, name)
]


@pytest.mark.parametrize("name", PADDED_SUB_BYTE)
def test_a_padded_sub_byte_view_keeps_its_count_through_its_dlpack_type(name):
    """numpy + ml_dtypes' padded sub-byte arrays (one element a byte): view(dtype=
    view.dlpack_dtype) is a round trip (the same 240 elements, dtype and bytes; a
    DLPackDType has no padded mark, and reading it as packed made 480); another packed
    sub-byte type is refused, never a silent recount; reading the bytes as packed stays
    possible, on purpose, through uint8."""
    dtype = np.dtype(getattr(ml_dtypes, name))
    view = StridedMemoryView(np.zeros(240, dtype))
    back = view.view(dtype=view.dlpack_dtype)
    assert (back.dtype, back.shape, back.strides, back.ptr) == (dtype, (240,), (1,), view.ptr)
    assert back.dlpack_dtype == view.dlpack_dtype
    bits = view.dlpack_dtype.bits
    other = DLPackDType(0, 4, 1) if view.dlpack_dtype == (1, 4, 1) else DLPackDType(1, 4, 1)
    with pytest.raises(BufferError, match=r"the element count would change"):
        view.view(dtype=other)
    packed = view.view(dtype=np.uint8).view(dtype=view.dlpack_dtype)
    assert packed.dtype is None and packed.shape == (240 * 8 // bits,)
