# What a stream argument means: normalise what the caller gave, and choose the
# value each device kind is handed through DLPack.
#
# Stream handles are CUDA's: 0 is the null stream, 1 the legacy default stream
# (CU_STREAM_LEGACY), 2 the per-thread default stream (CU_STREAM_PER_THREAD), any
# other positive value a CUstream handle.  -1 is the DLPack and stridedview word
# for "do not order anything: I take care of it".

from cpython.number cimport PyNumber_Index

cdef extern from "Python.h":
    # Cannot fail for an exact int (the only argument it is given here).
    long long _exact_int_value "PyLong_AsLongLongAndOverflow"(object, int *) noexcept

cdef object _STREAM_TYPE_MSG = (
    "stream: stream_ptr must be None, an int, or an object with __cuda_stream__ (got {!r}){}"
)


cdef str _stream_object_hint(object stream):
    """For a stream object that is neither an int nor has __cuda_stream__ (CuPy's
    streams before ``__cuda_stream__`` have an int ``.ptr``): which attribute to pass."""
    for name in ("ptr", "handle"):
        try:
            value = getattr(stream, name)
        except Exception:  # a property that raises is no handle to suggest
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            return f": pass its handle, stream_ptr=stream.{name} (an int here)"
    return ""


cdef object _UINTPTR_LIMIT = 1 << 64  # one past the largest address or handle
cdef object CU_STREAM_LEGACY_HANDLE = 1
# -1, the opt-out: one object in CPython (small ints are cached), so the launch
# loop's ``view(-1)`` is recognised by identity; an equal int made otherwise
# takes the general check below.
cdef object _OPT_OUT = -1


cdef inline object _normalize_stream(object stream_ptr):
    """Turn ``stream_ptr`` into None, -1 or a handle >= 0 (a Python int).

    Accepts None, an int (or an object with ``__index__``), or an object with
    ``__cuda_stream__()`` returning ``(version, handle)``.  A bool is refused:
    ``True`` as a stream is a slip, not a handle.
    """
    if stream_ptr is None or stream_ptr is _OPT_OUT:
        return stream_ptr
    return _normalize_other_stream(stream_ptr)


cdef object _normalize_other_stream(object stream_ptr):
    """_normalize_stream for anything but None and -1."""
    cdef object handle
    cdef int overflow = 0
    if type(stream_ptr) is int:
        if _exact_int_value(stream_ptr, &overflow) >= -1 and not overflow:
            return stream_ptr  # the common case (-1 or a handle below 2**63), checked in C
        handle = stream_ptr
    elif isinstance(stream_ptr, bool):
        raise TypeError(_STREAM_TYPE_MSG.format(stream_ptr, ""))
    elif hasattr(stream_ptr, "__cuda_stream__"):
        handle = _handle_from_cuda_stream(stream_ptr)
    else:
        try:
            handle = PyNumber_Index(stream_ptr)
        except TypeError:
            raise TypeError(
                _STREAM_TYPE_MSG.format(stream_ptr, _stream_object_hint(stream_ptr))
            ) from None
    if handle < -1 or handle >= _UINTPTR_LIMIT:
        raise ValueError(
            f"stream: stream_ptr must be -1 or a stream handle >= 0 (got {handle!r})"
        )
    return handle


cdef object _handle_from_cuda_stream(object stream_obj):
    """The handle of an object speaking the ``__cuda_stream__`` protocol."""
    result = stream_obj.__cuda_stream__()
    if (
        type(result) is not tuple
        or len(result) != 2
        or isinstance(result[1], bool)
        or not isinstance(result[1], int)
    ):
        raise TypeError(
            f"stream: __cuda_stream__() must return (version, handle) (got {result!r})"
        )
    return int(result[1])


cdef inline object _dlpack_stream_for(int32_t device_type, object stream):
    """The ``stream`` argument to hand ``__dlpack__`` for memory of ``device_type``.

    Host and pinned memory have no stream to order: always None (numpy and
    array-api-strict refuse anything else, even -1).  CUDA and managed memory get
    the consumer's stream: -1 stays -1 (opt out), 0 (the null stream) becomes 1
    because DLPack forbids 0, other handles pass as they are.
    """
    if device_type == kDLCPU or device_type == kDLCUDAHost:
        return None
    if stream is None:
        raise BufferError(
            f"dlpack: stream_ptr=None is ambiguous for {_device_name(device_type)} "
            "memory: pass a stream handle, or -1 to opt out"
        )
    if stream == 0:
        return 1
    return stream
