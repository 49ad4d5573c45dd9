# Memory described without DLPack or the CAI: numpy's array interface (v3), the
# Python buffer protocol, and from_buffer's layouts laid over a buffer's bytes.
#
# Host memory needs no driver and no stream: these views have device_id -1 and
# ready_stream None.  Only a cuda.core Buffer handed to from_buffer may hold
# device memory, and it says itself where.  A buffer obtained through the buffer
# protocol is held (the exporter keeps it valid and unmoved) until the view is
# deallocated, then released exactly once.

from cpython.buffer cimport (
    PyBUF_FULL_RO,
    PyBUF_SIMPLE,
    PyBuffer_IsContiguous,
    PyBuffer_Release,
    PyObject_CheckBuffer,
    PyObject_GetBuffer,
)

cdef str _ARRAY_INTERFACE = "__array_interface__"
cdef str _AI_NAME = "array interface"  # the protocols, as messages name them
cdef str _BUFFER_NAME = "buffer"

# (PEP 3118 format, itemsize) -> numpy dtype
cdef dict _buffer_dtypes = {}


# --- holding a buffer --------------------------------------------------------

cdef Py_buffer *_acquire_buffer(object obj, int flags) except NULL:
    """``obj``'s buffer, requested with ``flags``, in a block the caller owns.

    The exporter's own exception (a released memoryview, a refused request)
    reaches the caller unchanged.  Give the block back with _release_held_buffer.
    """
    cdef Py_buffer *buf = <Py_buffer *>malloc(sizeof(Py_buffer))
    if buf == NULL:
        raise MemoryError()
    if PyObject_GetBuffer(obj, buf, flags) != 0:
        free(buf)
        return NULL  # the exporter has set the exception
    return buf


cdef void _release_held_buffer(Py_buffer *buf) noexcept:
    PyBuffer_Release(buf)
    free(buf)


cdef int _set_view(
    StridedMemoryView view, uintptr_t ptr, tuple shape, tuple strides, object dtype,
    int64_t size, bint readonly, object exporting_obj,
    int32_t device_type=kDLCPU, int32_t device_id=-1,
) except -1:
    """Fill every field of a view made by this module (host memory by default)."""
    view._ptr = ptr
    view.ptr = ptr
    view.shape = shape
    view.strides = _empty_view_strides(len(shape)) if size == 0 else strides
    view.dtype = dtype
    view._size = size
    view.readonly = readonly
    view._device_type = device_type
    view._device_id = device_id
    view.is_device_accessible = device_type != kDLCPU
    view.ready_stream = None
    view.exporting_obj = exporting_obj
    return _store_c_layout(view)


cdef tuple _byte_span(tuple shape, tuple strides, Py_ssize_t itemsize):
    """``(lowest, end)``: the byte offsets, from element [0, ..., 0], of the first byte
    the layout touches and of one past its last; ``(0, 0)`` when it holds no element."""
    low = 0
    high = 0
    for extent, stride in zip(shape, strides):
        if extent == 0:
            return (0, 0)
        step = (extent - 1) * stride * itemsize
        if step < 0:
            low += step
        else:
            high += step
    return (low, high + itemsize)


# --- the buffer protocol -----------------------------------------------------

cdef int _view_from_buffer_protocol(StridedMemoryView view, object obj) except -1:
    """Fill ``view`` from ``obj``'s buffer (format, shape and strides as exported)."""
    cdef Py_buffer *buf = _acquire_buffer(obj, PyBUF_FULL_RO)
    try:
        shape, strides, dtype, size = _buffer_layout(obj, buf)
        _set_view(view, <uintptr_t>buf.buf, shape, strides, dtype, size, buf.readonly, obj)
    except BaseException:
        _release_held_buffer(buf)
        raise
    view._held_buffer = buf
    return 0


cdef tuple _buffer_layout(object obj, Py_buffer *buf):
    """``(shape, element strides, dtype, size)`` of an exported buffer, checked."""
    cdef Py_ssize_t i, ndim = buf.ndim
    cdef int64_t extents[_CAI_MAX_NDIM]
    cdef int64_t element_strides[_CAI_MAX_NDIM]
    if ndim < 0 or ndim > _CAI_MAX_NDIM:
        raise BufferError(f"buffer: ndim must be from 0 to {_CAI_MAX_NDIM} (got {ndim})")
    if buf.suboffsets != NULL:
        for i in range(ndim):
            if buf.suboffsets[i] >= 0:
                raise BufferError(
                    "buffer: indirect buffers (PIL-style suboffsets) cannot be viewed "
                    f"(suboffsets {[buf.suboffsets[j] for j in range(ndim)]})"
                )
    dtype = _buffer_dtype(obj, buf)
    cdef Py_ssize_t itemsize = buf.itemsize
    if ndim and buf.shape == NULL:
        raise BufferError(f"buffer: shape is NULL with ndim {ndim}")
    shape = tuple([buf.shape[i] for i in range(ndim)])
    for i in range(ndim):
        extents[i] = buf.shape[i]
        if extents[i] < 0:
            raise BufferError(f"buffer: shape extents must be >= 0 (got {shape})")
    cdef int64_t size = _extents_product(extents, ndim, shape, _BUFFER_NAME)
    if buf.strides == NULL:
        strides = _row_major_strides(shape, extents, size)
    else:
        byte_strides = tuple([buf.strides[i] for i in range(ndim)])
        for i in range(ndim):
            if byte_strides[i] % itemsize and extents[i] > 1:
                raise BufferError(
                    f"buffer: strides {byte_strides} are not multiples of the item size "
                    f"{itemsize}"
                )
        strides = tuple([stride // itemsize for stride in byte_strides])
    for i in range(ndim):
        element_strides[i] = strides[i]
    _check_layout_bytes(
        _BUFFER_NAME, ndim, extents, element_strides, size, itemsize, shape, strides
    )
    if buf.buf == NULL and size != 0:
        raise BufferError(f"buffer: the pointer is NULL for {size} elements (shape {shape})")
    return shape, strides, dtype, size


cdef object _buffer_dtype(object obj, Py_buffer *buf):
    """The numpy dtype of a buffer's PEP 3118 format, by numpy's own rules."""
    fmt = b"B" if buf.format == NULL else <bytes>buf.format
    key = (fmt, buf.itemsize)
    dtype = sv_dict_get_or_none(_buffer_dtypes, key)
    if dtype is not None:
        return dtype
    dtype = _resolve_buffer_dtype(obj, fmt, buf.itemsize)
    if len(_buffer_dtypes) < 4096:
        _buffer_dtypes[key] = dtype
    return dtype


cdef object _resolve_buffer_dtype(object obj, bytes fmt, Py_ssize_t itemsize):
    import numpy

    shown = fmt.decode("ascii", "replace")
    if itemsize <= 0:
        raise BufferError(f"buffer: itemsize must be > 0 (got {itemsize} for format {shown!r})")
    try:
        # numpy parses the format of a zero-length buffer that claims it.
        dtype = numpy.asarray(_FormatProbe(fmt, itemsize)).dtype
    except (TypeError, ValueError, RuntimeError) as exc:
        dtype = _ctypes_element_dtype(obj)
        if dtype is None:
            raise BufferError(
                f"buffer: format {shown!r} (itemsize {itemsize}) has no numpy dtype ({exc})"
            ) from None
    if not dtype.isnative:
        raise BufferError(f"buffer: format {shown!r} is not native-endian")
    if dtype.hasobject:
        raise BufferError(
            f"buffer: format {shown!r} holds Python objects, which no view can carry: "
            "convert the data first, e.g. numpy.asarray(obj).astype(numpy.float64)"
        )
    if dtype.itemsize != itemsize:
        raise BufferError(
            f"buffer: format {shown!r} has item size {dtype.itemsize}, the buffer {itemsize}"
        )
    return dtype


cdef object _ctypes_element_dtype(object obj):
    """numpy's dtype of a ctypes object's element type, or None for other objects.

    ctypes writes PEP 3118 formats without the padding of its structures, which
    numpy's parser then refuses; ``numpy.dtype`` of the ctypes type itself is
    numpy's rule for those.
    """
    ctypes = _sys.modules.get("ctypes")
    if ctypes is None or not isinstance(obj, ctypes.Array):
        if ctypes is None or not isinstance(obj, (ctypes.Structure, ctypes.Union)):
            return None
    import numpy

    element_type = type(obj)
    while issubclass(element_type, ctypes.Array):
        element_type = element_type._type_
    try:
        return numpy.dtype(element_type)
    except (TypeError, ValueError):
        return None


@cython.final
@cython.auto_pickle(False)
cdef class _FormatProbe:
    """A zero-length 1-d buffer claiming a PEP 3118 format, for numpy to parse it."""

    cdef bytes format
    cdef Py_ssize_t extent
    cdef Py_ssize_t stride

    def __cinit__(self, bytes format, Py_ssize_t itemsize):
        self.format = format
        self.extent = 0
        self.stride = itemsize

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        buffer.buf = <void *>&self.extent
        buffer.obj = self
        buffer.len = 0
        buffer.readonly = 1
        buffer.itemsize = self.stride
        buffer.format = <char *>self.format
        buffer.ndim = 1
        buffer.shape = &self.extent
        buffer.strides = &self.stride
        buffer.suboffsets = NULL
        buffer.internal = NULL

    def __releasebuffer__(self, Py_buffer *buffer):
        pass


# --- numpy's array interface -------------------------------------------------

cdef int _view_from_array_interface(
    StridedMemoryView view, object obj, object interface
) except -1:
    """Fill ``view`` from ``obj``'s ``__array_interface__`` dict (version 3).

    ``data`` is a ``(ptr, readonly)`` tuple, or a buffer object (None: ``obj``
    itself) whose memory starts ``offset`` bytes in; the layout must then lie
    inside that buffer, which the view holds.
    """
    if not isinstance(interface, dict):
        raise TypeError(
            f"array interface: __array_interface__ must be a dict (got {_quote(interface)})"
        )
    cdef dict ai = <dict>interface
    version = ai.get("version", _MISSING)
    if version is _MISSING:
        raise BufferError("array interface: 'version' is missing")
    if type(version) is not int or version != 3:
        raise BufferError(f"array interface: 'version' must be 3 (got {version!r})")

    cdef int64_t extents[_CAI_MAX_NDIM]
    cdef int64_t element_strides_c[_CAI_MAX_NDIM]
    shape = _interface_shape(ai, extents, _AI_NAME)
    cdef Py_ssize_t ndim = PyTuple_GET_SIZE(shape)
    dtype = _interface_dtype(ai, _AI_NAME)
    cdef Py_ssize_t itemsize = dtype.itemsize
    if itemsize == 0:
        raise BufferError(f"array interface: 'typestr' {ai['typestr']!r} has item size 0")
    cdef int64_t size = _extents_product(extents, ndim, shape, _AI_NAME)
    strides = ai.get("strides")
    if strides is None:
        element_strides = _row_major_strides(shape, extents, size)
    else:
        _interface_element_strides(
            strides, shape, extents, itemsize, element_strides_c, _AI_NAME
        )
        element_strides = _int64_tuple(element_strides_c, <int32_t>ndim)
    _check_layout_bytes(
        _AI_NAME, ndim, extents, NULL if strides is None else element_strides_c, size,
        itemsize, shape, element_strides,
    )
    mask = ai.get("mask")
    if mask is not None:
        raise BufferError(
            f"array interface: masked arrays are not supported ('mask' is {_quote(mask)})"
        )
    offset = ai.get("offset", 0)
    if type(offset) is not int:
        raise TypeError(f"array interface: 'offset' must be an int (got {_quote(offset)})")

    # What keeps the memory alive may be the dict alone (a numpy scalar's '__ref').
    view._interface = ai
    data = ai.get("data")
    if type(data) is tuple:
        ptr, readonly = _interface_pointer(data, size, shape, _AI_NAME)
        if offset != 0:
            raise BufferError(
                "array interface: 'offset' applies to a buffer 'data' only "
                f"(got offset {offset} with a (ptr, readonly) tuple)"
            )
        return _set_view(view, ptr, shape, element_strides, dtype, size, bool(readonly), obj)

    source = obj if data is None else data
    if not PyObject_CheckBuffer(source):
        raise TypeError(
            "array interface: 'data' must be a (ptr, readonly) tuple or an object with "
            f"the buffer protocol (got {_quote(data)})"
        )
    cdef Py_buffer *buf = _acquire_buffer(source, PyBUF_SIMPLE)
    try:
        low, end = _byte_span(shape, element_strides, itemsize)
        if offset + low < 0 or offset + end > buf.len:
            raise BufferError(
                f"array interface: the array (bytes {offset + low} to {offset + end} of its "
                f"buffer) does not lie inside the buffer's {buf.len} bytes"
            )
        _set_view(
            view, <uintptr_t>buf.buf + <uintptr_t>offset, shape, element_strides, dtype,
            size, buf.readonly, obj,
        )
    except BaseException:
        _release_held_buffer(buf)
        raise
    view._held_buffer = buf
    return 0


# --- from_buffer: a layout laid over a buffer's bytes -------------------------

cdef int _view_from_buffer_layout(
    StridedMemoryView view, object buffer, object shape, object strides,
    object itemsize, object dtype, bint is_readonly,
) except -1:
    """``StridedMemoryView.from_buffer``: see its docstring."""
    cdef Py_buffer *buf = NULL
    cdef int32_t device_type = kDLCPU
    cdef int32_t device_id = -1
    cdef bint readonly = is_readonly  # set on every path below; initialised for the compiler
    own_layout = None  # (shape, strides, dtype) of a buffer-protocol object
    if _is_cuda_core_buffer(buffer):
        ptr, nbytes, device_type, device_id = _cuda_core_buffer_memory(buffer)
        contiguous = True
        readonly = is_readonly
    elif PyObject_CheckBuffer(buffer):
        buf = _acquire_buffer(buffer, PyBUF_FULL_RO)
    else:
        raise TypeError(
            "buffer: from_buffer needs a cuda.core Buffer or an object with the buffer "
            f"protocol (got {_quote(buffer)})"
        )
    try:
        if buf != NULL:
            own_shape, own_strides, own_dtype, _ = _buffer_layout(buffer, buf)
            own_layout = (own_shape, own_strides, own_dtype)
            ptr = <uintptr_t>buf.buf
            nbytes = buf.len
            contiguous = PyBuffer_IsContiguous(buf, b"C")
            readonly = is_readonly or buf.readonly
        element_dtype = _element_dtype(dtype, itemsize, own_layout)
        layout = _requested_layout(
            shape, strides, element_dtype, own_layout, nbytes, contiguous
        )
        _set_view(
            view, ptr, layout[0], layout[1], element_dtype, layout[2], readonly, buffer,
            device_type, device_id,
        )
    except BaseException:
        if buf != NULL:
            _release_held_buffer(buf)
        raise
    view._held_buffer = buf
    return 0


cdef bint _is_cuda_core_buffer(object buffer) except -1:
    # cuda.core's Buffer, or anything with its attributes: an address (``handle``),
    # a byte count (``size``) and where the memory lives.  ``device_id`` is looked
    # for on the type first: hasattr on the object would run the property, and
    # cuda.core's raises RuntimeError for a buffer of a legacy pinned resource.
    return (
        hasattr(buffer, "handle")
        and hasattr(buffer, "size")
        and hasattr(buffer, "is_device_accessible")
        and (hasattr(type(buffer), "device_id") or hasattr(buffer, "device_id"))
    )


cdef tuple _cuda_core_buffer_memory(object buffer):
    """``(ptr, nbytes, DLPack device type, device_id)`` of a cuda.core Buffer."""
    ptr = int(buffer.handle)
    nbytes = buffer.size
    if type(nbytes) is not int or nbytes < 0:
        raise TypeError(f"buffer: Buffer.size must be an int >= 0 (got {_quote(nbytes)})")
    if not 0 <= ptr < _UINTPTR_LIMIT:
        raise BufferError(f"buffer: Buffer.handle must be an address >= 0 (got {ptr!r})")
    if not buffer.is_device_accessible:
        return ptr, nbytes, kDLCPU, -1
    if getattr(buffer, "is_managed", False):
        return ptr, nbytes, kDLCUDAManaged, max(int(buffer.device_id), 0)
    if getattr(buffer, "is_host_accessible", False):
        # Pinned host memory: DLPack's kDLCUDAHost, device 0 as cuda.core's own
        # __dlpack_device__ gives it.  A legacy pinned resource is bound to no GPU,
        # and cuda.core's device_id raises RuntimeError saying so: 0 then too.
        try:
            return ptr, nbytes, kDLCUDAHost, max(int(buffer.device_id), 0)
        except RuntimeError:
            return ptr, nbytes, kDLCUDAHost, 0
    device_id = int(buffer.device_id)
    if device_id < 0:
        raise BufferError(
            f"buffer: a device-accessible Buffer must have a device_id >= 0 (got {device_id})"
        )
    return ptr, nbytes, kDLCUDA, device_id


cdef object _element_dtype(object dtype, object itemsize, object own_layout):
    """The view's dtype: ``dtype``, else opaque ``itemsize``-byte elements (``V<n>``, even
    where the buffer's own elements have that size), else the buffer's own."""
    import numpy

    if itemsize is not None:
        if isinstance(itemsize, bool) or not isinstance(itemsize, int):
            raise TypeError(f"buffer: itemsize must be an int (got {_quote(itemsize)})")
        if itemsize <= 0:
            raise ValueError(f"buffer: itemsize must be > 0 (got {itemsize})")
    if dtype is not None:
        try:
            dtype = numpy.dtype(dtype)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"buffer: dtype must be a numpy dtype (got {dtype!r}: {exc})") from None
        if dtype.hasobject or dtype.itemsize == 0:
            raise ValueError(f"buffer: dtype {dtype} cannot describe raw memory")
        if itemsize is not None and itemsize != dtype.itemsize:
            raise ValueError(
                f"buffer: itemsize {itemsize} differs from dtype {dtype}'s {dtype.itemsize}"
            )
        return dtype
    if itemsize is not None:
        return numpy.dtype((numpy.void, itemsize))  # opaque elements, whatever the buffer's
    if own_layout is None:
        raise ValueError("buffer: a cuda.core Buffer needs dtype or itemsize")
    return own_layout[2]


cdef tuple _requested_layout(
    object shape, object strides, object dtype, object own_layout, object nbytes,
    bint contiguous,
):
    """``(shape, element strides, size)`` of the view from_buffer makes, checked to fit."""
    cdef Py_ssize_t itemsize = dtype.itemsize
    if shape is None:
        if strides is not None:
            raise ValueError("buffer: strides were given without a shape")
        if own_layout is not None and own_layout[2].itemsize == itemsize:
            own_shape, own_strides, _ = own_layout
            return own_shape, own_strides, _element_count(own_shape)
        if not contiguous:
            raise ValueError(
                "buffer: a non-contiguous buffer keeps its own item size (got itemsize "
                f"{itemsize}, the buffer's is {own_layout[2].itemsize})"
            )
        if nbytes % itemsize:
            raise ValueError(
                f"buffer: the buffer's {nbytes} bytes are not a whole number of "
                f"{itemsize}-byte elements"
            )
        # Checked below as a shape given would be (a Buffer's size may be any int).
        shape = (nbytes // itemsize,)
    cdef int64_t extents[_CAI_MAX_NDIM]
    cdef int64_t element_strides[_CAI_MAX_NDIM]
    cdef Py_ssize_t i
    shape = _int_tuple(shape, "shape")
    if len(shape) > _CAI_MAX_NDIM:
        raise ValueError(f"buffer: shape has {len(shape)} dimensions, more than {_CAI_MAX_NDIM}")
    for i, extent in enumerate(shape):
        if not 0 <= extent <= INT64_MAX:
            raise ValueError(f"buffer: shape extents must be from 0 to 2**63 - 1 (got {shape})")
        extents[i] = extent
    size = _element_count(shape)
    if size > INT64_MAX:
        raise ValueError(f"buffer: element count overflows int64 (shape {shape})")
    if strides is None:
        strides = _row_major_strides(shape, extents, size)
    else:
        strides = _int_tuple(strides, "strides")
        if len(strides) != len(shape):
            raise ValueError(f"buffer: strides {strides} and shape {shape} differ in length")
        for stride in strides:
            if not -INT64_MAX <= stride <= INT64_MAX:
                raise ValueError(f"buffer: strides must fit in int64 (got {strides})")
    if not contiguous:
        raise ValueError(
            "buffer: a shape can only be laid over a contiguous buffer (its bytes in one run)"
        )
    low, end = _byte_span(shape, strides, itemsize)
    if low < 0:
        raise ValueError(
            f"buffer: the layout reaches {-low} bytes before the buffer's start (shape "
            f"{shape}, strides {strides}: element [0, ..., 0] is the buffer's first byte)"
        )
    if end > nbytes:
        raise ValueError(
            f"buffer: the layout needs {end} bytes, the buffer has {nbytes} (shape {shape}, "
            f"strides {strides}, itemsize {itemsize})"
        )
    for i in range(len(shape)):
        element_strides[i] = strides[i]
    _check_layout_bytes(
        _BUFFER_NAME, len(shape), extents, element_strides, size, itemsize, shape, strides
    )
    return shape, strides, size


cdef tuple _int_tuple(object values, str name):
    """``values`` (a tuple or list of ints) as a tuple, else TypeError."""
    if isinstance(values, (tuple, list)):
        values = tuple(values)
        if all([type(value) is int for value in values]):
            return values
    raise TypeError(f"buffer: {name} must be a tuple of ints (got {_quote(values)})")

