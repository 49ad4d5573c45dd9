# The view handed on: DLPack capsules (versioned and legacy) and the CUDA Array
# Interface, so that a DLPack-only library and a CAI-only library can trade
# arrays through a view.

from libc.stdlib cimport free, malloc

cdef extern from "Python.h":
    void Py_IncRef(PyObject *)
    void Py_DecRef(PyObject *)
    int Py_IsInitialized() nogil

cdef DLDataType _exported_dl_dtype(StridedMemoryView view) except *:
    """The DLPack type a view hands on: its own (``_dl_dtype``), or BufferError naming
    ``view.dtype`` when no DLPack type describes it (bits 0)."""
    if view._dl_dtype.bits == 0:
        raise BufferError(f"dlpack: dtype {view.dtype} has no DLPack equivalent")
    return view._dl_dtype


cdef str _dtype_shown(StridedMemoryView view):
    """A view's element type as an export's error quotes it: ``dtype float32``, or
    the DLPack type where the dtype does not name it (``packed sub-byte dtype
    Float4_e2m1fn (bits 4, lanes 1)``, ``dtype Float4_e2m1fn (bits 4, lanes 2)``)."""
    dtype = view.dtype
    if dtype is None:
        return f"packed sub-byte dtype {_dl_dtype_text(view._dl_dtype)}"
    if dtype.metadata is not None and _DLPACK_DTYPE_KEY in dtype.metadata:
        return f"dtype {_dl_dtype_text(view._dl_dtype)}"
    return f"dtype {dtype}"


cdef inline bint _is_padded_subbyte(StridedMemoryView view) noexcept:
    """Whether the view's elements are sub-byte values one to a byte (IS_SUBBYTE_TYPE_PADDED)."""
    return view._itemsize == 1 and <uint32_t>view._dl_dtype.bits * view._dl_dtype.lanes < 8


cdef void _release_export(void *manager_ctx) noexcept nogil:
    # A deleter may run on any thread, with or without the GIL; at interpreter
    # shutdown the view is left alone rather than touched without a runtime.
    if not Py_IsInitialized():
        return
    with gil:
        Py_DecRef(<PyObject *>manager_ctx)


cdef void _delete_versioned(DLManagedTensorVersioned *tensor) noexcept nogil:
    _release_export(tensor.manager_ctx)
    free(tensor)


cdef void _delete_legacy(DLManagedTensor *tensor) noexcept nogil:
    _release_export(tensor.manager_ctx)
    free(tensor)


cdef void _capsule_destructor_versioned(object capsule) noexcept:
    # An unconsumed capsule still owns the tensor; a consumed one was renamed.
    cdef DLManagedTensorVersioned *tensor
    if PyCapsule_IsValid(capsule, _NAME_DLTENSOR_VERSIONED):
        tensor = <DLManagedTensorVersioned *>PyCapsule_GetPointer(capsule, _NAME_DLTENSOR_VERSIONED)
        tensor.deleter(tensor)


cdef void _capsule_destructor_legacy(object capsule) noexcept:
    cdef DLManagedTensor *tensor
    if PyCapsule_IsValid(capsule, _NAME_DLTENSOR):
        tensor = <DLManagedTensor *>PyCapsule_GetPointer(capsule, _NAME_DLTENSOR)
        tensor.deleter(tensor)


cdef object _export_capsule(StridedMemoryView view, bint versioned, uint32_t minor):
    """A new DLPack capsule over ``view``'s memory; the capsule keeps ``view`` alive."""
    cdef void *block = _export_managed_tensor(view, versioned, minor)
    try:
        if versioned:
            return PyCapsule_New(block, _NAME_DLTENSOR_VERSIONED, _capsule_destructor_versioned)
        return PyCapsule_New(block, _NAME_DLTENSOR, _capsule_destructor_legacy)
    except BaseException:
        if versioned:
            _delete_versioned(<DLManagedTensorVersioned *>block)
        else:
            _delete_legacy(<DLManagedTensor *>block)
        raise


cdef void *_export_managed_tensor(
    StridedMemoryView view, bint versioned, uint32_t minor
) except NULL:
    """A new DLPack managed tensor over ``view``'s memory, holding a reference to ``view``
    that its deleter drops."""
    cdef DLDataType dl_dtype = _exported_dl_dtype(view)
    cdef Py_ssize_t ndim = view._ndim
    cdef size_t header = sizeof(DLManagedTensorVersioned) if versioned else sizeof(DLManagedTensor)
    cdef char *block
    cdef DLTensor *tensor
    cdef DLManagedTensorVersioned *versioned_tensor
    cdef DLManagedTensor *legacy_tensor
    cdef int64_t *dims
    cdef Py_ssize_t i
    cdef uint64_t flags = 0

    if view.readonly:
        flags |= DLPACK_FLAG_BITMASK_READ_ONLY
    if _is_padded_subbyte(view):
        flags |= DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED
    if flags and not versioned:
        what = "read-only" if view.readonly else "padded sub-byte"
        raise BufferError(
            f"dlpack: a {what} view cannot be exported as a legacy capsule "
            "(ask with max_version=(1, 0) or later)"
        )
    _view_nbytes(view, "dlpack")  # a consumer computes byte offsets and nbytes in int64
    device_type, device_id = view.__dlpack_device__()

    block = <char *>malloc(header + 2 * ndim * sizeof(int64_t) + 1)
    if block == NULL:
        raise MemoryError()
    dims = <int64_t *>(block + header)
    for i in range(ndim):  # from the view's C layout, which mirrors shape and strides
        dims[i] = view._dims[i]
        dims[ndim + i] = _exported_stride_c(view._dims[ndim + i], view._itemsize)
    if versioned:
        versioned_tensor = <DLManagedTensorVersioned *>block
        versioned_tensor.version.major = DLPACK_MAJOR_VERSION
        versioned_tensor.version.minor = minor
        versioned_tensor.manager_ctx = <void *>view
        versioned_tensor.deleter = _delete_versioned
        versioned_tensor.flags = flags
        tensor = &versioned_tensor.dl_tensor
    else:
        legacy_tensor = <DLManagedTensor *>block
        legacy_tensor.manager_ctx = <void *>view
        legacy_tensor.deleter = _delete_legacy
        tensor = &legacy_tensor.dl_tensor
    tensor.data = NULL if view._size == 0 else <void *>view._ptr
    tensor.device.device_type = device_type
    tensor.device.device_id = device_id
    tensor.ndim = <int32_t>ndim
    tensor.dtype = dl_dtype
    tensor.shape = dims if ndim else NULL
    tensor.strides = dims + ndim if ndim else NULL
    tensor.byte_offset = 0

    Py_IncRef(<PyObject *>view)
    return block


cdef object _export_dlpack(
    StridedMemoryView view, object stream, object max_version, object dl_device, object copy
):
    """``view.__dlpack__``: check the request, order the consumer's stream, export."""
    if copy:
        raise BufferError("dlpack: a view never copies (got copy=True)")
    own_device = view.__dlpack_device__()
    if dl_device is not None and tuple(dl_device) != own_device:
        raise BufferError(
            f"dlpack: the view lives on device {own_device}, not {tuple(dl_device)!r} "
            "(a view never copies)"
        )
    cdef bint versioned = False
    cdef uint32_t minor = 0
    if max_version is not None:
        if (
            not isinstance(max_version, tuple)
            or len(max_version) != 2
            or not isinstance(max_version[0], int)
            or not isinstance(max_version[1], int)
        ):
            raise TypeError(
                f"dlpack: max_version must be None or a (major, minor) tuple (got {max_version!r})"
            )
        if max_version[0] >= 1:
            versioned = True
            minor = DLPACK_MINOR_VERSION if max_version[0] > 1 else min(
                max(max_version[1], 0), DLPACK_MINOR_VERSION
            )
    capsule = _export_capsule(view, versioned, minor)
    # Ordered once the export is known to succeed; should ordering fail, the
    # unconsumed capsule's destructor releases the view again, with the error
    # handled rather than pending (releasing the view may run a producer's
    # deleter written in Python).
    try:
        _order_export(view, stream)
    except BaseException:
        capsule = None
        raise
    return capsule


cdef int _order_export(StridedMemoryView view, object stream) except -1:
    """Make the consumer's DLPack ``stream`` wait for the view's ready stream."""
    if view._device_type == kDLCPU:
        if stream is not None and stream != -1:
            raise BufferError(
                f"dlpack: stream must be None for host memory (got {stream!r})"
            )
        return 0
    if view._device_type == kDLCUDAHost:
        return 0  # pinned host memory: nothing to order
    if stream is None:
        consumer = CU_STREAM_LEGACY_HANDLE  # DLPack: None means the legacy default stream
    else:
        consumer = _normalize_stream(stream)
        if consumer == -1:
            return 0
        if consumer == 0:
            raise BufferError(
                "dlpack: stream 0 is disallowed (ambiguous: pass 1 for the legacy default "
                "stream, 2 for the per-thread one)"
            )
    ready = view.ready_stream
    if ready is not None and not _same_stream(ready, consumer):
        _order_after(ready, consumer)
    return 0


# dtype -> whether its typestr (with its descr, for a structured dtype) names it.
cdef dict _own_typestr = {}


cdef bint _has_own_typestr(object dtype) except -1:
    """Whether a CAI consumer reading ``dtype.str`` gets ``dtype`` back.

    Not so for bfloat16 and the float8/6/4 and sub-byte int kinds (ml_dtypes):
    numpy writes '<V2' or '<V1' (anonymous bytes) for them, '<W4' (a kind no
    typestr reader knows) for complex32 and bcomplex32; nor for the void dtype
    of a DLPack vector type (its metadata, which names the type, is not in the
    typestr).  The cache is keyed by dtype, which compares without metadata:
    those are answered before it.
    """
    if dtype.metadata is not None and _DLPACK_DTYPE_KEY in dtype.metadata:
        return False
    known = _own_typestr.get(dtype)
    if known is None:
        import numpy
        try:
            known = dtype.fields is not None or numpy.dtype(dtype.str) == dtype
        except TypeError:
            known = False
        _own_typestr[dtype] = known
    return known


cdef object _export_cai(StridedMemoryView view):
    """``view.__cuda_array_interface__`` (version 3, strides in bytes)."""
    if not view.is_device_accessible:
        raise AttributeError(
            "__cuda_array_interface__: a host-only view (device_id -1) has no CUDA Array "
            "Interface; use DLPack"
        )
    dtype = view.dtype
    if dtype is None:
        raise BufferError(
            f"cuda array interface: {_dtype_shown(view)} has no typestr (a typestr "
            "counts whole bytes); export it through DLPack"
        )
    itemsize = dtype.itemsize
    if not _has_own_typestr(dtype):
        raise BufferError(
            f"cuda array interface: {_dtype_shown(view)} has no typestr ({dtype.str!r} names "
            "another type or none); export it through DLPack"
        )
    _view_nbytes(view, _CAI_NAME)
    ready = view.ready_stream
    interface = {
        "version": 3,
        "shape": view.shape,
        "typestr": dtype.str,
        "data": (view._ptr if view._size else 0, view.readonly),
        "strides": tuple([_exported_stride(stride, itemsize) * itemsize for stride in view.strides]),
        "stream": None if ready is None or ready == -1 else (1 if ready == 0 else ready),
    }
    if dtype.fields is not None:
        interface["descr"] = dtype.descr
    return interface
