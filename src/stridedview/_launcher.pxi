# The kernel-launch decorator's C side: the proxies it hands the launch function
# (ViewableArgument), their ``view()`` entry, the spare proxies it reuses, and
# the launcher's vectorcall.  The Python side (resolving which arguments are
# chosen) is _decorator.py.
#
# What is here, and the invariant each rests on:
#
# - ``ViewableArgument.view`` gets a method entry of its own (_proxy_view_call),
#   installed once at import in place of Cython's wrapper: ``view()``,
#   ``view(stream_ptr)`` and ``view(stream_ptr=s)`` go straight to _proxy_view;
#   any other call goes to the wrapper, which parses and raises.
# - Spare proxies (_new_proxy, _drop_proxy): a proxy that only the launcher holds
#   when the function returns is emptied and kept in the fast paths' state
#   (_thread_state.pxi: the process's with the GIL, the launching thread's
#   without), and a later launch takes it back only while the spare list holds
#   its only reference.  "Only" is _is_unique(): a reference count of 1 with the
#   GIL; without it, this thread owns the object and its local count is 1 and its
#   shared count 0 (a count of 1 alone proves nothing there: another thread may
#   be reviving a reference).  Either proves exclusive ownership while no Python
#   code runs between the check and the use, and none does.  A proxy is made by
#   the launching thread, so that thread owns it; one handed to another thread
#   and dropped there is merged or queued by the interpreter, fails the test for
#   good, and is let go.
# - Kept views (_proxy_view, _park_proxy): a launcher's proxy keeps the last view
#   it made.  When the proxy is parked and that view is held by the proxy alone
#   (_is_unique) and holds no resource (capsule, buffer, shape block), the view
#   is emptied (_is_emptied: the state a new one starts in, its producer, stream,
#   owner and interface None and its C fields zero, but for its value fields:
#   its last int, tuples and dtype stay, objects of no producer's, for the next
#   fill to replace; no Python code runs until the proxy is listed), and the
#   proxy's next view() fills it again, again only while the proxy holds its
#   only reference.
#   A view anyone else holds (the function's return value, a traceback, the
#   collector's caller, another thread) is let go instead, and a proxy the
#   function keeps drops its kept view, so nothing of a launch's views outlives
#   the launch.  Without a GIL, a proxy's fields other than ``obj`` and
#   ``_group`` (its kept view, whether it is emptied, its cached type
#   description) are read and written only by the thread that owns the proxy
#   (_owned_here; the launching thread), and by the launcher's own thread when
#   it parks or drops it: a function may hand a proxy to other threads, whose
#   view() then makes a new view, looks the type up afresh, and writes nothing
#   to the proxy (_proxy_view and _proxy_view_joining alike).  ``obj`` is
#   written only while the proxy is unshared (filled before the function gets
#   it, emptied when parked); ``_group`` is set while it is unshared and
#   cleared under the hand-over lock (record_stream=True, below).
#   An emptied view can still be reached (gc.get_objects(), a __del__ run by the
#   release of its old fields), so nothing may fill it but its proxy: it is
#   marked ``_parked`` as it is emptied, and StridedMemoryView.__init__ refuses an
#   emptied parked view (and any view not new); and the proxy fills it again only if it
#   still holds nothing a fill would overwrite and not release
#   (SV_VIEW_HOLDS_NOTHING: no capsule, held buffer or C layout, which every
#   complete fill sets), whatever its proxy's flag says, else lets it go.
# - record_stream=True (_launch_recording): the launch's proxies carry its group
#   (``_group``, _handover.pxi), and each view() on a stream joins it: the kept
#   view filled again, or a new one (kept, as any launcher's), as above.  When the
#   launch ends, each proxy's kept view made in it (its hand-over the group, not
#   sealed yet) and held by the proxy alone hands its hold over to the group
#   there and then (_kept_view_hands_over, on the launching thread, which owns
#   the proxy's fields; what its deallocator would do, with no Python code run),
#   so that it holds nothing and _park_proxy empties it for the next launch; a
#   view held elsewhere keeps its hand-over and is let go (_park_proxy lets a
#   view with a hand-over go), handing over when released.  Then every proxy
#   leaves the group, before it is parked.  A launcher without the option runs _launch_with with no group,
#   which the compiler folds away: one flag test per launch.  A function may hand
#   its proxy to another thread, whose view() runs while the launch ends: so
#   view() reads ``_group`` once (_proxy_group: a strong reference, taken under
#   the hand-over lock, as _leave_group clears it under that lock; the unlocked
#   test before it is an atomic load without a GIL) and never again once the
#   producer's code may have run; _join_group then joins the group only if it is
#   not sealed yet, else the view hands over on its own, on its stream.  With
#   the GIL the lock is compiled out and the test is a plain load: a proxy of a
#   launcher without the option pays one pointer test, as before.
# - Only launchers fill their proxies: ViewableArgument.__init__ refuses a proxy
#   that has an object or belongs to a launcher (``_name`` set, parked ones
#   included), so a proxy found through the collector cannot be made to view,
#   and keep a view of, an object of its own.
# - The launcher (_launch) reads its own fields, set once in __cinit__ and
#   __init__ (which refuses a launcher already initialised: _launch indexes
#   ``_name_at`` while it runs, and an argument's property may call Python
#   code); a launcher made without __init__ has ``_name_at`` () and
#   ``by_keyword`` () (set in __cinit__), and refuses to be called.
#
# Proven equal to the general path by tests/test_launch_reuse.py (kept views
# included: filled again as new ones, never while held elsewhere, never filled
# or re-initialised from outside), tests/test_gpu_record_stream.py (a recording
# launch's kept views filled again, their holds released once, after the
# stream) and
# tests/test_decorator.py (proxies kept, nested, threaded, raising, found by the
# collector; every argument form against Cython's wrapper).

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
    # The parameter name the launcher wrapped obj for (None: made directly), for errors.
    cdef object _name
    # The last view a launcher's proxy made (None: none kept), and whether it has been
    # emptied since, to be filled again by the next view() (see _park_proxy).
    cdef StridedMemoryView _kept_view
    cdef bint _kept_view_empty
    # The hand-over of the launch this proxy serves, when its launcher was decorated
    # with record_stream=True (None otherwise): each view() on a stream joins it.
    cdef _Handover _group

    def __init__(self, obj):
        # Once only, and never on a launcher's proxy (_name set), parked ones included:
        # a proxy filled from outside would view, and keep a view of, an object its
        # launcher never passed, until a later launch takes it.
        if self.obj is not None or self._name is not None:
            raise TypeError(
                "ViewableArgument is already initialised (a launcher's proxy, even an "
                "emptied one, is its launcher's): make a new one, ViewableArgument(obj)"
            )
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

    # The view's fields are not the argument's: a launcher that reads one from the
    # argument is told to make the view (AttributeError, so hasattr stays False).
    # Off the launch path: ``view`` is looked up as before.
    @property
    def ptr(self):
        """Not a field of the argument: raises AttributeError (``view(stream_ptr).ptr``)."""
        _not_a_view("ptr")

    @property
    def shape(self):
        """Not a field of the argument: raises AttributeError (``view(stream_ptr).shape``)."""
        _not_a_view("shape")

    @property
    def strides(self):
        """Not a field of the argument: raises AttributeError (``view(stream_ptr).strides``)."""
        _not_a_view("strides")

    @property
    def dtype(self):
        """Not a field of the argument: raises AttributeError (``view(stream_ptr).dtype``)."""
        _not_a_view("dtype")

    @property
    def device_id(self):
        """Not a field of the argument: raises AttributeError (``view(stream_ptr).device_id``)."""
        _not_a_view("device_id")


cdef int _not_a_view(str name) except -1:
    raise AttributeError(
        f"'ViewableArgument' object has no attribute {name!r}: it is the launch argument, "
        f"not its view; call .view(stream_ptr) with the launch's stream and read .{name} "
        "from the StridedMemoryView it returns"
    )


cdef inline StridedMemoryView _proxy_view(ViewableArgument proxy, object stream_ptr):
    """``proxy.view(stream_ptr)``."""
    cdef StridedMemoryView view
    cdef _ProducerType info
    # Whether this thread may use and change the proxy's own fields (always, with
    # the GIL; without it, the thread that owns the proxy: see above).
    cdef bint own = _owned_here(<PyObject *>proxy)
    if (
        SV_FAST_PATHS
        and own
        and proxy._kept_view_empty
        and _is_unique(<PyObject *>proxy._kept_view)
        and SV_VIEW_HOLDS_NOTHING(<PyObject *>proxy._kept_view)
    ):
        # The view this spare proxy made in an earlier launch, emptied when the
        # proxy was parked, held by nothing else since, and found empty (what it
        # holds, not the flag: a fill over a capsule would lose its deleter):
        # filled again.  Anything else is let go (below), and released.
        proxy._kept_view_empty = False
        view = proxy._kept_view
    else:
        view = _new_view()
        if SV_FAST_PATHS and own and proxy._name is not None:  # a launcher's proxy
            proxy._kept_view_empty = False
            proxy._kept_view = view
    if SV_PROXY_IN_GROUP(<PyObject *>proxy):
        # A recording launch's proxy: its group taken once, a strong reference (the
        # producer's code run while the view is made may let the launch end).
        return _proxy_view_joining(proxy, _proxy_group(proxy), stream_ptr, view)
    # Kept only while obj is still of the type it describes (__class__ can be
    # assigned) and that type is unchanged.
    if own:
        info = proxy._info
    else:
        info = None
    if info is None or not _describes(info, type(proxy.obj)):
        info = _producer_type(proxy.obj)
        if own:
            proxy._info = info
    if stream_ptr is None:
        _proxy_view_without_stream(view, proxy, info)
    else:
        _view_from_any(view, proxy.obj, stream_ptr, info)
    return view


cdef StridedMemoryView _proxy_view_joining(
    ViewableArgument proxy, _Handover group, object stream_ptr, StridedMemoryView view
):
    """``proxy.view(stream_ptr)`` in a recording launch: ``view`` (new, or the proxy's
    kept one, as _proxy_view chose) filled, joining ``group``, the launch's group as
    _proxy_group took it before any Python code ran (None: the launch has ended
    since, and the view is one of its own, as after the launch).  Never read again
    here: the producer's code, run while the view is made, may let the launch end;
    _join_group decides under the lock whether the group still takes the view."""
    cdef _ProducerType info
    # Without a GIL, only the thread that owns the proxy uses and sets its cached
    # type (as in _proxy_view): another thread looks it up and writes nothing.
    cdef bint own = _owned_here(<PyObject *>proxy)
    if own:
        info = proxy._info
    else:
        info = None
    if info is None or not _describes(info, type(proxy.obj)):
        info = _producer_type(proxy.obj)
        if own:
            proxy._info = info
    if stream_ptr is None:
        _proxy_view_without_stream(view, proxy, info)
    else:
        # Normalized once, for the view and its group.
        stream = _normalize_stream(stream_ptr)
        _view_from_normalized(view, proxy.obj, stream, info)
        if group is not None:
            _join_group(view, group, stream)
    return view


cdef inline _Handover _proxy_group(ViewableArgument proxy):
    """``proxy``'s group now, a strong reference (None: its launch has ended).  Taken
    under the hand-over lock, as _leave_group clears it: without a GIL the launching
    thread may end the launch, and drop the group, between a read and its reference."""
    cdef _Handover group
    SV_HANDOVER_LOCK()
    group = proxy._group  # a reference taken, none dropped: no Python code
    SV_HANDOVER_UNLOCK()
    return group


cdef int _proxy_view_without_stream(
    StridedMemoryView view, ViewableArgument proxy, _ProducerType info
) except -1:
    """``proxy.view()``: the ambiguity of no stream for device memory names the argument."""
    try:
        return _view_from_any(view, proxy.obj, None, info)
    except BufferError as exc:
        if proxy._name is None or "stream_ptr=None is ambiguous" not in str(exc):
            raise
        raise BufferError(
            f"args_viewable_as_strided_memory: view() of argument {proxy._name!r} "
            f"has no stream: {exc}"
        ) from None


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

# The method descriptor's own vectorcall (CPython's public PyMethodDescrObject):
# what the interpreter calls for a call it does not specialise, which on 3.11 to
# 3.13 includes every call with keywords (arg.view(stream_ptr=s)).  CPython's
# entry checks the receiver's type and the recursion depth, then calls ml_meth;
# _proxy_view_vectorcall takes a ViewableArgument receiver straight to
# _proxy_view_call and hands anything else (no receiver, another type) to
# CPython's entry, which raises as it always has.
cdef extern from "Python.h":
    ctypedef struct PyMethodDescrObject_vectorcall "PyMethodDescrObject":
        vectorcallfunc vectorcall

cdef vectorcallfunc _descriptor_vectorcall = NULL


cdef object _proxy_view_call(
    PyObject *proxy, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames
):
    # The method descriptor has checked that proxy is a ViewableArgument.
    if kwnames == NULL and nargs <= 1:
        return _proxy_view(<ViewableArgument>proxy, <object>args[0] if nargs else None)
    # view(stream_ptr=s), the form users write: the keyword's value follows the (no)
    # positional arguments; the name is compared as Python compares keyword names.
    if kwnames != NULL and nargs == 0 and _only_stream_ptr(kwnames):
        return _proxy_view(<ViewableArgument>proxy, <object>args[0])
    if kwnames != NULL:
        for name in <tuple><object>kwnames:
            if name != "stream_ptr":
                raise TypeError(
                    f"args_viewable_as_strided_memory: view() got an unexpected keyword "
                    f"argument {name!r}: the stream is passed as stream_ptr, as in "
                    "arg.view(stream_ptr=s) or arg.view(s)"
                )
    return _take_reference(_generated_proxy_view(proxy, args, nargs, kwnames))


cdef object _proxy_view_vectorcall(
    PyObject *descriptor, PyObject *const *args, size_t nargsf, PyObject *kwnames
):
    cdef Py_ssize_t count = PyVectorcall_NARGS(nargsf)
    if count >= 1 and Py_TYPE_ptr(args[0]) == <void *>ViewableArgument:
        if count == 1 and kwnames != NULL and _only_stream_ptr(kwnames):
            # view(stream_ptr=s), the form users write: straight to the view.
            return _proxy_view(<ViewableArgument>args[0], <object>args[1])
        return _proxy_view_call(args[0], args + 1, count - 1, kwnames)
    return _take_reference(_descriptor_vectorcall(descriptor, args, nargsf, kwnames))


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
    global _descriptor_vectorcall
    _descriptor_vectorcall = (<PyMethodDescrObject_vectorcall *><PyObject *>descriptor).vectorcall
    if _descriptor_vectorcall != NULL:
        (<PyMethodDescrObject_vectorcall *><PyObject *>descriptor).vectorcall = (
            <vectorcallfunc><void *>_proxy_view_vectorcall
        )
    (<dict><object>tp.tp_dict)["view"] = descriptor
    PyType_Modified(<PyTypeObject_dict *>tp)
    return 0


_install_proxy_view()


cdef extern from *:
    """
    #define SV_PROXY_STRUCT struct __pyx_obj_11stridedview_5_view_ViewableArgument
    /* A proxy's obj, _info and _name set to new references to the given objects,
       the old ones dropped once all three are set (a spare's are None, or what a
       caller of __init__ left; a spare's _name is usually the same object). */
    #define sv_proxy_fill(p, new_obj, new_info, new_name) do { \
        SV_PROXY_STRUCT *sv_fill = (SV_PROXY_STRUCT *)(p); \
        PyObject *sv_old_obj = sv_fill->obj; \
        PyObject *sv_old_info = (PyObject *)sv_fill->_info; \
        PyObject *sv_old_name = sv_fill->_name; \
        Py_INCREF(new_obj); \
        sv_fill->obj = (new_obj); \
        Py_INCREF(new_info); \
        sv_fill->_info = (void *)(new_info); \
        if (sv_old_name != (new_name)) { \
            Py_INCREF(new_name); \
            sv_fill->_name = (new_name); \
            Py_DECREF(sv_old_name); \
        } \
        Py_DECREF(sv_old_obj); \
        Py_DECREF(sv_old_info); \
    } while (0)
    /* Whether a proxy serves a recording launch now (_group set): a plain load with
       the GIL; without it an atomic one, as is _leave_group's store, which the
       launching thread may make meanwhile (_proxy_group then finds None). */
    #ifdef Py_GIL_DISABLED
    #define SV_PROXY_IN_GROUP(p) \
        (_Py_atomic_load_ptr_relaxed(&((SV_PROXY_STRUCT *)(p))->_group) != (void *)Py_None)
    #define SV_PROXY_STORE_GROUP(p, v) _Py_atomic_store_ptr_release(&(p)->_group, (v))
    #else
    #define SV_PROXY_IN_GROUP(p) ((void *)((SV_PROXY_STRUCT *)(p))->_group != (void *)Py_None)
    #define SV_PROXY_STORE_GROUP(p, v) ((p)->_group = (v))
    #endif
    /* A proxy's group set to None (the caller holds the hand-over lock); the old
       reference dropped, never the last: the launch holds its group until sealed. */
    #define sv_proxy_leave_group(p) do { \
        SV_PROXY_STRUCT *sv_leaving = (SV_PROXY_STRUCT *)(p); \
        PyObject *sv_old_group = (PyObject *)sv_leaving->_group; \
        Py_INCREF(Py_None); \
        SV_PROXY_STORE_GROUP(sv_leaving, (void *)Py_None); \
        Py_DECREF(sv_old_group); \
    } while (0)
    """
    void sv_proxy_fill(PyObject *, PyObject *, PyObject *, PyObject *) noexcept
    bint SV_PROXY_IN_GROUP(PyObject *) noexcept
    void sv_proxy_leave_group(PyObject *) noexcept


cdef inline PyObject *_viewable(PyObject *value, PyObject *name) except NULL:
    """A new reference to ``value`` (not None: the launcher passes None on as it is)
    wrapped as a ViewableArgument for the parameter ``name``; BufferError without a
    protocol."""
    info = _producer_type(<object>value)
    if not info.has_dlpack:
        _check_viewable(<object>value, <object>name, info)
    cdef PyObject *argument = _new_proxy()
    sv_proxy_fill(argument, value, <PyObject *>info, name)
    return argument


# --- Spare proxies -------------------------------------------------------
# A launch wraps its chosen arguments in ViewableArgument proxies, which the
# function nearly always drops before it returns.  A proxy that only the
# launcher still holds then (_is_unique) is emptied (obj and _info None, as a
# new one starts) and kept in the state's spare_proxies (strong references, up
# to SV_SPARE_PROXY_SLOTS); a later launch on the same thread, or one nested in
# this one, takes it instead of making a new one.  A proxy the function kept is
# never touched again.  A spare is handed out only while the list holds its only
# reference (a tracked object can be reached through gc.get_objects()).  The
# list is read and changed by one thread at a time (the GIL, or its own
# thread), and no Python code runs between the test of a proxy and the use
# that relies on it.


cdef inline PyObject *_new_proxy() except NULL:
    """A new reference to a proxy: a spare if one is free (emptied: obj and _info
    None, unless someone called its __init__), else a new one."""
    cdef PyObject *spare
    cdef sv_thread_state *st = _thread_state()
    if st != NULL:
        while st.spare_proxy_count != 0:
            st.spare_proxy_count -= 1
            spare = st.spare_proxies[st.spare_proxy_count]
            if _is_unique(spare):
                return spare  # the list's reference, handed over
            Py_DECREF_ptr(spare)  # another holder found it: it is theirs now
    proxy = ViewableArgument.__new__(ViewableArgument)
    Py_INCREF(proxy)  # the caller's reference (the local's is dropped on return)
    return <PyObject *>proxy


cdef inline void _drop_proxy(PyObject *proxy) noexcept:
    """Drop the launcher's reference to a proxy it made: kept as a spare when that
    reference is the only one and there is room, else released."""
    cdef sv_thread_state *st
    if SV_FAST_PATHS:
        if not _is_unique(proxy):
            _forget_kept_view(<ViewableArgument>proxy)  # a proxy the function kept
        else:
            st = _thread_state()
            if st != NULL and st.spare_proxy_count != SV_SPARE_PROXY_SLOTS:
                _park_proxy(st, proxy)
                return
    Py_DECREF_ptr(proxy)


cdef void _forget_kept_view(ViewableArgument proxy) noexcept:
    """Drop ``proxy``'s kept view: a proxy the launch function kept does not keep its
    last view alive too."""
    cdef object view = proxy._kept_view  # released on return, the field cleared first
    proxy._kept_view = None
    proxy._kept_view_empty = False


cdef extern from *:
    """
    /* A parked proxy's fields, read and moved without taking references: obj and
       _info moved to old[0], old[1] (None left in their place); the kept view and
       whether it has been emptied. */
    #define SV_PROXY_EMPTY(p, old) do { \
        SV_PROXY_STRUCT *sv_proxy = (SV_PROXY_STRUCT *)(p); \
        (old)[0] = sv_proxy->obj; \
        sv_proxy->obj = SV_NONE_NEW(); \
        (old)[1] = (PyObject *)sv_proxy->_info; \
        sv_proxy->_info = (void *)SV_NONE_NEW(); \
    } while (0)
    #define SV_PROXY_KEPT_VIEW(p) ((PyObject *)((SV_PROXY_STRUCT *)(p))->_kept_view)
    #define SV_PROXY_KEPT_VIEW_EMPTY(p) (((SV_PROXY_STRUCT *)(p))->_kept_view_empty)
    /* The kept view's reference moved to *old (None left), or emptied marked. */
    #define SV_PROXY_TAKE_KEPT_VIEW(p, old) do { \
        SV_PROXY_STRUCT *sv_proxy = (SV_PROXY_STRUCT *)(p); \
        *(old) = (PyObject *)sv_proxy->_kept_view; \
        sv_proxy->_kept_view = (void *)SV_NONE_NEW(); \
    } while (0)
    #define SV_PROXY_MARK_KEPT_VIEW_EMPTY(p) (((SV_PROXY_STRUCT *)(p))->_kept_view_empty = 1)
    """
    void SV_PROXY_EMPTY(PyObject *, PyObject **) noexcept
    PyObject *SV_PROXY_KEPT_VIEW(PyObject *) noexcept
    bint SV_PROXY_KEPT_VIEW_EMPTY(PyObject *) noexcept
    void SV_PROXY_TAKE_KEPT_VIEW(PyObject *, PyObject **) noexcept
    void SV_PROXY_MARK_KEPT_VIEW_EMPTY(PyObject *) noexcept


cdef inline void _park_proxy(sv_thread_state *st, PyObject *proxy) noexcept:
    cdef PyObject *view = SV_PROXY_KEPT_VIEW(proxy)
    # The references the proxy and its view let go of: obj and _info, then the four
    # fields an emptied view lets go of or the view itself; released once the proxy
    # is listed.
    cdef PyObject *released[6]
    cdef int release_count = 2
    cdef int i
    # Emptied and listed before anything is released: releasing obj, _info or a
    # view's fields may run Python code (a __del__), which may launch and take
    # this spare, and must then find it consistent.  Fields are moved, not copied:
    # no reference is taken or dropped until the end.
    SV_PROXY_EMPTY(proxy, released)
    if view != <PyObject *>None and not SV_PROXY_KEPT_VIEW_EMPTY(proxy):
        if _is_unique(view) and not _holds_resources(<StridedMemoryView>view):
            # Held by the proxy alone: emptied as a new view starts, no Python code run.
            SV_VIEW_EMPTY(view, released + 2)
            # Before any release below may run Python code that finds the view
            # (gc.get_objects()): __init__ refuses it from here on.
            (<StridedMemoryView>view)._parked = True
            SV_PROXY_MARK_KEPT_VIEW_EMPTY(proxy)
            release_count = 6
        else:
            # Kept by someone else, or holding a capsule, a buffer or a shape block
            # (whose release may run Python code): the proxy lets it go.
            SV_PROXY_TAKE_KEPT_VIEW(proxy, released + 2)
            release_count = 3
    st.spare_proxies[st.spare_proxy_count] = proxy  # the launcher's reference, handed over
    st.spare_proxy_count += 1
    for i in range(release_count):
        Py_DECREF_ptr(released[i])


def _fill_parked_view(StridedMemoryView view, obj, stream_ptr=None):
    """Fill a launcher's parked view in place, as no public call can (__init__ refuses
    it), and say whether it did (a parked view still emptied only): what a fill from
    outside would leave, for the tests of the proxy's check of what its kept view holds."""
    if not (view._parked and _is_emptied(view)):
        return False
    view._memo_ndim1 = 0
    _view_from_any(view, obj, stream_ptr)
    return True


cdef int _check_viewable(object value, object name, _ProducerType info) except -1:
    """BufferError unless ``value`` offers one of the protocols (its type has no DLPack)."""
    if (
        _has_dlpack(value, info)
        or getattr(value, _CAI, None) is not None
        or getattr(value, _ARRAY_INTERFACE, None) is not None
        or PyObject_CheckBuffer(value)
    ):
        return 0
    way_out = (
        "pass the array itself, not a capsule of it: the view calls its __dlpack__ with "
        "your stream" if PyCapsule_CheckExact(value) else
        "pass an array of a library that exports one, or convert it first, e.g. "
        "numpy.asarray(obj) for host data"
    )
    raise BufferError(
        f"args_viewable_as_strided_memory: argument {name!r} ({type(value).__name__!r} "
        "object) supports none of DLPack, the CUDA Array Interface, the array "
        f"interface and the buffer protocol: {way_out}"
    )


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
    # record_stream=True: the launch's views hand their memory over to the streams
    # they were made on, with one event per stream when the launch ends.
    cdef bint _record_stream
    cdef dict __dict__

    def __cinit__(self):
        self._vectorcall = <vectorcallfunc><void *>_launch
        # What a launcher made without __init__ (type(launcher).__new__) holds:
        # nothing chosen, and no function (refused when called).
        self._name_at = ()
        self.by_keyword = ()

    def __init__(self, func, tuple by_position, tuple by_keyword, bint record_stream=False):
        # Once only: _launch reads _name_at by index for as long as it runs, and a
        # launch may run Python code (an argument's properties) that could call this.
        if self.func is not None:
            raise TypeError("args_viewable_as_strided_memory: this launcher is already initialised")
        name_at = [None] * (by_position[-1][0] + 1 if by_position else 0)
        for position, name in by_position:
            name_at[position] = name
        # Set together once all is computed: a failed __init__ leaves the launcher new.
        self._name_at = tuple(name_at)
        self.by_keyword = by_keyword
        self._record_stream = record_stream
        self.func = func

    @property
    def record_stream(self):
        """Whether the launch's views hand their memory over to their streams."""
        return self._record_stream

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

    A launcher decorated with record_stream=True goes to _launch_recording; any other
    runs _launch_with with no group, which the compiler folds away (it is inlined).
    """
    if self._record_stream:
        return _launch_recording(self, args, nargsf, kwnames)
    return _launch_with(self, args, nargsf, kwnames, None)


cdef object _launch_recording(
    _ViewableLauncher self, PyObject *const *args, size_t nargsf, PyObject *kwnames
):
    """A launch whose views hand their memory over to their streams: one group for the
    launch, joined by each view made on a stream, sealed when the function returns."""
    return _launch_with(self, args, nargsf, kwnames, _new_handover(None, True))


cdef inline object _launch_with(
    _ViewableLauncher self, PyObject *const *args, size_t nargsf, PyObject *kwnames,
    _Handover group,
):
    """``self.func(*args)``, the chosen arguments wrapped; ``group`` is the launch's
    hand-over (record_stream=True) or None.

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
    # Raw pointers, read without references: the arguments (the caller's array holds
    # them) and the names (the launcher's tuple).  The stack's references are then the
    # launcher's only ones to its proxies (see _drop_proxy).
    cdef PyObject *item
    cdef PyObject *name_at = <PyObject *>self._name_at
    if self.func is None:
        raise TypeError("args_viewable_as_strided_memory: this launcher was never initialised")
    cdef tuple spill = None  # more arguments than the stack holds: a tuple holds them
    # Bit i: stack[i] is a proxy made here (see _drop_proxy); the stack only.
    cdef uint32_t proxies = 0
    if total > _LAUNCH_STACK_ARGS:
        spill = PyTuple_New(total)
        items = PySequence_Fast_ITEMS(spill)
    try:
        for i in range(count):
            item = args[i]
            if i < chosen_end:
                name = SV_TUPLE_ITEM(name_at, i)
                if name != <PyObject *>None and item != <PyObject *>None:
                    items[i] = _viewable(item, name)
                    filled += 1
                    if group is not None:
                        _enter_group(<ViewableArgument>items[i], group)
                    if spill is None:  # (a shift past 31 would be undefined)
                        proxies |= <uint32_t>1 << i
                    continue
            Py_INCREF_ptr(item)
            items[i] = item
            filled += 1
        for i in range(keyword_count):
            item = args[count + i]
            name = SV_TUPLE_ITEM(kwnames, i)
            if item != <PyObject *>None and <object>name in self.by_keyword:
                items[count + i] = _viewable(item, name)
                filled += 1
                if group is not None:
                    _enter_group(<ViewableArgument>items[count + i], group)
                if spill is None:
                    proxies |= <uint32_t>1 << (count + i)
                continue
            Py_INCREF_ptr(item)
            items[count + i] = item
            filled += 1
        return PyObject_Vectorcall(self.func, items, count, kwnames)
    finally:
        if group is not None:
            _leave_group(items, filled, group)
        if spill is None:  # the spill tuple drops its own items (no spares from it)
            # Last argument first: the spares are a stack, so the next launch's first
            # argument takes this launch's first proxy, and so on (its kept view
            # then holds that argument's last layout: the torch reader's memo).
            for i in range(filled - 1, -1, -1):
                if proxies >> i & 1:
                    _drop_proxy(stack[i])
                else:
                    Py_DECREF_ptr(stack[i])
        if group is not None:
            # The launch's views released by now have joined the group: one event per
            # stream for all of them (a view kept past the launch hands over on its own).
            _seal_group(group)


cdef inline void _enter_group(ViewableArgument proxy, _Handover group) noexcept:
    """``proxy`` serves a recording launch: its views join ``group`` (its kept view
    too, filled again as in any launch)."""
    proxy._group = group


cdef inline void _kept_view_hands_over(PyObject *proxy, _Handover group) noexcept:
    """The launch is ending: ``proxy``'s kept view, made in it (its hand-over is
    ``group``, not sealed yet) and held by the proxy alone, hands its hold over to the
    group now, as its deallocator would (no Python code runs: the group takes it).  It
    then holds nothing, and _park_proxy empties it for the next launch instead of
    letting it go.  The launching thread's: it owns the proxy's fields."""
    # (``proxy``, a ViewableArgument, borrowed from the launch's items: its fields read
    # in place, no reference taken.)
    cdef PyObject *view = <PyObject *>(<ViewableArgument>proxy)._kept_view
    if (
        view != <PyObject *>None
        and not (<ViewableArgument>proxy)._kept_view_empty
        and (<StridedMemoryView>view)._handover == <void *>group
        and _is_unique(view)
    ):
        _hand_over_view(<StridedMemoryView>view)


cdef void _leave_group(PyObject **items, Py_ssize_t filled, _Handover group) noexcept:
    """The launch is over: its proxies' kept views hand over to ``group``
    (_kept_view_hands_over), and the proxies no longer add views to it (a proxy the
    function kept makes views of its own from now on).  The latter under the hand-over
    lock: _proxy_group reads ``_group`` on any thread the function handed a proxy to."""
    cdef Py_ssize_t i
    # One pass: each proxy's kept view hands over, then the proxy leaves (the one's
    # leaving does not touch another's view).
    for i in range(filled):
        if Py_TYPE_ptr(items[i]) == <void *>ViewableArgument and (
            (<ViewableArgument>items[i])._group is group
        ):
            if SV_FAST_PATHS:
                _kept_view_hands_over(items[i], group)
            SV_HANDOVER_LOCK()
            sv_proxy_leave_group(items[i])  # no Python code: no last reference dropped
            SV_HANDOVER_UNLOCK()


cdef void _seal_group(_Handover group) noexcept:
    """Close ``group`` to new views and hand what it holds to its streams."""
    cdef bint empty
    SV_HANDOVER_LOCK()
    group.sealed = True
    empty = not group.held and group.n_slots == 0 and not group.holds
    SV_HANDOVER_UNLOCK()
    if not empty:
        _seal_and_register(group)


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
