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
from cpython.ref cimport Py_INCREF
from libc.string cimport memcmp, memcpy, strcmp, strncmp
from cpython.tuple cimport PyTuple_GET_SIZE, PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport INT64_MAX, UINTPTR_MAX, int32_t, int64_t, uint8_t, uint64_t, uintptr_t

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


class _LazyDataclassFields:
    """Descriptor giving StridedMemoryView its ``__dataclass_fields__`` on first use."""

    _fields = None

    def __get__(self, instance, owner):
        fields = _LazyDataclassFields._fields
        if fields is None:
            import dataclasses

            @dataclasses.dataclass(frozen=True)
            class StridedMemoryViewFields:
                ptr: "int"
                shape: "tuple[int, ...]"
                strides: "tuple[int, ...]"
                dtype: "numpy.dtype"
                device_id: "int"
                is_device_accessible: "bool"
                readonly: "bool"
                exporting_obj: "object"

            fields = _LazyDataclassFields._fields = StridedMemoryViewFields.__dataclass_fields__
        return fields


@cython.final
@cython.freelist(16)
@cython.auto_pickle(False)
cdef class StridedMemoryView:
    """A zero-copy view of a strided array from any DLPack or CUDA Array Interface producer.

    ``StridedMemoryView(obj, stream_ptr=None)`` views ``obj`` through DLPack when
    it has ``__dlpack__`` and ``__dlpack_device__``, else through the CUDA Array
    Interface (CAI) when it has ``__cuda_array_interface__``; anything else is a
    ``BufferError``.  ``from_dlpack`` and ``from_cuda_array_interface`` force one
    protocol.  Nothing is copied; the view keeps ``obj`` alive.

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
    - ``exporting_obj``: the object viewed, kept alive as long as the view;
    - ``ready_stream``: the stream on which the data may be used without further
      ordering (the caller's stream once ordered; with -1, the CAI producer's
      stream), or None when there is none to speak of (host memory) or it is
      unknown.

    A consumed DLPack capsule's deleter runs exactly once, when the view is
    deallocated.  The view hands itself on through ``__dlpack__``,
    ``__dlpack_device__`` and, for device-accessible memory,
    ``__cuda_array_interface__``.
    """

    # Exposed as read-only member descriptors by _expose_as_members() below.
    cdef object ptr
    cdef object shape
    cdef object strides
    cdef object dtype
    cdef object exporting_obj
    cdef readonly bint is_device_accessible
    """Whether a CUDA kernel may access the memory: False only for host-only (CPU) memory."""
    cdef readonly bint readonly
    """Whether the producer marked the memory read-only (DLPack 1.x's READ_ONLY flag, the
    CAI's ``data[1]``); False for a legacy DLPack capsule, which cannot say."""
    cdef readonly object ready_stream
    """The stream on which the data may be used with no further ordering, or None (host
    memory, or unknown)."""
    cdef uintptr_t _ptr
    cdef int64_t _size
    cdef int32_t _device_type
    cdef int32_t _device_id
    cdef void *_managed
    cdef bint _managed_is_versioned
    # The view whose DLPack capsule holds the memory, for a view derived from
    # another (_derive); None when this view owns its memory itself (through
    # _managed or exporting_obj).  Always the root owner: derived views never chain.
    cdef StridedMemoryView _memory_owner

    __match_args__ = ("ptr", "shape", "strides", "dtype")

    def __init__(self, obj, stream_ptr=None):
        if self.exporting_obj is not None:
            raise TypeError("StridedMemoryView is already initialised")
        _view_from_any(self, obj, stream_ptr)

    @classmethod
    def from_dlpack(cls, obj, stream_ptr=None):
        """View ``obj`` through DLPack only; see the class docstring for ``stream_ptr``."""
        cdef StridedMemoryView view = StridedMemoryView.__new__(StridedMemoryView)
        stream = _normalize_stream(stream_ptr)
        if not _has_dlpack(obj):
            raise BufferError(
                f"dlpack: {type(obj).__name__!r} object has no __dlpack__ and "
                "__dlpack_device__ methods"
            )
        _view_from_dlpack(view, obj, stream)
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

    def __dealloc__(self):
        cdef DLManagedTensorVersioned *versioned_tensor
        cdef DLManagedTensor *legacy_tensor
        if self._managed == NULL:
            return
        if self._managed_is_versioned:
            versioned_tensor = <DLManagedTensorVersioned *>self._managed
            if versioned_tensor.deleter != NULL:
                versioned_tensor.deleter(versioned_tensor)
        else:
            legacy_tensor = <DLManagedTensor *>self._managed
            if legacy_tensor.deleter != NULL:
                legacy_tensor.deleter(legacy_tensor)
        self._managed = NULL

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

    # dataclasses.is_dataclass() and dataclasses.fields() read this; built on
    # first use so that importing stridedview does not import dataclasses.
    __dataclass_fields__ = _LazyDataclassFields()


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

    def __init__(self, obj):
        self.obj = obj

    def view(self, stream_ptr=None):
        """``StridedMemoryView(self.obj, stream_ptr)``; see StridedMemoryView for streams."""
        cdef StridedMemoryView view = StridedMemoryView.__new__(StridedMemoryView)
        _view_from_any(view, self.obj, stream_ptr)
        return view

    def __repr__(self):
        return f"ViewableArgument({self.obj!r})"


cdef int _view_from_any(StridedMemoryView view, object obj, object stream_ptr) except -1:
    """The constructor's work: DLPack if ``obj`` has it, else the CAI, else BufferError."""
    stream = _normalize_stream(stream_ptr)
    if _has_dlpack(obj):
        return _view_from_dlpack(view, obj, stream)
    interface = getattr(obj, _CAI, None)
    if interface is not None:
        return _view_from_cai(view, obj, interface, stream)
    raise BufferError(
        f"stridedview: {type(obj).__name__!r} object supports neither DLPack "
        "(__dlpack__ and __dlpack_device__) nor the CUDA Array Interface "
        "(__cuda_array_interface__)"
    )


cdef object _viewable(object value, object name):
    """``value`` as a ViewableArgument; None stays None; BufferError without a protocol."""
    if value is None:
        return None
    if not (_has_dlpack(value) or getattr(value, _CAI, None) is not None):
        raise BufferError(
            f"args_viewable_as_strided_memory: argument {name!r} ({type(value).__name__!r} "
            "object) supports neither DLPack nor the CUDA Array Interface"
        )
    cdef ViewableArgument argument = ViewableArgument.__new__(ViewableArgument)
    argument.obj = value
    return argument


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


@cython.final
@cython.auto_pickle(False)
cdef class _ViewableLauncher:
    """What ``args_viewable_as_strided_memory`` returns: ``func`` with chosen arguments wrapped.

    ``by_position`` holds ``(position, name)`` pairs in increasing position and
    ``by_keyword`` the names that may come as keywords; both were resolved from
    the signature once.  A call is a vectorcall: one pass over the arguments in
    C, the chosen ones wrapped, then ``func`` called with them (no argument
    tuple or keyword dict is built).  Binds like a function when used as a method.
    """

    cdef vectorcallfunc _vectorcall  # read by the interpreter: tp_vectorcall_offset
    cdef object func
    cdef tuple by_position
    cdef tuple by_keyword
    cdef dict __dict__

    def __cinit__(self):
        self._vectorcall = <vectorcallfunc><void *>_launch

    def __init__(self, func, tuple by_position, tuple by_keyword):
        self.func = func
        self.by_position = by_position
        self.by_keyword = by_keyword

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


cdef object _launch(
    _ViewableLauncher self, PyObject *const *args, size_t nargsf, PyObject *kwnames
):
    """The launcher's vectorcall: ``self.func(*args)``, the chosen arguments wrapped."""
    cdef Py_ssize_t count = PyVectorcall_NARGS(nargsf)
    cdef Py_ssize_t keyword_count = 0 if kwnames == NULL else PyTuple_GET_SIZE(<tuple>kwnames)
    cdef Py_ssize_t i, chosen = 0, chosen_count = PyTuple_GET_SIZE(self.by_position)
    cdef Py_ssize_t next_position = -1
    cdef object item
    cdef tuple pair
    if chosen_count:
        pair = <tuple>self.by_position[0]
        next_position = pair[0]
    # Every argument, the chosen ones wrapped; the tuple only holds them while
    # func runs, func sees them as a vectorcall.
    cdef tuple items = PyTuple_New(count + keyword_count)
    for i in range(count):
        item = <object>args[i]
        if i == next_position:
            item = _viewable(item, pair[1])
            chosen += 1
            if chosen < chosen_count:
                pair = <tuple>self.by_position[chosen]
                next_position = pair[0]
        Py_INCREF(item)
        PyTuple_SET_ITEM(items, i, item)
    for i in range(keyword_count):
        item = <object>args[count + i]
        name = (<tuple>kwnames)[i]
        if name in self.by_keyword:
            item = _viewable(item, name)
        Py_INCREF(item)
        PyTuple_SET_ITEM(items, count + i, item)
    return PyObject_Vectorcall(self.func, PySequence_Fast_ITEMS(items), count, kwnames)


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


cdef StridedMemoryView _derive(StridedMemoryView base):
    """A new view of ``base``'s memory: every field copied, the memory owner shared.

    The one way a view is made from another (derived layouts, a view of a view):
    the caller then changes the layout fields it needs (``ptr``/``_ptr``,
    ``shape``, ``strides``, ``dtype``, ``_size``, ``readonly``...).  The new view
    keeps the root owner alive, never ``base`` itself, so that no chain of views
    forms however often views are derived from views; it takes no capsule of its
    own, so its deallocation calls no deleter.
    """
    cdef StridedMemoryView view = StridedMemoryView.__new__(StridedMemoryView)
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
    return view


# Address ints, interned like the shape tuples: a launch loop views the same
# buffers again and again, and an int found here spares an allocation and a
# deallocation per view.  Direct-mapped by the address; ints are immutable.
cdef enum:
    _ADDRESS_CACHE_SLOTS = 32

cdef uintptr_t _cached_addresses[_ADDRESS_CACHE_SLOTS]
cdef list _cached_address_ints = [None] * _ADDRESS_CACHE_SLOTS


cdef object _address_int(uintptr_t address):
    """``address`` as a Python int, from the intern cache when it holds it."""
    cdef Py_ssize_t slot = <Py_ssize_t>((address >> 4) % _ADDRESS_CACHE_SLOTS)
    cdef object cached = _cached_address_ints[slot]
    if cached is not None and _cached_addresses[slot] == address:
        return cached
    result = address
    _cached_address_ints[slot] = result
    _cached_addresses[slot] = address
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
include "_from_dlpack.pxi"
include "_from_numpy.pxi"
include "_from_cai.pxi"
include "_export.pxi"
