# The CUDA Array Interface (versions 0 to 3) -> the view's fields.
#
# One check per invariant, run before the view takes anything; messages name the
# protocol and quote the offending value.  A missing key or an unusable value is
# a BufferError, a value of the wrong type a TypeError.

cdef str _CAI = "__cuda_array_interface__"
cdef str _CAI_NAME = "cuda array interface"  # the protocol, as messages name it
cdef object _MISSING = object()
cdef enum:
    _CAI_MAX_NDIM = 64  # numpy's, CuPy's and Numba's limit

cdef extern from "Python.h":
    long long PyLong_AsLongLongAndOverflow(object, int *) except? -1

# typestr (or (typestr, descr)) -> numpy dtype
cdef dict _cai_dtypes = {}


cdef int _view_from_cai(
    StridedMemoryView view, object obj, object interface, object stream
) except -1:
    """Fill ``view`` from ``obj``'s CAI dict ``interface``; ``stream`` is normalised.

    Orders ``stream`` after the producer's stream (v3 ``stream`` key) unless
    ``stream`` is -1, the producer gave none, or both are the same stream.
    """
    if stream is None:
        raise BufferError(
            "cuda array interface: stream_ptr=None is ambiguous: pass a stream handle, "
            "or -1 to opt out"
        )
    if not isinstance(interface, dict):
        raise TypeError(
            "cuda array interface: __cuda_array_interface__ must be a dict "
            f"(got {_quote(interface)})"
        )
    cdef dict cai = <dict>interface

    version = cai.get("version", _MISSING)
    if version is _MISSING:
        raise BufferError("cuda array interface: 'version' is missing")
    if type(version) is not int or not 0 <= version <= 3:
        raise BufferError(
            f"cuda array interface: 'version' must be an int from 0 to 3 (got {version!r})"
        )

    cdef int64_t extents[_CAI_MAX_NDIM]
    cdef int64_t element_strides_c[_CAI_MAX_NDIM]
    shape = _interface_shape(cai, extents, _CAI_NAME)
    cdef Py_ssize_t ndim = PyTuple_GET_SIZE(shape)
    dtype = _interface_dtype(cai, _CAI_NAME)
    cdef Py_ssize_t itemsize = dtype.itemsize
    if itemsize == 0:
        raise BufferError(
            f"cuda array interface: 'typestr' {cai['typestr']!r} has item size 0"
        )
    cdef int64_t size = _extents_product(extents, ndim, shape, _CAI_NAME)
    cdef int64_t nbytes

    data = cai.get("data", _MISSING)
    if data is _MISSING:
        raise BufferError("cuda array interface: 'data' is missing")
    ptr, readonly = _interface_pointer(data, size, shape, _CAI_NAME)

    strides = cai.get("strides")
    if strides is None:
        element_strides = _row_major_strides(shape, extents, size)
    else:
        _interface_element_strides(
            strides, shape, extents, itemsize, element_strides_c, _CAI_NAME
        )
        element_strides = _int64_tuple(element_strides_c, <int32_t>ndim)
    if not _byte_offsets_fit(
        ndim, extents, NULL if strides is None else element_strides_c, size, itemsize
    ):
        raise BufferError(
            "cuda array interface: byte offsets from the first element must fit in int64 "
            f"(got 'shape' {shape}, 'strides' {strides}, item size {itemsize})"
        )
    if sv_mul_i64(size, itemsize, &nbytes):
        _check_layout_bytes(
            _CAI_NAME, ndim, extents, NULL if strides is None else element_strides_c, size,
            itemsize, shape, element_strides,
        )

    mask = cai.get("mask")
    if mask is not None:
        raise BufferError(
            f"cuda array interface: masked arrays are not supported ('mask' is {_quote(mask)})"
        )

    producer_stream = None
    if version >= 3:
        producer_stream = cai.get("stream")
        if producer_stream is not None:
            if type(producer_stream) is not int:
                raise TypeError(
                    "cuda array interface: 'stream' must be None or an int "
                    f"(got {producer_stream!r})"
                )
            if producer_stream == 0:
                raise BufferError(
                    "cuda array interface: 'stream' 0 is disallowed (ambiguous: use 1 for "
                    "the legacy default stream, 2 for the per-thread one)"
                )
            if not 0 < producer_stream < _UINTPTR_LIMIT:
                raise BufferError(
                    "cuda array interface: 'stream' must be None or a stream handle > 0 "
                    f"(got {producer_stream!r})"
                )

    # Every check passed: order the streams, then fill the view.
    if stream == -1:
        view.ready_stream = producer_stream
    else:
        # A default-stream producer (1, 2: <= 2) is the data device's: the driver decides.
        # For a consumer capturing a graph, only the graph's replays wait: the data are ready
        # on the producer's stream outside it.
        view.ready_stream = stream
        if producer_stream is not None and (
            producer_stream <= 2 or producer_stream != stream
        ):
            if _order_after(producer_stream, stream, None, ptr):
                view.ready_stream = producer_stream

    view._ptr = ptr
    view.ptr = ptr
    view.shape = shape
    view.strides = _empty_view_strides(ndim) if size == 0 else element_strides
    view.dtype = dtype
    view._size = size
    view.readonly = bool(readonly)
    view.is_device_accessible = True
    view._device_type = kDLCUDA
    view._device_id = _DEVICE_ID_UNKNOWN
    view.exporting_obj = obj
    view._interface = cai  # the producer may keep the memory alive through it alone
    if strides is not None and size != 0:  # the element strides are at hand in C
        _store_dl_dtype(view, _packed_dl_dtype(dtype, itemsize))
        return _store_c_layout_from(view, extents, element_strides_c, <int32_t>ndim, itemsize)
    return _store_c_layout(view)


cdef tuple _interface_shape(dict interface, int64_t *extents, str where):
    """The 'shape' entry of a CAI or array interface dict as a tuple, its extents
    copied into ``extents``; ``where`` names the protocol in messages."""
    shape = interface.get("shape", _MISSING)
    if shape is _MISSING:
        raise BufferError(f"{where}: 'shape' is missing")
    if type(shape) is not tuple:
        if not isinstance(shape, (tuple, list)):
            raise TypeError(f"{where}: 'shape' must be a tuple of ints (got {_quote(shape)})")
        shape = tuple(shape)
    cdef Py_ssize_t i, ndim = PyTuple_GET_SIZE(shape)
    if ndim > _CAI_MAX_NDIM:
        raise BufferError(f"{where}: 'shape' has {ndim} dimensions, more than {_CAI_MAX_NDIM}")
    for i in range(ndim):
        extent = (<tuple>shape)[i]
        if type(extent) is not int:
            raise TypeError(f"{where}: 'shape' must be a tuple of ints (got {shape!r})")
        extents[i] = _int64_or_raise(extent, shape, "'shape' extents", where)
        if extents[i] < 0:
            raise BufferError(f"{where}: 'shape' extents must be >= 0 (got {shape!r})")
    return <tuple>shape


cdef tuple _interface_pointer(object data, int64_t size, tuple shape, str where):
    """``(ptr, readonly)`` of a CAI or array interface ``data`` pair, checked."""
    if type(data) is not tuple or len(data) != 2:
        raise TypeError(f"{where}: 'data' must be a (ptr, readonly) tuple (got {_quote(data)})")
    ptr, readonly = data
    if type(ptr) is not int:
        raise TypeError(f"{where}: 'data' pointer must be an int (got {ptr!r})")
    if not 0 <= ptr < _UINTPTR_LIMIT:
        raise BufferError(f"{where}: 'data' pointer must be an address >= 0 (got {ptr!r})")
    if ptr == 0 and size != 0:
        raise BufferError(f"{where}: 'data' pointer is 0 for a non-empty array (shape {shape})")
    if not isinstance(readonly, (bool, int)):
        raise TypeError(f"{where}: 'data' readonly flag must be a bool (got {readonly!r})")
    return ptr, readonly


cdef int64_t _int64_or_raise(object value, object whole, str what, str where) except? -1:
    """``value`` (an int) as int64, or BufferError quoting ``whole``."""
    cdef int overflow = 0
    cdef long long result = PyLong_AsLongLongAndOverflow(value, &overflow)
    if overflow < 0 and what == "'shape' extents":
        raise BufferError(f"{where}: 'shape' extents must be >= 0 (got {whole!r})")
    if overflow:
        raise BufferError(f"{where}: {what} must fit in int64 (got {whole!r})")
    return result


cdef int64_t _extents_product(
    const int64_t *extents, Py_ssize_t ndim, tuple shape, str where
) except -1:
    """The element count, refusing an int64 overflow (0 as soon as an extent is 0)."""
    cdef int64_t size = 1
    cdef Py_ssize_t i
    cdef bint overflow = False
    for i in range(ndim):
        if extents[i] == 0:
            return 0
        if not overflow:
            overflow = sv_mul_i64(size, extents[i], &size)
    if overflow:
        raise BufferError(f"{where}: element count overflows int64 (shape {shape})")
    return size


cdef object _interface_dtype(dict interface, str where):
    """The numpy dtype of a CAI or array interface dict ('typestr', 'descr')."""
    typestr = interface.get("typestr", _MISSING)
    if typestr is _MISSING:
        raise BufferError(f"{where}: 'typestr' is missing")
    if type(typestr) is not str:
        raise TypeError(f"{where}: 'typestr' must be a str (got {typestr!r})")
    descr = interface.get("descr")
    if descr is not None and type(descr) is not list:
        raise TypeError(
            f"{where}: 'descr' must be a list of (name, type) tuples (got {_quote(descr)})"
        )
    key = typestr if descr is None else (typestr, repr(descr))
    dtype = sv_dict_get_or_none(_cai_dtypes, key)
    if dtype is None:
        dtype = _resolve_interface_dtype(typestr, descr, where)
        if len(_cai_dtypes) < 4096:
            _cai_dtypes[key] = dtype
    return dtype


cdef object _resolve_interface_dtype(str typestr, object descr, str where):
    """The numpy dtype of a CAI typestr, or of its descr when that is a structured type."""
    import numpy

    # numpy writes an object array's typestr without its item size ("|O").
    if len(typestr) < 3 and typestr[1:] != "O" or typestr[0] not in "<>|=":
        raise BufferError(
            f"{where}: 'typestr' must be <byte order><kind><item size>, "
            f"e.g. '<f4' (got {typestr!r})"
        )
    try:
        dtype = numpy.dtype(typestr)
    except (TypeError, ValueError) as exc:
        raise BufferError(
            f"{where}: 'typestr' {typestr!r} is not a numpy type string ({exc})"
        ) from None
    if dtype.byteorder == ">" or (dtype.byteorder == "<" and _BIG_ENDIAN_HOST):
        raise BufferError(
            f"{where}: 'typestr' {typestr!r} is not native-endian"
        )
    if dtype.hasobject:
        raise BufferError(
            f"{where}: 'typestr' {typestr!r} holds Python objects, which no view can "
            "carry: convert the array first, e.g. array.astype(numpy.float64)"
        )
    if descr is not None and _descr_is_structured(descr):
        try:
            structured = numpy.dtype(descr)
        except (TypeError, ValueError) as exc:
            raise BufferError(
                f"{where}: 'descr' {descr!r} is not a numpy descr ({exc})"
            ) from None
        if structured.itemsize != dtype.itemsize:
            raise BufferError(
                f"{where}: 'descr' {descr!r} has item size "
                f"{structured.itemsize}, 'typestr' {typestr!r} {dtype.itemsize}"
            )
        if structured.hasobject:
            raise BufferError(
                f"{where}: 'descr' {descr!r} holds Python objects"
            )
        return structured
    return dtype


cdef bint _descr_is_structured(list descr) except -1:
    # The CAI default descr is [('', typestr)]: one unnamed field, nothing structured.
    if not descr:
        return False
    if len(descr) == 1:
        field = descr[0]
        if isinstance(field, tuple) and len(field) == 2 and field[0] == "":
            return False
    return True


cdef int _interface_element_strides(
    object strides, tuple shape, const int64_t *extents, Py_ssize_t itemsize, int64_t *out,
    str where
) except -1:
    """Byte strides -> element strides in ``out``; BufferError where not a multiple."""
    if not isinstance(strides, (tuple, list)):
        raise TypeError(
            f"{where}: 'strides' must be None or a tuple of ints "
            f"(got {_quote(strides)})"
        )
    if type(strides) is not tuple:
        strides = tuple(strides)  # a list, or a subclass whose len() might not be its own
    cdef Py_ssize_t i, ndim = len(shape)
    if len(strides) != ndim:
        raise BufferError(
            f"{where}: 'strides' {strides!r} and 'shape' {shape!r} "
            "differ in length"
        )
    cdef int64_t byte_stride, element_stride
    for i in range(ndim):
        stride = strides[i]
        if type(stride) is not int:
            raise TypeError(
                f"{where}: 'strides' must be None or a tuple of ints "
                f"(got {strides!r})"
            )
        byte_stride = _int64_or_raise(stride, strides, "'strides'", where)
        element_stride = byte_stride // itemsize  # floor, as Python's //
        if byte_stride % itemsize != 0:
            # Extents of 0 or 1 never step: any stride will do there.
            if extents[i] > 1:
                raise BufferError(
                    f"{where}: 'strides' {strides!r} are not multiples of "
                    f"the item size {itemsize}"
                )
        out[i] = element_stride
    return 0


cdef bint _same_stream(object a, object b):
    # 0 (the NULL stream) is the legacy default stream, as handle 1 names it.
    return (1 if a == 0 else a) == (1 if b == 0 else b)


cdef str _quote(object value):
    """A short repr of a value for a message: its type and, if short, the value."""
    text = repr(value)
    if len(text) > 80:
        text = text[:77] + "..."
    return f"{text} of type {type(value).__name__!r}"
