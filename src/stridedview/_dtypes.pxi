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
    """The numpy dtype of one DLPack element type, or BufferError.

    A whole-byte, one-lane type resolved before is one slot read here; everything
    else (the checks, the first lookup) is _checked_dtype_from_dlpack's.
    """
    cdef object dtype
    cdef PyObject *slot
    if dl_dtype.code < 32 and dl_dtype.lanes == 1 and dl_dtype.bits >= 8:
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
    _set_dtype_slot(_dtype_slots, code * 256 + bits, dtype)  # None -> dtype, once
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
