"""as_tensor_map: the view's layout encoded through cuTensorMapEncodeTiled (the fake driver
checks the driver's rules too and keeps the arguments), each rule checked up front and named.
"""

from __future__ import annotations

import numpy as np
import pytest

from stridedview import StridedMemoryView
from stridedview._tensor_map import TensorMap


class DeviceArray:
    """A CUDA Array Interface over fake device memory with any byte strides and offset."""

    def __init__(self, fake, shape, dtype, byte_strides=None, offset=0):
        dtype = np.dtype(dtype)
        self.ptr = fake.allocate(1 << 20) + offset
        self.__cuda_array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": dtype.str, "data": (self.ptr, False),
            "strides": byte_strides, "stream": None,
        }


def view(fake, shape=(64, 128), dtype=np.float16, byte_strides=None, offset=0):
    return StridedMemoryView(DeviceArray(fake, shape, dtype, byte_strides, offset), stream_ptr=-1)


def test_encoded_arguments(fake):
    """A 2-d float16 view encodes innermost first: dims, byte strides, box, element strides, enums."""
    v = view(fake, (64, 128), np.float16, byte_strides=(512, 2))
    fake.clear_calls()
    tmap = v.as_tensor_map((16, 32), element_strides=(1, 2), swizzle=2, l2_promotion=1)
    assert isinstance(tmap, TensorMap) and tmap.view is v
    name, args = [c for c in fake.calls if c[0] == "cuTensorMapEncodeTiled"][0]
    assert tmap.descriptor.encoded == {
        "data_type": 6, "rank": 2, "address": v.ptr, "dims": (128, 64), "strides": (512,),
        "box": (32, 16), "element_strides": (2, 1), "interleave": 0, "swizzle": 2,
        "l2_promotion": 1, "oob_fill": 0,
    }
    assert type(args[0]).__name__ == "CUtensorMapDataType"  # enums, as cuda-bindings wants


def test_dtypes_and_data_type_override(fake):
    """Each supported dtype maps to its CUtensorMapDataType; data_type overrides; others are refused."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for dtype, code in [(np.uint8, 0), (np.float32, 7), (np.int64, 5), (ml_dtypes.bfloat16, 9)]:
        size = np.dtype(dtype).itemsize
        raw = view(fake, (4, 64 // size), np.dtype(f"u{size}")).view(dtype=dtype)
        assert raw.as_tensor_map((2, 16 // size)).data_type == code
    assert view(fake, (4, 16), np.float32).as_tensor_map((2, 4), data_type=11).data_type == 11
    with pytest.raises(ValueError, match="tensor map: dtype int8 has no TMA data type"):
        view(fake, (4, 64), np.int8).as_tensor_map((2, 16))


def test_options_object_like_cuda_core(fake):
    """options= (an object or a dict with cuda.core's field names) gives the same encoding."""
    v = view(fake, (8, 64), np.float32)
    direct = v.as_tensor_map((4, 8), swizzle=1)
    bundled = v.as_tensor_map(options={"box_dim": (4, 8), "swizzle": 1})
    assert direct.descriptor.encoded == bundled.descriptor.encoded
    with pytest.raises(ValueError, match="tensor map: pass either options= or box_dim"):
        v.as_tensor_map((4, 8), options={"box_dim": (4, 8)})


RULES = [
    ("host memory", None, {}, "tensor map: the view is host memory"),
    ("misaligned", dict(offset=8), dict(box_dim=(2, 8)), "tensor map: the global address 0x"),
    ("rank 6", dict(shape=(2,) * 5 + (8,)), dict(box_dim=(1,) * 5 + (8,)), "tensor map: rank 6 is outside 1 to 5"),
    ("stride not 16", dict(shape=(4, 8), byte_strides=(24, 2)), dict(box_dim=(2, 8)), "tensor map: the stride of axis 0 is 24 bytes"),
    ("inner not contiguous", dict(shape=(4, 8), byte_strides=(64, 4)), dict(box_dim=(2, 8)), "tensor map: the last axis must be contiguous"),
    ("box 257", dict(shape=(4, 512)), dict(box_dim=(2, 257)), "tensor map: box_dim[1] = 257 is outside 1 to 256"),
    ("box 0", dict(shape=(4, 512)), dict(box_dim=(0, 8)), "tensor map: box_dim[0] = 0 is outside 1 to 256"),
    ("box rank", dict(shape=(4, 512)), dict(box_dim=(8,)), "tensor map: box_dim (8,) must have one entry per axis"),
    ("element stride 9", dict(shape=(4, 512)), dict(box_dim=(2, 8), element_strides=(9, 1)), "tensor map: element_strides[0] = 9 is outside 1 to 8"),
    ("inner box bytes", dict(shape=(4, 512)), dict(box_dim=(2, 7)), "tensor map: the box's last axis spans 14 bytes"),
    ("swizzle span", dict(shape=(4, 512)), dict(box_dim=(2, 32), swizzle=1), "tensor map: the box's last axis spans 64 bytes, more than swizzle 1's 32-byte span"),
    ("interleave rank", dict(shape=(4, 512)), dict(box_dim=(2, 8), interleave=1), "tensor map: interleave 1 needs rank 3 to 5"),
    ("interleave 32B swizzle", dict(shape=(2, 4, 512)), dict(box_dim=(1, 2, 16), interleave=2), "tensor map: interleave 32B needs swizzle 32B"),
    ("bad swizzle", dict(shape=(4, 512)), dict(box_dim=(2, 8), swizzle=7), "tensor map: swizzle 7 is not one of"),
    ("bool option", dict(shape=(4, 512)), dict(box_dim=(2, 8), oob_fill=True), "tensor map: oob_fill must be an int"),
    ("no box", dict(shape=(4, 512)), dict(), "tensor map: box_dim is required"),
    ("itemsize", dict(shape=(4, 512)), dict(box_dim=(2, 8), data_type=7), "tensor map: data type 7 has 4-byte elements"),
]


@pytest.mark.parametrize("kind, layout, arguments, message", RULES, ids=[r[0] for r in RULES])
def test_each_rule_is_named_before_the_driver(fake, kind, layout, arguments, message):
    """Each violated rule is a ValueError (TypeError for a wrong type) naming it; the driver is not called."""
    if layout is None:
        target = StridedMemoryView(np.zeros((4, 16), np.float16))
        arguments = dict(box_dim=(2, 8))
    else:
        target = view(fake, **layout)
    fake.clear_calls()
    expected = TypeError if kind == "bool option" else ValueError
    with pytest.raises(expected) as info:
        target.as_tensor_map(**arguments)
    assert str(info.value).startswith(message), str(info.value)
    assert "cuTensorMapEncodeTiled" not in fake.names()


def test_fake_driver_refuses_what_the_checks_refuse(fake):
    """The fake's own rules agree: arguments that slipped past the checks would fail in the driver."""
    from fake_driver import CUtensorMapDataType as T, CUtensorMapFloatOOBfill as O
    from fake_driver import CUtensorMapInterleave as I, CUtensorMapL2promotion as L, CUtensorMapSwizzle as S
    from fake_driver import CUresult

    fake.cuInit(0)
    result = fake.cuTensorMapEncodeTiled(T(6), 2, 0x10008, (128, 64), (256,), (32, 16), (1, 1), I(0), S(0), L(0), O(0))
    assert result[0] == CUresult.CUDA_ERROR_INVALID_VALUE


class Index:
    """An integer that is no int: only ``__index__`` (what ``operator.index`` takes)."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


# One bad value per integer parameter: the parameter, the value and, for box_dim and
# element_strides, the entry it sits at (the message names it).
NON_INTEGERS = [
    ("box_dim-float", "box_dim", (4, 8.9), 1),
    ("box_dim-whole-float", "box_dim", (4.0, 8), 0),
    ("box_dim-str-entries", "box_dim", ("4", "8"), 0),
    ("box_dim-bool", "box_dim", (True, 8), 0),
    ("box_dim-numpy-bool", "box_dim", (np.True_, 8), 0),
    ("box_dim-numpy-float", "box_dim", (4, np.float64(8.0)), 1),
    ("box_dim-numpy-float-array", "box_dim", np.array([4.0, 8.0]), 0),
    ("box_dim-None-entry", "box_dim", (4, None), 1),
    ("element_strides-float", "element_strides", (1.9, 1), 0),
    ("element_strides-str", "element_strides", (1, "1"), 1),
    ("element_strides-bool", "element_strides", (1, True), 1),
    ("element_strides-numpy-float", "element_strides", (np.float32(1), 1), 0),
    ("element_strides-None-entry", "element_strides", (None, 1), 0),
    ("swizzle-float", "swizzle", 1.99, None),
    ("swizzle-str", "swizzle", "1", None),
    ("swizzle-bool", "swizzle", True, None),
    ("swizzle-numpy-float", "swizzle", np.float64(1.0), None),
    ("interleave-float", "interleave", 0.6, None),
    ("interleave-str", "interleave", "0", None),
    ("interleave-bool", "interleave", False, None),
    ("interleave-numpy-float", "interleave", np.float32(0.0), None),
    ("l2_promotion-float", "l2_promotion", 1.0, None),
    ("l2_promotion-str", "l2_promotion", "1", None),
    ("l2_promotion-bool", "l2_promotion", True, None),
    ("l2_promotion-numpy-bool", "l2_promotion", np.True_, None),
    ("l2_promotion-numpy-float", "l2_promotion", np.float64(2.0), None),
    ("oob_fill-float", "oob_fill", 0.0, None),
    ("oob_fill-str", "oob_fill", "0", None),
    ("oob_fill-bool", "oob_fill", False, None),
    ("oob_fill-numpy-float", "oob_fill", np.float64(1.0), None),
]


@pytest.mark.parametrize("parameter, value, entry", [t[1:] for t in NON_INTEGERS], ids=[t[0] for t in NON_INTEGERS])
@pytest.mark.parametrize("through", ["keywords", "options"])
def test_non_integers_are_a_type_error(fake, parameter, value, entry, through):
    """A float, str, bool or None where an integer is due is a TypeError naming it, never truncated."""
    arguments = {"box_dim": (2, 8), parameter: value}
    if entry is None:
        message = f"tensor map: {parameter} must be an int or a driver enum (got {value!r})"
    else:
        message = f"tensor map: {parameter}[{entry}] must be an int (got {value[entry]!r})"
    v = view(fake, (4, 512), np.float16)
    fake.clear_calls()
    with pytest.raises(TypeError) as info:
        if through == "options":
            v.as_tensor_map(options=arguments)
        else:
            v.as_tensor_map(**arguments)
    assert str(info.value) == message
    assert "cuTensorMapEncodeTiled" not in fake.names()


NOT_SEQUENCES = [
    ("int", 8), ("str", "28"), ("bytes", b"\x02\x08"), ("None-element_strides", None),
]


@pytest.mark.parametrize("value", [t[1] for t in NOT_SEQUENCES], ids=[t[0] for t in NOT_SEQUENCES])
def test_box_dim_must_be_a_sequence_of_integers(fake, value):
    """box_dim (and element_strides) is a sequence of integers: not an int, a str or bytes."""
    v = view(fake, (4, 512), np.float16)
    if value is None:  # None means "all ones" for element_strides, but box_dim has no default
        with pytest.raises(ValueError, match="^tensor map: box_dim is required$"):
            v.as_tensor_map(options={"box_dim": None})
        return
    with pytest.raises(TypeError) as info:
        v.as_tensor_map(value)
    assert str(info.value) == f"tensor map: box_dim must be a sequence of ints (got {value!r})"
    with pytest.raises(TypeError) as info:
        v.as_tensor_map((2, 8), element_strides=value)
    assert str(info.value) == f"tensor map: element_strides must be a sequence of ints (got {value!r})"


DATA_TYPE_NOT_INTEGERS = [
    ("float", 7.0), ("fraction", 7.9), ("str", "7"), ("bool", True),
]


@pytest.mark.parametrize("value", [t[1] for t in DATA_TYPE_NOT_INTEGERS], ids=[t[0] for t in DATA_TYPE_NOT_INTEGERS])
def test_data_type_code_must_be_an_integer(fake, value):
    """data_type is a dtype or an integer CUtensorMapDataType: a float, str or bool code is a TypeError."""
    v = view(fake, (4, 16), np.float32)
    with pytest.raises(TypeError) as info:
        v.as_tensor_map((2, 4), data_type=value)
    assert str(info.value) == f"tensor map: data_type must be a dtype or a CUtensorMapDataType (got {value!r})"
    for code in (np.int64(11), Index(11)):  # an integer code of any kind: tfloat32
        assert v.as_tensor_map((2, 4), data_type=code).data_type == 11


INTEGERS = [
    ("int", lambda x: x),
    ("numpy-int64", np.int64),
    ("numpy-int32", np.int32),
    ("numpy-uint8", np.uint8),
    ("index-only", Index),
]


@pytest.mark.parametrize("make", [t[1] for t in INTEGERS], ids=[t[0] for t in INTEGERS])
def test_integers_of_any_kind_are_accepted(fake, make):
    """Python ints, numpy integer scalars and any object with __index__ encode as the plain ints."""
    v = view(fake, (8, 512), np.float16)
    plain = v.as_tensor_map(
        (4, 32), element_strides=(2, 1), swizzle=2, interleave=0, l2_promotion=3, oob_fill=1,
    )
    made = v.as_tensor_map(
        (make(4), make(32)), element_strides=(make(2), make(1)), swizzle=make(2),
        interleave=make(0), l2_promotion=make(3), oob_fill=make(1),
    )
    assert made.descriptor.encoded == plain.descriptor.encoded
    assert (made.box_dim, made.element_strides, made.swizzle) == ((32, 4), (1, 2), 2)
    assert all(type(x) is int for x in made.box_dim + made.element_strides)
    assert all(type(x) is int for x in (made.swizzle, made.interleave, made.l2_promotion, made.oob_fill))


def test_integer_arrays_and_driver_enums_are_accepted(fake):
    """A numpy integer array for box_dim, and the driver's enum values for the options, are accepted."""
    from fake_driver import CUtensorMapFloatOOBfill as O, CUtensorMapL2promotion as L
    from fake_driver import CUtensorMapSwizzle as S

    v = view(fake, (8, 512), np.float16)
    tmap = v.as_tensor_map(np.array([4, 32]), swizzle=S(2), l2_promotion=L(1), oob_fill=O(1))
    assert tmap.box_dim == (32, 4) and (tmap.swizzle, tmap.l2_promotion, tmap.oob_fill) == (2, 1, 1)


# The TMA data types are uint8/16/32/64, int32/64 (integers) and float16/32/64, bfloat16,
# float32_ftz, tfloat32 and tfloat32_ftz (floating point); NaN fill is for the latter only.
INTEGER_DATA = [
    ("uint8", np.uint8, None, 0),
    ("uint16", np.uint16, None, 1),
    ("uint32", np.uint32, None, 2),
    ("int32", np.int32, None, 3),
    ("uint64", np.uint64, None, 4),
    ("int64", np.int64, None, 5),
    ("float16-as-uint16", np.float16, np.uint16, 1),
    ("float32-as-int32", np.float32, np.int32, 3),
    ("float64-as-code-4", np.float64, 4, 4),
    ("bool-as-uint8", np.bool_, np.uint8, 0),
]


@pytest.mark.parametrize("oob_fill", [1, np.int64(1), "enum"], ids=["int", "numpy-int", "enum"])
@pytest.mark.parametrize("dtype, data_type, code", [t[1:] for t in INTEGER_DATA], ids=[t[0] for t in INTEGER_DATA])
def test_nan_fill_is_refused_for_integer_data(fake, dtype, data_type, code, oob_fill):
    """oob_fill 1 (NaN) with an integer TMA data type is a ValueError; the driver is not called."""
    from fake_driver import CUtensorMapFloatOOBfill as O

    if isinstance(oob_fill, str):
        oob_fill = O(1)
    size = np.dtype(dtype).itemsize
    v = view(fake, (4, 64), dtype)
    box = (2, max(1, 16 // size))
    assert v.as_tensor_map(box, data_type=data_type).data_type == code  # fill 0 is fine
    fake.clear_calls()
    with pytest.raises(ValueError) as info:
        v.as_tensor_map(box, data_type=data_type, oob_fill=oob_fill)
    assert str(info.value).startswith(
        f"tensor map: oob_fill 1 (NaN) is for floating-point data; data type {code} ("
    ), str(info.value)
    assert "cuTensorMapEncodeTiled" not in fake.names()


FLOAT_DATA = [
    ("float16", np.float16, None, 6),
    ("float32", np.float32, None, 7),
    ("float64", np.float64, None, 8),
    ("int16-as-float16", np.int16, np.float16, 6),
    ("float32-ftz", np.float32, 10, 10),
    ("tfloat32", np.float32, 11, 11),
    ("tfloat32-ftz", np.float32, 12, 12),
]


@pytest.mark.parametrize("dtype, data_type, code", [t[1:] for t in FLOAT_DATA], ids=[t[0] for t in FLOAT_DATA])
def test_nan_fill_is_encoded_for_floating_point_data(fake, dtype, data_type, code):
    """oob_fill 1 (NaN) with a floating-point TMA data type (by dtype or data_type=) is encoded."""
    size = np.dtype(dtype).itemsize
    tmap = view(fake, (4, 64), dtype).as_tensor_map((2, 16 // size), data_type=data_type, oob_fill=1)
    assert tmap.descriptor.encoded["oob_fill"] == 1 and tmap.data_type == code


def test_nan_fill_for_bfloat16(fake):
    """bfloat16 (ml_dtypes) is floating point: NaN fill is encoded."""
    ml_dtypes = pytest.importorskip("ml_dtypes")
    v = view(fake, (4, 64), np.uint16).view(dtype=ml_dtypes.bfloat16)
    assert v.as_tensor_map((2, 8), oob_fill=1).descriptor.encoded["oob_fill"] == 1


@pytest.mark.parametrize("code", range(13), ids=[f"type-{c}" for c in range(13)])
def test_fake_driver_refuses_nan_fill_for_integer_types(fake, code):
    """The fake's cuTensorMapEncodeTiled, called directly, answers NaN fill for an integer type
    with CUDA_ERROR_INVALID_VALUE (the driver's rule), and encodes it for a floating-point one."""
    from fake_driver import CUtensorMapDataType as T, CUtensorMapFloatOOBfill as O
    from fake_driver import CUtensorMapInterleave as I, CUtensorMapL2promotion as L, CUtensorMapSwizzle as S
    from fake_driver import CUresult

    fake.cuInit(0)
    fake.cuCtxSetCurrent(fake.cuDevicePrimaryCtxRetain(0)[1])

    def encode(fill):
        return fake.cuTensorMapEncodeTiled(
            T(code), 2, 0x10000, (128, 64), (1024,), (16, 16), (1, 1), I(0), S(0), L(0), O(fill),
        )

    assert encode(0)[0] == CUresult.CUDA_SUCCESS
    expected = CUresult.CUDA_ERROR_INVALID_VALUE if code <= 5 else CUresult.CUDA_SUCCESS
    assert encode(1)[0] == expected


@pytest.mark.gpu
def test_gpu_tensor_map_encodes_on_a_tma_device():
    """On a GPU with TMA (compute capability 9.0+), the real driver accepts the encoding."""
    from conftest import gpu_import

    cp = gpu_import("cupy")
    from stridedview import _driver

    _driver.use_api(None)
    if cp.cuda.Device().compute_capability < "90":
        pytest.skip("needs a CUDA GPU and driver")  # no TMA before Hopper
    x = cp.zeros((64, 128), dtype=cp.float16)
    tmap = StridedMemoryView(x, stream_ptr=-1).as_tensor_map((16, 64), swizzle=3)
    assert tmap.global_dim == (128, 64) and tmap.descriptor is not None
