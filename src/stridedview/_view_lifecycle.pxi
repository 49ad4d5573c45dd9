# How a view is allocated, published and freed: the machinery in front of what
# Cython generates for StridedMemoryView.  Every array argument of every launch
# makes a view and drops it, so these few steps are the hot path's floor.
#
# What is here, and the invariant each rests on:
#
# - Member descriptors (_expose_as_members): ``ptr``, ``shape``, ``strides``,
#   ``dtype`` and ``exporting_obj`` are published as read-only member
#   descriptors at their offsets in Cython's instance struct (offsetof, so a
#   renamed field fails the build).  Installed once, at import, before any view
#   exists; the type is then never changed again.
# - Deallocation (_view_dealloc): installed in front of Cython's tp_dealloc at
#   import.  It runs with the only reference gone, so no other thread can reach
#   the object; it releases the capsule, the held buffer and the shape block
#   exactly once each, saving the pending exception only where Python code may
#   run (a deleter, a buffer release), and only when one is pending (none: any
#   exception a deleter leaves is cleared, as restoring none would).  A view
#   recorded on streams (``_handover``, one more test in _holds_resources) hands
#   its hold over instead, before the freelist takes the object (_handover.pxi).
# - Clearing (_view_clear): installed in front of Cython's tp_clear, which the
#   collector calls on a view of a garbage cycle before deallocating it: a
#   recorded view hands over there first (Cython's would drop the exporting
#   object), any other goes straight to Cython's.
# - Allocation (_new_view): pops a view from a freelist and re-initialises it as
#   Cython's tp_new would, but for the inline shape/stride arrays (never read
#   before _c_dims_storage writes them).  GIL builds pop Cython's own freelist, a
#   module-global array: the pop relies on the GIL, exactly as Cython's tp_new
#   does.  Cython compiles its freelists out of a free-threaded build
#   (CYTHON_USE_FREELISTS is 0 there; SV_VIEW_FREE_COUNT is then the constant 0):
#   there the type's tp_free is _view_free, which keeps up to SV_FREE_VIEW_SLOTS
#   freed views in the freeing thread's state (_thread_state.pxi), and _new_view
#   pops from the current thread's, as CPython's own per-thread freelists do.  A
#   freed view is dead: untracked by the collector (Cython's tp_dealloc untracks
#   it first), its reference counts zero, its memory never handed back while it
#   waits, so no other thread can revive it (a stale pointer's _Py_TryIncref
#   fails on a zero shared count) or see it as an object (the collector skips
#   untracked blocks).  Only a view the freeing thread owns is kept (ob_tid: one
#   it allocated, or reused from its own freelist): its memory is then that
#   thread's heap's.  One whose memory is another heap's, reused, would be handed
#   by the collector to that heap's thread (it sets ob_tid from the heap segment),
#   which would then run its deallocator, later, whoever dropped it last, and a
#   launcher's kept view would never be found held by its proxy alone.  Without
#   SV_FAST_PATHS, or in a thread with no state, every view comes from tp_new.
# - The constructor's vectorcall (_construct_view): ``StridedMemoryView(obj)``,
#   ``StridedMemoryView(obj, stream_ptr)`` and ``StridedMemoryView(obj,
#   stream_ptr=s)`` skip argument parsing; any other call goes to Cython's own
#   vectorcall, which parses and raises as __init__.
# - Filling only new views: __init__ fills ``self`` only if it is in the state a
#   new view starts in (_is_new reads every field, so a view filled before, or
#   left with anything by a fill that failed half-way, is refused) and is not a launcher's parked
#   view (``_parked``, _launcher.pxi); filling over a capsule would lose its
#   deleter.  The constructor's vectorcall needs no such check, and has none: it
#   fills a view _new_view has just made (a freelist pop re-initialised by
#   SV_VIEW_PREPARE, which zeroes ``_parked`` too, or tp_new), to which no other
#   reference exists before it returns; so does Cython's vectorcall, whose
#   __init__ runs on the object its tp_new has just made.  Nothing here depends
#   on the GIL: without SV_FAST_PATHS no view is ever parked, and the check of
#   the real state is the same on every build.
#
# Proven equal to the general path by tests/test_fast_paths.py and
# tests/test_hot_path_review.py (views from the constructor, __init__ and
# from_any_interface compared field by field; reused objects start empty); a
# second __init__ by tests/test_launch_reuse.py.
# docs/internals.md says how each piece can be switched off.

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
    _member_defs[3].doc = "The element type: an exact numpy.dtype, a void dtype (vectors), or None (packed)."
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


# --- Field reads on free-threaded 3.13 -----------------------------------
# CPython 3.13t does not specialise LOAD_ATTR (3.14t does): ``view.ptr`` there goes
# through PyObject_GenericGetAttr (a type-cache lookup under a sequence lock, a
# data-descriptor test, PyMember_GetOne's compare-and-incref), about 230
# instructions a field, where the GIL build's LOAD_ATTR_SLOT reads the slot inline.
# On that build alone the type's tp_getattro is sv_view_getattro: a name that is
# one of the five member fields' interned names (the interned object itself, as a
# code object's co_names holds it), on an instance of StridedMemoryView itself
# (not a subclass, which may override a field), returns the field with a new
# reference; anything else goes to PyObject_GenericGetAttr.
#
# Why a plain load and incref is safe without the GIL: a published view's object
# fields never change while another thread can reach it.  They are written by
# the constructor before the view is returned, by __init__ only on a new view
# (None, immortal, replaced once), by a launcher's parking only while it holds
# the only reference (_launcher.pxi), and cleared by tp_clear only on garbage no
# thread reaches.  So the object read is alive for as long as the caller's
# reference to the view, as for PyMember_GetOne.  Installed at import, before
# any view exists; compiled out with the fast paths (-DSV_NO_GIL_FAST_PATHS), on
# GIL builds and from 3.14 on (where it would stop the specialisation).  Proven
# equal to the generic read by tests/test_free_threading.py
# (test_field_reads_equal_the_generic_lookup) on every build.
cdef extern from *:
    """
    #if SV_FAST_PATHS && defined(Py_GIL_DISABLED) && PY_VERSION_HEX < 0x030E0000
    static PyObject *sv_field_names[5];
    static Py_ssize_t sv_field_offsets[5];
    static PyTypeObject *sv_view_type = NULL;
    static PyObject *sv_view_getattro(PyObject *self, PyObject *name) {
        if (Py_TYPE(self) == sv_view_type) {
            int i;
            for (i = 0; i < 5; i++) {
                if (name == sv_field_names[i]) {
                    PyObject *value = *(PyObject **)((char *)self + sv_field_offsets[i]);
                    if (value != NULL)
                        return Py_NewRef(value);
                    break;
                }
            }
        }
        return PyObject_GenericGetAttr(self, name);
    }
    /* `members`: the five member definitions _expose_as_members filled (names, offsets). */
    static int sv_install_field_getattro(PyTypeObject *tp, const PyMemberDef *members) {
        int i;
        if (sv_view_type != NULL || tp->tp_getattro != PyObject_GenericGetAttr)
            return 0;  /* installed already, or a getattro not ours to wrap */
        for (i = 0; i < 5; i++) {
            sv_field_names[i] = PyUnicode_InternFromString(members[i].name);  /* kept */
            if (sv_field_names[i] == NULL)
                return -1;
            sv_field_offsets[i] = members[i].offset;
        }
        sv_view_type = tp;
        tp->tp_getattro = sv_view_getattro;
        PyType_Modified(tp);
        return 0;
    }
    #define sv_field_getattro_installed() (sv_view_type != NULL)
    #else
    #define sv_install_field_getattro(tp, members) 0
    #define sv_field_getattro_installed() 0
    #endif
    """
    bint _field_getattro_installed "sv_field_getattro_installed"() noexcept
    int _install_field_getattro "sv_install_field_getattro"(
        PyTypeObject_dict *, const PyMemberDef *
    ) except -1


_install_field_getattro(<PyTypeObject_dict *>StridedMemoryView, _member_defs)
field_getattro = bool(_field_getattro_installed())  # whether views read their fields through it


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
        or view._handover != NULL
    )


cdef void _release_resources(StridedMemoryView view) noexcept:
    """Run the capsule's deleter, release the held buffer, free the shape block: once each.

    A view recorded on streams (``_handover``) hands what it holds on its memory to
    them instead (_handover.pxi); only its shape block is freed here then.
    """
    cdef DLManagedTensorVersioned *versioned_tensor
    cdef DLManagedTensor *legacy_tensor
    if view._handover != NULL:
        _hand_over_view(view)
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
        if PyErr_Occurred() == NULL:  # (the usual case: nothing to save)
            _release_resources(<StridedMemoryView>o)
            if PyErr_Occurred() != NULL:  # (left by a deleter: dropped, as a restore would)
                PyErr_Clear()
        else:
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


# The holds of hand-overs (_handover.pxi's _Hold and _Handover) are freed the same
# way: a hold is released before it is dropped (_release_holds), so the deallocator
# has nothing to do but in a failure's path, where it runs the deleter and releases
# the buffer (a _Handover also discards its C events) before Cython's, which drops
# the references and frees the object.  A Cython __dealloc__ would save and restore
# the pending exception twice for each _Handover (its own and its base's) and once
# for each _Hold.  The generated _Handover deallocator calls the generated _Hold one
# directly, so _handover_dealloc does both types' work, and for a _Handover's slots
# (C fields Cython does not know) drops their references as well.

cdef destructor _generated_hold_dealloc = NULL
cdef destructor _generated_handover_dealloc = NULL


cdef inline void _release_dropped_hold(PyObject *o) noexcept:
    """A hold dropped unreleased: its buffer and deleter released (with one reference
    while Cython code handles it, the pending exception saved only when there is one)."""
    cdef PyObject *error_type
    cdef PyObject *error_value
    cdef PyObject *error_traceback
    Py_SET_REFCNT(o, 1)
    if PyErr_Occurred() == NULL:
        _release_hold_memory(<_Hold>o)
        if PyErr_Occurred() != NULL:
            PyErr_Clear()
    else:
        PyErr_Fetch(&error_type, &error_value, &error_traceback)
        _release_hold_memory(<_Hold>o)
        PyErr_Restore(error_type, error_value, error_traceback)
    Py_SET_REFCNT(o, 0)


cdef void _hold_dealloc(PyObject *o) noexcept:
    if (<_Hold>o).managed != NULL or (<_Hold>o).held_buffer != NULL:  # casts: no reference
        _release_dropped_hold(o)
    _generated_hold_dealloc(o)


cdef void _handover_dealloc(PyObject *o) noexcept:
    cdef sv_door_hev *events = (<_Handover>o).c_events
    if events != NULL:  # (no Python code runs)
        (<_Handover>o).c_events = NULL
        sv_door_hev_discard(events)
    if (<_Hold>o).managed != NULL or (<_Hold>o).held_buffer != NULL:
        _release_dropped_hold(o)
    if (<_Handover>o).n_slots != 0:  # its slots' holds: their references too (not Cython's)
        Py_SET_REFCNT(o, 1)
        _release_slots(<_Handover>o)
        Py_SET_REFCNT(o, 0)
    _generated_handover_dealloc(o)


cdef int _install_hold_dealloc() except -1:
    global _generated_hold_dealloc, _generated_handover_dealloc
    cdef PyTypeObject_dealloc *tp
    if _generated_hold_dealloc == NULL:
        tp = <PyTypeObject_dealloc *>_Hold
        _generated_hold_dealloc = tp.tp_dealloc
        tp.tp_dealloc = _hold_dealloc
        tp = <PyTypeObject_dealloc *>_Handover
        _generated_handover_dealloc = tp.tp_dealloc
        tp.tp_dealloc = _handover_dealloc
    return 0


_install_hold_dealloc()


# --- Clearing (the collector) ----------------------------------------------
# A view in a garbage cycle is cleared before it is deallocated: Cython's
# tp_clear drops its object fields, the exporting object among them, which may be
# the last reference to the memory.  A view recorded on streams hands its hold
# over first (_handover.pxi), as its deallocator would; any other view goes
# straight to Cython's.  The collector calls it, never the hot path.

cdef extern from "Python.h":
    ctypedef int (*inquiry)(PyObject *)
    ctypedef struct PyTypeObject_clear "PyTypeObject":
        inquiry tp_clear

cdef inquiry _generated_view_clear = NULL


# --- Traversal (the collector) --------------------------------------------------------
# A view with a hand-over (record_stream, or a recording launch's view) does not report
# the objects that own its memory to the collector: its root view (a derived view's), its
# CUDA Array Interface dict, and its exporting object unless a DLPack capsule's tensor owns
# the memory (the view then holds the tensor and its deleter itself, and the exporting
# object owns nothing the stream reads).  While the hand-over is pending those objects
# count as referenced from outside any garbage, so a cycle holding the view never
# finalizes or clears them with it (a torch tensor read without a capsule, cleared, drops
# its storage; a stream-ordered allocator's owner frees its block while the stream may
# still read it; a weakref callback of the owner fires): the view itself is collected,
# and its tp_clear hands the hold over (above).  A cycle through such an owner (an owner
# that keeps its own recorded view) is therefore not collected until the hand-over is
# released or the cycle broken.  Any other view reports everything, as Cython's does.
cdef extern from "Python.h":
    ctypedef int (*visitproc)(PyObject *, void *)
    ctypedef int (*traverseproc)(PyObject *, visitproc, void *)
    ctypedef struct PyTypeObject_traverse "PyTypeObject":
        traverseproc tp_traverse

cdef extern from *:
    """
    typedef struct {
        visitproc visit;
        void *arg;
        PyObject *skip[3];
    } sv_skipping_visit;

    /* The collector's visit, for every object but the three skipped. */
    static int sv_visit_skipping(PyObject *o, void *arg) {
        sv_skipping_visit *s = (sv_skipping_visit *)arg;
        if (o == s->skip[0] || o == s->skip[1] || o == s->skip[2])
            return 0;
        return s->visit(o, s->arg);
    }
    """
    ctypedef struct sv_skipping_visit:
        visitproc visit
        void *arg
        PyObject *skip[3]
    int sv_visit_skipping(PyObject *o, void *arg) noexcept

cdef traverseproc _generated_view_traverse = NULL


cdef int _view_traverse(PyObject *o, visitproc visit, void *arg) noexcept:
    cdef sv_skipping_visit skipping
    if (<StridedMemoryView>o)._handover == NULL:
        return _generated_view_traverse(o, visit, arg)
    skipping.visit = visit
    skipping.arg = arg
    skipping.skip[0] = NULL
    if (<StridedMemoryView>o)._managed == NULL:
        skipping.skip[0] = <PyObject *>(<StridedMemoryView>o).exporting_obj
    skipping.skip[1] = <PyObject *>(<StridedMemoryView>o)._interface
    skipping.skip[2] = <PyObject *>(<StridedMemoryView>o)._memory_owner
    return _generated_view_traverse(o, sv_visit_skipping, &skipping)


cdef int _install_view_traverse() except -1:
    global _generated_view_traverse
    cdef PyTypeObject_traverse *tp = <PyTypeObject_traverse *>StridedMemoryView
    if _generated_view_traverse == NULL and tp.tp_traverse != NULL:
        _generated_view_traverse = tp.tp_traverse
        tp.tp_traverse = _view_traverse
    return 0


_install_view_traverse()


cdef int _view_clear(PyObject *o) noexcept:
    if (<StridedMemoryView>o)._handover != NULL:
        _hand_over_view(<StridedMemoryView>o)
    return _generated_view_clear(o)


cdef int _install_view_clear() except -1:
    global _generated_view_clear
    cdef PyTypeObject_clear *tp = <PyTypeObject_clear *>StridedMemoryView
    if _generated_view_clear == NULL and tp.tp_clear != NULL:
        _generated_view_clear = tp.tp_clear
        tp.tp_clear = _view_clear
    return 0


_install_view_clear()


def _clear_for_tests(StridedMemoryView view):
    """Clear ``view`` as the collector clears a view of a garbage cycle (the type's
    tp_clear): for tests, which cannot choose which member of a cycle goes first.  The
    view is left with None fields, as the collector leaves it."""
    cdef PyTypeObject_clear *tp = <PyTypeObject_clear *>StridedMemoryView
    tp.tp_clear(<PyObject *>view)


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
    /* The torch reader's memo (_from_torch.pxi): the inline arrays' last three
       slots, free in a layout of at most (slots - 3) / 2 dimensions (6 of 8). */
    #define SV_INLINE_SLOTS \
        (sizeof(((SV_VIEW_STRUCT *)0)->_inline_dims) / sizeof(int64_t))
    #define SV_MEMO_MAX_NDIM ((int32_t)((SV_INLINE_SLOTS - 3) / 2))
    #define SV_MEMO_DTYPE_SLOT (SV_INLINE_SLOTS - 3)
    #define SV_MEMO_SIZE_SLOT (SV_INLINE_SLOTS - 2)
    #define SV_MEMO_PTR_SLOT (SV_INLINE_SLOTS - 1)
    /* (SV_NONE_NEW, a field's reference to None: _view.pyx.) */
    #if SV_GIL_FAST_PATHS && CYTHON_USE_FREELISTS && !CYTHON_USE_TYPE_SPECS && !CYTHON_COMPILING_IN_LIMITED_API
    #define SV_VIEW_FREE_COUNT \
        (__pyx_mstate_global->__pyx_freecount_11stridedview_5_view_StridedMemoryView)
    #define SV_VIEW_FREE_POP() ((PyObject *) \
        __pyx_mstate_global->__pyx_freelist_11stridedview_5_view_StridedMemoryView[ \
            --SV_VIEW_FREE_COUNT])
    #else
    #define SV_VIEW_FREE_COUNT 0
    #define SV_VIEW_FREE_POP() ((PyObject *)NULL)
    #endif
    #if SV_PER_THREAD_STATE
    /* A freed view from this thread's freelist (free-threaded builds), or NULL. */
    static CYTHON_INLINE PyObject *sv_view_thread_free_pop(void) {
        sv_thread_state *st = sv_thread_state_get();
        if (st != NULL && st->free_view_count > 0)
            return st->free_views[--st->free_view_count];
        return NULL;
    }
    /* The type's tp_free (free-threaded builds): a freed view kept in the freeing
       thread's freelist if it has room and this thread owns it (its memory then comes
       from this thread's heap), else given to the interpreter's.  A view owned by
       another thread, or by none (merged: its owner ended), is never kept: reused here,
       the collector would give it back to the owner of its memory (it sets ob_tid from
       the heap segment), and this thread's last reference would then be dropped by
       that thread, later (biased reference counting), as would a kept view's test of
       being held by nobody else fail for good. */
    static freefunc sv_generated_view_free = NULL;
    static void sv_view_free(void *o) {
        sv_thread_state *st = sv_thread_state_if_any();
        if (st != NULL && st->free_view_count < SV_FREE_VIEW_SLOTS && sv_owned_here(o)) {
            st->free_views[st->free_view_count++] = (PyObject *)o;
            return;
        }
        sv_generated_view_free(o);
    }
    static void sv_install_view_free(PyTypeObject *tp) {
        if (sv_generated_view_free == NULL && tp->tp_free != NULL) {
            sv_generated_view_free = tp->tp_free;
            tp->tp_free = sv_view_free;
        }
    }
    #else
    #define sv_view_thread_free_pop() ((PyObject *)NULL)
    #define sv_install_view_free(tp) ((void)(tp))
    #endif
    /* Every byte of a view from `start` on zeroed but for the inline arrays,
       then the vtable and the object fields (None): the state Cython's tp_new
       leaves a view in, from `start` on. */
    #define SV_VIEW_RESET_FROM(o, start) do { \
        SV_VIEW_STRUCT *sv_reset = (SV_VIEW_STRUCT *)(o); \
        const size_t sv_from = offsetof(SV_VIEW_STRUCT, _inline_dims); \
        const size_t sv_to = sv_from + sizeof(sv_reset->_inline_dims); \
        memset((char *)sv_reset + (start), 0, sv_from - (start)); \
        memset((char *)sv_reset + sv_to, 0, sizeof(SV_VIEW_STRUCT) - sv_to); \
        sv_reset->__pyx_vtab = __pyx_vtabptr_11stridedview_5_view_StridedMemoryView; \
        sv_reset->ptr = SV_NONE_NEW(); \
        sv_reset->shape = SV_NONE_NEW(); \
        sv_reset->strides = SV_NONE_NEW(); \
        sv_reset->dtype = SV_NONE_NEW(); \
        sv_reset->exporting_obj = SV_NONE_NEW(); \
        sv_reset->ready_stream = SV_NONE_NEW(); \
        sv_reset->_memory_owner = (struct __pyx_obj_11stridedview_5_view_StridedMemoryView *)SV_NONE_NEW(); \
        sv_reset->_interface = SV_NONE_NEW(); \
    } while (0)
    /* A freed view made as Cython's tp_new makes one, but for the inline
       arrays: every byte before and after them zeroed, then the header, the
       vtable and the object fields (None), then tracked by the collector. */
    #define SV_VIEW_PREPARE(o) do { \
        SV_VIEW_RESET_FROM((o), 0); \
        (void)PyObject_INIT((PyObject *)(o), \
            __pyx_mstate_global->__pyx_ptype_11stridedview_5_view_StridedMemoryView); \
        PyObject_GC_Track(o); \
    } while (0)
    /* Whether a view holds nothing a fill would overwrite and not release: no
       capsule, no held buffer, no C layout (so no shape block; and every complete
       fill sets one, so a view filled since it was emptied fails this).  Its object
       fields need no reading: a fill assigns them, releasing what they held.  Read
       straight from the struct (no reference taken), in one test: a launcher's proxy
       asks it of its kept view on every view() (_proxy_view). */
    #define SV_VIEW_HOLDS_NOTHING(o) ( \
        ((uintptr_t)((SV_VIEW_STRUCT *)(o))->_dims \
         | (uintptr_t)((SV_VIEW_STRUCT *)(o))->_managed \
         | (uintptr_t)((SV_VIEW_STRUCT *)(o))->_held_buffer) == 0)
    /* A live view, tracked and referenced, emptied (see _is_emptied): made as
       SV_VIEW_PREPARE makes one but for its header and its four value fields
       (ptr, shape, strides, dtype), which keep their objects for the next fill to
       replace; the references of the four fields that hold the producer's objects
       are moved to `old[0..3]`, for the caller to drop once no code can see the
       view half emptied. */
    #define SV_VIEW_EMPTY(o, old) do { \
        SV_VIEW_STRUCT *sv_empty = (SV_VIEW_STRUCT *)(o); \
        PyObject *sv_kept[4]; \
        const size_t sv_from = offsetof(SV_VIEW_STRUCT, _inline_dims); \
        const size_t sv_to = sv_from + sizeof(sv_empty->_inline_dims); \
        sv_kept[0] = sv_empty->ptr; \
        sv_kept[1] = sv_empty->shape; \
        sv_kept[2] = sv_empty->strides; \
        sv_kept[3] = sv_empty->dtype; \
        (old)[0] = sv_empty->exporting_obj; \
        (old)[1] = sv_empty->ready_stream; \
        (old)[2] = (PyObject *)sv_empty->_memory_owner; \
        (old)[3] = sv_empty->_interface; \
        int32_t sv_memo_ndim1 = 0; \
        if (sv_empty->_reader_filled && sv_empty->_ndim <= SV_MEMO_MAX_NDIM) { \
            sv_empty->_inline_dims[SV_MEMO_PTR_SLOT] = (int64_t)sv_empty->_ptr; \
            sv_empty->_inline_dims[SV_MEMO_SIZE_SLOT] = sv_empty->_size; \
            memcpy(&sv_empty->_inline_dims[SV_MEMO_DTYPE_SLOT], &sv_empty->_dl_dtype, sizeof(sv_empty->_dl_dtype)); \
            sv_memo_ndim1 = sv_empty->_ndim + 1; \
        } \
        memset((char *)sv_empty + sizeof(PyObject), 0, sv_from - sizeof(PyObject)); \
        memset((char *)sv_empty + sv_to, 0, sizeof(SV_VIEW_STRUCT) - sv_to); \
        sv_empty->_memo_ndim1 = sv_memo_ndim1; \
        sv_empty->__pyx_vtab = __pyx_vtabptr_11stridedview_5_view_StridedMemoryView; \
        sv_empty->ptr = sv_kept[0]; \
        sv_empty->shape = sv_kept[1]; \
        sv_empty->strides = sv_kept[2]; \
        sv_empty->dtype = sv_kept[3]; \
        sv_empty->exporting_obj = SV_NONE_NEW(); \
        sv_empty->ready_stream = SV_NONE_NEW(); \
        sv_empty->_memory_owner = (SV_VIEW_STRUCT *)SV_NONE_NEW(); \
        sv_empty->_interface = SV_NONE_NEW(); \
    } while (0)
    """
    Py_ssize_t SV_VIEW_FREE_COUNT
    PyObject *SV_VIEW_FREE_POP() noexcept
    PyObject *_view_thread_free_pop "sv_view_thread_free_pop"() noexcept
    void _install_view_free "sv_install_view_free"(PyTypeObject_dealloc *) noexcept
    void SV_VIEW_PREPARE(PyObject *) noexcept
    void SV_VIEW_EMPTY(PyObject *, PyObject **) noexcept
    enum:
        SV_MEMO_DTYPE_SLOT
        SV_MEMO_SIZE_SLOT
        SV_MEMO_PTR_SLOT
    bint SV_VIEW_HOLDS_NOTHING(PyObject *) noexcept


cdef bint _is_new(StridedMemoryView view) noexcept:
    """Whether ``view`` is in the state a new view starts in (tp_new, _new_view): every
    object field None and every C field zero, but the inline shape/stride arrays
    (never read before being written).  What __init__ checks: its real state,
    whatever made it or failed half-way through filling it."""
    return (
        view.ptr is None
        and view.shape is None
        and view.strides is None
        and view.dtype is None
        and _is_emptied(view)
    )


cdef bint _is_emptied(StridedMemoryView view) noexcept:
    """Whether ``view`` holds nothing of a producer's: the state a new view starts in
    but for its four value fields (``ptr``, ``shape``, ``strides``, ``dtype``), which
    may hold anything.  A launcher's emptied view (SV_VIEW_EMPTY) is in this state:
    it keeps its last int, tuples and dtype (objects of no producer's, holding no
    memory) for its proxy's next fill to replace, which spares that fill and the
    emptying a reference count change and a store per field."""
    return (
        SV_VIEW_HOLDS_NOTHING(<PyObject *>view)
        and view.exporting_obj is None
        and view._memory_owner is None
        and view.ready_stream is None
        and view._interface is None
        and view._ptr == 0
        and view._ndim == 0
        and view._itemsize == 0
        and view._size == 0
        and view._device_type == 0
        and view._device_id == 0
        and not view.is_device_accessible
        and not view.readonly
        and not view._managed_is_versioned
        and not view._reader_filled
        and view._handover == NULL
    )


cdef extern from *:
    # A view's reference passed in becomes the caller's (as _take_reference, typed).
    StridedMemoryView _take_view "sv_take_reference"(PyObject *)


cdef inline StridedMemoryView _new_view():
    """A new empty view, as ``StridedMemoryView.__new__(StridedMemoryView)`` makes it
    (object fields None, C fields zero), sooner when the freelist has one."""
    cdef PyObject *view
    if SV_PENDING_LOAD(sv_pending_entries) != 0:  # hand-overs pending: check some, now and then
        _poll_on_creation()
    if SV_VIEW_FREE_COUNT > 0:  # GIL builds: Cython's freelist
        view = SV_VIEW_FREE_POP()
        SV_VIEW_PREPARE(view)
        return _take_view(view)
    view = _view_thread_free_pop()  # free-threaded builds: this thread's (else NULL)
    if view != NULL:
        SV_VIEW_PREPARE(view)
        return _take_view(view)
    return StridedMemoryView.__new__(StridedMemoryView)


_install_view_free(<PyTypeObject_dealloc *>StridedMemoryView)  # free-threaded builds only


def _free_view_addresses():
    """The addresses of the freed views this thread's freelist keeps (free-threaded
    builds; an empty list elsewhere), for the tests of what it admits."""
    cdef sv_thread_state *st
    cdef Py_ssize_t i
    if not SV_PER_THREAD_STATE:
        return []
    st = _thread_state_if_any()
    if st == NULL:
        return []
    return [<uintptr_t>st.free_views[i] for i in range(st.free_view_count)]


cdef extern from "Python.h":
    ctypedef struct PyTypeObject_new "PyTypeObject":
        vectorcallfunc tp_vectorcall
    int PyUnicode_CompareWithASCIIString(PyObject *, const char *) noexcept
    bint PyUnicode_Check(PyObject *) noexcept

cdef vectorcallfunc _generated_view_vectorcall = NULL


cdef inline bint _only_stream_ptr(PyObject *kwnames) noexcept:
    """Whether a vectorcall's keyword names are exactly ``("stream_ptr",)`` (the
    constructor's and view()'s entries).  Compared as the interpreter matches keyword
    names: the interned name by identity, else str contents (never a subclass's __eq__)."""
    if PyTuple_GET_SIZE(<tuple><object>kwnames) != 1:
        return False
    cdef PyObject *name = PyTuple_GET_ITEM(<tuple><object>kwnames, 0)
    return name == <PyObject *>"stream_ptr" or (
        PyUnicode_Check(name) and PyUnicode_CompareWithASCIIString(name, "stream_ptr") == 0
    )


cdef object _construct_view(
    PyObject *cls, PyObject *const *args, size_t nargsf, PyObject *kwnames
):
    """StridedMemoryView's vectorcall: ``StridedMemoryView(obj)``,
    ``StridedMemoryView(obj, stream_ptr)`` and ``StridedMemoryView(obj,
    stream_ptr=s)`` do __init__'s work on a view from _new_view; any other call
    (other keywords, another number of arguments) goes to the one Cython
    generated, which parses and raises as __init__ does."""
    cdef Py_ssize_t count = PyVectorcall_NARGS(nargsf)
    if kwnames != NULL and count == 1 and _only_stream_ptr(kwnames):
        count = 2  # the form users write: the keyword's value follows obj
    elif kwnames != NULL or count < 1 or count > 2:
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
