# DLPack (code, bits, lanes) -> the view's numpy dtype and bytes per element.
#
# numpy and ml_dtypes are imported on the first lookup, never at import time.  A
# resolved one-lane dtype is kept in a flat slot list indexed by code * 256 + bits,
# so the lookup a view pays after warm-up is one list index.
#
# What a view's dtype is, per kind of DLPack type (docs/api.md has the table):
# - one lane with a numpy or ml_dtypes type of the same size (int8 ... complex128,
#   bfloat16, the float8 kinds, complex32, bcomplex32, and the padded sub-byte
#   kinds, one byte each): that dtype;
# - whole bytes with no such type (vectors, lanes > 1: torch's float4_e2m1fn_x2
#   pairs; a one-lane type whose ml_dtypes type is missing): a void dtype of the
#   element's size, numpy.dtype("V<n>"), whose metadata["dlpack_dtype"] names the type;
# - packed sub-byte elements (fewer bits than a byte, or a bit count not a whole
#   number of bytes, IS_SUBBYTE_TYPE_PADDED unset): None, and no whole-byte item size
#   (the view's C item size is 0; itemsize_bits says the bits).
# The DLPack type itself is always the view's dlpack_dtype (_dl_dtype in C).

from collections import namedtuple as _namedtuple


class DLPackDType(_namedtuple("DLPackDType", ("code", "bits", "lanes"))):
    """A DLPack element type: ``code`` (DLDataTypeCode), ``bits`` per lane, ``lanes``.

    An element takes ``bits * lanes`` bits: torch's ``float4_e2m1fn_x2`` is
    ``DLPackDType(17, 4, 2)``, one byte holding a pair of float4_e2m1fn.
    """

    __slots__ = ()

    @property
    def name(self):
        """The DLPack spec's name of ``code`` (``"Float4_e2m1fn"``), or ``"unknown"``."""
        entry = _DLPACK_DTYPES.get(self.code)
        return "unknown" if entry is None else entry[0]


# code -> (name in the DLPack spec, {bits: dtype name}).  DLPack 1.3 added
# Bcomplex (a pair of bfloat16) as code 18 without changing its minor version.
cdef dict _DLPACK_DTYPES = {
    kDLInt: ("Int", {1: "int1", 2: "int2", 4: "int4", 8: "int8", 16: "int16", 32: "int32",
                     64: "int64"}),
    kDLUInt: ("UInt", {1: "uint1", 2: "uint2", 4: "uint4", 8: "uint8", 16: "uint16",
                       32: "uint32", 64: "uint64"}),
    kDLFloat: ("Float", {16: "float16", 32: "float32", 64: "float64"}),
    kDLOpaqueHandle: ("OpaqueHandle", {}),
    kDLBfloat: ("Bfloat", {16: "bfloat16"}),
    kDLComplex: ("Complex", {32: "complex32", 64: "complex64", 128: "complex128"}),
    kDLBool: ("Bool", {8: "bool"}),
    kDLFloat8_e3m4: ("Float8_e3m4", {8: "float8_e3m4"}),
    kDLFloat8_e4m3: ("Float8_e4m3", {8: "float8_e4m3"}),
    kDLFloat8_e4m3b11fnuz: ("Float8_e4m3b11fnuz", {8: "float8_e4m3b11fnuz"}),
    kDLFloat8_e4m3fn: ("Float8_e4m3fn", {8: "float8_e4m3fn"}),
    kDLFloat8_e4m3fnuz: ("Float8_e4m3fnuz", {8: "float8_e4m3fnuz"}),
    kDLFloat8_e5m2: ("Float8_e5m2", {8: "float8_e5m2"}),
    kDLFloat8_e5m2fnuz: ("Float8_e5m2fnuz", {8: "float8_e5m2fnuz"}),
    kDLFloat8_e8m0fnu: ("Float8_e8m0fnu", {8: "float8_e8m0fnu"}),
    kDLFloat6_e2m3fn: ("Float6_e2m3fn", {6: "float6_e2m3fn"}),
    kDLFloat6_e3m2fn: ("Float6_e3m2fn", {6: "float6_e3m2fn"}),
    kDLFloat4_e2m1fn: ("Float4_e2m1fn", {4: "float4_e2m1fn"}),
    kDLBcomplex: ("Bcomplex", {32: "bcomplex32"}),
}

# The dtype names numpy has itself; every other name in _DLPACK_DTYPES is ml_dtypes'.
cdef frozenset _NUMPY_DTYPE_NAMES = frozenset({
    "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "float32", "float64", "complex64", "complex128", "bool",
})

# The metadata key of a void dtype standing for a DLPack type numpy has no dtype for.
cdef str _DLPACK_DTYPE_KEY = "dlpack_dtype"

# Codes whose bits may be supported are all < 32: one slot per (code, bits).
cdef list _dtype_slots = [None] * (32 * 256)

cdef extern from *:
    """
    /* A slot of _dtype_slots, borrowed.  The list is never resized or replaced, and a
       slot only ever goes from None to a dtype, once (sv_set_dtype_slot), so the list's
       reference outlives every reader.  Without the GIL the read is an acquire load,
       paired with the release store of the one write. */
    #ifdef Py_GIL_DISABLED
    #define sv_dtype_slot(list, i) \
        ((PyObject *)_Py_atomic_load_ptr_acquire(&((PyListObject *)(list))->ob_item[(i)]))
    /* Store `dtype` in slot i unless a dtype is there already (a racing thread's):
       the critical section orders the writers, the release store publishes it. */
    static int sv_set_dtype_slot(PyObject *list, Py_ssize_t i, PyObject *dtype) {
        Py_BEGIN_CRITICAL_SECTION(list);
        PyObject **item = &((PyListObject *)list)->ob_item[i];
        if (*item == Py_None) {
            Py_INCREF(dtype);
            _Py_atomic_store_ptr_release(item, dtype);  /* None is immortal: not dropped */
        }
        Py_END_CRITICAL_SECTION();
        return 0;
    }
    #else
    #define sv_dtype_slot(list, i) PyList_GET_ITEM((list), (i))
    static int sv_set_dtype_slot(PyObject *list, Py_ssize_t i, PyObject *dtype) {
        if (PyList_GET_ITEM(list, i) != Py_None)
            return 0;
        Py_INCREF(dtype);
        return PyList_SetItem(list, i, dtype);
    }
    #endif
    """
    PyObject *_dtype_slot "sv_dtype_slot"(object, Py_ssize_t) noexcept
    int _set_dtype_slot "sv_set_dtype_slot"(object, Py_ssize_t, object) except -1


cdef inline object _dtype_from_dlpack(DLDataType dl_dtype, uint64_t flags):
    """The view's dtype for one DLPack element type (None for a packed sub-byte type),
    or BufferError; for callers that know the item size (a whole-byte, one-lane type's
    is bits / 8).

    A whole-byte, one-lane type resolved before is one slot read here; everything
    else (the checks, the first lookup) is _checked_dtype_from_dlpack's.
    """
    cdef object dtype
    cdef PyObject *slot
    if dl_dtype.code < 32 and dl_dtype.lanes == 1 and dl_dtype.bits >= 8:
        # A filled slot with bits >= 8 is a whole-byte type: every such entry of
        # _DLPACK_DTYPES is a multiple of 8 bits.
        if SV_FAST_PATHS:
            # The index is within the list (code < 32, bits < 256): a borrowed read
            # (sv_dtype_slot says why it is safe with or without the GIL).
            slot = _dtype_slot(_dtype_slots, dl_dtype.code * 256 + dl_dtype.bits)
            if slot != <PyObject *>None:
                return <object>slot
        else:
            dtype = _dtype_slots[dl_dtype.code * 256 + dl_dtype.bits]
            if dtype is not None:
                return dtype
    return _dtype_without_itemsize(dl_dtype, flags)


cdef object _dtype_without_itemsize(DLDataType dl_dtype, uint64_t flags):
    """_checked_dtype_from_dlpack with the item size left out (out of line: the hot
    callers' frames keep no address-taken local)."""
    cdef int64_t itemsize
    return _checked_dtype_from_dlpack(dl_dtype, flags, &itemsize)


cdef inline object _dtype_and_itemsize(DLDataType dl_dtype, uint64_t flags, int64_t *itemsize):
    """_dtype_from_dlpack, and the bytes per element in ``itemsize[0]`` (0: packed
    sub-byte elements), for callers that take any DLPack type."""
    if dl_dtype.code < 32 and dl_dtype.lanes == 1 and dl_dtype.bits >= 8:
        itemsize[0] = dl_dtype.bits >> 3
        return _dtype_from_dlpack(dl_dtype, flags)
    return _checked_dtype_from_dlpack(dl_dtype, flags, itemsize)


cdef object _checked_dtype_from_dlpack(DLDataType dl_dtype, uint64_t flags, int64_t *itemsize):
    """_dtype_from_dlpack's checks and slow path.

    An element takes ``bits * lanes`` bits.  A whole number of bytes is an element
    with a byte address; fewer than 8 bits with IS_SUBBYTE_TYPE_PADDED is one
    element a byte (what ml_dtypes stores); anything else is packed, DLPack's
    default for sub-byte types: element i at bit ``i * bits`` (little bit-endian),
    several to a byte, with no byte address of its own.
    """
    cdef uint32_t element_bits = <uint32_t>dl_dtype.bits * dl_dtype.lanes
    cdef bint padded = (flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED) != 0
    if dl_dtype.lanes == 0:
        raise BufferError("dlpack: dtype lanes must be >= 1 (got 0)")
    name = _dlpack_type_name(dl_dtype.code, dl_dtype.bits)  # code and bits checked
    # The flag speaks of sub-byte types only: on whole-byte ones it says nothing (and
    # the fast path above never reads it); on a vector of sub-byte lanes it is
    # ambiguous (a byte a lane, or a byte a vector?): refused.
    if padded and dl_dtype.bits < 8 and dl_dtype.lanes != 1:
        raise BufferError(
            f"dlpack: IS_SUBBYTE_TYPE_PADDED is set on dtype {name} with "
            f"{dl_dtype.bits} bits and {dl_dtype.lanes} lanes (DLPack pads only "
            "one-lane elements of fewer than 8 bits)"
        )
    if element_bits % 8 == 0:
        itemsize[0] = element_bits // 8
    elif padded and element_bits < 8:
        itemsize[0] = 1
    else:
        itemsize[0] = 0
        return None
    if dl_dtype.lanes != 1:
        return _vector_dtype(dl_dtype.code, dl_dtype.bits, dl_dtype.lanes, itemsize[0])
    dtype = _dtype_slots[dl_dtype.code * 256 + dl_dtype.bits]
    if dtype is None:
        dtype = _resolve_dtype(dl_dtype.code, dl_dtype.bits)
    return dtype


cdef str _dlpack_type_name(uint8_t code, uint8_t bits):
    """The DLPack spec's name of ``code``, once ``code`` and ``bits`` are checked."""
    entry = _DLPACK_DTYPES.get(code)
    if entry is None:
        raise BufferError(f"dlpack: unsupported dtype code {code} (unknown)")
    name, by_bits = entry
    if not by_bits:
        raise BufferError(f"dlpack: unsupported dtype code {code} ({name})")
    if bits not in by_bits:
        allowed = sorted(by_bits)
        expected = str(allowed[0]) if len(allowed) == 1 else (
            ", ".join(map(str, allowed[:-1])) + f" or {allowed[-1]}"
        )
        raise BufferError(f"dlpack: dtype {name} must have {expected} bits (got {bits})")
    return name


cdef object _resolve_dtype(uint8_t code, uint8_t bits):
    """Slow path of _dtype_from_dlpack for one lane: look the type up, import its
    home, cache it.  An ml_dtypes type that is missing (ml_dtypes not installed, or
    too old for it) is a void dtype of its size naming the DLPack type."""
    name = _dlpack_type_name(code, bits)
    dtype_name = _DLPACK_DTYPES[code][1][bits]
    import numpy
    dtype = None
    if dtype_name in _NUMPY_DTYPE_NAMES:
        dtype = numpy.dtype(dtype_name)
    else:
        try:
            import ml_dtypes
        except ImportError:
            ml_dtypes = None
        scalar_type = getattr(ml_dtypes, dtype_name, None)
        if scalar_type is not None:
            dtype = numpy.dtype(scalar_type)
    if dtype is None:
        dtype = _void_dtype(code, bits, 1, max(bits // 8, 1))
    _set_dtype_slot(_dtype_slots, code * 256 + bits, dtype)  # None -> dtype, once
    return _dtype_slots[code * 256 + bits]  # a racing thread's, if it came first


# (code, bits, lanes) -> the void dtype of a vector type (lanes > 1), made once; at most
# 4096 entries (the producer chooses the key), never replaced or removed.
cdef dict _vector_dtypes = {}


cdef object _vector_dtype(uint8_t code, uint8_t bits, uint16_t lanes, int64_t itemsize):
    """The void dtype of ``itemsize`` bytes a vector type's view has (no numpy dtype
    holds lanes: a subarray dtype would make numpy add an axis)."""
    key = (code, bits, lanes)
    dtype = _vector_dtypes.get(key)
    if dtype is None:
        dtype = _void_dtype(code, bits, lanes, itemsize)
        if len(_vector_dtypes) < 4096:
            dtype = _vector_dtypes.setdefault(key, dtype)  # a racing thread's, if it came first
    return dtype


cdef object _void_dtype(uint8_t code, uint8_t bits, uint16_t lanes, int64_t itemsize):
    """numpy.dtype("V<itemsize>") with metadata naming its DLPack type, which
    _dl_dtype_of reads back (so view(dtype=view.dtype) keeps the type)."""
    import numpy
    return numpy.dtype(
        f"V{itemsize}", metadata={_DLPACK_DTYPE_KEY: DLPackDType(code, bits, lanes)}
    )


cdef object _dlpack_dtype_object(DLDataType dl_dtype):
    """``view.dlpack_dtype``: the DLPackDType of a view's C type, None when bits is 0."""
    if dl_dtype.bits == 0:
        return None
    return DLPackDType(dl_dtype.code, dl_dtype.bits, dl_dtype.lanes)


cdef str _dl_dtype_text(DLDataType dl_dtype):
    """A DLPack type as messages quote it: ``Float4_e2m1fn (bits 4, lanes 2)``."""
    entry = _DLPACK_DTYPES.get(dl_dtype.code)
    name = "unknown" if entry is None else entry[0]
    return f"{name} (bits {dl_dtype.bits}, lanes {dl_dtype.lanes})"


cdef tuple _DEVICE_NAMES = (
    None, "CPU", "CUDA", "CUDAHost", "OpenCL", None, None, "Vulkan", "Metal", "VPI",
    "ROCM", "ROCMHost", "ExtDev", "CUDAManaged", "OneAPI", "WebGPU", "Hexagon", "MAIA",
    "Trn", "TPU", "TPUHost", "Ascend",
)


cdef str _device_name(int32_t device_type):
    """The DLPack spec's name of a device type, or 'unknown'."""
    if 0 <= device_type < len(_DEVICE_NAMES) and _DEVICE_NAMES[device_type] is not None:
        return _DEVICE_NAMES[device_type]
    return "unknown"
