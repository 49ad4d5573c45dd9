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
