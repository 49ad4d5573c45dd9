"""as_tensor_map: each of the driver's rules checked up front and named, before any driver call.

Every test here runs with no driver at all (``forbidden_driver`` fails the test on any driver
call): the view is a CUDA Array Interface over a made-up device address, never dereferenced.
What the driver then does with the arguments (cuTensorMapEncodeTiled through the real
bindings, each encoding compared with a direct call, and the driver refusing what the checks
refuse) is tests/test_gpu_tensor_map.py, on the simulated device or a GPU.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from stridedview import StridedMemoryView

#: A made-up device address, 1 MiB aligned: nothing here reads it.
ADDRESS = 0x7F5A00000000


class DeviceArray:
    """A CUDA Array Interface over a made-up device address with any byte strides and offset."""

    def __init__(self, shape, dtype, byte_strides=None, offset=0):
        dtype = np.dtype(dtype)
        self.ptr = ADDRESS + offset
        self.__cuda_array_interface__ = {
            "version": 3, "shape": tuple(shape), "typestr": dtype.str, "data": (self.ptr, False),
            "strides": byte_strides, "stream": None,
        }


def view(shape=(64, 128), dtype=np.float16, byte_strides=None, offset=0):
    return StridedMemoryView(DeviceArray(shape, dtype, byte_strides, offset), stream_ptr=-1)


def test_dtype_without_a_tma_data_type_is_refused(forbidden_driver):
    """A dtype with no CUtensorMapDataType (int8) is refused, naming it."""
    with pytest.raises(ValueError, match="tensor map: dtype int8 has no TMA data type"):
        view((4, 64), np.int8).as_tensor_map((2, 16))


def test_options_and_box_dim_together_are_refused(forbidden_driver):
    """options= and box_dim together are refused: one or the other."""
    with pytest.raises(ValueError, match="tensor map: pass either options= or box_dim"):
        view((8, 64), np.float32).as_tensor_map((4, 8), options={"box_dim": (4, 8)})


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
def test_each_rule_is_named_before_the_driver(forbidden_driver, kind, layout, arguments, message):
    """Each violated rule is a ValueError (TypeError for a wrong type) naming it; the driver is not called."""
    if layout is None:
        target = StridedMemoryView(np.zeros((4, 16), np.float16))
        arguments = dict(box_dim=(2, 8))
    else:
        target = view(**layout)
    expected = TypeError if kind == "bool option" else ValueError
    with pytest.raises(expected) as info:
        target.as_tensor_map(**arguments)
    assert str(info.value).startswith(message), str(info.value)


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
def test_non_integers_are_a_type_error(forbidden_driver, parameter, value, entry, through):
    """A float, str, bool or None where an integer is due is a TypeError naming it, never truncated."""
    arguments = {"box_dim": (2, 8), parameter: value}
    if entry is None:
        message = f"tensor map: {parameter} must be an int or a driver enum (got {value!r})"
    else:
        message = f"tensor map: {parameter}[{entry}] must be an int (got {value[entry]!r})"
    v = view((4, 512), np.float16)
    with pytest.raises(TypeError) as info:
        if through == "options":
            v.as_tensor_map(options=arguments)
        else:
            v.as_tensor_map(**arguments)
    assert str(info.value) == message


NOT_SEQUENCES = [
    ("int", 8), ("str", "28"), ("bytes", b"\x02\x08"), ("None-element_strides", None),
]


@pytest.mark.parametrize("value", [t[1] for t in NOT_SEQUENCES], ids=[t[0] for t in NOT_SEQUENCES])
def test_box_dim_must_be_a_sequence_of_integers(forbidden_driver, value):
    """box_dim (and element_strides) is a sequence of integers: not an int, a str or bytes."""
    v = view((4, 512), np.float16)
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
def test_data_type_code_must_be_an_integer(forbidden_driver, value):
    """data_type is a dtype or an integer CUtensorMapDataType: a float, str or bool code is a TypeError."""
    v = view((4, 16), np.float32)
    with pytest.raises(TypeError) as info:
        v.as_tensor_map((2, 4), data_type=value)
    assert str(info.value) == f"tensor map: data_type must be a dtype or a CUtensorMapDataType (got {value!r})"


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
def test_nan_fill_is_refused_for_integer_data(forbidden_driver, dtype, data_type, code, oob_fill):
    """oob_fill 1 (NaN) with an integer TMA data type is a ValueError; the driver is not called."""
    if isinstance(oob_fill, str):
        from cuda.bindings.driver import CUtensorMapFloatOOBfill

        oob_fill = CUtensorMapFloatOOBfill(1)
    size = np.dtype(dtype).itemsize
    v = view((4, 64), dtype)
    box = (2, max(1, 16 // size))
    with pytest.raises(ValueError) as info:
        v.as_tensor_map(box, data_type=data_type, oob_fill=oob_fill)
    assert str(info.value).startswith(
        f"tensor map: oob_fill 1 (NaN) is for floating-point data; data type {code} ("
    ), str(info.value)


def packed_view(row_bytes=64, rows=4, dl_type=(1, 4, 1), offset=0):
    """A device view of ``rows`` rows of ``row_bytes`` bytes seen as packed sub-byte values."""
    from stridedview import DLPackDType

    return view((rows, row_bytes), np.uint8, offset=offset).view(dtype=DLPackDType(*dl_type))


@pytest.mark.parametrize(
    "make, arguments, message",
    [
        (lambda: packed_view(), {"box_dim": (2, 32), "data_type": 14},
         "tensor map: data type 14 needs box_dim[1] = 128 (got 32)"),
        (lambda: packed_view(row_bytes=32), {"box_dim": (2, 128), "data_type": 14},
         "tensor map: data type 14 needs shape[1] to be a multiple of 128 values (got 64)"),
        (lambda: packed_view(row_bytes=64, offset=16), {"box_dim": (2, 128), "data_type": 14},
         "is not 32-byte aligned"),
        (lambda: packed_view(), {"box_dim": (2, 128), "data_type": 14, "swizzle": 1},
         "tensor map: data type 14 takes swizzle 0 (none), 3 (128B) or 4 (128B_ATOM_32B), got 1"),
        (lambda: packed_view(96, dl_type=(15, 6, 1)), {"box_dim": (2, 128), "swizzle": 5},
         "tensor map: data type 15 takes swizzle 0 (none), 3 (128B), 4 (128B_ATOM_32B) or "
         "6 (128B_ATOM_64B), got 5"),
        (lambda: packed_view(row_bytes=40), {"box_dim": (2, 32)},
         "tensor map: the stride of axis 0 is 40 bytes"),
        (lambda: packed_view(dl_type=(17, 4, 1)).view(dtype=np.uint8), {"box_dim": (2, 16), "data_type": 13},
         "tensor map: data type 13 is packed 4-bit values, the view's elements take 8 bits each"),
        (lambda: packed_view(dl_type=(0, 2, 1)), {"box_dim": (2, 64)},
         "tensor map: packed 2-bit elements (DLPackDType(code=0, bits=2, lanes=1)) have no TMA data type"),
        (lambda: packed_view(), {"box_dim": (2, 32), "data_type": 0},
         "tensor map: data type 0 has 1-byte elements, the view's elements take 4 bits each"),
    ],
    ids=["box-128", "dim-128", "align-32", "swizzle", "swizzle-6-bit", "stride-16", "bytes-as-packed", "2-bit",
         "uint8-of-packed"],
)
def test_packed_type_rules_named_before_the_driver(forbidden_driver, make, arguments, message):
    """The driver's rules for its packed 4- and 6-bit types are checked first, each named."""
    box = arguments.pop("box_dim")
    with pytest.raises(ValueError, match=re.escape(message)):
        make().as_tensor_map(box, **arguments)


def test_packed_view_default_data_types(forbidden_driver):
    """A packed 4-bit view defaults to 16U4_ALIGN8B (13), a 6-bit one to 16U6_ALIGN16B (15);
    whole-byte views keep their own (tests/test_gpu_tensor_map.py encodes them)."""
    from stridedview._tensor_map import _data_type

    assert _data_type(packed_view(), None) == 13
    assert _data_type(packed_view(96, dl_type=(15, 6, 1)), None) == 15
    assert _data_type(packed_view().view(dtype=np.uint8), None) == 0


# --- compute capability 10.0: the packed types and the ATOM swizzles ---------------------------


@pytest.fixture
def hopper(fake):
    """The fake driver (tests/fake_driver.py), its devices of compute capability 9.0 (an H100,
    an H200) and the made-up address device 0's memory; it has no cuTensorMapEncodeTiled."""
    fake.register_pointer(ADDRESS, 1 << 20)
    assert fake.compute_capability == (9, 0)
    return fake


def capability_reads(fake):
    return [args for name, args in fake.calls if name == "cuDeviceGetAttribute"]


CAPABILITY_REFUSED = [
    ("16U4_ALIGN8B", lambda: packed_view(), dict(box_dim=(2, 32)),
     "tensor map: data type 13 (16U4_ALIGN8B) needs a device of compute capability 10.0 or higher; "
     "device 0 has 9.0"),
    ("16U4_ALIGN16B", lambda: packed_view(), dict(box_dim=(2, 128), data_type=14),
     "tensor map: data type 14 (16U4_ALIGN16B) needs"),
    ("16U6_ALIGN16B", lambda: packed_view(96, dl_type=(15, 6, 1)), dict(box_dim=(2, 128)),
     "tensor map: data type 15 (16U6_ALIGN16B) needs"),
    ("128B_ATOM_32B", lambda: view((4, 512), np.float32), dict(box_dim=(2, 32), swizzle=4),
     "tensor map: swizzle 4 (128B_ATOM_32B) needs a device of compute capability 10.0 or higher; "
     "device 0 has 9.0"),
    ("128B_ATOM_32B_FLIP_8B", lambda: view((4, 512), np.float32), dict(box_dim=(2, 32), swizzle=5),
     "tensor map: swizzle 5 (128B_ATOM_32B_FLIP_8B) needs"),
    ("128B_ATOM_64B", lambda: view((4, 512), np.float32), dict(box_dim=(2, 32), swizzle=6),
     "tensor map: swizzle 6 (128B_ATOM_64B) needs"),
    ("both", lambda: packed_view(), dict(box_dim=(2, 128), data_type=14, swizzle=4),
     "tensor map: data type 14 (16U4_ALIGN16B) and swizzle 4 (128B_ATOM_32B) need a device of "
     "compute capability 10.0 or higher; device 0 has 9.0"),
]


@pytest.mark.parametrize("make, arguments, message", [c[1:] for c in CAPABILITY_REFUSED],
                         ids=[c[0] for c in CAPABILITY_REFUSED])
def test_capability_10_features_refused_below_it(hopper, make, arguments, message):
    """A packed data type or an ATOM swizzle on a device of compute capability 9.0 is a
    ValueError naming it and the capability, and cuTensorMapEncodeTiled is not called (a real
    driver 580 refuses them there whatever the layout: INVALID_VALUE, nothing named)."""
    box = arguments.pop("box_dim")
    with pytest.raises(ValueError, match=re.escape(message)):
        make().as_tensor_map(box, **arguments)
    assert [(int(a), d) for a, d in capability_reads(hopper)] == [(75, 0), (76, 0)]


def test_capability_is_read_once_per_device(hopper):
    """Tensor-map encoding asks the device's capability once; a second encoding uses the cached one."""
    for _ in range(3):
        with pytest.raises(ValueError, match="needs a device of compute capability 10.0"):
            packed_view().as_tensor_map((2, 32))
    assert len(capability_reads(hopper)) == 2


def test_capability_10_lets_them_reach_the_driver(hopper):
    """On a device of compute capability 10.0 the check passes and the encoding is the driver's
    to do (the fake has none: the simulated device encodes them, tests/test_gpu_tensor_map.py)."""
    hopper.compute_capability = (10, 0)
    with pytest.raises(AttributeError, match="cuTensorMapEncodeTiled"):
        view((4, 512), np.float32).as_tensor_map((2, 32), swizzle=4)
    assert hopper.unserved == ["cuTensorMapEncodeTiled"]
    hopper.unserved.clear()  # (the call this test expects: not a failure of the fixture)


def test_capability_is_not_asked_for_other_types_and_swizzles(forbidden_driver):
    """Without a packed type or an ATOM swizzle nothing asks the capability: a rule broken
    after every other check still fails with no driver call (forbidden_driver)."""
    with pytest.raises(ValueError, match="interleave 32B needs swizzle 32B"):
        view((2, 4, 512), np.float32).as_tensor_map((1, 2, 8), interleave=2, swizzle=3)
