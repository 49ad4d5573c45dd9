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
    INT64_MAX, INT64_MIN, UINTPTR_MAX, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t,
    uintptr_t,
)

from stridedview._dlpack cimport *

# The fast paths that keep objects between calls (the view freelist, spare
# proxies and their kept views, interned ints and tuples, the last-type and
# last-itemsize caches) keep them in _thread_state.pxi's struct: one for the
# process where the GIL protects it, one per thread where there is no GIL.  A
# build with -DSV_NO_GIL_FAST_PATHS leaves all of them out (SV_FAST_PATHS 0),
# which the tests use to prove the general path alone gives the same views.
# SV_GIL_FAST_PATHS is 1 where they are in and the GIL protects them: what still
# differs between the two kinds of build (Cython's own freelist, used with the
# GIL).  docs/internals.md lists each.
cdef extern from *:
    """
    #if defined(Py_GIL_DISABLED) || defined(SV_NO_GIL_FAST_PATHS)
    #define SV_GIL_FAST_PATHS 0
    #else
    #define SV_GIL_FAST_PATHS 1
    #endif
    /* The hot path's small helpers, inlined at every call whatever the compiler's
       size estimate: setup.py puts it on their prototypes in the generated C
       (Cython has no syntax for a function attribute), and C helpers here use it;
       SV_NEVER_INLINE keeps a hot function's cold helpers out of it. */
    #if defined(__GNUC__) || defined(__clang__)
    #define SV_ALWAYS_INLINE __attribute__((always_inline))
    #define SV_NEVER_INLINE __attribute__((noinline))
    #else
    #define SV_ALWAYS_INLINE
    #define SV_NEVER_INLINE
    #endif
    """
    bint SV_GIL_FAST_PATHS

include "_thread_state.pxi"

# Whether this build has the fast paths above, and where their state lives
# ("process": GIL builds; "thread": free-threaded builds; None: compiled out);
# for tests and the report.  gil_fast_paths is the older name of fast_paths.
fast_paths = bool(SV_FAST_PATHS)
fast_paths_state = None if not SV_FAST_PATHS else ("thread" if SV_PER_THREAD_STATE else "process")
gil_fast_paths = fast_paths


# The C API the hot-path modules share (_view_lifecycle.pxi, _launcher.pxi).
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
    void Py_INCREF_ptr "Py_INCREF"(PyObject *)
    PyObject *SV_TUPLE_ITEM "PyTuple_GET_ITEM"(PyObject *, Py_ssize_t)  # borrowed

cdef extern from *:
    """
    /* The reference passed in becomes the caller's (Cython takes an object
       returned by a function as a new reference). */
    static CYTHON_INLINE PyObject *sv_take_reference(PyObject *o) { return o; }
    /* A reference to None for a field the view or a proxy owns.  None is immortal
       from CPython 3.12 on (its count is never changed: Py_RETURN_NONE takes no
       reference there either), so the reference is taken only before 3.12, where a
       field's None is counted like any other object. */
    #if PY_VERSION_HEX >= 0x030C0000
    #define SV_NONE_NEW() (Py_None)
    #else
    #define SV_NONE_NEW() (Py_INCREF(Py_None), Py_None)
    #endif
    /* An object field's reference taken out of the field, which holds None after. */
    static CYTHON_INLINE PyObject *sv_take_field(PyObject **field) {
        PyObject *o = *field;
        *field = SV_NONE_NEW();
        return o;
    }
    """
    object _take_reference "sv_take_reference"(PyObject *)
    Py_ssize_t Py_REFCNT_ptr "Py_REFCNT"(PyObject *)

cdef extern from "Python.h":
    ctypedef struct PyTypeObject_dict "PyTypeObject":
        PyObject *tp_dict
    void PyType_Modified(PyTypeObject_dict *)
    object PyDescr_NewMember(PyTypeObject_dict *, PyMemberDef *)


include "_streams.pxi"
include "_dtypes.pxi"

import sys
from types import MethodType as _MethodType

cdef bint _BIG_ENDIAN_HOST = sys.byteorder == "big"
# device_id of a CAI view before the driver has been asked.
cdef enum:
    _DEVICE_ID_UNKNOWN = -2

# stridedview._driver, published once on first need (_driver_module).
cdef PyObject *_driver = NULL


cdef object _copy_module():
    """stridedview._copy, imported on first need."""
    from stridedview import _copy
    return _copy


cdef object _tensor_map_module():
    """stridedview._tensor_map, imported on first need."""
    from stridedview import _tensor_map
    return _tensor_map


cdef object _ipc_module():
    """stridedview._ipc (views sent to other processes), imported on first need."""
    from stridedview import _ipc
    return _ipc


cdef int _refuse_copy(StridedMemoryView view) except -1:
    raise TypeError(
        f"copy: a StridedMemoryView is not copied (copy.copy, copy.deepcopy): make another "
        f"view of its exporting object ({type(view.exporting_obj).__name__!r}), or copy its "
        "elements with copy_to; pickle sends a device view to another process"
    )


cdef object _allocation_module():
    """stridedview._allocation (what the driver knows of a view's memory), on first need."""
    from stridedview import _allocation
    return _allocation


cdef object _driver_module():
    """stridedview._driver, imported on first need (it is the only door to CUDA).

    Published once (_thread_state.pxi's _publish_once): threads racing on the first
    need each import it (the same module) and read the slot with an acquire load.
    """
    cdef PyObject *module = _load_published(&_driver)
    if module == NULL:
        from stridedview import _driver as imported
        module = _publish_once(&_driver, imported)
    return <object>module


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
@cython.embedsignature.format("clinic")
cdef class StridedMemoryView:
    """A zero-copy view of an array, read from any producer: DLPack, the CUDA Array
    Interface, numpy's array interface or the buffer protocol.

    It gives a kernel launcher what it needs, nothing copied: ``ptr`` (element
    [0, ..., 0]), ``shape``, ``strides`` (in elements), ``dtype``, ``device_id`` (-1 for
    host memory) and ``readonly``.  For example::

        >>> view = StridedMemoryView(numpy.zeros((4, 3), numpy.float32)[:, ::2])
        >>> view.shape, view.strides, view.dtype, view.device_id
        ((4, 2), (3, 2), dtype('float32'), -1)

    For device memory, pass the stream your kernel will use, ``stream_ptr=stream``
    (-1: order nothing), and to keep memory a launch may outlive, ``record_stream``.
    The whole contract (which protocol is used, streams, lifetime, every field and
    error) is in the documentation, Markdown readable unbuilt: the source repository's
    docs/concepts.md, docs/api.md (the API reference) and docs/errors.md.
    """

    # The fields are declared in _view.pxd, with the C-level API.

    __match_args__ = ("ptr", "shape", "strides", "dtype")
    __signature__ = _ConstructorSignature()  # that of __init__: a slot has none

    def __init__(self, obj, stream_ptr=None):
        """__init__($self, /, obj, stream_ptr=None)
--

View ``obj`` through the first protocol it offers (see the class docstring)."""
        # Only a new view is filled: one filled before (or left with anything by a fill
        # that failed half-way) would lose what it holds, a capsule's deleter never to
        # run.  Its real state is checked, not how it was made.
        if self._parked and _is_emptied(self):  # a launcher's proxy will fill it (_park_proxy)
            raise TypeError(
                "StridedMemoryView is kept empty by a launcher, for its proxy's next "
                "view() to fill: make a new view, StridedMemoryView(obj)"
            )
        if not _is_new(self):
            raise TypeError("StridedMemoryView is already initialised")
        _view_from_any(self, obj, stream_ptr)

    @classmethod
    def from_dlpack(cls, obj, stream_ptr=None):
        """View ``obj`` through DLPack only; see the class docstring for ``stream_ptr``."""
        cdef StridedMemoryView view = StridedMemoryView.__new__(StridedMemoryView)
        stream = _normalize_stream(stream_ptr)
        info = _producer_type(obj)
        if not _has_dlpack(obj, info):
            if PyCapsule_CheckExact(obj):
                _refuse_capsule(obj)  # (the array belongs here, not its capsule)
            _refuse_half_dlpack(obj)
            raise BufferError(
                f"dlpack: {type(obj).__name__!r} object has no __dlpack__ and "
                "__dlpack_device__ methods: StridedMemoryView(obj) takes the other "
                "protocols too"
            )
        _view_from_dlpack(view, obj, stream, info)
        return view

    @classmethod
    def from_cuda_array_interface(cls, obj, stream_ptr=None):
        """View ``obj`` through the CUDA Array Interface only (``stream_ptr=None`` is refused)."""
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
        """View host memory through numpy's ``__array_interface__`` (version 3) only."""
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
        """View ``buffer``'s bytes with a layout (cuda.core's ``from_buffer``, for any buffer)."""
        cdef StridedMemoryView view = StridedMemoryView.__new__(StridedMemoryView)
        _view_from_buffer_layout(view, buffer, shape, strides, itemsize, dtype, is_readonly)
        return view

    @property
    def device_id(self):
        """-1 for host-only memory, else the device ordinal (a CAI view asks the driver once)."""
        if self._device_id == _DEVICE_ID_UNKNOWN:
            self._device_id = _driver_module().device_of_pointer(
                self._ptr, type(self.exporting_obj).__name__
            )
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
        """Bytes per element (BufferError for packed sub-byte elements: see ``itemsize_bits``)."""
        if self.dtype is None and self.shape is not None:
            raise BufferError(
                f"itemsize: {_dtype_shown(self)} has no whole-byte item size (several "
                f"elements share a byte): itemsize_bits is {self.itemsize_bits}"
            )
        return self.dtype.itemsize

    @property
    def itemsize_bits(self):
        """Bits per element as stored: ``8 * itemsize``, or a packed sub-byte type's bits."""
        if self._itemsize == 0 and self.dtype is None:
            return self._dl_dtype.bits * self._dl_dtype.lanes
        return self.dtype.itemsize * 8

    @property
    def dlpack_dtype(self):
        """The element type as DLPack says it, a DLPackDType(code, bits, lanes), or None."""
        return _dlpack_dtype_object(self._dl_dtype)

    @property
    def nbytes(self):
        """``size * itemsize``: the bytes the elements occupy, gaps not counted (bits / 8, rounded up, if packed)."""
        if self._itemsize == 0 and self.dtype is None and self.shape is not None:
            return (self._size * self.itemsize_bits + 7) // 8
        return _view_nbytes(self, "layout")

    @property
    def is_c_contiguous(self):
        """Row-major and gap-free (numpy's rule: extent-1 axes are ignored, empty views qualify)."""
        return _is_contiguous(self.shape, self.strides, self._size, reversed_axes=True)

    @property
    def is_f_contiguous(self):
        """Column-major and gap-free (numpy's rule: extent-1 axes are ignored, empty views qualify)."""
        return _is_contiguous(self.shape, self.strides, self._size, reversed_axes=False)

    def __repr__(self):
        # The DLPack type where the dtype does not name it (a vector's void dtype,
        # packed sub-byte elements' None).
        shown = self.dtype
        if self._dl_dtype.bits and (
            shown is None or (shown.metadata is not None and _DLPACK_DTYPE_KEY in shown.metadata)
        ):
            shown = f"{shown}, dlpack_dtype={self.dlpack_dtype}"
        return (
            f"StridedMemoryView(ptr={self._ptr:#x}, shape={self.shape}, "
            f"strides={self.strides}, dtype={shown}, device_id={self._device_id_text()}, "
            f"readonly={self.readonly})"
        )

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """Export the view as a DLPack capsule, the consumer's ``stream`` ordered after ``ready_stream``."""
        return _export_dlpack(self, stream, max_version, dl_device, copy)

    def __dlpack_device__(self):
        """``(device_type, device_id)`` in DLPack's terms (device_id 0 for host memory)."""
        if self._device_type == kDLCPU:
            return (kDLCPU, 0)
        return (self._device_type, self.device_id)

    @property
    def __cuda_array_interface__(self):
        """The CUDA Array Interface (v3) of a device-accessible view; none for host memory."""
        return _export_cai(self)

    # --- Beyond viewing: the buffer protocol, numpy's array interface, copies, TMA.
    # The bodies stay one line; the work is in _buffer_export.pxi, _copy.py and
    # _tensor_map.py.

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        _export_buffer(self, buffer, flags)

    def __releasebuffer__(self, Py_buffer *buffer):
        _release_exported_buffer(buffer)

    @property
    def __array_interface__(self):
        """numpy's array interface (version 3) of a host view."""
        return _host_array_interface(self)

    def record_stream(self, stream):
        """Keep the memory from its producer until work now on ``stream`` is done (torch's name)."""
        _record_stream(self, stream)

    def synchronize(self):
        """Block until the data are ready on the host's timeline (for MPI and other stream-less readers)."""
        _allocation_module().synchronize(self)

    @property
    def allocation(self):
        """What the driver knows of the memory: base, size, kind, whether it can be shared."""
        return _allocation_module().allocation_of(self)

    def __reduce__(self):
        """Pickle: a device view for another process (CUDA IPC), a host view by value."""
        return _ipc_module().reduce_view(self)

    def __copy__(self):
        """Refused: a view is never refilled or duplicated (make another view of the object)."""
        _refuse_copy(self)

    def __deepcopy__(self, memo):
        """Refused, as ``copy.copy``: a deep copy would not copy the memory either."""
        _refuse_copy(self)

    def copy_from(self, other, stream=None, allocator=None, blocking=None):
        """Copy the elements of view ``other`` into this view (``stream``: for device memory)."""
        _copy_module().copy(self, other, None if stream is None else _normalize_stream(stream), blocking)

    def copy_to(self, other, stream=None, allocator=None, blocking=None):
        """Copy this view's elements into view ``other``: ``other.copy_from(self, ...)``."""
        _copy_module().copy(other, self, None if stream is None else _normalize_stream(stream), blocking)

    def as_tensor_map(
        self, box_dim=None, *, options=None, element_strides=None, data_type=None,
        interleave=None, swizzle=None, l2_promotion=None, oob_fill=None,
    ):
        """Encode this device view into a tiled TMA descriptor (``cuTensorMapEncodeTiled``)."""
        return _tensor_map_module().encode_tiled(
            self, box_dim, options, element_strides, data_type, interleave, swizzle,
            l2_promotion, oob_fill,
        )

    cdef str _device_id_text(self):
        # repr must not need the driver: an unresolved CAI device shows as '?'.
        return "?" if self._device_id == _DEVICE_ID_UNKNOWN else str(self._device_id)

    cdef int32_t c_device_id(self) except -2:
        """The device ordinal for C consumers (_view.pxd, stridedview.h): ``device_id``."""
        if self._device_id == _DEVICE_ID_UNKNOWN:
            return self.device_id
        return self._device_id

    # Not a dataclass: dataclasses.replace() cannot rebuild a view from its
    # fields and dataclasses.asdict() would deep-copy the array.  The fields are
    # named as a namedtuple names them instead.
    _fields = (
        "ptr", "shape", "strides", "dtype", "device_id", "is_device_accessible", "readonly",
        "exporting_obj",
    )

    def _asdict(self):
        """The eight fields of ``_fields`` in a new dict, each the view's own (no copy)."""
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
        """Basic indexing (ints, slices, ``...``, None), exactly as numpy gives it."""
        offset, shape, strides = _layout_index(self.shape, self.strides, key)
        byte_offset = _byte_offset_of(self, offset, "the index", shape, strides)
        return _relaid(self, byte_offset, shape, strides, None, "the index")

    def __iter__(self):
        """The views ``self[0]``, ``self[1]``, ... along the first axis, as numpy iterates."""
        if not self.shape:
            raise TypeError("iteration over a 0-d view")
        return (self[i] for i in range(self.shape[0]))

    @property
    def T(self):
        """The view with its axes reversed (``transpose()``)."""
        return self.transpose()

    def transpose(self, *axes):
        """The view with its axes permuted, as numpy's ``transpose``."""
        order = _transpose_axes(axes, len(self.shape))
        shape = tuple([self.shape[i] for i in order])
        strides = tuple([self.strides[i] for i in order])
        return _relaid(self, 0, shape, strides, None, "transpose")

    def reshape(self, *shape, order="C"):
        """The same elements with a new shape, without copying (numpy's ``reshape``)."""
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
        """The view without its extent-1 axes (all of them, or those in ``axis``)."""
        removed = _squeeze_axes(axis, self.shape)
        kept = [i for i in range(len(self.shape)) if i not in removed]
        shape = tuple([self.shape[i] for i in kept])
        strides = tuple([self.strides[i] for i in kept])
        return _relaid(self, 0, shape, strides, None, "squeeze")

    def broadcast_to(self, shape):
        """The view broadcast to ``shape`` by numpy's rules (read-only, as numpy's is)."""
        new_shape = _shape_argument((shape,), "broadcast_to: extent")
        strides = _broadcast_layout(self.shape, self.strides, new_shape)
        cdef StridedMemoryView view = _relaid(self, 0, new_shape, strides, None, "broadcast_to")
        view.readonly = True
        return view

    def view(self, layout=None, dtype=None):
        """A view of the same bytes with another layout and/or dtype (cuda.core's ``view``)."""
        if layout is None and dtype is None:
            return self
        if type(dtype) is DLPackDType:
            new_dtype = _dtype_of_dlpack_type(dtype)
            if new_dtype is None and _is_padded_subbyte(self):
                # A DLPackDType has no "padded" mark: a sub-byte one names packed
                # elements, which would count this view's bytes anew.  Its own type keeps
                # the padding (a round trip); another is refused, never a silent recount.
                if dtype != self.dlpack_dtype:
                    raise BufferError(
                        f"view: {_dtype_shown(self)} holds one sub-byte element a byte "
                        f"(padded), and {dtype!r} names packed elements, several a byte: "
                        "the element count would change; pass a padded numpy dtype "
                        "(an ml_dtypes one, e.g. numpy.dtype(ml_dtypes.uint4)) to keep one "
                        "a byte, or see the bytes first, view(dtype=numpy.uint8), to read them as packed on purpose"
                    )
                new_dtype = self.dtype
            if new_dtype is None or self.dtype is None:
                return _view_by_bits(self, layout, new_dtype, dtype)
            dtype = new_dtype
        elif self.dtype is None:
            new_dtype = None if dtype is None else _view_dtype(dtype)
            return _view_by_bits(self, layout, new_dtype, self.dlpack_dtype)
        new_dtype = self.dtype if dtype is None else _view_dtype(dtype)
        if layout is not None:
            return _view_with_layout(self, layout, new_dtype)
        shape, strides = _retyped_layout(
            self.shape, self.strides, self.dtype.itemsize, new_dtype.itemsize
        )
        return _relaid(self, 0, shape, strides, new_dtype, "view")

    @property
    def byte_strides(self):
        """The strides in bytes (``strides`` times ``itemsize``)."""
        itemsize = _whole_byte_itemsize(self, "byte_strides")
        _view_nbytes(self, "layout")
        return tuple([_exported_stride(stride, itemsize) * itemsize for stride in self.strides])

    @property
    def byte_bounds(self):
        """``(low, high)``: the lowest address an element occupies and one past the highest."""
        _view_nbytes(self, "layout")
        bounds = _offset_bounds(self.shape, self.strides)
        if bounds is None:
            return (self._ptr, self._ptr)
        if self.dtype is None:  # packed: row-major and gap-free, from bit 0 of ptr
            return (self._ptr, self._ptr + self.nbytes)
        itemsize = self.dtype.itemsize
        return (self._ptr + bounds[0] * itemsize, self._ptr + (bounds[1] + 1) * itemsize)

    @property
    def has_overlap(self):
        """Whether two distinct indices may address the same element (False is exact)."""
        return _has_overlap(self.shape, self.strides)

    @property
    def is_dense(self):
        """Whether the elements fill exactly ``nbytes`` bytes from ``ptr``, one each."""
        return _is_dense(self.shape, self.strides)

    @property
    def has_negative_stride(self):
        """Whether any stride is negative (torch.from_dlpack cannot take such a view)."""
        cdef object stride
        for stride in self.strides:
            if stride < 0:
                return True
        return False


cdef inline int _view_from_any(
    StridedMemoryView view, object obj, object stream_ptr, _ProducerType info=None
) except -1:
    """The constructor's work: the first protocol ``obj`` offers, in this order:
    DLPack, the CAI, numpy's array interface, the buffer protocol; else BufferError.
    ``info`` is ``_producer_type(obj)`` when the caller has it (None: looked up here).
    A stream already normalized is taken as it is (_normalize_stream gives it back)."""
    stream = _normalize_stream(stream_ptr)
    if info is None:
        info = _producer_type(obj)
    return _view_from_normalized(view, obj, stream, info)


cdef inline int _view_from_normalized(
    StridedMemoryView view, object obj, object stream, _ProducerType info
) except -1:
    """_view_from_any with ``stream`` as _normalize_stream returned it and ``info``
    known (a recording launch's view normalizes its stream once, for the view and its
    group: an int would be checked again by _view_from_any)."""
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
    _refuse_half_dlpack(obj)
    if PyCapsule_CheckExact(obj):
        _refuse_capsule(obj)
    raise BufferError(
        f"stridedview: {type(obj).__name__!r} object supports none of DLPack "
        "(__dlpack__ and __dlpack_device__), the CUDA Array Interface "
        "(__cuda_array_interface__), numpy's array interface (__array_interface__) "
        "and the buffer protocol: pass an array of a library that exports one "
        "(numpy, CuPy, PyTorch, JAX, Numba device arrays, ...), or convert it "
        "first, e.g. numpy.asarray(obj) for host data"
    )


cdef int _refuse_capsule(object capsule) except -1:
    """A capsule passed where the array belongs (``StridedMemoryView(x.__dlpack__())``)."""
    cdef const char *name = PyCapsule_GetName(capsule)
    shown = "unnamed" if name == NULL else repr(name.decode("utf-8", "replace"))
    raise BufferError(
        f"stridedview: a PyCapsule ({shown}) is not an array: pass the array itself, whose "
        "__dlpack__ the view calls with your stream (a capsule made before cannot be ordered)"
    )


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
    view._dl_dtype = base._dl_dtype
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
    cdef tuple shape = <tuple>view.shape
    cdef tuple strides = <tuple>view.strides
    cdef Py_ssize_t i, ndim = PyTuple_GET_SIZE(shape)
    cdef int64_t *dims = _c_dims_storage(view, ndim)
    for i in range(ndim):
        dims[i] = <int64_t>(<object>PyTuple_GET_ITEM(shape, i))
        dims[ndim + i] = <int64_t>(<object>PyTuple_GET_ITEM(strides, i))
    # dtype.itemsize is an attribute lookup: the last dtype's answer and its DLPack
    # type are kept in the fast paths' state (_intern.pxi), written together with
    # the dtype, so that a reader never pairs one dtype with another's size.
    dtype = view.dtype
    if dtype is None:
        # Packed sub-byte elements (_dtypes.pxi): no whole-byte item size, and the
        # DLPack type, set with the dtype, is the only one there is.
        view._itemsize = 0
        return 0
    cdef sv_thread_state *st = _thread_state()
    if st != NULL and st.last_itemsize_dtype == <PyObject *>dtype:
        view._itemsize = st.last_itemsize
        _store_dl_dtype(view, st.last_dl_dtype)
        return 0
    view._itemsize = <int64_t>dtype.itemsize
    cdef uint32_t packed = <uint32_t>_dl_dtype_of(dtype)
    _store_dl_dtype(view, packed)
    st = _thread_state()  # asked again: the lookups are numpy code
    if st != NULL:
        _remember_itemsize(st, dtype, view._itemsize, packed)
    return 0


cdef uint32_t _packed_dl_dtype(object dtype, int64_t itemsize) except? 0:
    """``_dl_dtype_of(dtype)``, from the fast paths' state when ``dtype`` is the last one
    seen (its DLPack type is kept there with its item size: numpy's ``dtype.name`` is
    Python code), remembered there otherwise."""
    cdef sv_thread_state *st = _thread_state()
    if st != NULL and st.last_itemsize_dtype == <PyObject *>dtype:
        return st.last_dl_dtype
    cdef uint32_t packed = <uint32_t>_dl_dtype_of(dtype)
    st = _thread_state()  # asked again: the lookups are numpy code
    if st != NULL:
        _remember_itemsize(st, dtype, itemsize, packed)
    return packed


cdef void _remember_itemsize(
    sv_thread_state *st, object dtype, int64_t itemsize, uint32_t packed
) noexcept:
    cdef PyObject *old = st.last_itemsize_dtype
    Py_INCREF(dtype)
    st.last_itemsize_dtype = <PyObject *>dtype
    st.last_itemsize = itemsize
    st.last_dl_dtype = packed
    Py_XDECREF(old)


cdef inline void _store_dl_dtype(StridedMemoryView view, uint32_t packed) noexcept:
    """Unpack a DLPack type packed by _dl_dtype_of into the view's C field."""
    view._dl_dtype.code = <uint8_t>(packed & 0xFF)
    view._dl_dtype.bits = <uint8_t>((packed >> 8) & 0xFF)
    view._dl_dtype.lanes = <uint16_t>(packed >> 16)


# dtype name -> its DLPack type packed as code | bits << 8 | 1 << 16 (one lane), built
# from _DLPACK_DTYPES on first use with no import (ml_dtypes' names are its dtypes'),
# published once (_thread_state.pxi's _publish_once).
cdef PyObject *_dl_dtype_by_name = NULL


cdef object _dl_dtype_of(object dtype):
    """The DLPack type of a view's numpy dtype, packed as code | bits << 8 | lanes << 16,
    or 0 when none describes it (structured, datetime, bytes, str, opaque, swapped
    byte order).  A void dtype made for a DLPack type (_void_dtype) names it in its
    metadata; the others are known by name, at their own size."""
    cdef PyObject *by_name = _load_published(&_dl_dtype_by_name)
    if by_name == NULL:
        table = {}
        for code, (_, by_bits) in _DLPACK_DTYPES.items():
            for bits, name in by_bits.items():
                table[name] = code | bits << 8 | 1 << 16
        by_name = _publish_once(&_dl_dtype_by_name, table)
    if dtype.fields is not None or dtype.subdtype is not None or not dtype.isnative:
        return 0
    metadata = dtype.metadata
    if metadata is not None:
        named = metadata.get(_DLPACK_DTYPE_KEY)
        if type(named) is DLPackDType and (
            dtype.itemsize * 8 == named.bits * named.lanes  # whole bytes
            or (dtype.itemsize == 1 and named.bits < 8 and named.lanes == 1)  # padded
        ):
            return named.code | named.bits << 8 | named.lanes << 16
    packed = (<dict>by_name).get(dtype.name, 0)
    bits = (packed >> 8) & 0xFF
    if packed and dtype.itemsize != (bits // 8 if bits >= 8 else 1):
        return 0  # a dtype of another size that happens to bear the name
    return packed


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


# --- Byte counts ---------------------------------------------------------------
# A view's byte counts fit int64 from the moment it is made: its element count
# (the product of the extents), its nbytes (size * itemsize), and the byte offset
# of every element from element 0 (the sums of (extent - 1) * stride * itemsize
# above and below it).  numpy's rule is the same ("array is too big" when size *
# itemsize passes Py_ssize_t): a broadcast layout whose few bytes hold more than
# int64 bytes' worth of elements cannot be made either, from any producer or by
# any derived view, so nbytes, a buffer's len, the byte strides and byte bounds
# an export gives, and what a C consumer computes from c_size() and c_itemsize(),
# never wrap.  Every entry point checks its layout before it fills the view
# (_check_layout_bytes, or the same C checks inline on the hot paths); every
# export checks again before it hands a byte count on (_view_nbytes), so that a
# layout that ever slipped past would be refused there rather than wrap.

cdef extern from *:
    """
    /* Checked int64 arithmetic: the one way the core multiplies or adds sizes,
       strides and item sizes in C.  0 with the exact result in *out, or 1 when
       it does not fit int64 (*out is then not to be used).  gcc and clang give a
       multiply or an add and one branch; other compilers (MSVC) the portable
       forms, which compare against the limits before computing. */
    #if defined(__has_builtin)
    #  if __has_builtin(__builtin_mul_overflow) && __has_builtin(__builtin_add_overflow)
    #    define SV_OVERFLOW_BUILTINS 1
    #  endif
    #endif
    #if !defined(SV_OVERFLOW_BUILTINS) && defined(__GNUC__) && __GNUC__ >= 5
    #  define SV_OVERFLOW_BUILTINS 1
    #endif
    #ifndef SV_OVERFLOW_BUILTINS
    #  define SV_OVERFLOW_BUILTINS 0
    #endif
    static inline int sv_mul_i64_portable(int64_t a, int64_t b, int64_t *out) {
        if (a > 0 ? (b > 0 ? a > INT64_MAX / b : b < INT64_MIN / a)
                  : (b > 0 ? a < INT64_MIN / b : (a != 0 && b < INT64_MAX / a)))
            return 1;
        *out = a * b;
        return 0;
    }
    static inline int sv_add_i64_portable(int64_t a, int64_t b, int64_t *out) {
        if (b > 0 ? a > INT64_MAX - b : a < INT64_MIN - b)
            return 1;
        *out = a + b;
        return 0;
    }
    static inline int sv_mul_i64(int64_t a, int64_t b, int64_t *out) {
    #if SV_OVERFLOW_BUILTINS
        return __builtin_mul_overflow(a, b, out);
    #else
        return sv_mul_i64_portable(a, b, out);
    #endif
    }
    static inline int sv_add_i64(int64_t a, int64_t b, int64_t *out) {
    #if SV_OVERFLOW_BUILTINS
        return __builtin_add_overflow(a, b, out);
    #else
        return sv_add_i64_portable(a, b, out);
    #endif
    }
    /* The byte counts are checked against int64, which is Py_ssize_t (a buffer's
       len and strides) on every platform stridedview is built for, the 64-bit
       ones; a build where it is not stops here rather than truncate them. */
    typedef char sv_py_ssize_t_is_int64[sizeof(Py_ssize_t) == sizeof(int64_t) ? 1 : -1];
    """
    int sv_mul_i64(int64_t a, int64_t b, int64_t *out) noexcept nogil
    int sv_add_i64(int64_t a, int64_t b, int64_t *out) noexcept nogil
    int sv_mul_i64_portable(int64_t a, int64_t b, int64_t *out) noexcept nogil
    int sv_add_i64_portable(int64_t a, int64_t b, int64_t *out) noexcept nogil


def _checked_int64_both_ways(int64_t a, int64_t b):
    """``((a * b, a + b), (the same, portably))`` as the checked helpers give them, None
    where one reports an overflow; for tests, which compare both with exact integers."""
    cdef int64_t product, total
    answers = []
    for portable in (False, True):
        if portable:
            mul_overflow = sv_mul_i64_portable(a, b, &product)
            add_overflow = sv_add_i64_portable(a, b, &total)
        else:
            mul_overflow = sv_mul_i64(a, b, &product)
            add_overflow = sv_add_i64(a, b, &total)
        answers.append((None if mul_overflow else product, None if add_overflow else total))
    return tuple(answers)


cdef int _check_layout_bytes(
    str where, Py_ssize_t ndim, const int64_t *extents, const int64_t *strides, int64_t size,
    Py_ssize_t itemsize, tuple shape, tuple shown_strides,
) except -1:
    """Refuse a layout whose byte offsets or nbytes pass int64 (BufferError naming it).

    ``extents`` and ``strides`` (in elements; NULL for row-major) are the layout as
    C values, ``shape`` and ``shown_strides`` the same as quoted; ``where`` names
    the protocol or the operation.  The entry points without a hot path call it
    as their check; the others call it once their inline check has failed.
    """
    cdef int64_t nbytes
    if not _byte_offsets_fit(ndim, extents, strides, size, itemsize):
        raise BufferError(
            f"{where}: byte offsets from element 0 must fit in int64 (got shape {shape}, "
            f"strides {shown_strides} in elements, itemsize {itemsize})"
        )
    if sv_mul_i64(size, itemsize, &nbytes):
        raise BufferError(
            f"{where}: nbytes (size * itemsize) must fit in int64 (got shape {shape}, "
            f"strides {shown_strides} in elements, itemsize {itemsize})"
        )
    return 0


cdef inline int64_t _view_nbytes(StridedMemoryView view, str where) except -1:
    """``view``'s nbytes, once its byte counts are checked again (every export's check).

    Each view was checked when it was made: this refuses, with ``where`` naming the
    export, a layout that slipped past a check, rather than hand on a byte count
    that wrapped.  A view made by ``__new__`` alone has no element: 0.
    """
    cdef int64_t nbytes
    cdef const int64_t *dims = view._dims
    if sv_mul_i64(view._size, view._itemsize, &nbytes) or not _byte_offsets_fit(
        view._ndim, dims, dims + view._ndim, view._size, view._itemsize
    ):
        _check_layout_bytes(
            where, view._ndim, dims, dims + view._ndim, view._size, view._itemsize,
            view.shape, view.strides,
        )
    return nbytes


def _checked_nbytes(StridedMemoryView view, str where):
    """``view.nbytes`` with its byte counts checked, refused as ``where`` (_copy.py and
    _tensor_map.py check the views they are handed with it)."""
    return _view_nbytes(view, where)


def _view_with_unchecked_layout(StridedMemoryView base, shape, strides):
    """A view of ``base``'s memory with ``shape`` and ``strides`` (elements) and no check of
    its byte counts: what a view would be had a check at its making been missed.  For
    tests, which prove with it that each export refuses such a layout on its own."""
    cdef StridedMemoryView view = _derive(base)
    view.shape = tuple(shape)
    view.strides = tuple(strides)
    view._size = _element_count(view.shape)
    _store_c_layout(view)
    return view


cdef tuple _empty_view_strides(Py_ssize_t ndim):
    """The strides of a view with no elements, from any producer and entry point: all 0.

    No element of an empty view is ever addressed, so its strides say nothing, and
    producers disagree on them (numpy's DLPack export gives 0s, its array interface
    none, a slice keeps its base's); one rule makes one array give one view by every
    route, numpy's DLPack export included."""
    return (0,) * ndim


cdef tuple _row_major_strides(tuple shape, const int64_t *extents, int64_t size):
    """Row-major element strides for ``shape`` (whose extents are also in ``extents``).

    The one place both protocols compute strides a producer left out.  For a
    non-empty shape every product fits int64 (its element count was checked), so
    the strides are computed in C and interned.  An empty shape's are all 0
    (_empty_view_strides).
    """
    cdef Py_ssize_t i, ndim = PyTuple_GET_SIZE(shape)
    cdef int64_t step = 1
    cdef int64_t computed[64]
    if size == 0:
        return _empty_view_strides(ndim)
    if ndim <= 64:
        for i in range(ndim - 1, -1, -1):
            computed[i] = step
            step *= extents[i]
        return _int64_tuple(computed, <int32_t>ndim)
    strides = [0] * ndim
    big_step = 1
    for i in range(ndim - 1, -1, -1):
        strides[i] = big_step
        big_step *= shape[i]
    return tuple(strides)


cdef extern from *:
    """
    /* _byte_offsets_fit in 128-bit arithmetic, where the compiler has it: the
       spans below and above element 0 are summed in elements, stopping as soon
       as one passes INT64_MAX (so no sum can overflow), then scaled by the item
       size (sv_mul_i64).  -1: no 128-bit integers here, use the portable check. */
    static inline SV_ALWAYS_INLINE int sv_byte_offsets_fit_128(
        Py_ssize_t ndim, const int64_t *extents, const int64_t *strides,
        int64_t size, Py_ssize_t itemsize)
    {
    #if defined(__SIZEOF_INT128__)
        const unsigned __int128 limit = (unsigned __int128)INT64_MAX;
        unsigned __int128 above = 0, below = 0;
        int64_t bytes;
        Py_ssize_t i;
        if (size == 0) return 1;
        if (itemsize < 1) itemsize = 1;
        if (strides == NULL)
            return !sv_mul_i64(size - 1, itemsize, &bytes);
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
        /* Both spans are within int64 here: one checked product each (two 128-bit
           products took ten times the instructions). */
        return !sv_mul_i64((int64_t)above, itemsize, &bytes)
            && !sv_mul_i64((int64_t)below, itemsize, &bytes);
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
    """Whether every element lies within int64 bytes of element 0, in checked int64
    arithmetic (sv_mul_i64, sv_add_i64).

    ``strides`` are in elements, NULL for row-major.  Only dimensions of extent > 1
    step, and an empty layout addresses nothing: their strides may be anything.
    The byte spans below and above element 0 are summed apart, each kept within
    2**63 - 1.
    """
    cdef int64_t above = 0, below = 0, reach
    cdef Py_ssize_t i
    if size == 0:
        return True
    if itemsize < 1:
        itemsize = 1
    if strides == NULL:
        return not sv_mul_i64(size - 1, itemsize, &reach)
    for i in range(ndim):
        if extents[i] <= 1:
            continue
        if sv_mul_i64(extents[i] - 1, strides[i], &reach) or sv_mul_i64(reach, itemsize, &reach):
            return False
        if reach >= 0:
            if sv_add_i64(above, reach, &above):
                return False
        elif sv_add_i64(below, reach, &below):
            return False
    return below >= -INT64_MAX


cdef inline int64_t _exported_stride_c(int64_t stride, int64_t itemsize) noexcept:
    """_exported_stride on C values (the DLPack and buffer exports): ``stride``, or 0
    where its bytes pass int64 (so ``result * itemsize`` fits)."""
    cdef int64_t byte_stride
    if sv_mul_i64(stride, itemsize, &byte_stride) or byte_stride == INT64_MIN:
        return 0
    return stride


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


include "_intern.pxi"
include "_driver_door.pxi"
include "_handover.pxi"
include "_graphs.pxi"
include "_view_lifecycle.pxi"
include "_attributes.pxi"
include "_producer_types.pxi"
include "_launcher.pxi"
include "_torch_bits.pxi"
include "_from_torch.pxi"
include "_from_dlpack.pxi"
include "_from_numpy.pxi"
include "_from_cai.pxi"
include "_export.pxi"
include "_layout.pxi"
include "_from_host.pxi"
include "_exchange_export.pxi"
include "_buffer_export.pxi"
include "_c_api.pxi"
