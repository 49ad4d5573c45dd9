# cython: language_level=3
"""The compiled core of stridedview: the StridedMemoryView class and its parsers."""

cimport cython
from cpython.object cimport PyObject
from cpython.pycapsule cimport (
    PyCapsule_CheckExact,
    PyCapsule_GetName,
    PyCapsule_GetPointer,
    PyCapsule_IsValid,
    PyCapsule_New,
    PyCapsule_SetName,
)
from cpython.ref cimport Py_INCREF, Py_XDECREF
from libc.string cimport memcmp, memcpy, memset, strcmp, strncmp
from cpython.type cimport PyType_IsSubtype
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from libc.stdlib cimport free, malloc
from libc.stdint cimport (
    INT64_MAX, UINTPTR_MAX, int32_t, int64_t, uint8_t, uint32_t, uint64_t, uintptr_t,
)

from stridedview._dlpack cimport *

include "_streams.pxi"
include "_dtypes.pxi"

import sys
from types import MethodType as _MethodType

cdef bint _BIG_ENDIAN_HOST = sys.byteorder == "big"
# device_id of a CAI view before the driver has been asked.
cdef enum:
    _DEVICE_ID_UNKNOWN = -2

cdef object _driver = None


cdef object _driver_module():
    """stridedview._driver, imported on first need (it is the only door to CUDA)."""
    global _driver
    if _driver is None:
        from stridedview import _driver as module
        _driver = module
    return _driver


class _ConstructorSignature:
    """Descriptor giving StridedMemoryView a ``__signature__`` for inspect (built on use)."""

    def __get__(self, instance, owner):
        import inspect

        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([
            inspect.Parameter("obj", kind),
            inspect.Parameter("stream_ptr", kind, default=None),
        ])


@cython.final
@cython.freelist(16)
@cython.auto_pickle(False)
cdef class StridedMemoryView:
    """A zero-copy view of a strided array from any DLPack, CUDA Array Interface or host producer.

    ``StridedMemoryView(obj, stream_ptr=None)`` (also ``from_any_interface``)
    views ``obj`` through the first protocol it offers: DLPack (``__dlpack__``
    and ``__dlpack_device__``), the CUDA Array Interface (CAI,
    ``__cuda_array_interface__``), numpy's array interface
    (``__array_interface__``, host memory), the buffer protocol (bytes,
    bytearray, memoryview, array.array, mmap, ctypes arrays: host memory);
    anything else is a ``BufferError``.  ``from_dlpack``,
    ``from_cuda_array_interface`` and ``from_array_interface`` force one
    protocol; ``from_buffer`` lays a layout over a buffer's bytes.  Nothing is
    copied: ``__dlpack__`` is asked with ``copy=False`` (``max_version=(1, 3)``
    too; asked again without a keyword the producer does not know), and a
    capsule flagged IS_COPIED is refused.  The view keeps ``obj`` alive (and
    holds a buffer-protocol buffer until it is deallocated).  Every element it
    reaches lies within 2**63 - 1 bytes of element 0 (a layout reaching farther
    is a ``BufferError``).  A type's DLPack 1.3 C exchange API
    (``__dlpack_c_exchange_api__``) is used in place of ``__dlpack__`` only while
    the type's DLPack methods are those of the class offering it.  A view of a
    StridedMemoryView takes that view's fields, its ``exporting_obj`` and its
    memory owner (no capsule, no driver, no chain however deep views nest).

    Streams.  ``stream_ptr`` names the stream on which the caller will use the
    data: an int handle (0 the null stream, 1 the legacy default stream, 2 the
    per-thread default stream, or a ``CUstream`` address), an object with
    ``__cuda_stream__``, -1 to order nothing (the caller takes care of it), or
    None.  The host is never blocked.

    - DLPack, host (CPU) and pinned (CUDAHost) memory: nothing to order; the
      producer is handed ``stream=None`` whatever ``stream_ptr`` says.
    - DLPack, CUDA and managed memory: the producer is handed the caller's stream
      (0 as 1, -1 as -1) and makes it wait for its pending work, as DLPack
      requires; ``stream_ptr=None`` is ambiguous there, a ``BufferError``.
    - CAI: if the producer names a stream (v3 ``stream``) other than the caller's,
      an event is recorded on it and the caller's stream made to wait on it
      (``cuEventRecord`` + ``cuStreamWaitEvent``); -1, no producer stream, or the
      same stream order nothing and need no driver.  ``stream_ptr=None`` is a
      ``BufferError``.
    - A StridedMemoryView: as its memory kind says above, with its
      ``ready_stream`` as the producer's stream.

    Fields (read-only):

    - ``ptr``: address of element ``[0, ..., 0]`` (DLPack's ``byte_offset``
      included), an int;
    - ``shape``: tuple of extents;
    - ``strides``: tuple of strides in *elements*, not bytes, always explicit
      (``()`` for 0-d; row-major when the producer sent none);
    - ``dtype``: a ``numpy.dtype`` (bfloat16 and the float8/6/4 kinds are
      ml_dtypes' dtypes);
    - ``device_id``: -1 for host-only (CPU) memory, else the device ordinal (0
      for pinned and managed memory, as DLPack gives it; for a CAI view the driver
      is asked on first read);
    - ``is_device_accessible``: whether a CUDA kernel may read the memory;
    - ``readonly``: DLPack 1.x's READ_ONLY flag or the CAI's ``data[1]``; a legacy
      (pre-1.0) DLPack capsule cannot say, and is taken as writable;
    - ``exporting_obj``: the object viewed, kept alive as long as the view (for
      a view of a view, the object that view views);
    - ``ready_stream``: the stream on which the data may be used without further
      ordering (the caller's stream once ordered; with -1, the CAI producer's
      stream), or None when there is none to speak of (host memory) or it is
      unknown.

    The view is not a dataclass: ``_fields`` names the eight fields above (from
    ``ptr`` to ``exporting_obj``) and ``_asdict()`` returns them, uncopied, as
    a namedtuple would.

    A consumed DLPack capsule's deleter runs exactly once, when the view is
    deallocated.  The view hands itself on through ``__dlpack__``,
    ``__dlpack_device__`` and, for device-accessible memory,
    ``__cuda_array_interface__``.
    """

    # The fields are declared in _view.pxd, with the C-level API.

    __match_args__ = ("ptr", "shape", "strides", "dtype")
    __signature__ = _ConstructorSignature()  # that of __init__: a slot has none

    def __init__(self, obj, stream_ptr=None):
        # A view made from a bare managed tensor (the exchange API) has no exporting object.
        if self.exporting_obj is not None or self._managed != NULL:
            raise TypeError("StridedMemoryView is already initialised")
        _view_from_any(self, obj, stream_ptr)

    @classmethod
    def from_dlpack(cls, obj, stream_ptr=None):
        """View ``obj`` through DLPack only; see the class docstring for ``stream_ptr``."""
        cdef StridedMemoryView view = StridedMemoryView.__new__(StridedMemoryView)
        stream = _normalize_stream(stream_ptr)
        info = _producer_type(obj)
        if not _has_dlpack(obj, info):
            raise BufferError(
                f"dlpack: {type(obj).__name__!r} object has no __dlpack__ and "
                "__dlpack_device__ methods"
            )
        _view_from_dlpack(view, obj, stream, info)
        return view

    @classmethod
    def from_cuda_array_interface(cls, obj, stream_ptr=None):
        """View ``obj`` through the CUDA Array Interface only.

        ``stream_ptr`` (a handle, an object with ``__cuda_stream__``, or -1) is the
        stream on which the data will be used; None is ambiguous, a BufferError.
        """
        cdef StridedMemoryView view = StridedMemoryView.__new__(StridedMemoryView)
        stream = _normalize_stream(stream_ptr)
        interface = getattr(obj, _CAI, None)
        if interface is None:
            raise BufferError(
                f"cuda array interface: {type(obj).__name__!r} object has no "
                "__cuda_array_interface__"
            )
        _view_from_cai(view, obj, interface, stream)
        return view

    @classmethod
    def from_any_interface(cls, obj, stream_ptr=None):
        """``StridedMemoryView(obj, stream_ptr)`` under cuda.core's name: every protocol, in order."""
        cdef StridedMemoryView view = StridedMemoryView.__new__(StridedMemoryView)
        _view_from_any(view, obj, stream_ptr)
        return view

    @classmethod
    def from_array_interface(cls, obj):
        """View host memory through numpy's ``__array_interface__`` (version 3) only.

        ``data`` may be a ``(ptr, readonly)`` tuple or an object with the buffer
        protocol (None: ``obj`` itself), ``offset`` bytes in; ``strides`` are in
        bytes and must be multiples of the item size.  The memory is taken as host
        memory (``device_id`` -1): no driver is called and no stream ordered.
        """
        cdef StridedMemoryView view = StridedMemoryView.__new__(StridedMemoryView)
        interface = getattr(obj, _ARRAY_INTERFACE, None)
        if interface is None:
            raise BufferError(
                f"array interface: no __array_interface__ on a {type(obj).__name__!r} object"
            )
        _view_from_array_interface(view, obj, interface)
        return view

    @classmethod
    def from_buffer(
        cls, buffer, shape=None, strides=None, *, itemsize=None, dtype=None,
        bint is_readonly=False,
    ):
        """View ``buffer``'s bytes with a layout: cuda.core's ``from_buffer``, for any buffer.

        ``buffer`` is a cuda.core ``Buffer`` (or an object with its ``handle``,
        ``size``, ``is_device_accessible`` and ``device_id``; host, pinned,
        managed or device memory as it says) or any object with the buffer
        protocol (host memory, held by the view until it is deallocated).

        ``shape`` and ``strides`` are in elements (``strides=None``: row-major),
        element ``[0, ..., 0]`` being the buffer's first byte; every element must
        lie inside the buffer, else ValueError with the byte counts.
        ``shape=None`` takes the buffer's own layout: a buffer-protocol object's
        shape and strides when the item size is its own, else the buffer's bytes
        as a 1-d run of whole elements.  ``dtype`` (anything ``numpy.dtype``
        takes) is the element type; ``itemsize`` alone gives opaque
        ``itemsize``-byte elements (``numpy.dtype('V<n>')``); with neither, a
        buffer-protocol object's own element type.  ``is_readonly`` marks the view
        read-only (a read-only buffer's view is read-only anyway).

        Nothing is ordered on any stream (``ready_stream`` None): the caller
        makes sure the data are ready, as with cuda.core.
        """
        cdef StridedMemoryView view = StridedMemoryView.__new__(StridedMemoryView)
        _view_from_buffer_layout(view, buffer, shape, strides, itemsize, dtype, is_readonly)
        return view

    @property
    def device_id(self):
        """-1 for host-only memory, else the device ordinal.

        For a CUDA Array Interface view the driver is asked on first access
        (``cuPointerGetAttribute``; the current device for a NULL pointer), so
        that a view made with no driver present only needs one if this is read.
        """
        if self._device_id == _DEVICE_ID_UNKNOWN:
            self._device_id = _driver_module().device_of_pointer(self._ptr)
        return self._device_id

    @property
    def ndim(self):
        """Number of dimensions."""
        return len(self.shape)

    @property
    def size(self):
        """Number of elements."""
        return self._size

    @property
    def itemsize(self):
        """Bytes per element."""
        return self.dtype.itemsize

    @property
    def nbytes(self):
        """``size * itemsize``: the bytes the elements occupy, gaps between them not counted."""
        return self._size * self.dtype.itemsize

    @property
    def is_c_contiguous(self):
        """Row-major and gap-free (numpy's rule: extent-1 axes are ignored, empty views qualify)."""
        return _is_contiguous(self.shape, self.strides, self._size, reversed_axes=True)

    @property
    def is_f_contiguous(self):
        """Column-major and gap-free (numpy's rule: extent-1 axes are ignored, empty views qualify)."""
        return _is_contiguous(self.shape, self.strides, self._size, reversed_axes=False)

    def __repr__(self):
        return (
            f"StridedMemoryView(ptr={self._ptr:#x}, shape={self.shape}, "
            f"strides={self.strides}, dtype={self.dtype}, device_id={self._device_id_text()}, "
            f"readonly={self.readonly})"
        )

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export the view as a DLPack capsule (versioned when ``max_version >= (1, 0)``).

        The capsule keeps the view (and so the original object) alive.  For device
        memory the consumer's ``stream`` is made to wait for the view's
        ``ready_stream`` (an event, never a host synchronisation); -1 orders
        nothing.  ``copy=True`` and a ``dl_device`` other than the view's own are
        a BufferError: a view never copies.  A read-only view cannot be exported as
        a legacy capsule (it has no flag to say so).
        """
        return _export_dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self):
        """``(device_type, device_id)`` in DLPack's terms (device_id 0 for host memory)."""
        if self._device_type == kDLCPU:
            return (kDLCPU, 0)
        return (self._device_type, self.device_id)

    @property
    def __cuda_array_interface__(self):
        """The CUDA Array Interface (v3) of a device-accessible view.

        Strides are in bytes, ``stream`` is the view's ``ready_stream``.  Host-only
        views have none: reading it raises AttributeError, so ``hasattr`` is False.
        """
        return _export_cai(self)

    cdef str _device_id_text(self):
        # repr must not need the driver: an unresolved CAI device shows as '?'.
        return "?" if self._device_id == _DEVICE_ID_UNKNOWN else str(self._device_id)

    # Not a dataclass: dataclasses.replace() cannot rebuild a view from its
    # fields and dataclasses.asdict() would deep-copy the array.  The fields are
    # named as a namedtuple names them instead.
    _fields = (
        "ptr", "shape", "strides", "dtype", "device_id", "is_device_accessible", "readonly",
        "exporting_obj",
    )

    def _asdict(self):
        """The eight fields of ``_fields`` in a new dict, each value the view's own (no copy).

        Reading ``device_id`` asks the driver for a CUDA Array Interface view whose
        device is not yet known (see ``device_id``).
        """
        return {
            "ptr": self.ptr,
            "shape": self.shape,
            "strides": self.strides,
            "dtype": self.dtype,
            "device_id": self.device_id,
            "is_device_accessible": self.is_device_accessible,
            "readonly": self.readonly,
            "exporting_obj": self.exporting_obj,
        }

    # --- Layouts: views derived from this one (see _layout.pxi and docs/layouts.md).
    # Each is a new view of the same memory: nothing is copied and no driver is
    # called; it keeps the root memory owner, exporting_obj, device, readonly and
    # ready_stream, and hands itself on through DLPack and the CAI like any view.

    def __getitem__(self, key):
        """Basic indexing, exactly as numpy gives it: ints (negative from the end),
        slices with any step, ``...`` and ``None`` (a new axis of extent 1, stride 0).

        An int on every axis gives a 0-d view.  An out-of-range int is an
        IndexError; lists, arrays and bools (advanced indexing) a TypeError.
        """
        offset, shape, strides = _layout_index(self.shape, self.strides, key)
        return _relaid(self, offset * self.dtype.itemsize, shape, strides, None, "the index")

    def __iter__(self):
        """The views ``self[0]``, ``self[1]``, ... along the first axis, as numpy iterates.

        A 0-d view has no axis to iterate over: TypeError, as numpy gives.
        """
        if not self.shape:
            raise TypeError("iteration over a 0-d view")
        return (self[i] for i in range(self.shape[0]))

    @property
    def T(self):
        """The view with its axes reversed (``transpose()``)."""
        return self.transpose()

    def transpose(self, *axes):
        """The view with its axes permuted, as numpy's ``transpose``.

        ``transpose()`` (or ``transpose(None)``) reverses the axes;
        ``transpose((1, 0, 2))`` and ``transpose(1, 0, 2)`` name, for each new
        axis, the old one (negative axes count from the end).  ValueError for a
        repeated or out-of-range axis, or too few or too many.
        """
        order = _transpose_axes(axes, len(self.shape))
        shape = tuple([self.shape[i] for i in order])
        strides = tuple([self.strides[i] for i in order])
        return _relaid(self, 0, shape, strides, None, "transpose")

    def reshape(self, *shape, order="C"):
        """The same elements with a new shape, without copying (numpy's ``reshape``).

        ``shape`` is given as separate ints or one tuple; one extent may be -1, to
        be inferred.  Elements are taken in C (row-major) order, or F with
        ``order="F"``.  A layout whose elements cannot be walked in that order with
        new strides (numpy would copy) is a BufferError; a shape with a different
        element count a ValueError.
        """
        if order != "C" and order != "F":
            raise ValueError(f"reshape: order must be 'C' or 'F' (got {order!r})")
        if not shape:
            raise TypeError("reshape: a shape is required (got none)")
        requested = _shape_argument(shape, "reshape: extent")
        new_shape = _infer_shape(requested, self._size)
        if requested == self.shape:
            return _relaid(self, 0, self.shape, self.strides, None, "reshape")
        strides = _reshape_strides(self.shape, self.strides, new_shape, order == "C")
        if strides is None:
            raise BufferError(
                f"reshape: shape {self.shape} with strides {self.strides} cannot be seen as "
                f"shape {new_shape} in {order} order without a copy"
            )
        return _relaid(self, 0, new_shape, strides, None, "reshape")

    def squeeze(self, axis=None):
        """The view without its extent-1 axes (all of them, or those in ``axis``: an int or
        a tuple); ValueError for an axis whose extent is not 1."""
        removed = _squeeze_axes(axis, self.shape)
        kept = [i for i in range(len(self.shape)) if i not in removed]
        shape = tuple([self.shape[i] for i in kept])
        strides = tuple([self.strides[i] for i in kept])
        return _relaid(self, 0, shape, strides, None, "squeeze")

    def broadcast_to(self, shape):
        """The view broadcast to ``shape`` by numpy's rules (stride 0 on every broadcast axis).

        The result is read-only, as numpy's ``broadcast_to`` is: its elements
        share memory, so a kernel writing through it would race with itself.
        ValueError when the shapes are incompatible.
        """
        new_shape = _shape_argument((shape,), "broadcast_to: extent")
        strides = _broadcast_layout(self.shape, self.strides, new_shape)
        cdef StridedMemoryView view = _relaid(self, 0, new_shape, strides, None, "broadcast_to")
        view.readonly = True
        return view

    def view(self, layout=None, dtype=None):
        """A view of the same bytes with another layout and/or dtype (cuda.core's ``view``).

        ``view()`` is the view itself.  ``view(dtype=d)`` reinterprets the bytes by
        numpy's ``ndarray.view(d)`` rules: with a different item size the last axis
        must be contiguous and its extent scales (a 0-d view must keep its item
        size); ml_dtypes' dtypes are accepted.  ``layout`` is any object with
        ``shape``, ``strides`` (in elements; None for C order), ``itemsize`` and
        optionally ``slice_offset``, such as cuda.core's ``_StridedLayout``, placed at
        this view's element [0, ..., 0]; its itemsize must be the dtype's, and its
        elements must lie within this view's ``byte_bounds``.  Alignment of the
        new elements is the caller's concern, as in numpy.
        """
        if layout is None and dtype is None:
            return self
        new_dtype = self.dtype if dtype is None else _view_dtype(dtype)
        if layout is not None:
            return _view_with_layout(self, layout, new_dtype)
        shape, strides = _retyped_layout(
            self.shape, self.strides, self.dtype.itemsize, new_dtype.itemsize
        )
        return _relaid(self, 0, shape, strides, new_dtype, "view")

    @property
    def byte_strides(self):
        """The strides in bytes (``strides`` times ``itemsize``), a tuple."""
        itemsize = self.dtype.itemsize
        return tuple([stride * itemsize for stride in self.strides])

    @property
    def byte_bounds(self):
        """``(low, high)``: the lowest address an element occupies and one past the highest
        (numpy's ``byte_bounds``); ``(ptr, ptr)`` for an empty view, which touches nothing."""
        bounds = _offset_bounds(self.shape, self.strides)
        if bounds is None:
            return (self._ptr, self._ptr)
        itemsize = self.dtype.itemsize
        return (self._ptr + bounds[0] * itemsize, self._ptr + (bounds[1] + 1) * itemsize)

    @property
    def has_overlap(self):
        """Whether two distinct indices address the same element (so a kernel writing
        through the view would race with itself).

        Exact for zero strides, for layouts made by slicing, transposing or
        reshaping a gap-free array, and for any layout of at most 2**16 elements;
        past that an undecided layout answers True ("may overlap"), so False is
        always safe to rely on.
        """
        return _has_overlap(self.shape, self.strides)

    @property
    def is_dense(self):
        """Whether the elements fill exactly the ``nbytes`` bytes from ``ptr``, one each,
        in some axis order (cuda.core's ``is_dense``): no gaps, no overlap, no negative
        stride on an axis of extent > 1.  Empty and 0-d views are dense."""
        return _is_dense(self.shape, self.strides)


cdef extern from *:
    # Offsets of the object fields in the instance struct Cython generates for
    # StridedMemoryView (a wrong name fails the build, never silently).
    """
    #include <stddef.h>
    #define SV_VIEW_OFFSET(field) \
        offsetof(struct __pyx_obj_11stridedview_5_view_StridedMemoryView, field)
    """
    const Py_ssize_t _OFFSET_PTR "SV_VIEW_OFFSET(ptr)"
    const Py_ssize_t _OFFSET_SHAPE "SV_VIEW_OFFSET(shape)"
    const Py_ssize_t _OFFSET_STRIDES "SV_VIEW_OFFSET(strides)"
    const Py_ssize_t _OFFSET_DTYPE "SV_VIEW_OFFSET(dtype)"
    const Py_ssize_t _OFFSET_EXPORTING_OBJ "SV_VIEW_OFFSET(exporting_obj)"

cdef extern from "Python.h":
    ctypedef struct PyTypeObject_dict "PyTypeObject":
        PyObject *tp_dict
    void PyType_Modified(PyTypeObject_dict *)
    object PyDescr_NewMember(PyTypeObject_dict *, PyMemberDef *)

cdef extern from "structmember.h":
    ctypedef struct PyMemberDef:
        const char *name
        int type
        Py_ssize_t offset
        int flags
        const char *doc
    enum:
        T_OBJECT_EX
        READONLY

cdef PyMemberDef _member_defs[5]


cdef int _expose_as_members() except -1:
    """Publish the object fields as read-only member descriptors.

    Cython exposes ``cdef`` object fields through getset descriptors, which the
    interpreter cannot specialise; a member descriptor is read by LOAD_ATTR_SLOT,
    about twice as fast.  Every array argument of every launch reads these.
    """
    cdef PyTypeObject_dict *tp = <PyTypeObject_dict *>StridedMemoryView
    cdef Py_ssize_t[5] offsets
    offsets[0] = _OFFSET_PTR
    offsets[1] = _OFFSET_SHAPE
    offsets[2] = _OFFSET_STRIDES
    offsets[3] = _OFFSET_DTYPE
    offsets[4] = _OFFSET_EXPORTING_OBJ
    # String literals: static storage, as long-lived as the type.
    _member_defs[0].name = "ptr"
    _member_defs[0].doc = "Address of element [0, ..., 0] (an int), byte offset included."
    _member_defs[1].name = "shape"
    _member_defs[1].doc = "Tuple of extents."
    _member_defs[2].name = "strides"
    _member_defs[2].doc = "Tuple of strides in elements, not bytes; always explicit, () at 0-d."
    _member_defs[3].name = "dtype"
    _member_defs[3].doc = "The element type, a numpy.dtype (ml_dtypes' for bfloat16 and float8/6/4)."
    _member_defs[4].name = "exporting_obj"
    _member_defs[4].doc = "The object viewed, kept alive as long as the view lives."
    cdef int i
    for i in range(5):
        _member_defs[i].type = T_OBJECT_EX
        _member_defs[i].offset = offsets[i]
        _member_defs[i].flags = READONLY
        descriptor = PyDescr_NewMember(tp, &_member_defs[i])
        (<dict><object>tp.tp_dict)[descriptor.__name__] = descriptor
    PyType_Modified(tp)
    return 0


_expose_as_members()


@cython.final
@cython.freelist(16)
@cython.auto_pickle(False)
cdef class ViewableArgument:
    """A launch argument chosen by ``args_viewable_as_strided_memory``.

    ``obj`` is the argument as the caller passed it; ``view(stream_ptr)`` makes
    its ``StridedMemoryView`` (one per call: the stream is only known there).
    """

    cdef readonly object obj
    """The argument exactly as the caller passed it."""
    # What obj's type offers, kept from wrapping (None: not looked up yet).
    cdef _ProducerType _info

    def __init__(self, obj):
        self.obj = obj
        self._info = None

    # A plain method descriptor (the interpreter calls it without a function
    # object in between), its signature in the docstring's clinic form.
    # (_install_proxy_view puts a faster entry in front of it).
    @cython.binding(False)
    @cython.embedsignature.format("clinic")
    def view(self, stream_ptr=None):
        """``StridedMemoryView(self.obj, stream_ptr)``; see StridedMemoryView for streams."""
        return _proxy_view(self, stream_ptr)

    def __repr__(self):
        return f"ViewableArgument({self.obj!r})"


cdef StridedMemoryView _proxy_view(ViewableArgument proxy, object stream_ptr):
    """``proxy.view(stream_ptr)``."""
    cdef StridedMemoryView view = _new_view()
    info = proxy._info
    # Kept only while obj is still of the type it describes (__class__ can be assigned).
    if info is None or info.described_type is not type(proxy.obj):
        info = _producer_type(proxy.obj)
        proxy._info = info
    _view_from_any(view, proxy.obj, stream_ptr, info)
    return view


# ViewableArgument.view is called once per array argument of every launch.
# Cython's wrapper parses its arguments for keywords first; the entry below
# takes view() and view(stream_ptr) straight to _proxy_view and hands any other
# call (a keyword, too many arguments) to that wrapper, which parses and raises.
# It is the same method: name, flags, docstring (so signature) are the wrapper's.

ctypedef PyObject *(*_FastcallKeywords)(
    PyObject *, PyObject *const *, Py_ssize_t, PyObject *
) noexcept

cdef extern from "Python.h":
    ctypedef struct PyMethodDef_entry "PyMethodDef":
        const char *ml_name
        void *ml_meth
        int ml_flags
        const char *ml_doc
    ctypedef struct PyTypeObject_methods "PyTypeObject":
        PyMethodDef_entry *tp_methods
        PyObject *tp_dict
    object PyDescr_NewMethod(PyTypeObject_methods *, PyMethodDef_entry *)
    enum:
        METH_FASTCALL
        METH_KEYWORDS

cdef _FastcallKeywords _generated_proxy_view = NULL
cdef PyMethodDef_entry _proxy_view_entry  # static: as long-lived as the type


cdef object _proxy_view_call(
    PyObject *proxy, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames
):
    # The method descriptor has checked that proxy is a ViewableArgument.
    if kwnames == NULL and nargs <= 1:
        return _proxy_view(<ViewableArgument>proxy, <object>args[0] if nargs else None)
    return _take_reference(_generated_proxy_view(proxy, args, nargs, kwnames))


cdef int _install_proxy_view() except -1:
    global _generated_proxy_view, _proxy_view_entry
    cdef PyTypeObject_methods *tp = <PyTypeObject_methods *>ViewableArgument
    cdef PyMethodDef_entry *entry = tp.tp_methods
    while entry != NULL and entry.ml_name != NULL and strcmp(entry.ml_name, "view") != 0:
        entry += 1
    if (
        _generated_proxy_view != NULL or entry == NULL or entry.ml_name == NULL
        or entry.ml_flags != METH_FASTCALL | METH_KEYWORDS
    ):
        return 0  # not the wrapper expected: Cython's own entry stays
    _proxy_view_entry = entry[0]
    _proxy_view_entry.ml_meth = <void *>_proxy_view_call
    descriptor = PyDescr_NewMethod(tp, &_proxy_view_entry)
    _generated_proxy_view = <_FastcallKeywords>entry.ml_meth
    (<dict><object>tp.tp_dict)["view"] = descriptor
    PyType_Modified(<PyTypeObject_dict *>tp)
    return 0


_install_proxy_view()


cdef inline int _view_from_any(
    StridedMemoryView view, object obj, object stream_ptr, _ProducerType info=None
) except -1:
    """The constructor's work: the first protocol ``obj`` offers, in this order:
    DLPack, the CAI, numpy's array interface, the buffer protocol; else BufferError.
    ``info`` is ``_producer_type(obj)`` when the caller has it (None: looked up here)."""
    stream = _normalize_stream(stream_ptr)
    if info is None:
        info = _producer_type(obj)
    if info.has_dlpack:  # the common case first, every check below left out of line
        return _view_from_dlpack(view, obj, stream, info)
    return _view_without_type_dlpack(view, obj, stream, info)


cdef int _view_without_type_dlpack(
    StridedMemoryView view, object obj, object stream, _ProducerType info
) except -1:
    """_view_from_any for an object whose type has no DLPack methods."""
    if _has_dlpack(obj, info):
        return _view_from_dlpack(view, obj, stream, info)
    interface = getattr(obj, _CAI, None)
    if interface is not None:
        return _view_from_cai(view, obj, interface, stream)
    interface = getattr(obj, _ARRAY_INTERFACE, None)
    if interface is not None:
        return _view_from_array_interface(view, obj, interface)
    if PyObject_CheckBuffer(obj):
        return _view_from_buffer_protocol(view, obj)
    raise BufferError(
        f"stridedview: {type(obj).__name__!r} object supports none of DLPack "
        "(__dlpack__ and __dlpack_device__), the CUDA Array Interface "
        "(__cuda_array_interface__), numpy's array interface (__array_interface__) "
        "and the buffer protocol: pass an array of a library that exports one "
        "(numpy, CuPy, PyTorch, JAX, Numba device arrays, ...), or convert it "
        "first, e.g. numpy.asarray(obj) for host data"
    )


cdef inline ViewableArgument _viewable(object value, object name):
    """``value`` (not None: the launcher passes None on as it is) as a ViewableArgument;
    BufferError without a protocol."""
    info = _producer_type(value)
    if not info.has_dlpack:
        _check_viewable(value, name, info)
    cdef ViewableArgument argument = _new_proxy()
    argument.obj = value
    argument._info = info
    return argument


# --- Spare proxies -------------------------------------------------------
# A launch wraps its chosen arguments in ViewableArgument proxies, which the
# function nearly always drops before it returns.  A proxy that only the
# launcher still holds then (reference count 1) is emptied (obj and _info None,
# as a new one starts) and kept here; a later launch, or one nested in this
# one, takes it instead of making a new one.  A proxy the function kept is
# never touched again.  A spare is handed out only while this list holds its
# only reference (a tracked object can be reached through gc.get_objects()).
# The list is read and changed only while the GIL is held, and no Python code
# runs between a check of a reference count and the use that relies on it.
cdef enum:
    _SPARE_PROXY_SLOTS = 16

cdef PyObject *_spare_proxies[_SPARE_PROXY_SLOTS]  # strong references
cdef Py_ssize_t _spare_proxy_count = 0

cdef extern from *:
    """
    /* The reference passed in becomes the caller's (Cython takes an object
       returned by a function as a new reference). */
    static CYTHON_INLINE PyObject *sv_take_reference(PyObject *o) { return o; }
    """
    object _take_reference "sv_take_reference"(PyObject *)
    Py_ssize_t Py_REFCNT_ptr "Py_REFCNT"(PyObject *)


cdef inline ViewableArgument _new_proxy():
    """An empty proxy (obj and _info None): a spare if one is free, else a new one."""
    global _spare_proxy_count
    cdef PyObject *spare
    while _spare_proxy_count != 0:
        _spare_proxy_count -= 1
        spare = _spare_proxies[_spare_proxy_count]
        if Py_REFCNT_ptr(spare) == 1:
            return <ViewableArgument>_take_reference(spare)
        Py_DECREF_ptr(spare)  # another holder found it: it is theirs now
    return ViewableArgument.__new__(ViewableArgument)


cdef inline void _drop_proxy(PyObject *proxy) noexcept:
    """Drop the launcher's reference to a proxy it made: kept as a spare when that
    reference is the only one and there is room, else released."""
    if Py_REFCNT_ptr(proxy) != 1 or _spare_proxy_count == _SPARE_PROXY_SLOTS:
        Py_DECREF_ptr(proxy)
        return
    _park_proxy(proxy)


cdef void _park_proxy(PyObject *proxy) noexcept:
    global _spare_proxy_count
    cdef ViewableArgument argument = <ViewableArgument>proxy
    # Emptied and listed before obj and _info are released: releasing them may
    # run Python code (a __del__), which may launch and take this spare.
    cdef object obj = argument.obj
    cdef object info = argument._info
    argument.obj = None
    argument._info = None
    _spare_proxies[_spare_proxy_count] = proxy  # the launcher's reference, handed over
    _spare_proxy_count += 1


cdef int _check_viewable(object value, object name, _ProducerType info) except -1:
    """BufferError unless ``value`` offers one of the protocols (its type has no DLPack)."""
    if (
        _has_dlpack(value, info)
        or getattr(value, _CAI, None) is not None
        or getattr(value, _ARRAY_INTERFACE, None) is not None
        or PyObject_CheckBuffer(value)
    ):
        return 0
    raise BufferError(
        f"args_viewable_as_strided_memory: argument {name!r} ({type(value).__name__!r} "
        "object) supports none of DLPack, the CUDA Array Interface, the array "
        "interface and the buffer protocol"
    )


cdef extern from "Python.h":
    ctypedef PyObject *(*vectorcallfunc)(
        PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames
    )
    ctypedef struct PyTypeObject_vectorcall "PyTypeObject":
        Py_ssize_t tp_vectorcall_offset
        unsigned long tp_flags
    enum:
        Py_TPFLAGS_HAVE_VECTORCALL
    Py_ssize_t PyVectorcall_NARGS(size_t nargsf)
    object PyObject_Vectorcall(
        object callable, PyObject *const *args, size_t nargsf, PyObject *kwnames
    )
    object PyVectorcall_Call(object callable, object args, object kwargs)
    PyObject **PySequence_Fast_ITEMS(object)
    void Py_DECREF_ptr "Py_DECREF"(PyObject *)


@cython.final
@cython.auto_pickle(False)
cdef class _ViewableLauncher:
    """What ``args_viewable_as_strided_memory`` returns: ``func`` with chosen arguments wrapped.

    ``by_position`` (given to the constructor) holds ``(position, name)`` pairs in
    increasing position and ``by_keyword`` the names that may come as keywords;
    both were resolved from the signature once.  A call is a vectorcall: one pass over the arguments in
    C, the chosen ones wrapped, then ``func`` called with them (no argument
    tuple or keyword dict is built).  Binds like a function when used as a method.
    """

    cdef vectorcallfunc _vectorcall  # read by the interpreter: tp_vectorcall_offset
    cdef object func
    cdef tuple by_keyword
    # by_position as the launch loop reads it (kept in no other form): _name_at[i]
    # is the name of the argument at position i if it is chosen, else None
    # (positions past the tuple's end are not chosen).
    cdef tuple _name_at
    cdef dict __dict__

    def __cinit__(self):
        self._vectorcall = <vectorcallfunc><void *>_launch

    def __init__(self, func, tuple by_position, tuple by_keyword):
        self.func = func
        self.by_keyword = by_keyword
        name_at = [None] * (by_position[-1][0] + 1 if by_position else 0)
        for position, name in by_position:
            name_at[position] = name
        self._name_at = tuple(name_at)

    def __call__(self, *args, **kwargs):
        # Only callers that hold a tuple and a dict come here (PyObject_Call's
        # own callers go straight to the vectorcall).
        return PyVectorcall_Call(self, args, kwargs)

    def __get__(self, instance, owner):
        if instance is None:
            return self
        return _MethodType(self, instance)

    def __repr__(self):
        return f"<viewable-arguments launcher {self.func!r}>"


cdef enum:
    _LAUNCH_STACK_ARGS = 16  # a call with up to this many arguments builds no tuple


cdef object _launch(
    _ViewableLauncher self, PyObject *const *args, size_t nargsf, PyObject *kwnames
):
    """The launcher's vectorcall: ``self.func(*args)``, the chosen arguments wrapped.

    One pass over the arguments in C; func gets them as a vectorcall, from an
    array on the stack that holds a reference to each while func runs.
    """
    cdef Py_ssize_t count = PyVectorcall_NARGS(nargsf)
    cdef Py_ssize_t keyword_count = 0 if kwnames == NULL else PyTuple_GET_SIZE(<tuple>kwnames)
    cdef Py_ssize_t total = count + keyword_count
    cdef Py_ssize_t i, filled = 0
    cdef Py_ssize_t chosen_end = PyTuple_GET_SIZE(self._name_at)
    cdef PyObject *stack[_LAUNCH_STACK_ARGS]
    cdef PyObject **items = stack
    cdef PyObject *name
    cdef tuple spill = None  # more arguments than the stack holds: a tuple holds them
    cdef object item
    # Bit i: stack[i] is a proxy made here (see _drop_proxy); the stack only.
    cdef uint32_t proxies = 0
    if total > _LAUNCH_STACK_ARGS:
        spill = PyTuple_New(total)
        items = PySequence_Fast_ITEMS(spill)
    try:
        for i in range(count):
            item = <object>args[i]
            if i < chosen_end:
                name = PyTuple_GET_ITEM(self._name_at, i)
                if name != <PyObject *>None and item is not None:
                    item = _viewable(item, <object>name)
                    if spill is None:  # (a shift past 31 would be undefined)
                        proxies |= <uint32_t>1 << i
            Py_INCREF(item)
            items[i] = <PyObject *>item
            filled += 1
        for i in range(keyword_count):
            item = <object>args[count + i]
            keyword = <object>PyTuple_GET_ITEM(<tuple>kwnames, i)
            if item is not None and keyword in self.by_keyword:
                item = _viewable(item, keyword)
                if spill is None:
                    proxies |= <uint32_t>1 << (count + i)
            Py_INCREF(item)
            items[count + i] = <PyObject *>item
            filled += 1
        item = None  # the stack's references are the launcher's only ones (see _drop_proxy)
        return PyObject_Vectorcall(self.func, items, count, kwnames)
    finally:
        if spill is None:  # the spill tuple drops its own items (no spares from it)
            for i in range(filled):
                if proxies >> i & 1:
                    _drop_proxy(stack[i])
                else:
                    Py_DECREF_ptr(stack[i])


cdef int _enable_launcher_vectorcall() except -1:
    """Point the interpreter at each launcher's ``_vectorcall`` field.

    Cython gives a class no vectorcall of its own; a launcher is called on every
    kernel launch, and a vectorcall spares the argument tuple and keyword dict.
    """
    cdef PyTypeObject_vectorcall *tp = <PyTypeObject_vectorcall *>_ViewableLauncher
    cdef _ViewableLauncher probe = _ViewableLauncher.__new__(_ViewableLauncher)
    tp.tp_vectorcall_offset = <Py_ssize_t>(<char *>&probe._vectorcall - <char *><void *>probe)
    tp.tp_flags |= Py_TPFLAGS_HAVE_VECTORCALL
    PyType_Modified(<PyTypeObject_dict *>tp)
    return 0


_enable_launcher_vectorcall()


# --- Deallocation --------------------------------------------------------
# A view's own resources (a consumed capsule's deleter, a held buffer, a shape
# block for views of more than _INLINE_DIMS dimensions) are released by
# _view_dealloc, installed as the type's tp_dealloc in front of the one Cython
# generates (which clears the object fields and recycles the object).  A
# Cython __dealloc__ would save and restore the pending exception around every
# deallocation; here that is done only for a view that releases something (a
# deleter or a buffer release may run Python code), not for the views of numpy
# arrays and exchange-API tensors a launch loop makes and drops.

cdef extern from "Python.h":
    ctypedef void (*destructor)(PyObject *)
    ctypedef struct PyTypeObject_dealloc "PyTypeObject":
        destructor tp_dealloc
    void Py_SET_REFCNT(PyObject *, Py_ssize_t)
    void PyObject_GC_UnTrack(void *)
    void PyErr_Fetch(PyObject **, PyObject **, PyObject **)
    void PyErr_Restore(PyObject *, PyObject *, PyObject *)

cdef destructor _generated_view_dealloc = NULL


cdef inline bint _holds_resources(StridedMemoryView view) noexcept:
    return (
        view._managed != NULL
        or view._held_buffer != NULL
        or (view._dims != NULL and view._dims != view._inline_dims)
    )


cdef void _release_resources(StridedMemoryView view) noexcept:
    """Run the capsule's deleter, release the held buffer, free the shape block: once each."""
    cdef DLManagedTensorVersioned *versioned_tensor
    cdef DLManagedTensor *legacy_tensor
    if view._dims != view._inline_dims and view._dims != NULL:
        free(view._dims)
    view._dims = NULL
    if view._held_buffer != NULL:
        _release_held_buffer(view._held_buffer)
        view._held_buffer = NULL
    if view._managed == NULL:
        return
    if view._managed_is_versioned:
        versioned_tensor = <DLManagedTensorVersioned *>view._managed
        view._managed = NULL
        if versioned_tensor.deleter != NULL:
            versioned_tensor.deleter(versioned_tensor)
    else:
        legacy_tensor = <DLManagedTensor *>view._managed
        view._managed = NULL
        if legacy_tensor.deleter != NULL:
            legacy_tensor.deleter(legacy_tensor)


cdef void _view_dealloc(PyObject *o) noexcept:
    """StridedMemoryView's tp_dealloc: release what the view holds, then Cython's own.

    A view that holds nothing (the views of numpy arrays and exchange-API
    tensors a launch makes) goes straight to Cython's, which untracks it.
    """
    cdef PyObject *error_type
    cdef PyObject *error_value
    cdef PyObject *error_traceback
    if _holds_resources(<StridedMemoryView>o):  # a cast: no reference taken
        # Untracked before Python code (a deleter) can run a collection, and kept
        # at one reference while Cython code handles it (a reference taken and
        # dropped must not bring it back to zero), as Cython's own __dealloc__ does.
        PyObject_GC_UnTrack(o)
        Py_SET_REFCNT(o, 1)
        PyErr_Fetch(&error_type, &error_value, &error_traceback)
        _release_resources(<StridedMemoryView>o)
        PyErr_Restore(error_type, error_value, error_traceback)
        Py_SET_REFCNT(o, 0)
    _generated_view_dealloc(o)


cdef int _install_view_dealloc() except -1:
    global _generated_view_dealloc
    cdef PyTypeObject_dealloc *tp = <PyTypeObject_dealloc *>StridedMemoryView
    if _generated_view_dealloc == NULL:
        _generated_view_dealloc = tp.tp_dealloc
        tp.tp_dealloc = _view_dealloc
    return 0


_install_view_dealloc()


# --- Allocation ----------------------------------------------------------
# A launch makes a view per array argument and drops it at once.  Cython's
# tp_new takes a view from the type's freelist (filled by its tp_dealloc) and
# clears all of it, the inline shape/stride arrays too (16 int64, the bulk of
# the object), before the C fields are written.  _new_view takes from the same
# freelist and clears everything but those arrays: they are only read where
# _dims points into them, and _c_dims_storage writes them before it points
# there (_dims starts NULL, _ndim 0).

cdef extern from *:
    """
    #define SV_VIEW_STRUCT struct __pyx_obj_11stridedview_5_view_StridedMemoryView
    #if CYTHON_USE_FREELISTS && !CYTHON_USE_TYPE_SPECS && !CYTHON_COMPILING_IN_LIMITED_API
    #define SV_VIEW_FREE_COUNT \
        (__pyx_mstate_global->__pyx_freecount_11stridedview_5_view_StridedMemoryView)
    #define SV_VIEW_FREE_POP() ((PyObject *) \
        __pyx_mstate_global->__pyx_freelist_11stridedview_5_view_StridedMemoryView[ \
            --SV_VIEW_FREE_COUNT])
    #else
    #define SV_VIEW_FREE_COUNT 0
    #define SV_VIEW_FREE_POP() ((PyObject *)NULL)
    #endif
    /* A freed view made as Cython's tp_new makes one, but for the inline
       arrays: every byte before and after them zeroed, then the header, the
       vtable and the object fields (None), then tracked by the collector. */
    #define SV_VIEW_PREPARE(o) do { \
        SV_VIEW_STRUCT *sv_view = (SV_VIEW_STRUCT *)(o); \
        const size_t sv_from = offsetof(SV_VIEW_STRUCT, _inline_dims); \
        const size_t sv_to = sv_from + sizeof(sv_view->_inline_dims); \
        memset((char *)sv_view, 0, sv_from); \
        memset((char *)sv_view + sv_to, 0, sizeof(SV_VIEW_STRUCT) - sv_to); \
        (void)PyObject_INIT((PyObject *)sv_view, \
            __pyx_mstate_global->__pyx_ptype_11stridedview_5_view_StridedMemoryView); \
        sv_view->__pyx_vtab = __pyx_vtabptr_11stridedview_5_view_StridedMemoryView; \
        Py_INCREF(Py_None); sv_view->ptr = Py_None; \
        Py_INCREF(Py_None); sv_view->shape = Py_None; \
        Py_INCREF(Py_None); sv_view->strides = Py_None; \
        Py_INCREF(Py_None); sv_view->dtype = Py_None; \
        Py_INCREF(Py_None); sv_view->exporting_obj = Py_None; \
        Py_INCREF(Py_None); sv_view->ready_stream = Py_None; \
        Py_INCREF(Py_None); \
        sv_view->_memory_owner = (struct __pyx_obj_11stridedview_5_view_StridedMemoryView *)Py_None; \
        PyObject_GC_Track(sv_view); \
    } while (0)
    """
    Py_ssize_t SV_VIEW_FREE_COUNT
    PyObject *SV_VIEW_FREE_POP() noexcept
    void SV_VIEW_PREPARE(PyObject *) noexcept


cdef inline StridedMemoryView _new_view():
    """A new empty view, as ``StridedMemoryView.__new__(StridedMemoryView)`` makes it
    (object fields None, C fields zero), sooner when the freelist has one."""
    cdef PyObject *view
    if SV_VIEW_FREE_COUNT > 0:
        view = SV_VIEW_FREE_POP()
        SV_VIEW_PREPARE(view)
        return <StridedMemoryView>_take_reference(view)
    return StridedMemoryView.__new__(StridedMemoryView)


cdef extern from "Python.h":
    ctypedef struct PyTypeObject_new "PyTypeObject":
        vectorcallfunc tp_vectorcall

cdef vectorcallfunc _generated_view_vectorcall = NULL


cdef object _construct_view(
    PyObject *cls, PyObject *const *args, size_t nargsf, PyObject *kwnames
):
    """StridedMemoryView's vectorcall: ``StridedMemoryView(obj)`` and
    ``StridedMemoryView(obj, stream_ptr)`` do __init__'s work on a view from
    _new_view; any other call (keywords, another number of arguments) goes to
    the one Cython generated, which parses and raises as __init__ does."""
    cdef Py_ssize_t count = PyVectorcall_NARGS(nargsf)
    if kwnames != NULL or count < 1 or count > 2:
        return _take_reference(_generated_view_vectorcall(cls, args, nargsf, kwnames))
    cdef StridedMemoryView view = _new_view()
    _view_from_any(view, <object>args[0], <object>args[1] if count == 2 else None)
    return view


cdef int _install_view_constructor() except -1:
    global _generated_view_vectorcall
    cdef PyTypeObject_new *tp = <PyTypeObject_new *>StridedMemoryView
    if _generated_view_vectorcall == NULL and tp.tp_vectorcall != NULL:
        _generated_view_vectorcall = tp.tp_vectorcall
        tp.tp_vectorcall = <vectorcallfunc><void *>_construct_view
    return 0


_install_view_constructor()


cdef StridedMemoryView _derive(StridedMemoryView base):
    """A new view of ``base``'s memory: every field copied, the memory owner shared.

    The one way a view is made from another (derived layouts, a view of a view):
    the caller then changes the layout fields it needs (``ptr``/``_ptr``,
    ``shape``, ``strides``, ``dtype``, ``_size``, ``readonly``...) and, if it
    changed ``shape``, ``strides`` or ``dtype``, calls ``_store_c_layout(view)``
    so that the C-level API (_view.pxd, stridedview.h) sees the new layout.  The new view
    keeps the root owner alive, never ``base`` itself, so that no chain of views
    forms however often views are derived from views; it takes no capsule of its
    own, so its deallocation calls no deleter.
    """
    cdef StridedMemoryView view = _new_view()
    _derive_into(view, base)
    return view


cdef int _derive_into(StridedMemoryView view, StridedMemoryView base) except -1:
    """``_derive``'s work on a view already allocated (a constructor's ``self``)."""
    view._ptr = base._ptr
    view.ptr = base.ptr
    view.shape = base.shape
    view.strides = base.strides
    view.dtype = base.dtype
    view._size = base._size
    view._device_type = base._device_type
    view._device_id = base._device_id
    view.is_device_accessible = base.is_device_accessible
    view.readonly = base.readonly
    view.ready_stream = base.ready_stream
    view.exporting_obj = base.exporting_obj
    view._memory_owner = base if base._memory_owner is None else base._memory_owner
    # The C layout too, straight from base's C arrays (no tuple read back).
    return _store_c_layout_from(
        view, base._dims, base._dims + base._ndim, base._ndim, base._itemsize
    )


cdef int _store_c_layout(StridedMemoryView view) except -1:
    """Copy ``view``'s shape, strides and item size into its C fields (the C-level API).

    Every way of making a view ends here (or in _store_c_layout_from), once its
    ``shape``, ``strides`` and ``dtype`` are final: a caller of _derive that
    changes them calls it again.
    """
    global _last_itemsize
    cdef tuple shape = <tuple>view.shape
    cdef tuple strides = <tuple>view.strides
    cdef Py_ssize_t i, ndim = PyTuple_GET_SIZE(shape)
    cdef int64_t *dims = _c_dims_storage(view, ndim)
    for i in range(ndim):
        dims[i] = <int64_t>(<object>PyTuple_GET_ITEM(shape, i))
        dims[ndim + i] = <int64_t>(<object>PyTuple_GET_ITEM(strides, i))
    # dtype.itemsize is an attribute lookup: the last dtype's answer is kept, in
    # one global so that a reader never pairs one dtype with another's size.
    cdef tuple last = _last_itemsize
    dtype = view.dtype
    if last[0] is not dtype:
        last = (dtype, dtype.itemsize)
        _last_itemsize = last
    view._itemsize = <int64_t>last[1]
    return 0


cdef inline int _store_c_layout_from(
    StridedMemoryView view, const int64_t *shape, const int64_t *strides, int32_t ndim,
    int64_t itemsize,
) except -1:
    """_store_c_layout from C arrays already at hand (a DLTensor's): two copies, or
    none when they are the view's own already (the exchange API copies a lent
    layout straight into them)."""
    cdef int64_t *dims
    cdef int32_t i
    if ndim != 0 and view._ndim == ndim and shape == view._dims and strides == view._dims + ndim:
        view._itemsize = itemsize
        return 0
    dims = _c_dims_storage(view, ndim)
    for i in range(ndim):  # a few values: a loop beats two memcpy calls
        dims[i] = shape[i]
        dims[ndim + i] = strides[i]
    view._itemsize = itemsize
    return 0


cdef inline int64_t *_c_dims_storage(StridedMemoryView view, Py_ssize_t ndim) except NULL:
    """Room for ``2 * ndim`` int64 in ``view`` (inside it up to _INLINE_DIMS
    dimensions, else one block freed with the view); sets ``_dims`` and ``_ndim``."""
    cdef int64_t *dims
    if ndim <= _INLINE_DIMS:
        dims = view._inline_dims
    elif view._dims != NULL and view._dims != view._inline_dims and view._ndim >= ndim:
        dims = view._dims
    else:
        dims = <int64_t *>malloc(2 * ndim * sizeof(int64_t))
        if dims == NULL:
            raise MemoryError()
    if view._dims != NULL and view._dims != view._inline_dims and view._dims != dims:
        free(view._dims)
    view._dims = dims
    view._ndim = <int32_t>ndim
    return dims


cdef tuple _last_itemsize = (None, 0)


# Address ints, interned like the shape tuples: a launch loop views the same
# buffers again and again, and an int found here spares an allocation and a
# deallocation per view.  Two-way set-associative: each address may sit in
# either slot of its set, and a miss replaces the one used less recently, so
# the few buffers of a launch never evict each other (direct-mapped, three
# buffers shared a slot in one process of ten, and two of them missed on every
# launch).  Ints are immutable.
cdef enum:
    _ADDRESS_CACHE_SET_BITS = 4
    _ADDRESS_CACHE_SETS = 1 << _ADDRESS_CACHE_SET_BITS
    _ADDRESS_CACHE_SLOTS = 2 * _ADDRESS_CACHE_SETS  # set s: slots 2s and 2s + 1

cdef uintptr_t _cached_addresses[_ADDRESS_CACHE_SLOTS]
# Strong references, owned by the cache (NULL: empty slot); C arrays rather than
# lists, so that a hit is two loads and a compare.
cdef PyObject *_cached_address_ints[_ADDRESS_CACHE_SLOTS]
# Per set, the way (0 or 1) a miss replaces: the one not used last.
cdef uint8_t _address_victims[_ADDRESS_CACHE_SETS]


cdef inline object _address_int(uintptr_t address):
    """``address`` as a Python int, from the intern cache when it holds it."""
    # Fibonacci hashing: allocators align buffers to 64 bytes and more, so the
    # low bits alone would crowd a few sets.
    cdef Py_ssize_t set_index = <Py_ssize_t>(
        (<uint64_t>address * <uint64_t>0x9E3779B97F4A7C15) >> (64 - _ADDRESS_CACHE_SET_BITS)
    )
    cdef Py_ssize_t slot = 2 * set_index
    cdef PyObject *cached = _cached_address_ints[slot]
    if cached != NULL and _cached_addresses[slot] == address:
        _address_victims[set_index] = 1
        return <object>cached
    cached = _cached_address_ints[slot + 1]
    if cached != NULL and _cached_addresses[slot + 1] == address:
        _address_victims[set_index] = 0
        return <object>cached
    return _intern_address(address, set_index)


cdef object _intern_address(uintptr_t address, Py_ssize_t set_index):
    cdef object result = address  # typed: an inferred C integer would be cached as a pointer
    cdef Py_ssize_t way = _address_victims[set_index]
    cdef Py_ssize_t slot = 2 * set_index + way
    Py_INCREF(result)
    Py_XDECREF(_cached_address_ints[slot])
    _cached_address_ints[slot] = <PyObject *>result
    _cached_addresses[slot] = address
    _address_victims[set_index] = 1 - way
    return result


cdef tuple _row_major_strides(tuple shape, const int64_t *extents, int64_t size):
    """Row-major element strides for ``shape`` (whose extents are also in ``extents``).

    The one place both protocols compute strides a producer left out.  For a
    non-empty shape every product fits int64 (its element count was checked), so
    the strides are computed in C and interned.  Only an empty shape can make a
    stride pass int64; such a stride never addresses anything, and is given as 0
    so that every stride of a view fits DLPack's int64.
    """
    cdef Py_ssize_t i, ndim = PyTuple_GET_SIZE(shape)
    cdef int64_t step = 1
    cdef int64_t computed[64]
    if size != 0 and ndim <= 64:
        for i in range(ndim - 1, -1, -1):
            computed[i] = step
            step *= extents[i]
        return _int64_tuple(computed, <int32_t>ndim)
    strides = [0] * ndim
    big_step = 1
    for i in range(ndim - 1, -1, -1):
        strides[i] = big_step if big_step <= INT64_MAX else 0
        big_step *= max(shape[i], 1)
    return tuple(strides)


cdef extern from *:
    """
    /* _byte_offsets_fit in 128-bit arithmetic, where the compiler has it: the
       spans below and above element 0 are summed in elements, stopping as soon
       as one passes INT64_MAX (so no sum can overflow), then scaled by the item
       size.  -1: no 128-bit integers here, use the portable check. */
    static inline int sv_byte_offsets_fit_128(
        Py_ssize_t ndim, const int64_t *extents, const int64_t *strides,
        int64_t size, Py_ssize_t itemsize)
    {
    #if defined(__SIZEOF_INT128__)
        const unsigned __int128 limit = (unsigned __int128)INT64_MAX;
        unsigned __int128 above = 0, below = 0;
        Py_ssize_t i;
        if (size == 0) return 1;
        if (itemsize < 1) itemsize = 1;
        if (strides == NULL)
            return (unsigned __int128)(uint64_t)(size - 1) * (uint64_t)itemsize <= limit;
        for (i = 0; i < ndim; i++) {
            int64_t stride = strides[i];
            if (extents[i] <= 1) continue;
            if (stride >= 0) {
                above += (unsigned __int128)(uint64_t)(extents[i] - 1) * (uint64_t)stride;
                if (above > limit) return 0;
            } else {
                below += (unsigned __int128)(uint64_t)(extents[i] - 1)
                         * ((uint64_t)0 - (uint64_t)stride);
                if (below > limit) return 0;
            }
        }
        return above * (uint64_t)itemsize <= limit && below * (uint64_t)itemsize <= limit;
    #else
        (void)ndim; (void)extents; (void)strides; (void)size; (void)itemsize;
        return -1;
    #endif
    }
    """
    int sv_byte_offsets_fit_128(
        Py_ssize_t, const int64_t *, const int64_t *, int64_t, Py_ssize_t
    ) noexcept


cdef inline bint _byte_offsets_fit(
    Py_ssize_t ndim, const int64_t *extents, const int64_t *strides, int64_t size,
    Py_ssize_t itemsize
) noexcept:
    """Whether every element lies within int64 bytes of element 0 (both protocols' check).

    ``strides`` are in elements, NULL for row-major.  In 128-bit arithmetic where
    the compiler offers it, else by _byte_offsets_fit_portable (the same answer).
    """
    cdef int answer = sv_byte_offsets_fit_128(ndim, extents, strides, size, itemsize)
    if answer >= 0:
        return answer
    return _byte_offsets_fit_portable(ndim, extents, strides, size, itemsize)


def _byte_offsets_fit_both_ways(extents, strides, Py_ssize_t itemsize):
    """(128-bit answer or -1, portable answer) for int64 ``extents`` and ``strides``
    (None: row-major); for tests, which compare both with exact integers."""
    cdef Py_ssize_t i, ndim = len(extents)
    # Room for any ndim (fixed arrays would overflow), freed with the bytearray.
    cdef bytearray room = bytearray(2 * max(ndim, 1) * sizeof(int64_t))
    cdef int64_t *c_extents = <int64_t *><char *>room
    cdef int64_t *c_strides = c_extents + ndim
    cdef int64_t size = 1
    for i in range(ndim):
        c_extents[i] = extents[i]
        size = size * extents[i] if size * extents[i] <= INT64_MAX else INT64_MAX
        if strides is not None:
            c_strides[i] = strides[i]
    if 0 in extents:
        size = 0
    cdef const int64_t *stride_array = NULL if strides is None else c_strides
    return (
        sv_byte_offsets_fit_128(ndim, c_extents, stride_array, size, itemsize),
        _byte_offsets_fit_portable(ndim, c_extents, stride_array, size, itemsize),
    )


cdef bint _byte_offsets_fit_portable(
    Py_ssize_t ndim, const int64_t *extents, const int64_t *strides, int64_t size,
    Py_ssize_t itemsize
) noexcept:
    """Whether every element lies within int64 bytes of element 0, in 64-bit arithmetic.

    ``strides`` are in elements, NULL for row-major.  Only dimensions of extent > 1
    step, and an empty layout addresses nothing: their strides may be anything.
    The spans below and above element 0 are summed apart, each kept <= 2**63 - 1.
    """
    cdef uint64_t limit = <uint64_t>INT64_MAX
    cdef uint64_t above = 0, below = 0, step, span, steps, per_item
    cdef Py_ssize_t i
    if size == 0:
        return True
    if itemsize < 1:
        itemsize = 1
    per_item = limit // <uint64_t>itemsize
    if strides == NULL:
        return <uint64_t>(size - 1) <= per_item
    for i in range(ndim):
        if extents[i] <= 1:
            continue
        steps = <uint64_t>(extents[i] - 1)
        step = <uint64_t>strides[i] if strides[i] >= 0 else <uint64_t>0 - <uint64_t>strides[i]
        if step > per_item:
            return False
        step *= <uint64_t>itemsize
        # Below 2**31 both, the product fits; only larger ones need the division.
        if (steps | step) >> 31 and step != 0 and steps > limit // step:
            return False
        span = step * steps
        if strides[i] >= 0:
            if span > limit - above:
                return False
            above += span
        else:
            if span > limit - below:
                return False
            below += span
    return True


cdef object _exported_stride(object stride, Py_ssize_t itemsize):
    """``stride`` as an export gives it: 0 where ``stride * itemsize`` passes int64.

    Only a dimension that never steps (extent <= 1, or an empty view) can carry
    such a stride once a view is made, so 0 describes the same elements, and no
    consumer computing byte offsets overflows.
    """
    if -INT64_MAX <= stride * itemsize <= INT64_MAX:
        return stride
    return 0


cdef bint _is_contiguous(tuple shape, tuple strides, int64_t size, bint reversed_axes):
    if size == 0:
        return True
    cdef Py_ssize_t ndim = len(shape)
    expected = 1
    axes = range(ndim - 1, -1, -1) if reversed_axes else range(ndim)
    for i in axes:
        extent = shape[i]
        if extent != 1:
            if strides[i] != expected:
                return False
            expected *= extent
    return True


include "_producer_types.pxi"
include "_torch_bits.pxi"
include "_from_dlpack.pxi"
include "_from_numpy.pxi"
include "_from_cai.pxi"
include "_export.pxi"
include "_layout.pxi"
include "_from_host.pxi"
include "_exchange_export.pxi"
include "_c_api.pxi"
