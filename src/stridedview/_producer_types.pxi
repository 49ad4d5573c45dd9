# What stridedview learns once per producer type: whether it speaks DLPack, the
# DLPack C exchange API it offers (if any), and whether it is a torch.Tensor
# (whose negative and conjugate bits need a check, _torch_bits.pxi).  Looked up once per type; the
# last type seen is kept apart so that a run of views of one type skips even
# the dict lookup.
#
# A description holds only while its type is unchanged: assigning or deleting a
# class attribute (``Cls.__dlpack__ = ...``, on the class or any base) may
# change every answer.  CPython gives each type a version tag that it clears on
# every such change (PyType_Modified, run for the type and all its subclasses)
# and never hands out twice; a description records the tag it was made under and
# is used only while the type still carries that tag.  A type the interpreter
# cannot tag (tag 0) is described anew on every view: slower, never stale.
#
# Invariants of the caches: the last description and the direct-mapped slots
# live in the fast paths' state (_thread_state.pxi), read and replaced by one
# thread at a time (under the GIL, or each thread its own where there is none),
# a new entry stored before the old one is dropped (dropping a type may run
# code).  A description is immutable once made, so threads share them through
# the dict, whose operations are atomic in a free-threaded build; without the
# state (-DSV_NO_GIL_FAST_PATHS) only the dict is used.
#
# The per-view instance-dict check (_instance_overrides_dlpack) reads, on CPython
# 3.11 and 3.12 with the GIL only, the managed-dict words CPython's own inline
# accessors read (sv_no_managed_attributes): where neither a dict nor a values
# array exists, the instance has no attribute, which is what _PyObject_GetDictPtr's
# NULL slot would say.  Anything else asks the general check.  Proven equal by
# tests/test_fast_paths.py (test_managed_dict_read_agrees_with_the_instance_dict_check).

import sys as _sys

# The DLPackExchangeAPI structure is declared once, in _dlpack.pxd.

# DLPack 1.3's capsule.  The 1.2-era int attribute __c_dlpack_exchange_api__ is not
# read: any int there would be dereferenced as a table address.
cdef str _EXCHANGE_API_CAPSULE_ATTR = "__dlpack_c_exchange_api__"

# Tests turn the fast paths (the exchange API, host-only types skipping
# __dlpack_device__) off, to compare their views with the general path's.
cdef bint _fast_paths_enabled = True


def _set_fast_paths_enabled(bint enabled):
    """Use (True) or bypass (False) the per-type fast paths; for tests."""
    global _fast_paths_enabled
    _fast_paths_enabled = enabled


@cython.final
@cython.auto_pickle(False)
cdef class _ProducerType:
    """What one producer type offers; built once by _producer_type()."""

    cdef object described_type  # the type this describes
    # described_type's version tag when described (0: none; never trusted again)
    cdef unsigned int type_version
    cdef bint has_dlpack
    cdef bint host_only  # its arrays are always host memory: no need to ask the device
    cdef bint is_torch
    cdef bint torch_bits_direct  # torch's bits are read in C (_torch_bits.pxi) when calibrated
    # Its DLTensor may come from torch's C++ function, not its exchange API (_torch_bits.pxi).
    cdef bint torch_layout_direct
    cdef DLTensorFromPyObject dltensor_from_py_object
    cdef CurrentWorkStream current_work_stream
    cdef object exchange_api_owner  # the capsule or object that keeps the table alive


# id(type) -> its description.  Keyed by identity, never by the type's own
# __eq__ and __hash__ (a metaclass may define them): the description holds the
# type, so its id cannot be reused while the entry lives.
cdef dict _producer_types = {}
cdef extern from *:
    """
    /* dict.get with a strong reference taken inside the dict's own lock where there
       is no GIL (PyDict_GetItemRef): a borrowed item could be freed by another
       thread replacing or clearing the entry before the caller's incref.  With the
       GIL, the borrowed lookup and the incref run with no other thread between. */
    static PyObject *sv_dict_get_or_none(PyObject *dict, PyObject *key) {
    #if PY_VERSION_HEX >= 0x030D0000
        PyObject *value;
        if (PyDict_GetItemRef(dict, key, &value) < 0)
            return NULL;
        if (value == NULL)
            Py_RETURN_NONE;
        return value;
    #else
        PyObject *value = PyDict_GetItemWithError(dict, key);
        if (value == NULL) {
            if (PyErr_Occurred())
                return NULL;
            Py_RETURN_NONE;
        }
        Py_INCREF(value);
        return value;
    #endif
    }
    """
    object sv_dict_get_or_none(dict, object)
# In front of the dict, descriptions direct-mapped by the type's address (no
# int to allocate; the state's type_slots); a slot is used only if the
# description it holds is of this very type.
cdef extern from *:
    """
    /* The type's version tag (0: none valid), read as the interpreter reads it. */
    static CYTHON_INLINE unsigned int sv_type_version(PyObject *type) {
        PyTypeObject *tp = (PyTypeObject *)type;
    #ifdef Py_GIL_DISABLED
        unsigned int tag = _Py_atomic_load_uint_relaxed(&tp->tp_version_tag);
    #else
        unsigned int tag = tp->tp_version_tag;
    #endif
    #if PY_VERSION_HEX < 0x030C0000
        /* Before 3.12 a modified type keeps its old number and loses the flag. */
        if (!PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG)) return 0;
    #endif
        return tag;
    }
    /* Give the type a version tag where the interpreter can; its tag, or 0. */
    static unsigned int sv_assign_type_version(PyObject *type, PyObject *any_name) {
        PyTypeObject *tp = (PyTypeObject *)type;
    #if PY_VERSION_HEX >= 0x030C0000
        (void)any_name;
        if (!PyUnstable_Type_AssignVersionTag(tp)) return 0;
    #else
        /* A method-cache lookup assigns one (3.10, 3.11). */
        (void)_PyType_Lookup(tp, any_name);
    #endif
        return sv_type_version(type);
    }
    """
    unsigned int _type_version "sv_type_version"(PyObject *) noexcept
    unsigned int _assign_type_version "sv_assign_type_version"(PyObject *, object) noexcept

# The last answer (the state's last_info) is one pointer, so that a reader never
# pairs one type with another type's description.


cdef inline bint _describes(_ProducerType info, object tp) noexcept:
    """Whether ``info`` is the current description of ``tp`` (same type, unchanged since)."""
    return (
        info.described_type is tp
        and info.type_version != 0
        and info.type_version == _type_version(<PyObject *>tp)
    )


cdef inline _ProducerType _producer_type(object obj):
    """What ``type(obj)`` offers: the last type's answer at once, else _look_up_type."""
    cdef sv_thread_state *st = _thread_state()
    cdef PyObject *last
    if st != NULL:
        last = st.last_info
        if last != NULL and _describes(<_ProducerType>last, type(obj)):
            return <_ProducerType>last
    return _look_up_type(type(obj))


cdef _ProducerType _look_up_type(object tp):
    cdef _ProducerType info
    cdef Py_ssize_t slot = <Py_ssize_t>((<uintptr_t><PyObject *>tp >> 4) % SV_TYPE_SLOTS)
    cdef sv_thread_state *st = _thread_state()
    cdef PyObject *found
    if st != NULL:
        found = st.type_slots[slot]
        if found != NULL and _describes(<_ProducerType>found, tp):
            _remember_type(st, -1, found)
            return <_ProducerType>found
    info = <_ProducerType>sv_dict_get_or_none(_producer_types, id(tp))
    if info is None or not _describes(info, tp):
        info = _describe_type(<type>tp)  # a cast: a metaclass instance is no exact type
        if len(_producer_types) >= 1024:
            _producer_types.clear()  # bound the cache where classes are made on the fly
        _producer_types[id(tp)] = info
    st = _thread_state()  # asked again: describing the type ran Python code
    if st != NULL:
        _remember_type(st, slot, <PyObject *>info)
    return info


cdef void _remember_type(sv_thread_state *st, Py_ssize_t slot, PyObject *info) noexcept:
    """Make ``info`` the state's last description, and put it in type slot ``slot``
    (-1: none); what they held is dropped once both are set (dropping a description
    may drop a type, whose release may run code that views)."""
    cdef PyObject *old_last = st.last_info
    cdef PyObject *old_slot = NULL
    Py_INCREF_ptr(info)
    st.last_info = info
    if slot >= 0:
        old_slot = st.type_slots[slot]
        Py_INCREF_ptr(info)
        st.type_slots[slot] = info
    Py_XDECREF(old_last)
    Py_XDECREF(old_slot)


cdef tuple _defined_where(object tp, str name):
    """``(class, value)``: the first class of ``tp``'s MRO whose own namespace holds
    ``name``, and that raw value (no descriptor, no metaclass code runs); (None, None)."""
    for klass in tp.__mro__:
        namespace = klass.__dict__
        if name in namespace:
            return klass, namespace[name]
    return None, None


cdef bint _same_definition(object tp, object owner, str name) except -1:
    """Whether ``tp`` finds the very ``name`` that ``owner`` defines or inherits."""
    found = _defined_where(tp, name)[1]
    return found is not None and found is _defined_where(owner, name)[1]


cdef _ProducerType _describe_type(type tp):
    cdef _ProducerType info = _ProducerType.__new__(_ProducerType)
    cdef const DLPackExchangeAPI *api = NULL
    info.described_type = tp
    # Tagged before anything is read: a change made while describing (a
    # descriptor's code) clears the tag, and the description is made anew.
    info.type_version = _assign_type_version(<PyObject *>tp, _DLPACK)
    info.has_dlpack = hasattr(tp, _DLPACK) and hasattr(tp, _DLPACK_DEVICE)
    # numpy keeps every array in host memory: ndarray's __dlpack_device__ always
    # answers (kDLCPU, 0), so a subclass that keeps numpy's methods need not be
    # asked.  The capsule's device is still checked against that answer.
    numpy = _sys.modules.get("numpy")
    info.host_only = (
        info.has_dlpack
        and numpy is not None
        and issubclass(tp, numpy.ndarray)
        and tp.__dlpack_device__ is numpy.ndarray.__dlpack_device__
        and tp.__dlpack__ is numpy.ndarray.__dlpack__
    )
    torch = _sys.modules.get("torch")
    info.is_torch = torch is not None and issubclass(tp, torch.Tensor)
    info.torch_bits_direct = info.is_torch and _torch_bits_readable_directly(tp)
    # A view's own table is not used on a view: a lent DLTensor cannot carry its
    # READ_ONLY flag nor its ready stream, which __dlpack__ does.
    if info.has_dlpack and tp is not StridedMemoryView:
        # The table speaks for the class that offers it: trusted only while tp's
        # DLPack methods are that class's own (a subclass overriding __dlpack__
        # or __dlpack_device__ must have them called).
        api_class, owner = _defined_where(tp, _EXCHANGE_API_CAPSULE_ATTR)
        if (
            owner is not None
            and PyCapsule_IsValid(owner, b"dlpack_exchange_api")
            and _same_definition(tp, api_class, _DLPACK)
            and _same_definition(tp, api_class, _DLPACK_DEVICE)
        ):
            api = <const DLPackExchangeAPI *>PyCapsule_GetPointer(owner, b"dlpack_exchange_api")
        # Only a 1.x table has the layout declared above.
        if api != NULL and api.header.version.major == DLPACK_MAJOR_VERSION:
            info.dltensor_from_py_object = api.dltensor_from_py_object_no_sync
            info.current_work_stream = api.current_work_stream
            info.exchange_api_owner = owner
    # A real torch tensor object (the C layout the calibrated offset is valid in)
    # whose table is torch.Tensor's own, and whose type handles no operator in Python
    # (a __torch_dispatch__ subclass's sizes, strides and data may be answered by its
    # Python code, which the direct readers must never run: the exchange API asks it).
    tensor_base = getattr(getattr(torch, "_C", None), "TensorBase", None) if info.is_torch else None
    info.torch_layout_direct = (
        isinstance(tensor_base, type)
        and info.dltensor_from_py_object != NULL
        and PyType_IsSubtype(tp, <type>tensor_base)
        and _same_definition(tp, torch.Tensor, "__torch_dispatch__")
        and (
            tp is torch.Tensor
            or info.dltensor_from_py_object == _look_up_type(torch.Tensor).dltensor_from_py_object
        )
    )
    return info


cdef extern from *:
    """
    /* Whether obj's own __dict__ holds name1 or name2 (Python finds an instance's
       own attribute before a function of its type): 1 yes, 0 no, -1 error. */
    static int sv_instance_defines(PyObject *obj, PyObject *name1, PyObject *name2) {
        PyObject *dict;
        int found;
    #ifdef Py_GIL_DISABLED
        dict = PyObject_GenericGetDict(obj, NULL);  /* a new reference, made safely */
        if (dict == NULL) return -1;
    #else
        {
            PyObject **slot = _PyObject_GetDictPtr(obj);
            if (slot == NULL) return PyErr_Occurred() ? -1 : 0;
            if (*slot == NULL) return 0;  /* no instance dict made yet */
            dict = *slot;
            Py_INCREF(dict);
        }
    #endif
        found = PyDict_Contains(dict, name1);
        if (found == 0) found = PyDict_Contains(dict, name2);
        Py_DECREF(dict);
        return found;
    }
    """
    int _instance_defines "sv_instance_defines"(object, object, object) except -1

cdef extern from *:
    """
    /* 1 where obj's type keeps its instances' attributes in CPython's managed dict
       and obj has none (no dict, no values array): then _PyObject_GetDictPtr would
       answer a slot holding NULL, and sv_instance_defines 0.  The slots are read
       where CPython 3.11's and 3.12's own inline accessors read them
       (Include/internal/pycore_object.h): 3.11 the values pointer at obj[-4] and the
       dict at obj[-3] (_PyObject_ValuesPointer, _PyObject_ManagedDictPointer); 3.12
       one tagged dict-or-values word at obj[-3] (_PyObject_DictOrValuesPointer), 0
       when neither.  Other versions and free-threaded builds: 0 (ask
       sv_instance_defines). */
    #if !defined(Py_GIL_DISABLED) && PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030D0000
    #define SV_MANAGED_DICT_READ 1
    static inline int sv_no_managed_attributes(PyObject *obj) {
        if (!PyType_HasFeature(Py_TYPE(obj), Py_TPFLAGS_MANAGED_DICT)) return 0;
    #if PY_VERSION_HEX < 0x030C0000
        return ((void **)obj)[-4] == NULL && ((void **)obj)[-3] == NULL;
    #else
        return ((void **)obj)[-3] == NULL;
    #endif
    }
    #else
    #define SV_MANAGED_DICT_READ 0
    static inline int sv_no_managed_attributes(PyObject *obj) { (void)obj; return 0; }
    #endif
    """
    bint _no_managed_attributes "sv_no_managed_attributes"(PyObject *) noexcept nogil
    bint _MANAGED_DICT_READ "SV_MANAGED_DICT_READ"
    ctypedef struct _PyTypeObject_dictoffset "PyTypeObject":
        Py_ssize_t tp_dictoffset
    void *Py_TYPE_ptr "Py_TYPE"(PyObject *)


cdef inline bint _instance_overrides_dlpack(object obj) except -1:
    """Whether ``obj`` carries its own ``__dlpack__`` or ``__dlpack_device__``: then
    its type's fast paths (the exchange API, the numpy adapter) must not answer for it."""
    if (<_PyTypeObject_dictoffset *>Py_TYPE_ptr(<PyObject *>obj)).tp_dictoffset == 0:
        return False  # no instance dict at all (numpy.ndarray): one load, no call
    if _no_managed_attributes(<PyObject *>obj):
        return False  # a managed dict neither made nor filled (a plain torch.Tensor)
    return _instance_defines(obj, _DLPACK, _DLPACK_DEVICE)


def _instance_dict_answers(obj):
    """(whether the managed-dict read proves ``obj`` has no instance attribute, what
    the general instance-dict check answers), for tests: the first True only where
    the second is False; the first always False where the read is not compiled in."""
    return bool(_no_managed_attributes(<PyObject *>obj)), bool(
        _instance_defines(obj, _DLPACK, _DLPACK_DEVICE)
    )


def _managed_dict_read():
    """Whether the managed-dict read is compiled in (CPython 3.11 and 3.12 with the GIL)."""
    return bool(_MANAGED_DICT_READ)


cdef int _refuse_half_dlpack(object obj) except -1:
    """BufferError naming the missing method when ``obj`` has one DLPack method only."""
    has_dlpack = hasattr(obj, _DLPACK)
    if has_dlpack == hasattr(obj, _DLPACK_DEVICE):
        return 0
    present, missing = (_DLPACK, _DLPACK_DEVICE) if has_dlpack else (_DLPACK_DEVICE, _DLPACK)
    raise BufferError(
        f"dlpack: {type(obj).__name__!r} object has {present} but no {missing}: a DLPack "
        "producer needs both (__dlpack_device__() returns (device_type, device_id), e.g. "
        "(1, 0) for host memory); add the missing method"
    )


cdef bint _has_dlpack(object obj, _ProducerType info) except -1:
    """Whether ``obj`` offers both DLPack methods (its type's, or rarely its own);
    ``info`` is ``_producer_type(obj)``."""
    if info.has_dlpack:
        return True
    return hasattr(obj, _DLPACK) and hasattr(obj, _DLPACK_DEVICE)
