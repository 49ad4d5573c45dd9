# DLPack (code, bits, lanes) -> numpy dtype.
#
# numpy and ml_dtypes are imported on the first lookup, never at import time.  A
# resolved dtype is kept in a flat slot list indexed by code * 256 + bits, so the
# lookup a view pays after warm-up is one list index.

# code -> (name in the DLPack spec, {bits: dtype name}, where the dtype lives)
cdef dict _DLPACK_DTYPES = {
    kDLInt: ("Int", {8: "int8", 16: "int16", 32: "int32", 64: "int64"}, "numpy"),
    kDLUInt: ("UInt", {8: "uint8", 16: "uint16", 32: "uint32", 64: "uint64"}, "numpy"),
    kDLFloat: ("Float", {16: "float16", 32: "float32", 64: "float64"}, "numpy"),
    kDLOpaqueHandle: ("OpaqueHandle", {}, None),
    kDLBfloat: ("Bfloat", {16: "bfloat16"}, "ml_dtypes"),
    kDLComplex: ("Complex", {64: "complex64", 128: "complex128"}, "numpy"),
    kDLBool: ("Bool", {8: "bool"}, "numpy"),
    kDLFloat8_e3m4: ("Float8_e3m4", {8: "float8_e3m4"}, "ml_dtypes"),
    kDLFloat8_e4m3: ("Float8_e4m3", {8: "float8_e4m3"}, "ml_dtypes"),
    kDLFloat8_e4m3b11fnuz: ("Float8_e4m3b11fnuz", {8: "float8_e4m3b11fnuz"}, "ml_dtypes"),
    kDLFloat8_e4m3fn: ("Float8_e4m3fn", {8: "float8_e4m3fn"}, "ml_dtypes"),
    kDLFloat8_e4m3fnuz: ("Float8_e4m3fnuz", {8: "float8_e4m3fnuz"}, "ml_dtypes"),
    kDLFloat8_e5m2: ("Float8_e5m2", {8: "float8_e5m2"}, "ml_dtypes"),
    kDLFloat8_e5m2fnuz: ("Float8_e5m2fnuz", {8: "float8_e5m2fnuz"}, "ml_dtypes"),
    kDLFloat8_e8m0fnu: ("Float8_e8m0fnu", {8: "float8_e8m0fnu"}, "ml_dtypes"),
    kDLFloat6_e2m3fn: ("Float6_e2m3fn", {6: "float6_e2m3fn"}, "ml_dtypes"),
    kDLFloat6_e3m2fn: ("Float6_e3m2fn", {6: "float6_e3m2fn"}, "ml_dtypes"),
    kDLFloat4_e2m1fn: ("Float4_e2m1fn", {4: "float4_e2m1fn"}, "ml_dtypes"),
}

# Codes whose bits may be supported are all < 32: one slot per (code, bits).
cdef list _dtype_slots = [None] * (32 * 256)

cdef extern from "Python.h":
    PyObject *PyList_GET_ITEM_ptr "PyList_GET_ITEM"(object, Py_ssize_t) noexcept


cdef inline object _dtype_from_dlpack(DLDataType dl_dtype, uint64_t flags):
    """The numpy dtype of one DLPack element type, or BufferError.

    A whole-byte, one-lane type resolved before is one slot read here; everything
    else (the checks, the first lookup) is _checked_dtype_from_dlpack's.
    """
    cdef object dtype
    cdef PyObject *slot
    if dl_dtype.code < 32 and dl_dtype.lanes == 1 and dl_dtype.bits >= 8:
        if SV_GIL_FAST_PATHS:
            # The index is within the list (code < 32, bits < 256), which is never
            # replaced: a borrowed read, safe while the GIL is held (a slot is only
            # ever set from None to a dtype, under the GIL).
            slot = PyList_GET_ITEM_ptr(_dtype_slots, dl_dtype.code * 256 + dl_dtype.bits)
            if slot != <PyObject *>None:
                return <object>slot
        else:
            dtype = _dtype_slots[dl_dtype.code * 256 + dl_dtype.bits]
            if dtype is not None:
                return dtype
    return _checked_dtype_from_dlpack(dl_dtype, flags)


cdef object _checked_dtype_from_dlpack(DLDataType dl_dtype, uint64_t flags):
    """_dtype_from_dlpack's checks and slow path."""
    cdef object dtype
    if dl_dtype.lanes != 1:
        raise BufferError(f"dlpack: dtype lanes must be 1 (got {dl_dtype.lanes})")
    dtype = None
    if dl_dtype.code < 32:
        dtype = _dtype_slots[dl_dtype.code * 256 + dl_dtype.bits]
    if dtype is None:
        dtype = _resolve_dtype(dl_dtype.code, dl_dtype.bits)
    if dl_dtype.bits < 8 and not (flags & DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED):
        # Packed sub-byte elements have no byte address each: no numpy dtype and no
        # element strides can describe them.  Only the padded layout (one element
        # per byte, what ml_dtypes stores) can be viewed.
        raise BufferError(
            f"dlpack: dtype {_DLPACK_DTYPES[dl_dtype.code][0]} is sub-byte and not "
            "padded (IS_SUBBYTE_TYPE_PADDED unset)"
        )
    return dtype


cdef object _resolve_dtype(uint8_t code, uint8_t bits):
    """Slow path of _dtype_from_dlpack: look the type up, import its home, cache it."""
    entry = _DLPACK_DTYPES.get(code)
    if entry is None:
        raise BufferError(f"dlpack: unsupported dtype code {code} (unknown)")
    name, by_bits, home = entry
    if not by_bits:
        raise BufferError(f"dlpack: unsupported dtype code {code} ({name})")
    dtype_name = by_bits.get(bits)
    if dtype_name is None:
        allowed = sorted(by_bits)
        expected = str(allowed[0]) if len(allowed) == 1 else (
            ", ".join(map(str, allowed[:-1])) + f" or {allowed[-1]}"
        )
        raise BufferError(f"dlpack: dtype {name} must have {expected} bits (got {bits})")
    import numpy
    if home == "ml_dtypes":
        import ml_dtypes
        dtype = numpy.dtype(getattr(ml_dtypes, dtype_name))
    else:
        dtype = numpy.dtype(dtype_name)
    _dtype_slots[code * 256 + bits] = dtype
    return dtype


cdef tuple _DEVICE_NAMES = (
    None, "CPU", "CUDA", "CUDAHost", "OpenCL", None, None, "Vulkan", "Metal", "VPI",
    "ROCM", "ROCMHost", "ExtDev", "CUDAManaged", "OneAPI", "WebGPU", "Hexagon", "MAIA",
    "Trn",
)


cdef str _device_name(int32_t device_type):
    """The DLPack spec's name of a device type, or 'unknown'."""
    if 0 <= device_type < len(_DEVICE_NAMES) and _DEVICE_NAMES[device_type] is not None:
        return _DEVICE_NAMES[device_type]
    return "unknown"
