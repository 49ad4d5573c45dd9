# The view as a producer of DLPack 1.3's C exchange API: a static
# DLPackExchangeAPI table, published on the type as the PyCapsule
# ``StridedMemoryView.__dlpack_c_exchange_api__`` (name "dlpack_exchange_api"),
# so that a C consumer (tvm-ffi, a kernel launcher) takes a view without a
# Python call or a capsule.
#
# Every function but the allocator and current_work_stream is called with the
# GIL held and reports a failure as -1 with a Python exception set.  "no_sync":
# none orders any stream; a consumer that needs a device view's ready_stream
# ordered uses __dlpack__(stream=...).

cdef extern from *:
    """
    /* Aligned host allocations: posix_memalign where POSIX is, _aligned_malloc on
       Windows (whose blocks must go back through _aligned_free, not free). */
    #if defined(_WIN32)
    #include <malloc.h>
    static void *sv_aligned_alloc(size_t alignment, size_t size) {
        return _aligned_malloc(size, alignment);
    }
    static void sv_aligned_free(void *block) { _aligned_free(block); }
    #else
    #include <stdlib.h>
    static void *sv_aligned_alloc(size_t alignment, size_t size) {
        void *block = NULL;
        return posix_memalign(&block, alignment, size) == 0 ? block : NULL;
    }
    static void sv_aligned_free(void *block) { free(block); }
    #endif
    """
    void *sv_aligned_alloc(size_t alignment, size_t size) nogil
    void sv_aligned_free(void *block) nogil

cdef enum:
    _HOST_ALLOCATION_ALIGNMENT = 256  # bytes: what CUDA's allocators promise

cdef DLPackExchangeAPI _EXCHANGE_API


cdef StridedMemoryView _exchange_view(void *py_object):
    """The view a table function was handed, or TypeError."""
    if py_object == NULL:
        raise TypeError("dlpack: the exchange API was handed a NULL py_object")
    obj = <object>py_object
    if type(obj) is not StridedMemoryView:
        raise TypeError(
            "dlpack: StridedMemoryView's exchange API takes a StridedMemoryView "
            f"(got {type(obj).__name__!r})"
        )
    return <StridedMemoryView>obj


cdef int _api_dltensor_from_py_object(void *py_object, DLTensor *out) except -1:
    """Lend the view's layout as a DLTensor, valid while the view lives.

    A bare DLTensor has no flags: a read-only view, or a padded sub-byte one,
    cannot be described truthfully and is refused (BufferError); take a managed
    tensor for those.
    """
    cdef StridedMemoryView view = _exchange_view(py_object)
    cdef DLDataType dl_dtype = _exported_dl_dtype(view)
    if view.readonly:
        raise BufferError(
            "dlpack: a read-only view cannot be lent as a DLTensor, which has no "
            "READ_ONLY flag (use managed_tensor_from_py_object_no_sync or __dlpack__)"
        )
    if _is_padded_subbyte(view):
        raise BufferError(
            "dlpack: a padded sub-byte view cannot be lent as a DLTensor, which has no "
            "flags (use managed_tensor_from_py_object_no_sync or __dlpack__)"
        )
    _view_nbytes(view, "dlpack")
    out.data = NULL if view._size == 0 else <void *>view._ptr
    out.device.device_type = view._device_type
    if view._device_type == kDLCPU:
        out.device.device_id = 0
    else:
        out.device.device_id = view.device_id  # a CAI view's is asked on first need
    out.ndim = view._ndim
    out.dtype = dl_dtype
    out.shape = view._dims
    out.strides = view._dims + view._ndim
    out.byte_offset = 0
    return 0


cdef int _api_managed_tensor_from_py_object(
    void *py_object, DLManagedTensorVersioned **out
) except -1:
    """A new owning DLPack 1.3 tensor over the view's memory (as ``__dlpack__`` makes)."""
    if out == NULL:
        raise TypeError("dlpack: managed_tensor_from_py_object_no_sync was handed a NULL out")
    out[0] = NULL
    cdef StridedMemoryView view = _exchange_view(py_object)
    out[0] = <DLManagedTensorVersioned *>_export_managed_tensor(
        view, True, DLPACK_MINOR_VERSION
    )
    return 0


cdef int _api_managed_tensor_to_py_object(
    DLManagedTensorVersioned *tensor, void **out_py_object
) except -1:
    """A new view owning ``tensor`` (its deleter runs once, when the view goes).

    The tensor is stolen on every path: if it cannot be viewed, its deleter is
    called here before the error is reported.
    """
    if out_py_object != NULL:
        out_py_object[0] = NULL
    if tensor == NULL:
        raise BufferError("dlpack: managed_tensor_to_py_object_no_sync was handed a NULL tensor")
    cdef StridedMemoryView view = StridedMemoryView.__new__(StridedMemoryView)
    try:
        if out_py_object == NULL:
            raise TypeError(
                "dlpack: managed_tensor_to_py_object_no_sync was handed a NULL out_py_object"
            )
        if tensor.version.major != DLPACK_MAJOR_VERSION:
            raise BufferError(
                f"dlpack: unsupported DLPack version {tensor.version.major}."
                f"{tensor.version.minor} (major version must be 1)"
            )
        _check_device_type(tensor.dl_tensor.device.device_type)
        _fill_from_dltensor(view, &tensor.dl_tensor, tensor.flags)
    except BaseException:
        if tensor.deleter != NULL:
            tensor.deleter(tensor)
        raise
    view._managed = tensor
    view._managed_is_versioned = True
    view.ready_stream = None
    Py_IncRef(<PyObject *>view)
    out_py_object[0] = <void *>view
    return 0


cdef int _api_managed_tensor_allocator(
    DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
    DLPackSetError set_error,
) except -1 with gil:
    """A new row-major host (CPU) tensor shaped like ``prototype``; other devices refused.

    Errors go to ``set_error`` when one is given (no Python exception is left
    set), else are raised.
    """
    try:
        if out == NULL:
            raise TypeError("dlpack: managed_tensor_allocator was handed a NULL out")
        out[0] = NULL
        out[0] = _new_host_tensor(prototype)
    except BaseException as exc:
        if set_error == NULL:
            raise
        kind = type(exc).__name__.encode("utf-8", "replace")
        message = str(exc).encode("utf-8", "replace")
        set_error(error_ctx, kind, message)
        return -1
    return 0


cdef void _delete_host_tensor(DLManagedTensorVersioned *tensor) noexcept nogil:
    sv_aligned_free(tensor.manager_ctx)  # the data
    free(tensor)


cdef DLManagedTensorVersioned *_new_host_tensor(DLTensor *prototype) except NULL:
    """The allocator's work: validate the prototype, then allocate data and header."""
    if prototype == NULL:
        raise BufferError("dlpack: managed_tensor_allocator was handed a NULL prototype")
    cdef int32_t device_type = prototype.device.device_type
    if device_type != kDLCPU:
        raise BufferError(
            "dlpack: stridedview's allocator makes host (CPU) tensors only "
            f"(got device type {device_type} ({_device_name(device_type)}))"
        )
    cdef int32_t i, ndim = prototype.ndim
    if ndim < 0 or ndim > _CAI_MAX_NDIM:
        raise BufferError(f"dlpack: ndim must be from 0 to {_CAI_MAX_NDIM} (got {ndim})")
    if ndim > 0 and prototype.shape == NULL:
        raise BufferError(f"dlpack: shape is NULL with ndim {ndim}")
    cdef uint64_t flags = 0
    if prototype.dtype.lanes == 1 and prototype.dtype.bits < 8:
        flags = DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED  # one element per byte
    cdef int64_t itemsize  # 0: packed sub-byte elements (lanes > 1 of a few bits)
    _dtype_and_itemsize(prototype.dtype, flags, &itemsize)  # refuses what no view can hold
    cdef int64_t count = 1
    for i in range(ndim):
        if prototype.shape[i] < 0:
            raise BufferError(f"dlpack: shape[{i}] must be >= 0 (got {prototype.shape[i]})")
        if sv_mul_i64(count, prototype.shape[i], &count):
            raise BufferError("dlpack: element count overflows int64")
    cdef int64_t nbytes
    cdef int64_t element_bits = <int64_t>prototype.dtype.bits * prototype.dtype.lanes
    if itemsize == 0:
        if sv_mul_i64(count, element_bits, &nbytes) or sv_add_i64(nbytes, 7, &nbytes):
            raise BufferError("dlpack: byte count overflows int64")
        nbytes //= 8
    elif sv_mul_i64(count, itemsize, &nbytes):
        raise BufferError("dlpack: byte count overflows int64")

    cdef void *data = sv_aligned_alloc(_HOST_ALLOCATION_ALIGNMENT, <size_t>max(nbytes, 1))
    if data == NULL:
        raise MemoryError()
    cdef DLManagedTensorVersioned *tensor = <DLManagedTensorVersioned *>malloc(
        sizeof(DLManagedTensorVersioned) + 2 * ndim * sizeof(int64_t) + 1
    )
    if tensor == NULL:
        sv_aligned_free(data)
        raise MemoryError()
    cdef int64_t *dims = <int64_t *>(<char *>tensor + sizeof(DLManagedTensorVersioned))
    # Row-major.  A step can pass int64 only in an empty tensor (else each is at most
    # the element count), whose strides address nothing: 0 there, as
    # _row_major_strides gives it.
    cdef int64_t step = 1
    cdef bint step_overflow = False
    for i in range(ndim - 1, -1, -1):
        dims[i] = prototype.shape[i]
        dims[ndim + i] = 0 if step_overflow else step
        if prototype.shape[i] > 1 and not step_overflow:
            step_overflow = sv_mul_i64(step, prototype.shape[i], &step)
    tensor.version.major = DLPACK_MAJOR_VERSION
    tensor.version.minor = DLPACK_MINOR_VERSION
    tensor.manager_ctx = data
    tensor.deleter = _delete_host_tensor
    tensor.flags = flags
    tensor.dl_tensor.data = data
    tensor.dl_tensor.device.device_type = kDLCPU
    tensor.dl_tensor.device.device_id = 0
    tensor.dl_tensor.ndim = ndim
    tensor.dl_tensor.dtype = prototype.dtype
    tensor.dl_tensor.shape = dims
    tensor.dl_tensor.strides = dims + ndim
    tensor.dl_tensor.byte_offset = 0
    return tensor


cdef int _api_current_work_stream(
    int32_t device_type, int32_t device_id, void **out_stream
) noexcept nogil:
    # A view has a ready stream of its own, but no device has a current stream:
    # NULL (what a CPU-only producer answers, and the default stream on CUDA).
    if out_stream != NULL:
        out_stream[0] = NULL
    return 0


cdef int _publish_exchange_api() except -1:
    """Fill the table and set ``StridedMemoryView.__dlpack_c_exchange_api__``."""
    _EXCHANGE_API.header.version.major = DLPACK_MAJOR_VERSION
    _EXCHANGE_API.header.version.minor = DLPACK_MINOR_VERSION
    _EXCHANGE_API.header.prev_api = NULL
    # The functions are written with Cython's "-1 means an exception is set",
    # which is DLPack's convention too; the casts only drop Cython's bookkeeping.
    _EXCHANGE_API.managed_tensor_allocator = <DLPackManagedTensorAllocator>(
        _api_managed_tensor_allocator
    )
    _EXCHANGE_API.managed_tensor_from_py_object_no_sync = <DLPackManagedTensorFromPyObject>(
        _api_managed_tensor_from_py_object
    )
    _EXCHANGE_API.managed_tensor_to_py_object_no_sync = <DLPackManagedTensorToPyObject>(
        _api_managed_tensor_to_py_object
    )
    _EXCHANGE_API.dltensor_from_py_object_no_sync = <DLTensorFromPyObject>(
        _api_dltensor_from_py_object
    )
    _EXCHANGE_API.current_work_stream = _api_current_work_stream
    capsule = PyCapsule_New(<void *>&_EXCHANGE_API, b"dlpack_exchange_api", NULL)
    cdef PyTypeObject_dict *tp = <PyTypeObject_dict *>StridedMemoryView
    (<dict><object>tp.tp_dict)[_EXCHANGE_API_CAPSULE_ATTR] = capsule
    # The DLPack 1.2-era name, as cuda.core also publishes it (the same capsule).
    (<dict><object>tp.tp_dict)["__c_dlpack_exchange_api__"] = capsule
    PyType_Modified(tp)
    return 0


_publish_exchange_api()
