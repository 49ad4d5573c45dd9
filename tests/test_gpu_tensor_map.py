"""as_tensor_map through the real ``cuTensorMapEncodeTiled`` binding (its arrays, its enums).

On any CUDA driver (marked ``gpu``): the simulated device (tests/simgpu), whose encoding is
deterministic and which refuses what the driver documents it refuses, or a real GPU (compute
capability 9.0 or higher: TMA).  Each encoding is compared with a direct call of the binding
with the arguments the view should give, innermost dimension first, so a wrong argument shows
as different bytes; and the driver itself refuses what stridedview's checks refuse
(tests/test_tensor_map.py checks that those refusals come first, with no driver).

The packed sub-byte types and the 128B_ATOM swizzles need compute capability 10.0: the tests
of them decide by the capability the device reports.  Below 10.0 (the simulator's default 9.0,
an H100 or H200) stridedview refuses them before the driver, and the driver refuses them too;
from 10.0 (the simulator switched to it, ``capability_10``, or a Blackwell GPU) they encode.
"""

from __future__ import annotations

import numpy as np
import pytest

from stridedview import StridedMemoryView
from stridedview._tensor_map import TensorMap

pytestmark = pytest.mark.gpu


@pytest.fixture
def tma(gpu):
    """Resources of a test; skipped (hardware reason) on a GPU without TMA."""
    from conftest import GPU_SKIP_REASON
    from driver_support import drv, ok

    major, minor = ok(drv.cuDeviceComputeCapability(0))
    if major < 9:
        pytest.skip(GPU_SKIP_REASON)  # no TMA before compute capability 9.0
    return gpu


def capability() -> tuple[int, int]:
    """Device 0's compute capability, as the driver reports it."""
    from driver_support import drv, ok

    return tuple(ok(drv.cuDeviceComputeCapability(0)))


@pytest.fixture(params=["device", "capability-10"])
def capability_10(request, tma):
    """Runs a test twice: on the device as it is, and on a device of compute capability 10.0
    (the simulator switched to 10.0 for the test; a real GPU below 10.0 skips that run).  The
    test decides by ``capability()``; stridedview's cached capability is forgotten either way."""
    from conftest import CAPABILITY_10_SKIP_REASON
    from driver_support import simulator
    from stridedview import _driver

    sim = simulator()
    before = capability()
    if request.param == "capability-10" and before < (10, 0):
        if sim is None:
            pytest.skip(CAPABILITY_10_SKIP_REASON)
        sim.set_compute_capability(10, 0)
        assert capability() == (10, 0)  # else the run below would test 9.0's refusals again
    _driver._capabilities.clear()
    yield tma
    if sim is not None:
        sim.set_compute_capability(*before)
    _driver._capabilities.clear()


def view(res, shape=(64, 128), dtype=np.float16, byte_strides=None, offset=0):
    """A view of fresh device memory (1 MiB, 1 MiB-aligned by the driver) with any layout."""
    from driver_support import CAIArray

    memory = res.device(1 << 20)
    array = CAIArray(memory, shape, dtype, strides=byte_strides, offset=offset)
    return StridedMemoryView(array, stream_ptr=-1)


def encode(data_type, address, dims, strides, box, element_strides,
           interleave=0, swizzle=0, l2_promotion=0, oob_fill=0):
    """cuTensorMapEncodeTiled called directly: (CUresult, CUtensorMap)."""
    from driver_support import drv

    return drv.cuTensorMapEncodeTiled(
        drv.CUtensorMapDataType(data_type), len(dims), address,
        [drv.cuuint64_t(n) for n in dims], [drv.cuuint64_t(n) for n in strides],
        [drv.cuuint32_t(n) for n in box], [drv.cuuint32_t(n) for n in element_strides],
        drv.CUtensorMapInterleave(interleave), drv.CUtensorMapSwizzle(swizzle),
        drv.CUtensorMapL2promotion(l2_promotion), drv.CUtensorMapFloatOOBfill(oob_fill),
    )


def opaque(descriptor) -> list[int]:
    """A CUtensorMap's 128 bytes, as 16 ints."""
    return [int(word) for word in descriptor.opaque]


def encoded(*args, **kwargs) -> list[int]:
    from driver_support import ok

    return opaque(ok(encode(*args, **kwargs)))


def test_encoded_arguments(tma):
    """A 2-d float16 view encodes innermost first: dims, byte strides, box, element strides and
    the options, exactly as a direct call with those arguments does."""
    from driver_support import drv

    v = view(tma, (64, 128), np.float16, byte_strides=(512, 2))
    tmap = v.as_tensor_map((16, 32), element_strides=(1, 2), swizzle=2, l2_promotion=1)
    assert isinstance(tmap, TensorMap) and tmap.view is v
    assert isinstance(tmap.descriptor, drv.CUtensorMap)
    assert (tmap.data_type, tmap.rank, tmap.global_address) == (6, 2, v.ptr)
    assert (tmap.global_dim, tmap.global_strides) == ((128, 64), (512,))
    assert (tmap.box_dim, tmap.element_strides) == ((32, 16), (2, 1))
    assert (tmap.interleave, tmap.swizzle, tmap.l2_promotion, tmap.oob_fill) == (0, 2, 1, 0)
    want = encoded(6, v.ptr, (128, 64), (512,), (32, 16), (2, 1), swizzle=2, l2_promotion=1)
    assert opaque(tmap.descriptor) == want
    other = encoded(6, v.ptr, (128, 64), (512,), (32, 16), (1, 2), swizzle=2, l2_promotion=1)
    from driver_support import simulator

    if simulator() is not None:
        assert other != want  # the simulator's bytes depend on every argument


def test_five_dimensions_and_a_pitched_layout(tma):
    """Rank 5 with padded strides: every stride (bytes, outer axes) passed as the driver takes it."""
    shape = (2, 3, 4, 5, 16)
    strides = (3 * 4 * 6 * 64, 4 * 6 * 64, 6 * 64, 64, 4)
    v = view(tma, shape, np.float32, byte_strides=strides)
    tmap = v.as_tensor_map((1, 1, 2, 2, 8))
    assert tmap.global_strides == (64, 384, 1536, 4608)
    assert opaque(tmap.descriptor) == encoded(
        7, v.ptr, shape[::-1], strides[-2::-1], (8, 2, 2, 1, 1), (1, 1, 1, 1, 1))


@pytest.mark.parametrize(
    "dtype, code", [("uint8", 0), ("uint16", 1), ("float32", 7), ("int64", 5), ("bfloat16", 9)]
)
def test_dtypes_and_data_type_override(tma, dtype, code):
    """Each supported dtype maps to its CUtensorMapDataType, which the driver encodes."""
    import ml_dtypes

    dtype = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    size = dtype.itemsize
    raw = view(tma, (4, 64 // size), np.dtype(f"u{size}")).view(dtype=dtype)
    tmap = raw.as_tensor_map((2, 16 // size))
    assert tmap.data_type == code
    assert opaque(tmap.descriptor) == encoded(code, raw.ptr, (64 // size, 4), (64,), (16 // size, 2), (1, 1))


class Index:
    """An integer that is no int: only ``__index__``."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


@pytest.mark.parametrize(
    "make", [lambda x: x, np.int64, np.int32, np.uint8, Index],
    ids=["int", "numpy-int64", "numpy-int32", "numpy-uint8", "index-only"],
)
def test_integers_of_any_kind_encode_the_same(tma, make):
    """Python ints, numpy integer scalars and any object with __index__ give the same encoding."""
    v = view(tma, (8, 512), np.float16)
    plain = v.as_tensor_map((4, 32), element_strides=(2, 1), swizzle=2, interleave=0, l2_promotion=3, oob_fill=1)
    made = v.as_tensor_map(
        (make(4), make(32)), element_strides=(make(2), make(1)), swizzle=make(2),
        interleave=make(0), l2_promotion=make(3), oob_fill=make(1),
    )
    assert opaque(made.descriptor) == opaque(plain.descriptor)
    assert all(type(x) is int for x in made.box_dim + made.element_strides)
    wide = view(tma, (4, 16), np.float32)
    assert wide.as_tensor_map((2, 4), data_type=make(11)).data_type == 11  # an integer code: tfloat32


def test_arrays_enums_and_options_encode_the_same(tma):
    """A numpy array for box_dim, the bindings' enums for the options, and options= (cuda.core's
    field names) encode as the plain arguments do."""
    from driver_support import drv

    v = view(tma, (8, 512), np.float16)
    plain = opaque(v.as_tensor_map((4, 32), swizzle=2, l2_promotion=1, oob_fill=1).descriptor)
    enums = v.as_tensor_map(
        np.array([4, 32]), swizzle=drv.CUtensorMapSwizzle(2), l2_promotion=drv.CUtensorMapL2promotion(1),
        oob_fill=drv.CUtensorMapFloatOOBfill(1),
    )
    assert (enums.swizzle, enums.l2_promotion, enums.oob_fill) == (2, 1, 1)
    bundled = v.as_tensor_map(options={"box_dim": (4, 32), "swizzle": 2, "l2_promotion": 1, "oob_fill": 1})
    assert opaque(enums.descriptor) == plain == opaque(bundled.descriptor)


@pytest.mark.parametrize(
    "dtype, data_type, code",
    [(np.float16, None, 6), (np.float32, None, 7), (np.float64, None, 8), (np.int16, np.float16, 6),
     (np.float32, 10, 10), (np.float32, 11, 11), (np.float32, 12, 12), ("bfloat16", None, 9)],
    ids=["float16", "float32", "float64", "int16-as-float16", "float32-ftz", "tfloat32", "tfloat32-ftz", "bfloat16"],
)
def test_nan_fill_is_encoded_for_floating_point_data(tma, dtype, data_type, code):
    """oob_fill 1 (NaN) with a floating-point TMA data type is encoded by the driver."""
    if dtype == "bfloat16":
        import ml_dtypes

        dtype = ml_dtypes.bfloat16
    size = np.dtype(dtype).itemsize
    v = view(tma, (4, 64), np.dtype(f"u{size}")).view(dtype=dtype)
    tmap = v.as_tensor_map((2, 16 // size), data_type=data_type, oob_fill=1)
    assert (tmap.oob_fill, tmap.data_type) == (1, code)
    assert opaque(tmap.descriptor) == encoded(code, v.ptr, (64, 4), (64 * size,), (16 // size, 2), (1, 1), oob_fill=1)


@pytest.mark.parametrize("code", range(6), ids=["uint8", "uint16", "uint32", "int32", "uint64", "int64"])
def test_integer_data_encodes_with_zero_fill(tma, code):
    """Integer TMA data types encode with oob_fill 0 (the NaN fill stridedview refuses for them,
    the driver refuses too: below)."""
    size = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8}[code]
    v = view(tma, (4, 64), np.dtype(f"u{size}"))
    assert v.as_tensor_map((2, max(1, 16 // size)), data_type=code).data_type == code


# --- the driver refuses what the checks refuse --------------------------------------------------

#: (name, arguments of encode) the driver must refuse with CUDA_ERROR_INVALID_VALUE: each is a
#: rule of tests/test_tensor_map.py's RULES that stridedview checks before calling it.  (Rank 6
#: never reaches the driver: the binding refuses arrays longer than 5 itself.)
REFUSED = [
    ("misaligned address", dict(address=8, dims=(128, 64), strides=(256,), box=(32, 16))),
    ("stride not a multiple of 16", dict(dims=(8, 4), strides=(24,), box=(8, 2))),
    ("box 257", dict(dims=(512, 4), strides=(1024,), box=(257, 2))),
    ("box 0", dict(dims=(512, 4), strides=(1024,), box=(8, 0))),
    ("element stride 9", dict(dims=(512, 4), strides=(1024,), box=(8, 2), element_strides=(1, 9))),
    ("inner box 14 bytes", dict(dims=(512, 4), strides=(1024,), box=(7, 2))),
    ("box wider than the swizzle span", dict(dims=(512, 4), strides=(1024,), box=(32, 2), swizzle=1)),
    ("interleave at rank 2", dict(dims=(512, 4), strides=(1024,), box=(8, 2), interleave=1)),
]
# (interleave 32B without swizzle 32B is refused by stridedview, as documented, though driver
# 580 encodes it: test_interleave_32B_without_swizzle_32B below.)


@pytest.mark.parametrize("case", [r[1] for r in REFUSED], ids=[r[0] for r in REFUSED])
def test_driver_refuses_what_the_checks_refuse(tma, case):
    """Called directly with what a layout or an option stridedview refuses would give, the
    driver answers CUDA_ERROR_INVALID_VALUE: the checks mirror its rules."""
    from driver_support import drv

    memory = tma.device(1 << 20)
    args = dict(case)
    dims = args.pop("dims")
    address = memory.ptr + args.pop("address", 0)
    element_strides = args.pop("element_strides", (1,) * len(dims))
    result = encode(6, address, dims, args.pop("strides"), args.pop("box"), element_strides, **args)
    assert result[0] == drv.CUresult.CUDA_ERROR_INVALID_VALUE


@pytest.mark.parametrize("swizzle", [0, 2, 3])
def test_interleave_32B_without_swizzle_32B(tma, swizzle):
    """32-byte interleave with a swizzle other than 32B: the documentation forbids it and
    stridedview refuses it, though the driver (580, an H200; and the simulator, which follows
    it) encodes it as it does with swizzle 32B."""
    from driver_support import drv

    v = view(tma, (4, 4, 8), np.float32, byte_strides=(256, 64, 4))
    with pytest.raises(ValueError, match=f"tensor map: interleave 32B needs swizzle 32B \\(1\\), got {swizzle}"):
        v.as_tensor_map((4, 4, 8), interleave=2, swizzle=swizzle)
    assert v.as_tensor_map((4, 4, 8), interleave=2, swizzle=1).interleave == 2
    result = encode(7, v.ptr, (8, 4, 4), (64, 256), (8, 4, 4), (1, 1, 1), interleave=2, swizzle=swizzle)
    assert result[0] == drv.CUresult.CUDA_SUCCESS


@pytest.mark.parametrize("code", range(13), ids=[f"type-{c}" for c in range(13)])
def test_driver_refuses_nan_fill_for_integer_types(tma, code):
    """NaN fill is refused for the integer types (codes 0 to 5) and encoded for the others."""
    from driver_support import drv

    memory = tma.device(1 << 20)
    size = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}[code]
    box = (max(16 // size, 1), 2)

    def attempt(fill):
        return encode(code, memory.ptr, (128, 64), (1024,), box, (1, 1), oob_fill=fill)[0]

    assert attempt(0) == drv.CUresult.CUDA_SUCCESS
    expected = drv.CUresult.CUDA_ERROR_INVALID_VALUE if code <= 5 else drv.CUresult.CUDA_SUCCESS
    assert attempt(1) == expected


@pytest.mark.parametrize(
    "code, dl_type, row_bytes, box, data_type",
    [
        (13, (1, 4, 1), 64, (2, 32), None),  # 16U4_ALIGN8B: a packed 4-bit view's default
        (14, (17, 4, 1), 64, (2, 128), 14),  # 16U4_ALIGN16B: asked for; box[0] must be 128
        (15, (15, 6, 1), 96, (2, 128), None),  # 16U6_ALIGN16B: a packed 6-bit view's default
    ],
    ids=["16U4_ALIGN8B", "16U4_ALIGN16B", "16U6_ALIGN16B"],
)
def test_packed_subbyte_views_encode_as_the_drivers_packed_types(capability_10, code, dl_type, row_bytes, box,
                                                                 data_type):
    """A packed sub-byte view (4 rows of ``row_bytes`` bytes seen as packed values) encodes
    with the driver's packed type: globalDim counts the values, the strides are bytes.  Below
    compute capability 10.0 stridedview refuses it, naming the type and the capability, and
    the driver refuses the same arguments."""
    from driver_support import drv
    from stridedview import DLPackDType

    values = row_bytes * 8 // dl_type[1]
    packed = view(capability_10, (4, row_bytes), np.uint8).view(dtype=DLPackDType(*dl_type))
    assert packed.shape == (4, values) and packed.dtype is None
    major, minor = capability()
    if major < 10:
        with pytest.raises(ValueError, match=(
            f"tensor map: data type {code} \\(16U[46]_ALIGN(8|16)B\\) needs a device of compute "
            f"capability 10.0 or higher; device 0 has {major}.{minor}$"
        )):
            packed.as_tensor_map(box, data_type=data_type)
        result = encode(code, packed.ptr, (values, 4), (row_bytes,), box[::-1], (1, 1))
        assert result[0] == drv.CUresult.CUDA_ERROR_INVALID_VALUE
        return
    tmap = packed.as_tensor_map(box, data_type=data_type)
    assert (tmap.data_type, tmap.global_dim, tmap.global_strides) == (code, (values, 4), (row_bytes,))
    assert opaque(tmap.descriptor) == encoded(code, packed.ptr, (values, 4), (row_bytes,), box[::-1], (1, 1))


@pytest.mark.parametrize("swizzle, name", [(4, "128B_ATOM_32B"), (5, "128B_ATOM_32B_FLIP_8B"), (6, "128B_ATOM_64B")])
def test_atom_swizzles_need_capability_10(capability_10, swizzle, name):
    """The 128B_ATOM swizzles (a 128-byte span, as 128B's): encoded from compute capability
    10.0; below it refused by stridedview, naming the swizzle and the capability, and by the
    driver (float32, dims (64, 32), box (32, 8): what driver 580 refused on an H200)."""
    from driver_support import drv

    v = view(capability_10, (32, 64), np.float32)
    major, minor = capability()
    if major < 10:
        with pytest.raises(ValueError, match=(
            f"tensor map: swizzle {swizzle} \\({name}\\) needs a device of compute capability 10.0 "
            f"or higher; device 0 has {major}.{minor}$"
        )):
            v.as_tensor_map((8, 32), swizzle=swizzle)
        result = encode(7, v.ptr, (64, 32), (256,), (32, 8), (1, 1), swizzle=swizzle)
        assert result[0] == drv.CUresult.CUDA_ERROR_INVALID_VALUE
        return
    tmap = v.as_tensor_map((8, 32), swizzle=swizzle)
    assert tmap.swizzle == swizzle
    assert opaque(tmap.descriptor) == encoded(7, v.ptr, (64, 32), (256,), (32, 8), (1, 1), swizzle=swizzle)
    with pytest.raises(ValueError, match=f"more than swizzle {swizzle}'s 128-byte span"):
        v.as_tensor_map((8, 64), swizzle=swizzle)
