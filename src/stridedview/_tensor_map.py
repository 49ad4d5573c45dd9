"""TMA descriptors: ``StridedMemoryView.as_tensor_map`` through ``cuTensorMapEncodeTiled``.

The driver's rules are checked here first, each violation named in a
ValueError (TypeError for a value of the wrong type), so that the one driver
call made is one the driver accepts.  An integer argument (each entry of
``box_dim`` and ``element_strides``, ``interleave``, ``swizzle``,
``l2_promotion``, ``oob_fill``, an int ``data_type``) is what
``operator.index`` takes: an int, a numpy integer, a driver enum; a float, a
string or None is refused, never truncated, and so is a bool (Python's or
numpy's), which is no count or mode here.  The driver orders dimensions innermost
first; the view's axis order (row-major, as ``shape``) is what the caller
passes, and is reversed here.  The innermost axis must be contiguous (its
stride is the element size, implicit in the encoding).

The packed sub-byte data types and the 128B_ATOM swizzles are compute capability 10.0
features: a driver refuses them on a 9.x device whatever the layout (driver 580 on an
H200, measured), so on such a device they are refused here, naming the capability, which
is asked of the driver once per device (``_driver.compute_capability``), after every
other rule and before the encoding.
"""

from __future__ import annotations

import operator
import sys

from stridedview import _driver
from stridedview._view import _checked_nbytes

# CUtensorMapDataType values, by numpy dtype name (ml_dtypes' bfloat16 included).
_DATA_TYPES = {
    "uint8": 0, "uint16": 1, "uint32": 2, "int32": 3, "uint64": 4, "int64": 5,
    "float16": 6, "float32": 7, "float64": 8, "bfloat16": 9,
}
# The integer CUtensorMapDataTypes (uint8, uint16, uint32, int32, uint64, int64): the
# driver fills out of bounds with NaN only for floating-point data.
_INTEGER_TYPES = {0: "uint8", 1: "uint16", 2: "uint32", 3: "int32", 4: "uint64", 5: "int64"}
# The element size of each CUtensorMapDataType (float32_ftz, tfloat32, tfloat32_ftz: 10-12).
_TYPE_SIZES = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2, 10: 4, 11: 4, 12: 4}
# The driver's packed sub-byte types (CUDA 12.8): 16U4_ALIGN8B (13), 16U4_ALIGN16B (14),
# 16U6_ALIGN16B (15).  globalDim counts the 4- or 6-bit values, laid in global memory
# one after another (a packed sub-byte view's layout: its dtype is None); in shared
# memory 16 of them take 8 bytes (13) or 16 (14, 15).  Their bits per value, and the
# bytes each takes in shared memory (what the box's inner span counts), in eighths.
_PACKED_TYPE_BITS = {13: 4, 14: 4, 15: 6}
_PACKED_TYPE_NAMES = {13: "16U4_ALIGN8B", 14: "16U4_ALIGN16B", 15: "16U6_ALIGN16B"}
_PACKED_SHARED_EIGHTHS = {13: 4, 14: 8, 15: 8}
# The packed types a packed view of each bit size encodes as by default.
_PACKED_DEFAULT = {4: 13, 6: 15}
_ALIGN16B_TYPES = (14, 15)  # 32-byte address and strides, globalDim[0] % 128, boxDim[0] 128
_INTERLEAVE_NONE, _INTERLEAVE_16B, _INTERLEAVE_32B = 0, 1, 2
# CU_TENSOR_MAP_SWIZZLE_NONE, 32B, 64B, 128B, and the 128B_ATOM ones, each its span in bytes.
_SWIZZLE_SPAN = {0: None, 1: 32, 2: 64, 3: 128, 4: 128, 5: 128, 6: 128}
_ATOM_SWIZZLE_NAMES = {4: "128B_ATOM_32B", 5: "128B_ATOM_32B_FLIP_8B", 6: "128B_ATOM_64B"}
# The swizzles the 16-byte-aligned packed types take: none, 128B, 128B_ATOM_32B (and for
# 16U6_ALIGN16B 128B_ATOM_64B, for stores only).
_ALIGN16B_SWIZZLES = {14: (0, 3, 4), 15: (0, 3, 4, 6)}
_SWIZZLE_NAMES = {0: "none", 1: "32B", 2: "64B", 3: "128B", **_ATOM_SWIZZLE_NAMES}
_BLACKWELL = (10, 0)  # the compute capability of the packed types and the ATOM swizzles
_L2_PROMOTIONS = (0, 1, 2, 3)
_OOB_FILL_NONE, _OOB_FILL_NAN = 0, 1  # CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA
_OOB_FILLS = (_OOB_FILL_NONE, _OOB_FILL_NAN)


class TensorMap:
    """A tiled TMA descriptor made by ``StridedMemoryView.as_tensor_map``.

    ``descriptor`` is what the driver encoded (a ``CUtensorMap`` of cuda-bindings:
    pass it as a kernel argument); the other attributes are the arguments it was
    encoded from, innermost dimension first as the driver takes them.  It keeps
    the view, and so the memory, alive.
    """

    __slots__ = (
        "descriptor", "view", "data_type", "rank", "global_address", "global_dim",
        "global_strides", "box_dim", "element_strides", "interleave", "swizzle",
        "l2_promotion", "oob_fill",
    )
    descriptor: object
    view: object
    data_type: int
    rank: int
    global_address: int
    global_dim: tuple[int, ...]
    global_strides: tuple[int, ...]
    box_dim: tuple[int, ...]
    element_strides: tuple[int, ...]
    interleave: int
    swizzle: int
    l2_promotion: int
    oob_fill: int

    def __repr__(self) -> str:
        return (
            f"TensorMap(rank={self.rank}, data_type={self.data_type}, "
            f"global_dim={self.global_dim}, box_dim={self.box_dim})"
        )


def _is_bool(value) -> bool:
    """A Python or numpy bool (numpy looked up, never imported)."""
    if isinstance(value, bool):
        return True
    numpy = sys.modules.get("numpy")
    return numpy is not None and isinstance(value, numpy.bool_)


def _integer(value, name, expected):
    """``operator.index(value)``, a bool refused: an int, never a truncated float."""
    number = None
    if not _is_bool(value):
        try:
            number = operator.index(value)
        except TypeError:
            pass
    if number is None:
        raise TypeError(f"tensor map: {name} must be {expected} (got {value!r})")
    return number


def _option(value, name, allowed, default=0) -> int:
    if value is None:
        return default
    number = _integer(value, name, "an int or a driver enum")
    if number not in allowed:
        raise ValueError(f"tensor map: {name} {number} is not one of {tuple(allowed)}")
    return number


def _ints(values, name, rank):
    # A str or bytes iterates, but into characters or bytes, not counts.
    items = None
    if not isinstance(values, (str, bytes, bytearray)):
        try:
            items = iter(values)
        except TypeError:
            pass
    if items is None:
        raise TypeError(f"tensor map: {name} must be a sequence of ints (got {values!r})")
    result = tuple(_integer(v, f"{name}[{i}]", "an int") for i, v in enumerate(items))
    if len(result) != rank:
        raise ValueError(f"tensor map: {name} {result} must have one entry per axis ({rank})")
    return result


def _data_type(view, data_type):
    if data_type is None and view.dtype is None:  # packed sub-byte elements
        code = _PACKED_DEFAULT.get(view.itemsize_bits)
        if code is None:
            raise ValueError(
                f"tensor map: packed {view.itemsize_bits}-bit elements ({view.dlpack_dtype}) "
                "have no TMA data type (the driver packs 4- and 6-bit values)"
            )
        return code
    if data_type is None:
        code = _DATA_TYPES.get(view.dtype.name)
        if code is None or view.dtype.byteorder == ">":
            raise ValueError(
                f"tensor map: dtype {view.dtype} has no TMA data type (supported: "
                f"{', '.join(_DATA_TYPES)}); pass data_type= to encode its bytes as another"
            )
        return code
    if hasattr(data_type, "__index__") and not isinstance(data_type, type) and not _is_bool(data_type):
        code = operator.index(data_type)
        if code not in _TYPE_SIZES and code not in _PACKED_TYPE_BITS:
            raise ValueError(f"tensor map: data_type {code} is not a CUtensorMapDataType")
        return code
    import numpy

    try:
        name = numpy.dtype(data_type).name
    except TypeError:
        raise TypeError(f"tensor map: data_type must be a dtype or a CUtensorMapDataType (got {data_type!r})") from None
    code = _DATA_TYPES.get(name)
    if code is None:
        raise ValueError(f"tensor map: dtype {name} has no TMA data type")
    return code


def encode_tiled(
    view, box_dim, options, element_strides, data_type, interleave, swizzle, l2_promotion,
    oob_fill,
):
    """Check the rules, then encode ``view`` with ``cuTensorMapEncodeTiled``; a TensorMap."""
    if options is not None:
        if box_dim is not None or any(
            v is not None
            for v in (element_strides, data_type, interleave, swizzle, l2_promotion, oob_fill)
        ):
            raise ValueError("tensor map: pass either options= or box_dim and the other keywords, not both")
        get = options.get if isinstance(options, dict) else lambda key: getattr(options, key, None)
        box_dim, element_strides, data_type = get("box_dim"), get("element_strides"), get("data_type")
        interleave, swizzle = get("interleave"), get("swizzle")
        l2_promotion, oob_fill = get("l2_promotion"), get("oob_fill")
    if box_dim is None:
        raise ValueError("tensor map: box_dim is required")
    if not view.is_device_accessible:
        raise ValueError("tensor map: the view is host memory (device_id -1); TMA reads device memory")
    _checked_nbytes(view, "tensor map")  # the byte strides below fit int64, as every view's do
    rank = len(view.shape)
    if not 1 <= rank <= 5:
        raise ValueError(f"tensor map: rank {rank} is outside 1 to 5")
    code = _data_type(view, data_type)
    packed_bits = _PACKED_TYPE_BITS.get(code)
    if packed_bits is not None:
        if view.dtype is not None or view.itemsize_bits != packed_bits:
            hint = "" if view.dtype is None else (
                " (view packed values first, e.g. "
                f"view.view(dtype=stridedview.DLPackDType(1, {packed_bits}, 1)))"
            )
            raise ValueError(
                f"tensor map: data type {code} is packed {packed_bits}-bit values, the view's "
                f"elements take {view.itemsize_bits} bits each{hint}"
            )
        size = None
    else:
        size = _TYPE_SIZES[code]
        if view.dtype is None or size != view.itemsize:
            raise ValueError(
                f"tensor map: data type {code} has {size}-byte elements, the view's "
                f"elements take {view.itemsize_bits} bits each"
            )
    interleave = _option(interleave, "interleave", (0, 1, 2))
    swizzle = _option(swizzle, "swizzle", tuple(_SWIZZLE_SPAN))
    l2_promotion = _option(l2_promotion, "l2_promotion", _L2_PROMOTIONS)
    oob_fill = _option(oob_fill, "oob_fill", _OOB_FILLS)
    if oob_fill == _OOB_FILL_NAN and code in _INTEGER_TYPES:
        raise ValueError(
            f"tensor map: oob_fill 1 (NaN) is for floating-point data; data type {code} "
            f"({_INTEGER_TYPES[code]}) is an integer type"
        )
    if oob_fill == _OOB_FILL_NAN and packed_bits is not None:
        raise ValueError(
            f"tensor map: oob_fill 1 (NaN) is not for the packed data types; data type "
            f"{code} is packed {packed_bits}-bit values"
        )
    if code == 15 and interleave != _INTERLEAVE_NONE:
        raise ValueError(f"tensor map: data type 15 (16U6_ALIGN16B) needs interleave 0, got {interleave}")
    if code in _ALIGN16B_TYPES and swizzle not in _ALIGN16B_SWIZZLES[code]:
        allowed = [f"{s} ({_SWIZZLE_NAMES[s]})" for s in _ALIGN16B_SWIZZLES[code]]
        raise ValueError(
            f"tensor map: data type {code} takes swizzle {', '.join(allowed[:-1])} or "
            f"{allowed[-1]}, got {swizzle}"
        )
    box = _ints(box_dim, "box_dim", rank)
    steps = (1,) * rank if element_strides is None else _ints(element_strides, "element_strides", rank)
    alignment = 32 if interleave == _INTERLEAVE_32B or code in _ALIGN16B_TYPES else 16
    if view.ptr % alignment:
        raise ValueError(f"tensor map: the global address {view.ptr:#x} is not {alignment}-byte aligned")
    if interleave != _INTERLEAVE_NONE and rank < 3:
        raise ValueError(f"tensor map: interleave {interleave} needs rank 3 to 5 (got {rank})")
    # The extents first: an empty view's strides are all 0 (it has no last axis to step).
    for axis, extent in enumerate(view.shape):
        if not 1 <= extent <= 2**32:
            raise ValueError(f"tensor map: shape[{axis}] = {extent} is outside 1 to 2**32")
    if view.strides[-1] != 1 and view.shape[-1] != 1:
        raise ValueError(
            f"tensor map: the last axis must be contiguous (stride 1 element, got {view.strides[-1]})"
        )
    dims = tuple(reversed(view.shape))
    if packed_bits is None:
        byte_strides = tuple(reversed(view.byte_strides))[1:]
    else:
        byte_strides = _packed_byte_strides(view, code)
    for i, stride in enumerate(byte_strides):
        axis = rank - 2 - i
        if stride <= 0 or stride % alignment or stride >= 2**40:
            raise ValueError(
                f"tensor map: the stride of axis {axis} is {stride} bytes; it must be a positive "
                f"multiple of {alignment} below 2**40"
            )
    for axis, extent in enumerate(box):
        if not 1 <= extent <= 256:
            raise ValueError(f"tensor map: box_dim[{axis}] = {extent} is outside 1 to 256")
    for axis, step in enumerate(steps):
        if not 1 <= step <= 8:
            raise ValueError(f"tensor map: element_strides[{axis}] = {step} is outside 1 to 8")
    if packed_bits is None:
        inner_bytes = box[-1] * size
    else:
        if code in _ALIGN16B_TYPES and box[-1] != 128:
            raise ValueError(f"tensor map: data type {code} needs box_dim[{rank - 1}] = 128 (got {box[-1]})")
        inner_bytes = box[-1] * _PACKED_SHARED_EIGHTHS[code] / 8
    if interleave == _INTERLEAVE_NONE:
        if inner_bytes % 16:
            raise ValueError(
                f"tensor map: the box's last axis spans {inner_bytes} bytes; without interleave "
                "it must be a multiple of 16"
            )
        span = _SWIZZLE_SPAN[swizzle]
        if span is not None and inner_bytes > span:
            raise ValueError(
                f"tensor map: the box's last axis spans {inner_bytes} bytes, more than swizzle "
                f"{swizzle}'s {span}-byte span"
            )
    elif interleave == _INTERLEAVE_32B and swizzle != 1:
        # The documented rule; driver 580 does not enforce it (it encodes 32-byte interleave
        # with swizzle none, 32B, 64B and 128B alike), but what a TMA unit does with such a
        # map is undocumented, so it stays refused here.
        raise ValueError(f"tensor map: interleave 32B needs swizzle 32B (1), got {swizzle}")
    device = view.device_id
    api = _driver._driver()
    if packed_bits is not None or swizzle in _ATOM_SWIZZLE_NAMES:
        _check_capability(api, device, code if packed_bits is not None else None, swizzle)
    args = (
        _enum(api, "CUtensorMapDataType", code), rank, view.ptr,
        _sized(api, "cuuint64_t", dims), _sized(api, "cuuint64_t", byte_strides),
        _sized(api, "cuuint32_t", reversed(box)), _sized(api, "cuuint32_t", reversed(steps)),
        _enum(api, "CUtensorMapInterleave", interleave),
        _enum(api, "CUtensorMapSwizzle", swizzle),
        _enum(api, "CUtensorMapL2promotion", l2_promotion),
        _enum(api, "CUtensorMapFloatOOBfill", oob_fill),
    )
    descriptor = _driver.with_context(
        api, device, lambda: _driver._call(api, "cuTensorMapEncodeTiled", *args)
    )
    result = TensorMap()
    result.descriptor = descriptor
    result.view = view
    result.data_type = code
    result.rank = rank
    result.global_address = view.ptr
    result.global_dim = dims
    result.global_strides = byte_strides
    result.box_dim = tuple(reversed(box))
    result.element_strides = tuple(reversed(steps))
    result.interleave, result.swizzle = interleave, swizzle
    result.l2_promotion, result.oob_fill = l2_promotion, oob_fill
    return result


def _check_capability(api, device, packed_code, swizzle):
    """Refuse a packed data type (``packed_code``, None for none) or an ATOM swizzle on a
    device below compute capability 10.0, naming what was asked and the device's capability."""
    capability = _driver.compute_capability(api, device)
    if capability >= _BLACKWELL:
        return
    asked = []
    if packed_code is not None:
        asked.append(f"data type {packed_code} ({_PACKED_TYPE_NAMES[packed_code]})")
    if swizzle in _ATOM_SWIZZLE_NAMES:
        asked.append(f"swizzle {swizzle} ({_ATOM_SWIZZLE_NAMES[swizzle]})")
    raise ValueError(
        f"tensor map: {' and '.join(asked)} {'needs' if len(asked) == 1 else 'need'} a device "
        f"of compute capability 10.0 or higher; device {device} has {capability[0]}.{capability[1]}"
    )


def _packed_byte_strides(view, code):
    """The byte strides (innermost first, the innermost left out) of a packed sub-byte
    view, which is row-major and gap-free: each a whole number of bytes, and the
    innermost extent what the data type asks (a multiple of 2 values, or of 128)."""
    inner = view.shape[-1]
    multiple = 128 if code in _ALIGN16B_TYPES else 2
    if inner % multiple:
        raise ValueError(
            f"tensor map: data type {code} needs shape[{len(view.shape) - 1}] to be a "
            f"multiple of {multiple} values (got {inner})"
        )
    strides = []
    for axis in range(len(view.shape) - 2, -1, -1):
        bits = view.strides[axis] * view.itemsize_bits
        if view.shape[axis] == 1:  # never steps: the row-major stride, in whole bytes
            bits = inner * view.itemsize_bits
            for later in range(axis + 1, len(view.shape) - 1):
                bits *= view.shape[later]
        if bits % 8:
            raise ValueError(
                f"tensor map: the stride of axis {axis} is {bits} bits, not whole bytes"
            )
        strides.append(bits // 8)
    return tuple(strides)


def _enum(api, name, value):
    kind = getattr(api, name, None)
    return value if kind is None else kind(value)


def _sized(api, name, values):
    """``values`` as a list of the bindings' ``name`` (cuuint32_t, cuuint64_t): cuda-bindings
    takes the arrays of cuTensorMapEncodeTiled only so, and refuses plain ints."""
    kind = getattr(api, name, None)
    return [value if kind is None else kind(value) for value in values]
