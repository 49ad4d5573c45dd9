# DLPack -> the view's fields: negotiate with the producer, validate the capsule,
# take ownership, and leave the deleter to the view's deallocation.

from cpython.exc cimport PyErr_Clear, PyErr_Occurred
from libc.stdlib cimport free, malloc

cdef extern from "Python.h":
    # Calls args[0].<name>(*args[1:nargs], **dict(zip(kwnames, args[nargs:]))) without
    # building a bound method, an argument tuple or a keyword dict.
    object PyObject_VectorcallMethod(
        object name, PyObject **args, size_t nargsf, PyObject *kwnames
    )

# The capsule names, each alone in 32 aligned bytes.  glibc's strcmp takes a
# slower path for a string that ends within 32 bytes of a page's end, so a
# literal the linker happened to place there would make every capsule's name
# checks (ours and the consumer's) dearer in one build than in another.
cdef extern from *:
    """
    #if defined(__GNUC__)
    #define SV_NAME_ALIGNED __attribute__((aligned(32)))
    #else
    #define SV_NAME_ALIGNED
    #endif
    static const char sv_name_dltensor[32] SV_NAME_ALIGNED = "dltensor";
    static const char sv_name_dltensor_versioned[32] SV_NAME_ALIGNED = "dltensor_versioned";
    static const char sv_name_used_dltensor[32] SV_NAME_ALIGNED = "used_dltensor";
    static const char sv_name_used_dltensor_versioned[32] SV_NAME_ALIGNED = "used_dltensor_versioned";
    """
    const char *_NAME_DLTENSOR "sv_name_dltensor"
    const char *_NAME_DLTENSOR_VERSIONED "sv_name_dltensor_versioned"
    const char *_NAME_USED_DLTENSOR "sv_name_used_dltensor"
    const char *_NAME_USED_DLTENSOR_VERSIONED "sv_name_used_dltensor_versioned"

cdef object _MAX_VERSION = (DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION)
cdef str _DLPACK = "__dlpack__"
cdef str _DLPACK_DEVICE = "__dlpack_device__"
cdef tuple _KWNAMES_STREAM_MAX_VERSION_COPY = ("stream", "max_version", "copy")
cdef object _NO_COPY = False  # an object: a bare False literal would be C's 0 here
cdef tuple _KWNAMES_STREAM_MAX_VERSION = ("stream", "max_version")
cdef tuple _KWNAMES_STREAM = ("stream",)

cdef inline int _view_from_dlpack(
    StridedMemoryView view, object obj, object stream, _ProducerType info
) except -1:
    """Fill ``view`` from ``obj`` through DLPack; ``stream`` is already normalised,
    ``info`` is ``_producer_type(obj)`` (looked up once per view by the caller).

    Through the producer type's C exchange API when it has one (no capsule, no
    allocation), from a numpy array's own layout (_from_numpy.pxi), else through
    ``__dlpack_device__`` and ``__dlpack__``.  A StridedMemoryView is not asked:
    its fields are taken as they are.
    """
    if type(obj) is StridedMemoryView:
        return _view_from_view(view, <StridedMemoryView>obj, stream)
    if info.dltensor_from_py_object != NULL and _fast_paths_enabled:
        if (
            info.torch_layout_direct
            and info.torch_bits_direct
            and _bits_state() == _BITS_DIRECT
            and _torch_lean_ready
            and _view_from_plain_torch(view, obj) == 0
        ):
            return 0  # a plain CPU torch tensor, from its TensorImpl (_from_torch.pxi)
        return _view_from_exchange_api(view, obj, stream, info)
    if (
        info.host_only
        and (_fast_paths_enabled or _is_user_type_array(obj))
        and _view_from_numpy(view, obj)
    ):
        return 0
    return _view_through_capsule(view, obj, stream, info)


cdef int _view_through_capsule(
    StridedMemoryView view, object obj, object stream, _ProducerType info
) except -1:
    """_view_from_dlpack's general path: ``__dlpack_device__``, then ``__dlpack__``."""
    if info.is_torch:
        # Before __dlpack__, which refuses conjugate tensors with a vaguer message.
        _check_torch_bits(obj, info, -1)

    cdef int32_t device_type = 0, device_id = 0  # _ask_device sets both or raises
    cdef PyObject *args[4]
    if info.is_torch and obj.requires_grad:
        # torch's __dlpack__ refuses tensors that require grad, its exchange API
        # does not: the memory holds the values either way, so view them alike.
        exporter = obj.detach()
    else:
        exporter = obj
    args[0] = <PyObject *>exporter
    _ask_device(exporter, &device_type, &device_id)
    _check_device_type(device_type)
    dl_stream = _dlpack_stream_for(device_type, stream)

    args[1] = <PyObject *>dl_stream
    args[2] = <PyObject *>_MAX_VERSION
    args[3] = <PyObject *>_NO_COPY
    try:
        capsule = _ask_capsule(args)
    except BufferError as exc:
        _hint_numpy_dtype(obj, exc)  # raises a clearer error where it applies
        raise
    try:
        _view_from_capsule(view, capsule, device_type, device_id)
    except BaseException:
        # Release a refused capsule here, where the error is handled rather than
        # pending: its destructor (or, for a major version other than 1, nothing
        # more) may run Python code, a ctypes or cffi callback, which fails with
        # an exception set, turning the refusal into SystemError and skipping
        # the deleter.
        capsule = None
        raise
    view.exporting_obj = obj
    # Host memory needs no stream; device memory is ready on the stream the
    # producer was asked to order, or unknown when the caller opted out.
    view.ready_stream = None if dl_stream is None or dl_stream == -1 else stream
    return 0


cdef object _ask_capsule(PyObject **args):
    """``__dlpack__(stream=args[1], max_version=args[2], copy=False)``, asked as the
    producer's age allows.

    ``copy=False`` (array API 2023.12, with max_version) makes "copies nothing" a
    promise the producer must keep or refuse.  A producer that does not know a
    keyword raises TypeError naming it: ask again without it (without both for
    one older than DLPack 1.0).  Any other TypeError (a refused stream, say) is
    the caller's, raised after one call.
    """
    try:
        return PyObject_VectorcallMethod(
            _DLPACK, args, 1, <PyObject *>_KWNAMES_STREAM_MAX_VERSION_COPY
        )
    except TypeError as exc:
        message = str(exc)
        if "max_version" in message:
            pass
        elif "'copy'" in message:
            try:
                return PyObject_VectorcallMethod(
                    _DLPACK, args, 1, <PyObject *>_KWNAMES_STREAM_MAX_VERSION
                )
            except TypeError as again:
                if "max_version" not in str(again):
                    raise
        else:
            raise
    return PyObject_VectorcallMethod(_DLPACK, args, 1, <PyObject *>_KWNAMES_STREAM)


cdef int _view_from_view(StridedMemoryView view, StridedMemoryView base, object stream) except -1:
    """Fill ``view`` as a view of the view ``base``: no capsule, no chain, no driver.

    ``view`` shares ``base``'s root memory owner (``_derive_into``), so views of
    views never nest however deep they go.  Streams as for any device memory:
    the caller's stream is made to wait for ``base.ready_stream`` unless they are
    the same or the caller passed -1 (then the data stay ready where they were).
    """
    if base.shape is None:
        raise BufferError("stridedview: the StridedMemoryView to view is not initialised")
    dl_stream = _dlpack_stream_for(base._device_type, stream)  # refuses None on a device
    ready = base.ready_stream
    if dl_stream is not None and dl_stream != -1:
        # (Ordered into a graph's capture, the data stay ready where they were outside it.)
        if ready is None or _same_stream(ready, stream) or not _order_after(ready, stream):
            ready = stream
    _derive_into(view, base)
    view.ready_stream = ready
    return 0


cdef int _view_from_exchange_api(
    StridedMemoryView view, object obj, object stream, _ProducerType info
) except -1:
    """Fill ``view`` from a DLTensor the producer lends (DLPack 1.3's C exchange API).

    The DLTensor is lent only until control returns to the producer, and any
    Python code may hand it control (a method call, a torch mode, a garbage
    collection): every field is copied, in C, before anything else runs.
    "no_sync" means the producer orders nothing: for device memory the caller's
    stream is made to wait for the producer's current work stream here.
    """
    cdef DLTensor tensor  # the copy the rest reads; its arrays point into the view's
    cdef int64_t *arrays
    cdef int32_t device_type
    if _instance_overrides_dlpack(obj):
        # Python finds an instance's own __dlpack__ first: it must be asked.
        return _view_through_capsule(view, obj, stream, info)
    if info.is_torch:
        # Before the layout is borrowed: the check may run Python (a subclass's
        # is_neg, a TorchFunctionMode), which may resize the tensor and free the
        # memory a borrowed layout describes.  Nothing between the borrow and the
        # copy below runs Python.
        _check_torch_bits(obj, info, -1)
        if (
            info.torch_layout_direct
            and _torch_layout_direct_enabled
            and _stable_layout_ready
            and _torch_layout_stable_enabled
            and _view_from_torch(view, obj) == 0
        ):
            # Straight into the view (_from_torch.pxi): what the fill below would
            # give, with no DLTensor in between.
            if view._device_type == kDLCUDA:
                _dlpack_stream_for(kDLCUDA, stream)  # refuses None as ambiguous
            return _finish_exchange_view(view, obj, stream, info)
    _borrow_dltensor(obj, info, &tensor)
    if tensor.ndim > 0 and tensor.shape != NULL:
        # Straight into the view's own C arrays (the C-level API's): the fill
        # below finds them in place and copies nothing more.  (A NULL shape is
        # refused there, before anything is allocated for it.)
        arrays = _c_dims_storage(view, tensor.ndim)
        memcpy(arrays, tensor.shape, tensor.ndim * sizeof(int64_t))
        tensor.shape = arrays
        if tensor.strides != NULL:
            memcpy(arrays + tensor.ndim, tensor.strides, tensor.ndim * sizeof(int64_t))
            tensor.strides = arrays + tensor.ndim
    # The lent DLTensor is not touched again: Python code may run from here on.
    device_type = tensor.device.device_type
    _check_device_type(device_type)
    on_device = device_type == kDLCUDA or device_type == kDLCUDAManaged
    if on_device:
        _dlpack_stream_for(device_type, stream)  # refuses stream None as ambiguous
    _fill_from_dltensor(view, &tensor, 0)
    return _finish_exchange_view(view, obj, stream, info)


cdef inline int _finish_exchange_view(
    StridedMemoryView view, object obj, object stream, _ProducerType info
) except -1:
    """The end of _view_from_exchange_api, once ``view``'s layout and device are
    filled and checked: the streams ordered, the producer kept."""
    cdef int32_t device_type = view._device_type
    if (device_type == kDLCUDA or device_type == kDLCUDAManaged) and stream != -1:
        return _order_exchange_view(view, obj, stream, info)
    view.exporting_obj = obj
    view.ready_stream = None  # host memory, or the caller opted out (-1)
    return 0


cdef int _order_exchange_view(
    StridedMemoryView view, object obj, object stream, _ProducerType info
) except -1:
    """_finish_exchange_view for device memory and a stream: the caller's stream made
    to wait for the producer's current work stream."""
    cdef void *producer_stream = NULL
    if info.current_work_stream == NULL:
        raise BufferError(
            f"dlpack: the exchange API of {type(obj).__name__!r} has no "
            "current_work_stream to order after"
        )
    if info.current_work_stream(view._device_type, view._device_id, &producer_stream) != 0:
        return _exchange_failed(obj, "current_work_stream")
    producer = <uintptr_t>producer_stream
    # A NULL (or 1, 2) work stream is a default stream of the TENSOR's device,
    # whatever context is current: the driver resolves it there, and decides
    # whether it is the consumer's stream.
    view.exporting_obj = obj
    view.ready_stream = stream
    if producer <= 2 or producer != stream:
        if _order_after(producer, stream, view._device_id):
            # Ordered into a graph's capture: ready on the producer's stream outside it (its
            # NULL is the legacy stream of the tensor's device).
            view.ready_stream = producer if producer > 0 else CU_STREAM_LEGACY_HANDLE
    return 0


cdef inline int _borrow_dltensor(object obj, _ProducerType info, DLTensor *out) except -1:
    """Fill ``out`` through the exchange API; a failure is a one-line BufferError.

    For a torch tensor whose type allows it, the C++ function torch's exchange API
    ends in is called directly once calibrated (_torch_bits.pxi); if it fails, the
    exchange API is asked, and reports the failure.
    """
    if info.torch_layout_direct and _torch_layout_direct_enabled:
        if _bits_state() == _BITS_UNCALIBRATED:
            _calibrate_torch_bits()
        if _stable_layout_ready and _torch_layout_stable_enabled:
            if _fill_by_stable_abi(_tensor_cdata(obj), out) == 0:
                return 0
        elif (
            _fill_torch_dltensor != NULL
            and _cxx_fill_guarded(_fill_torch_dltensor, _tensor_cdata(obj), out) == 0
        ):
            return 0
    if info.dltensor_from_py_object(<void *>obj, out) == 0:
        return 0
    return _exchange_failed(obj, "dltensor_from_py_object_no_sync")


cdef int _exchange_failed(object obj, str function) except -1:
    """Raise for a producer's exchange-API ``function`` that returned non-zero.

    The producer reports a failure with a Python exception set; one that sets
    none, or a torch error (a RuntimeError carrying its C++ frames: sparse,
    quantized and meta tensors), is made the BufferError DLPack producers raise,
    with the way out for a torch tensor of a kind no view can describe.
    """
    if PyErr_Occurred() == NULL:
        raise BufferError(
            f"dlpack: the exchange API of {type(obj).__name__!r} failed in {function} "
            "without setting an error"
        )
    try:
        _raise_pending()
    except (RuntimeError, ValueError, TypeError) as error:
        first_line = str(error).partition("\n")[0] or (
            "it gave no reason: its own __dlpack__() raises the producer's error"
        )
        raise BufferError(
            f"dlpack: the producer refused to export a {type(obj).__name__!r} object "
            f"({first_line}){_torch_way_out(obj)}"
        ) from None
    return -1


cdef str _torch_way_out(object obj):
    """What to view instead of a torch tensor no view can describe, as ": ...", or ""."""
    torch = _sys.modules.get("torch")
    if torch is None or not isinstance(obj, torch.Tensor):
        return ""
    try:
        if obj.is_nested:
            return ": a nested tensor has no single layout; view each part (tensor.unbind())"
        if obj.layout is not torch.strided:
            return f": a {obj.layout} tensor has no strides; view a dense copy (tensor.to_dense())"
        if obj.is_quantized:
            return ": view the dequantized values (tensor.dequantize(), a copy)"
        if obj.is_meta:
            return ": a meta tensor has no data; make it on a real device first"
    except Exception:  # a tensor subclass whose attributes raise: no advice
        return ""
    return ""


cdef int _raise_pending() except -1:
    return -1  # Cython raises the exception already set


cdef int _ask_device(object obj, int32_t *device_type, int32_t *device_id) except -1:
    """``obj.__dlpack_device__()``, checked to be a pair of ints."""
    cdef PyObject *args[1]
    args[0] = <PyObject *>obj
    reported = PyObject_VectorcallMethod(_DLPACK_DEVICE, args, 1, NULL)
    try:
        if type(reported) is not tuple or PyTuple_GET_SIZE(reported) != 2:
            raise TypeError
        reported_type = (<tuple>reported)[0]
        reported_id = (<tuple>reported)[1]
        # int subclasses (torch's and jax's enums) are fine; floats are not.
        if not isinstance(reported_type, int) or not isinstance(reported_id, int):
            raise TypeError
        device_type[0] = reported_type
        device_id[0] = reported_id
    except (TypeError, OverflowError):
        raise BufferError(
            f"dlpack: __dlpack_device__() must return (device_type, device_id) (got {reported!r})"
        ) from None
    return 0


cdef int _check_device_type(int32_t device_type) except -1:
    if (
        device_type != kDLCPU
        and device_type != kDLCUDA
        and device_type != kDLCUDAHost
        and device_type != kDLCUDAManaged
    ):
        raise BufferError(
            f"dlpack: unsupported device type {device_type} ({_device_name(device_type)})"
        )
    return 0


cdef int _view_from_capsule(
    StridedMemoryView view, object capsule, int32_t device_type, int32_t device_id
) except -1:
    """Validate a DLPack capsule, fill ``view`` from it, then take ownership.

    The capsule is renamed to ``used_*`` only after every check has passed, so on
    a failure the capsule's own destructor still calls the deleter.  The one
    exception is a major version other than 1: the spec says the consumer then
    calls the deleter and reads nothing else, so it is renamed and released here.
    """
    cdef const char *name
    cdef const char *used_name
    cdef void *managed
    cdef DLManagedTensorVersioned *versioned_tensor
    cdef DLTensor *tensor
    cdef uint64_t flags = 0
    cdef bint versioned

    if not PyCapsule_CheckExact(capsule):
        raise BufferError(
            "dlpack: __dlpack__() must return a PyCapsule "
            f"(got an object of type {type(capsule).__name__!r})"
        )
    name = PyCapsule_GetName(capsule)
    if name != NULL and strcmp(name, _NAME_DLTENSOR_VERSIONED) == 0:
        versioned = True
        used_name = _NAME_USED_DLTENSOR_VERSIONED
    elif name != NULL and strcmp(name, _NAME_DLTENSOR) == 0:
        versioned = False
        used_name = _NAME_USED_DLTENSOR
    elif name != NULL and strncmp(name, b"used_", 5) == 0:
        raise BufferError(
            f"dlpack: capsule was already consumed (name {name.decode('utf-8', 'replace')!r})"
        )
    else:
        shown = None if name == NULL else name.decode("utf-8", "replace")
        raise BufferError(
            f"dlpack: capsule name must be 'dltensor_versioned' or 'dltensor' (got {shown!r})"
        )
    managed = PyCapsule_GetPointer(capsule, name)
    if managed == NULL:
        return -1  # PyCapsule_GetPointer has set the error

    if versioned:
        versioned_tensor = <DLManagedTensorVersioned *>managed
        if versioned_tensor.version.major != DLPACK_MAJOR_VERSION:
            major = versioned_tensor.version.major
            minor = versioned_tensor.version.minor
            PyCapsule_SetName(capsule, used_name)
            if versioned_tensor.deleter != NULL:
                versioned_tensor.deleter(versioned_tensor)
            raise BufferError(
                f"dlpack: unsupported DLPack version {major}.{minor} (major version must be 1)"
            )
        tensor = &versioned_tensor.dl_tensor
        flags = versioned_tensor.flags
    else:
        tensor = &(<DLManagedTensor *>managed).dl_tensor

    if flags & DLPACK_FLAG_BITMASK_IS_COPIED:
        raise BufferError(
            "dlpack: the producer copied the data (IS_COPIED flag set): a view of a copy "
            "would not see the original"
        )
    if tensor.device.device_type != device_type or tensor.device.device_id != device_id:
        raise BufferError(
            f"dlpack: capsule device ({tensor.device.device_type}, {tensor.device.device_id}) "
            f"differs from __dlpack_device__() ({device_type}, {device_id})"
        )
    _fill_from_dltensor(view, tensor, flags)
    if not versioned:
        # A legacy capsule has no READ_ONLY flag: its memory may be immutable (JAX's
        # arrays are, and JAX hands out only legacy capsules), so nothing may write
        # through the view.  numpy takes legacy capsules as read-only too (numpy#28600).
        view.readonly = True

    if PyCapsule_SetName(capsule, used_name) != 0:
        return -1
    view._managed = managed
    view._managed_is_versioned = versioned
    return 0


cdef int _fill_from_dltensor(
    StridedMemoryView view, DLTensor *tensor, uint64_t flags
) except -1:
    """Check a DLTensor and copy its layout into ``view``; takes no ownership."""
    cdef int32_t ndim = tensor.ndim
    cdef int32_t i
    cdef int64_t extent
    cdef int64_t size = 1
    cdef int64_t nbytes
    cdef bint empty = False
    cdef bint overflow = False

    if ndim < 0:
        raise BufferError(f"dlpack: ndim must be >= 0 (got {ndim})")
    if ndim > 0 and tensor.shape == NULL:
        raise BufferError(f"dlpack: shape is NULL with ndim {ndim}")

    for i in range(ndim):
        extent = tensor.shape[i]
        if extent < 0:
            raise BufferError(f"dlpack: shape[{i}] must be >= 0 (got {extent})")
        if extent == 0:
            empty = True
        elif not overflow:
            overflow = sv_mul_i64(size, extent, &size)
    shape = _int64_tuple(tensor.shape, ndim)
    if empty:
        size = 0
    elif overflow:
        raise BufferError(f"dlpack: element count overflows int64 (shape {shape})")

    if ndim == 0:
        strides = ()
    elif tensor.strides != NULL and size != 0:
        strides = _int64_tuple(tensor.strides, ndim)
    else:
        # Producers before DLPack 1.2 may send NULL strides: row-major.
        strides = _row_major_strides(shape, tensor.shape, size)

    if size > 0 and tensor.data == NULL:
        raise BufferError(f"dlpack: data is NULL for a tensor of {size} elements")
    if tensor.byte_offset > UINTPTR_MAX - <uintptr_t>tensor.data:
        raise BufferError(
            f"dlpack: data + byte_offset passes the end of the address space "
            f"(data {<uintptr_t>tensor.data:#x}, byte_offset {tensor.byte_offset})"
        )
    if tensor.device.device_type != kDLCPU and tensor.device.device_id < 0:
        raise BufferError(f"dlpack: device_id must be >= 0 (got {tensor.device.device_id})")
    # The item size comes with the dtype, from the DLPack type it was checked
    # against: bits * lanes / 8, 1 for a padded sub-byte element, 0 for packed ones.
    cdef int64_t itemsize
    view.dtype = _dtype_and_itemsize(tensor.dtype, flags, &itemsize)
    view._dl_dtype = tensor.dtype
    if itemsize == 0:
        _check_packed_layout("dlpack", tensor.dtype, shape, strides, size)
    if not _byte_offsets_fit(ndim, tensor.shape, tensor.strides, size, itemsize):
        raise BufferError(
            f"dlpack: byte offsets from element 0 must fit in int64 (got shape {shape}, "
            f"strides {strides} in elements, itemsize {itemsize})"
        )
    if sv_mul_i64(size, itemsize, &nbytes):
        _check_layout_bytes(
            "dlpack", ndim, tensor.shape, tensor.strides, size, itemsize, shape, strides
        )

    view._ptr = <uintptr_t>tensor.data + <uintptr_t>tensor.byte_offset
    view.ptr = _address_int(view._ptr)
    view.shape = shape
    view.strides = strides
    view._size = size
    view._device_type = tensor.device.device_type
    view.readonly = (flags & DLPACK_FLAG_BITMASK_READ_ONLY) != 0
    if tensor.device.device_type == kDLCPU:
        view._device_id = -1
        view.is_device_accessible = False
    else:
        view._device_id = tensor.device.device_id
        view.is_device_accessible = True
    if ndim != 0 and (tensor.strides == NULL or size == 0):
        return _store_c_layout(view)  # strides computed, or an empty view's 0s
    return _store_c_layout_from(view, tensor.shape, tensor.strides, ndim, itemsize)


cdef int _check_packed_layout(
    str where, DLDataType dl_dtype, tuple shape, tuple strides, int64_t size
) except -1:
    """Refuse packed sub-byte elements in any layout but row-major and gap-free.

    DLPack defines a packed tensor's element i as the bits at ``i * bits`` from the
    data pointer: the elements in row-major order, one after another.  Element
    strides that step otherwise would address bits inside a byte, which no byte
    pointer, byte stride or kernel argument can say.  Extent-1 axes may carry any
    stride (they never step); an empty tensor addresses nothing.
    """
    if size == 0 or _is_contiguous(shape, strides, size, reversed_axes=True):
        return 0
    raise BufferError(
        f"{where}: packed sub-byte dtype {_dl_dtype_text(dl_dtype)} must be row-major "
        f"and gap-free, its elements one after another (got shape {shape}, strides "
        f"{strides} in elements)"
    )
