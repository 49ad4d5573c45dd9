# The C-level declaration of StridedMemoryView: its fields, and the inline
# accessors that give a Cython extension the layout as C values.
#
#     from stridedview cimport StridedMemoryView
#
#     cdef StridedMemoryView view = StridedMemoryView(array)
#     cdef char *data = <char *>view.c_ptr()
#     cdef int ndim = view.c_ndim()
#     cdef const int64_t *shape = view.c_shape()      # ndim extents
#     cdef const int64_t *strides = view.c_strides()  # ndim strides, in elements
#     if view.c_dtype().code == 2 and view.c_dtype().bits == 32:  # float32 elements
#         ...
#
# Each accessor is a field read compiled into the caller (no Python attribute
# lookup, no call).  The arrays belong to the view: valid while it lives.
# ``c_size() * c_itemsize()`` and each element's byte offset from element 0
# (the sum of ``(extent - 1) * stride * itemsize``) fit int64: a layout whose
# would not is refused when the view is made, so int64 arithmetic on them never
# wraps.  Only
# the accessors (``c_*``) are the API; the underscored fields may change.  C and
# C++ extensions get the same through ``stridedview/stridedview.h`` (see
# ``stridedview.get_include()``).

cimport cython
from cpython.buffer cimport Py_buffer
from libc.stdint cimport int32_t, int64_t, uintptr_t

from stridedview._dlpack cimport DLDataType

# Views of up to this many dimensions keep their C shape and strides inside the
# object; larger ones in a block of their own.
cdef enum:
    _INLINE_DIMS = 8


@cython.final
cdef class StridedMemoryView:
    # Exposed to Python as read-only member descriptors (_view.pyx).
    cdef object ptr
    cdef object shape
    cdef object strides
    cdef object dtype
    cdef object exporting_obj
    cdef readonly bint is_device_accessible
    """Whether a CUDA kernel may access the memory: False only for host-only (CPU) memory."""
    cdef readonly bint readonly
    """Whether the memory is read-only (True for a legacy DLPack capsule, which cannot say)."""
    cdef readonly object ready_stream
    """The stream on which the data may be used with no further ordering, or None."""

    # The layout as C values, filled at construction (_store_c_layout).
    cdef uintptr_t _ptr
    cdef int32_t _ndim
    # (In the padding after _ndim: no field moves.)  The torch reader's memo
    # (_from_torch.pxi): the ndim + 1 of the layout it last wrote, set when a
    # launcher empties the view (SV_VIEW_EMPTY) with that layout's address, size
    # and type in the inline arrays' last three slots; 0: no memo.
    cdef int32_t _memo_ndim1
    cdef int64_t _itemsize
    cdef int64_t *_dims  # _ndim extents, then _ndim element strides
    cdef int64_t _inline_dims[2 * _INLINE_DIMS]
    cdef int64_t _size
    cdef int32_t _device_type
    cdef int32_t _device_id
    # The element type as DLPack's (code, bits, lanes); bits 0: no DLPack type.
    cdef DLDataType _dl_dtype
    # (In the padding after _dl_dtype.)  Set by the torch reader once it has
    # written the whole layout; zeroed, as every field here, when the view is
    # emptied.
    cdef bint _reader_filled

    # What keeps the memory alive, besides exporting_obj: a consumed DLPack
    # capsule's tensor (its deleter runs once, at deallocation), a buffer held
    # through the buffer protocol (released once, at deallocation), or, for a
    # view derived from another (_derive), the root view that holds them.
    cdef void *_managed
    cdef bint _managed_is_versioned
    # Set when a launcher's proxy empties this view to fill it again with its next
    # view() (_park_proxy, _launcher.pxi); __init__ refuses such a view.  Zero in a
    # new view, and in every view of a build without the GIL fast paths.  (It sits
    # in the padding after _managed_is_versioned: the object is no larger.)
    cdef bint _parked
    cdef Py_buffer *_held_buffer
    cdef StridedMemoryView _memory_owner
    # The interface dict an __array_interface__ or CUDA Array Interface view was
    # read from: its producer may keep the memory alive through it alone (a numpy
    # scalar's dict holds, in '__ref', the only reference to its temporary array).
    cdef object _interface
    # Where the memory goes when the view lets go of it, if a stream was recorded
    # (record_stream, or a launcher's record_stream=True): a counted reference to a
    # _Handover (_handover.pxi), or NULL.  Last, so that no other field moves.
    cdef void *_handover

    cdef str _device_id_text(self)
    # Appended last (the type's table of C methods only grows): see c_device_id below.
    cdef int32_t c_device_id(self) except -2

    # --- The C-level API ---------------------------------------------------

    cdef inline void *c_ptr(self) noexcept:
        """Address of element [0, ..., 0] (byte offsets included)."""
        return <void *>self._ptr

    cdef inline int c_ndim(self) noexcept:
        """Number of dimensions."""
        return self._ndim

    cdef inline const int64_t *c_shape(self) noexcept:
        """The ``c_ndim()`` extents."""
        return self._dims

    cdef inline const int64_t *c_strides(self) noexcept:
        """The ``c_ndim()`` strides, in elements (not bytes)."""
        return self._dims + self._ndim

    cdef inline int64_t c_itemsize(self) noexcept:
        """Bytes per element; 0 for packed sub-byte elements (see ``c_itemsize_bits()``)."""
        return self._itemsize

    cdef inline int64_t c_itemsize_bits(self) noexcept:
        """Bits per element as stored: ``8 * c_itemsize()``, or a packed type's bits * lanes."""
        if self._itemsize != 0:
            return 8 * self._itemsize
        return <int64_t>self._dl_dtype.bits * self._dl_dtype.lanes

    cdef inline int64_t c_size(self) noexcept:
        """Number of elements."""
        return self._size

    cdef inline int c_device_type(self) noexcept:
        """DLPack device type: 1 CPU, 2 CUDA, 3 CUDA pinned host, 13 CUDA managed."""
        return self._device_type

    # c_device_id(), declared above with the C methods: the device ordinal (-1 for
    # host-only memory, 0 for pinned and managed memory), the Python ``device_id``.
    # A call, not an inlined read: a CUDA Array Interface view asks the driver on
    # first use, which can fail (-2 with the exception set).

    cdef inline bint c_readonly(self) noexcept:
        """Whether the producer marked the memory read-only."""
        return self.readonly

    cdef inline DLDataType c_dtype(self) noexcept:
        """The element type as DLPack describes it, exactly as the producer gave it:
        ``.code`` (0 int, 1 uint, 2 float, 4 bfloat, 5 complex, 6 bool, 7 to 17 the
        float8, float6 and float4 kinds, 18 bcomplex), ``.bits`` per lane and
        ``.lanes`` (torch's float4_e2m1fn_x2: 17, 4, 2).  An element takes
        ``bits * lanes`` bits; sub-byte elements are padded, one a byte
        (``c_itemsize()`` 1: ml_dtypes' int4, float4_e2m1fn...), or packed, several
        to a byte in row-major order (``c_itemsize()`` 0).  ``.bits == 0`` when no
        DLPack type describes the elements (a structured, datetime or bytes dtype
        from an array interface or a buffer): read ``view.dtype`` then."""
        return self._dl_dtype
