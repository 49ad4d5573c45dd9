# A host view handed on as a Python buffer (PEP 3118) and through numpy's array
# interface (version 3).  The class body (_view.pyx) holds only the slots; the
# work is here.
#
# Which memory: host (CPU) and pinned (CUDAHost) memory, which the host reads and
# writes directly.  Device and managed memory are refused with a BufferError that
# says why (a host access of device memory faults; managed memory may be in use by
# a kernel, and the host cannot know).
#
# The exported Py_buffer: ``buf`` is element [0, ..., 0] (strides may be negative
# or zero, as PEP 3118 allows), ``len`` the element bytes (``nbytes``), shape and
# byte strides in one malloc'ed block that also holds the format string, freed by
# __releasebuffer__ (``internal`` points at it).  Every byte count is checked
# against int64 (Py_ssize_t) before it is written: a view whose nbytes or byte
# offsets would pass it is refused (BufferError), never exported with a len that
# wrapped (_view.pyx, "Byte counts").  ``obj`` is the view, which keeps
# its memory owner alive.  Nothing is cached: each export asks numpy for the
# format of the dtype, so no module state is shared between threads.

from cpython.buffer cimport (
    PyBUF_ANY_CONTIGUOUS,
    PyBUF_C_CONTIGUOUS,
    PyBUF_F_CONTIGUOUS,
    PyBUF_FORMAT,
    PyBUF_ND,
    PyBUF_STRIDES,
    PyBUF_WRITABLE,
)


cdef str _device_memory_kind(StridedMemoryView view):
    """None for memory the host reads in place (host, pinned), else "device" or "managed"."""
    if view._device_type == kDLCPU or view._device_type == kDLCUDAHost:
        return None
    return "managed" if view._device_type == kDLCUDAManaged else "device"


_HOST_ACCESS_HINT = (
    "which the host cannot read in place; copy it to a host view first (copy_to) "
    "or hand it on through DLPack or __cuda_array_interface__"
)


cdef bytes _buffer_format(object dtype):
    """The PEP 3118 format numpy writes for ``dtype``, or None when numpy has none.

    numpy has none for datetimes and for ml_dtypes' bfloat16 and float8/6/4 kinds
    (it refuses to export them itself); ``memoryview(numpy.empty(0, dtype))``
    answers, so the format is numpy's own for every dtype it knows.
    """
    if dtype.metadata is not None and _DLPACK_DTYPE_KEY in dtype.metadata:
        return None  # a DLPack vector type's bytes: numpy's 'V' format would not say it
    import numpy
    try:
        return memoryview(numpy.empty(0, dtype)).format.encode("ascii")
    except (ValueError, TypeError, BufferError):
        return None


cdef str _device_words(StridedMemoryView view):
    # " (device N)" for a message, or nothing for a CUDA Array Interface view whose
    # device has not been asked (an error path does not call the driver for it).
    if view._device_id == _DEVICE_ID_UNKNOWN:
        return ""
    return f" (device {view._device_id})"


cdef str _same_size_unsigned(object dtype):
    """The numpy unsigned type of ``dtype``'s item size, as a hint writes it: a
    reinterpretation that keeps the element count and strides (uint16 for bfloat16,
    uint8 for a float8, uint32 for complex32); a dtype of 16 bytes or more has none."""
    name = {1: "uint8", 2: "uint16", 4: "uint32", 8: "uint64"}.get(dtype.itemsize)
    if name is None:
        return f"numpy.dtype((numpy.void, {dtype.itemsize}))"
    return f"numpy.{name}"


cdef int _export_buffer(StridedMemoryView view, Py_buffer *buffer, int flags) except -1:
    """Fill ``buffer`` for ``flags`` (the work of StridedMemoryView.__getbuffer__)."""
    cdef Py_ssize_t i, k, step, ndim = view._ndim
    cdef bytes fmt = None
    cdef Py_ssize_t *block
    cdef char *text
    kind = _device_memory_kind(view)
    if kind is not None:
        raise BufferError(
            f"buffer: the view holds CUDA {kind} memory{_device_words(view)}, "
            f"{_HOST_ACCESS_HINT}"
        )
    if (flags & PyBUF_WRITABLE) == PyBUF_WRITABLE and view.readonly:
        raise BufferError("buffer: the view is read-only; a writable buffer was requested")
    if view.dtype is None:
        raise BufferError(
            f"buffer: {_dtype_shown(view)} has no byte per element (several share a "
            "byte); hand it on through DLPack, or view its bytes first, e.g. "
            "view.view(dtype=numpy.uint8)"
        )
    if (flags & PyBUF_FORMAT) == PyBUF_FORMAT:
        fmt = _buffer_format(view.dtype)
        if fmt is None:
            raise BufferError(
                f"buffer: {_dtype_shown(view)} has no PEP 3118 format (numpy gives none "
                "either); request the buffer without a format (raw bytes, e.g. "
                f"PyBUF_SIMPLE) or reinterpret it first, e.g. view.view(dtype={_same_size_unsigned(view.dtype)})"
            )
    c_order = _is_contiguous(view.shape, view.strides, view._size, reversed_axes=True)
    if (flags & PyBUF_STRIDES) != PyBUF_STRIDES or (
        (flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS
    ):
        if not c_order:
            raise BufferError(
                f"buffer: the view (shape {view.shape}, strides {view.strides}) is not "
                "C-contiguous, as the request requires"
            )
    if (flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS and not _is_contiguous(
        view.shape, view.strides, view._size, reversed_axes=False
    ):
        raise BufferError(
            f"buffer: the view (shape {view.shape}, strides {view.strides}) is not "
            "Fortran-contiguous, as the request requires"
        )
    if (flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS and not (
        c_order or _is_contiguous(view.shape, view.strides, view._size, reversed_axes=False)
    ):
        raise BufferError(
            f"buffer: the view (shape {view.shape}, strides {view.strides}) is not "
            "contiguous, as the request requires"
        )
    # len (nbytes) and every element's byte offset fit int64, Py_ssize_t here (checked
    # again: a len that wrapped would let a consumer read past the memory).
    cdef int64_t nbytes = _view_nbytes(view, "buffer")
    flen = 0 if fmt is None else len(fmt) + 1
    block = <Py_ssize_t *>malloc(2 * ndim * sizeof(Py_ssize_t) + flen + 1)
    if block == NULL:
        raise MemoryError()
    for i in range(ndim):
        block[i] = <Py_ssize_t>view._dims[i]
    if c_order or _is_contiguous(view.shape, view.strides, view._size, reversed_axes=False):
        # A contiguous view's byte strides as its order gives them (numpy's export does
        # so too): the stride of an axis of extent 0 or 1 says nothing, and a consumer
        # that reads contiguity from the strides would otherwise see none (memoryview
        # calls a 1-d buffer contiguous only when its stride is the item size or its
        # extent 1: an empty view's stride 0 broke memoryview(view).cast('B')).
        step = <Py_ssize_t>view._itemsize
        for k in range(ndim):
            i = ndim - 1 - k if c_order else k
            block[ndim + i] = step
            step *= block[i]
    else:
        for i in range(ndim):
            # A stride whose bytes pass int64 is 0, as every export gives it (with
            # every byte offset in int64, only one that never steps can): the product fits.
            block[ndim + i] = <Py_ssize_t>(
                _exported_stride_c(view._dims[ndim + i], view._itemsize) * view._itemsize
            )
    text = <char *>(block + 2 * ndim)
    if fmt is not None:
        memcpy(text, <char *>fmt, len(fmt))
        text[len(fmt)] = 0
    buffer.buf = <void *>view._ptr
    buffer.obj = view
    buffer.len = <Py_ssize_t>nbytes
    buffer.readonly = view.readonly
    buffer.itemsize = <Py_ssize_t>view._itemsize
    buffer.format = text if fmt is not None else NULL
    buffer.ndim = <int>ndim
    buffer.shape = block if (flags & PyBUF_ND) == PyBUF_ND else NULL
    buffer.strides = block + ndim if (flags & PyBUF_STRIDES) == PyBUF_STRIDES else NULL
    buffer.suboffsets = NULL
    buffer.internal = <void *>block
    return 0


cdef void _release_exported_buffer(Py_buffer *buffer) noexcept:
    """Free the block _export_buffer made (the work of __releasebuffer__)."""
    free(buffer.internal)
    buffer.internal = NULL


cdef dict _host_array_interface(StridedMemoryView view):
    """``view.__array_interface__`` (version 3): numpy's array interface of a host view.

    ``data`` is ``(pointer, readonly)``: the consumer keeps the view (numpy keeps
    the object whose interface it read as the array's base), and the view keeps
    its memory owner alive.  Strides in bytes.
    """
    kind = _device_memory_kind(view)
    if kind is not None:
        raise BufferError(
            f"array interface: the view holds CUDA {kind} memory{_device_words(view)}, "
            f"{_HOST_ACCESS_HINT}"
        )
    dtype = view.dtype
    if dtype is None:
        raise BufferError(
            f"array interface: {_dtype_shown(view)} has no typestr (a typestr counts "
            "whole bytes); hand it on through DLPack"
        )
    if not _has_own_typestr(dtype):
        raise BufferError(
            f"array interface: {_dtype_shown(view)} has no typestr numpy reads back as {dtype} "
            f"({dtype.str!r} names another type or none); reinterpret the bytes first, "
            f"e.g. numpy.asarray(view.view(dtype={_same_size_unsigned(dtype)})).view(dtype)"
        )
    itemsize = dtype.itemsize
    _view_nbytes(view, "array interface")
    interface = {
        "version": 3,
        "shape": view.shape,
        "typestr": dtype.str,
        "data": (view._ptr, view.readonly),
        "strides": tuple([_exported_stride(stride, itemsize) * itemsize for stride in view.strides]),
    }
    if dtype.fields is not None:
        interface["descr"] = dtype.descr
    return interface
