# Hand-overs: the other half of stream ordering.  A view told that its memory is
# in use on a stream (``view.record_stream(s)``, or a launcher decorated with
# ``record_stream=True``) does not let go of that memory when it is released:
# what it held (its reference to the exporting object, the DLPack capsule's
# tensor and deleter, the CAI dict, a held buffer, the root view of a derived
# one) moves to a hold (the _Handover's own fields for its first; its slots for
# the next _HOLD_SLOTS of a launch's group, a _Hold for each later one; every
# slot's references counted, moved under the lock like the rest), handed to the
# streams, and released only once an event recorded on each of them then has
# completed.
#
# What is here, and the invariant each piece rests on:
#
# - The rule: a hold is released only once the work of every stream it was handed to is
#   known complete (an event query or wait answered SUCCESS) or known gone (its context
#   was destroyed, or the driver let go of: the driver door's "gone" answers).  An answer
#   that says neither (NOT_PERMITTED, which every CUDA call answers inside a host
#   function; any unexpected error) keeps it pending, asked again later; where the host
#   may wait (the bound, release_pending(wait=True)) and the wait says neither, it stays
#   pending too.  Nothing is released, and nothing waited for, from inside a host
#   function: its records are tried again later.  Where a stream's work can only be
#   waited for by the host (a stream reported gone while its context lives) the host
#   waits, unless a capture beside it forbids that (the record is then tried again).
#   Every such decision is the driver door's (_driver_door.h), written once.
# - Where a stream is, is decided where it is recorded (record_stream, or a view
#   joining its launch's group): _stream_place asks the door (_door_place) for its
#   *place* ``(handle, context, thread)``: the context an ordinary handle belongs to,
#   or for 0, 1 and 2 the context current then (else the data device's primary
#   context), and for 2 the recording thread's serial.  The record at the hand-over is
#   made there, never in whatever the releasing thread has current: a per-thread stream
#   released by another thread is recorded on its context's legacy stream (which waits
#   for it), and once its thread has ended, through the event that thread recorded on
#   its per-thread stream as it ended (no host wait, so no capture elsewhere is broken).
# - ``_handover``, a C field at the end of the view (NULL: nothing recorded; the
#   hot path tests it once, in the deallocator's _holds_resources).  It holds a
#   counted reference to a _Handover: the view's own (record_stream) or its
#   launch's (a group, shared by the views of one launch).  A view with a
#   hand-over has been filled (every device-accessible view has a C layout, so
#   _dims is set): a launcher's kept view is therefore never refilled over one
#   (SV_VIEW_HOLDS_NOTHING), and _park_proxy lets such a view go instead of
#   emptying it (_holds_resources), so that it hands over in its deallocator;
#   but a recording launch's kept view, held by its proxy alone, hands over to the
#   group as the launch ends (_launcher.pxi's _kept_view_hands_over), and is then
#   emptied and filled again by the next launch.
# - The hand-over runs where the view lets go of its memory: its deallocator
#   (_release_resources, before the freelist takes the object) and, for a view
#   in a garbage cycle, the collector's tp_clear (_view_clear, installed in
#   front of Cython's, which would otherwise drop the exporting object first).
# - Events: one per place per hand-over, from the recording thread's pool for its
#   context (_record_entry, _driver_door.h's sv_door_place_record), kept in C
#   (``c_events``), queried, waited for and given back to the releasing thread's pool;
#   a launch's group records one per stream for all its views when the launch ends
#   (views released before then join its holds; one released after it hands over on its
#   own, on the group's streams).
# - Joining (_join_youngest): a hand-over on one place (an ordinary or legacy
#   stream handle) whose place is that of the youngest pending entry, recorded in
#   C on that place alone and joined by fewer than _JOIN_LIMIT others, records no
#   event of its own.  It claims that entry (taken off the registry's end under the
#   lock, as a check claims the oldest: an entry is in one place), records the
#   entry's event again on the stream (a record overwrites what the event
#   captured: later queries see the latest point only), after cuStreamIsCapturing
#   said NONE and cuStreamGetId said the handle still names the stream the entry
#   was recorded on (ids are never reused: a stream destroyed and another made at
#   its address fails this), is linked from the entry's ``joined`` (its own holds
#   with it: _release_holds releases a joined one's all) and puts the entry back at
#   the end.  The earlier holds then wait for a later point of the same stream,
#   never an earlier one, and for at most _JOIN_LIMIT records; no event is made,
#   no entry listed, nothing queried, so a hand-over costs the same with 1 or
#   4,096 entries pending.  Anything else (two places, a per-thread stream, no
#   cuStreamGetId, a capture, a failing call) records as above.
# - Spares (_keep_spare_handover, _new_handover; with the GIL only): a hand-over
#   that joined an entry, once released with it (its holds, joins and events gone)
#   and held by nothing else (a reference count of 1), is kept (up to 64) and
#   handed out again by _new_handover in the state a new one starts in.  A
#   free-threaded build makes each anew.
# - A group is sealed when its launch ends, and a seal is never undone: a view
#   joins it (_join_group) only while it is not sealed, decided under the lock,
#   so a sealed group's streams never change.  A view made on a stream after the
#   seal (by a thread the launch function handed its argument to, the launch
#   ending while the producer's code ran) hands over on its own, on its stream,
#   as record_stream makes it.  A view's group is the one its proxy had when
#   view() began, taken as a strong reference (_launcher.pxi's _proxy_group),
#   never read from the proxy again.
# - The registry (_pending_entries, a list of sealed _Handovers, oldest first
#   from index _pending_head: the slots before it hold None, left by claims, and
#   are cut off once they are half the list and at least 64, so that a claim, a
#   hand-back and an append cost the same with 1 or 4,096 entries pending)
#   and, while a launch runs, its group's ``place``, ``streams``, ``holds`` and ``sealed``
#   and its proxies' ``_group`` (once the function has them) are changed only
#   between SV_HANDOVER_LOCK and SV_HANDOVER_UNLOCK, with no
#   Python code run in between (list appends, pops and slice assignments that
#   drop no last reference).  With the GIL that alone makes each change atomic
#   and the lock is compiled out; a free-threaded build takes a PyMutex.  An
#   entry is in exactly one place: the registry, or the one thread that popped
#   it to query or release it (and puts it back if not done), so each hold is
#   released exactly once.  _release_hold runs the deleter with no exception
#   pending, outside the lock.
# - Completed holds are found without a thread of their own: the oldest entries
#   are queried (cuEventQuery) every _POLL_EVERY view creations while any is
#   pending (sv_pending_entries, read with one relaxed load in _new_view), at
#   every hand-over that lists an entry (it checks the older entries before it
#   joins them; one that joins the youngest checks nothing),
#   and all of them by release_pending().
# - The bound: at most _pending_limit entries.  A hand-over past it first
#   checks every entry, then waits on the host for the oldest ones
#   (cuEventSynchronize) until the count is back under the bound: back-pressure,
#   as the driver's own launch queue gives when a program runs that far ahead
#   of the device.  Holds handed to a stream that is capturing a CUDA graph
#   cannot be waited for (the graph runs later, maybe many times): they belong to
#   the graph (_graphs.pxi: a user object its graphs hold; listed meanwhile in
#   _graph_entries), outside the bound, with the events recorded on the entry's
#   other places.  The work the capturing stream had queued before its capture began
#   is waited for too: that place is recorded once the capture has ended (at a
#   check, or when the graphs give the hold back), so a stream that was capturing
#   when a view recorded on it was released must live until then (release_pending()
#   after cuStreamEndCapture records it).  The hold comes back when the graph and its
#   executable graphs are gone: to the registry, or released at once when nothing is
#   left to wait for.  Only when that cannot be arranged (no user object could be
#   made, a graph refused the object's reference: that graph may be replayed after
#   the others are gone) is such a hold kept until interpreter exit.
#   release_driver_resources() waits for the events of the holds graphs own and gives
#   them back, so that nothing of the driver state it lets go of is named when they
#   come back (after a primary-context reset, naming such an event crashes a real
#   driver).
# - The collector: a view with a hand-over does not report the objects that own its
#   memory (its exporting object unless a DLPack capsule's tensor owns it, its CUDA
#   Array Interface dict, its root view) to the collector (_view_traverse,
#   _view_lifecycle.pxi): while the hand-over is pending they count as referenced from
#   outside any garbage, so a garbage cycle that holds the view is collected without
#   finalizing or clearing them (the view's tp_clear hands its hold over first).  A
#   cycle that runs through such an owner itself (an owner that keeps its own recorded
#   view) is therefore not collected while the hand-over is pending: the program breaks
#   it by dropping that reference.
# - Exit: an atexit function (registered at the first hand-over, so after the
#   producers' libraries have registered theirs, and run before them) waits for
#   every pending entry and releases it; a hand-over after that waits at once; a
#   hold whose wait cannot say its work is done is released as the process ends.
#   A record that cannot be made now keeps the hold for later (deferred, below),
#   reported once when the driver's answer was unexpected; a record whose stream's
#   context is gone releases at once (the driver discarded the work).  A real driver
#   does not report a destroyed stream: naming one is undefined and crashes it
#   (driver 580: SIGSEGV), so the stream given to record_stream must outlive the
#   view's release (docs/concepts.md).
# - Deferred: a record that cannot be made now (the legacy stream beside a capturing
#   blocking stream, a stream whose capture was invalidated, a host function, an
#   unexpected answer, a place still capturing when its graphs gave the hold back)
#   neither releases nor waits: the entry goes to _deferred_entries (counted in
#   sv_pending_entries, so that the checks on view creation run, and in
#   sv_deferred_entries), and every check (_check_oldest, release_pending) first
#   tries those records again (_retry_deferred: claimed all at once, like
#   release_pending's, so each is tried by one thread); a record made later covers
#   more work, never less.  At exit they are released.
#
# Proven by tests/test_record_stream.py (host: arguments, host views),
# tests/test_gpu_record_stream.py (the simulated device: stale reads prevented and
# their control, deleters counted across threads and collections, events counted, the
# decorator's one event per launch), tests/test_gpu_hold_rule.py (the rule where the
# driver's answer says neither done nor gone, captures, resets, collected cycles, ended
# threads) and tests/test_gpu_driver_door.py (the records' calls; joins up to the
# limit, none across a stream id that does not read the same).

cdef extern from *:
    """
    #ifdef Py_GIL_DISABLED
    static PyMutex sv_handover_mutex = {0};
    #define SV_HANDOVER_LOCK() PyMutex_Lock(&sv_handover_mutex)
    #define SV_HANDOVER_UNLOCK() PyMutex_Unlock(&sv_handover_mutex)
    #define SV_PENDING_LOAD(x) _Py_atomic_load_ssize_relaxed(&(x))
    #define SV_PENDING_ADD(x, d) ((void)_Py_atomic_add_ssize(&(x), (d)))
    #define SV_COUNTDOWN(x) (_Py_atomic_add_int(&(x), -1) - 1)
    #define SV_COUNTDOWN_RESET(x, v) _Py_atomic_store_int_relaxed(&(x), (v))
    #else
    #define SV_HANDOVER_LOCK() ((void)0)
    #define SV_HANDOVER_UNLOCK() ((void)0)
    /* Atomic even with the GIL: a user object's destructor adds to sv_pending_entries
       from a driver thread (_graphs.pxi).  The load is a plain load. */
    #if defined(_MSC_VER)
    #include <intrin.h>
    #define SV_PENDING_LOAD(x) (*(volatile Py_ssize_t *)&(x))
    #define SV_PENDING_ADD(x, d) ((void)_InterlockedExchangeAdd64((volatile __int64 *)&(x), (d)))
    #else
    #define SV_PENDING_LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
    #define SV_PENDING_ADD(x, d) ((void)__atomic_fetch_add(&(x), (d), __ATOMIC_RELAXED))
    #endif
    #define SV_COUNTDOWN(x) (--(x))
    #define SV_COUNTDOWN_RESET(x, v) ((void)((x) = (v)))
    #endif
    /* Sealed hand-overs in the registry or being checked by a thread, and resources
       given back by destroyed graphs not yet drained (_graphs.pxi). */
    static Py_ssize_t sv_pending_entries = 0;
    /* Of those, hand-overs not yet recorded (_deferred_entries). */
    static Py_ssize_t sv_deferred_entries = 0;
    static int sv_poll_countdown = 0;
    /* exc set as the current exception, then reported as unraisable. */
    static void sv_write_unraisable(PyObject *exc, PyObject *where) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        PyErr_WriteUnraisable(where);
    }
    """
    void SV_HANDOVER_LOCK() noexcept nogil
    void SV_HANDOVER_UNLOCK() noexcept nogil
    Py_ssize_t sv_pending_entries
    Py_ssize_t sv_deferred_entries
    int sv_poll_countdown
    Py_ssize_t SV_PENDING_LOAD(Py_ssize_t) noexcept nogil
    void SV_PENDING_ADD(Py_ssize_t, Py_ssize_t) noexcept nogil
    int SV_COUNTDOWN(int) noexcept nogil
    void SV_COUNTDOWN_RESET(int, int) noexcept nogil
    void sv_write_unraisable(object, object) noexcept

cdef extern from *:
    """
    /* A list's last item taken out, its reference handed to the caller (the size cut,
       the storage kept for the next append, as list.pop() does). */
    static inline PyObject *sv_list_take_last(PyObject *list) {
        Py_ssize_t size = PyList_GET_SIZE(list);
        PyObject *item = PyList_GET_ITEM(list, size - 1);
        Py_SET_SIZE(list, size - 1);
        return item;
    }
    """
    PyObject *sv_list_take_last(PyObject *) noexcept nogil

cdef extern from *:
    """
    /* ``item`` put back at the end of ``list`` when the list's storage has room (as
       after sv_list_take_last: its size was cut, its storage kept), the caller's
       reference to it moved into the list (none taken); 1, else 0 with nothing done
       (the reference still the caller's, who appends).  No allocation, no Python code:
       a claim's hand-back needs no exception handling. */
    static inline int sv_list_put_back_moved(PyObject *list, PyObject *item) {
        Py_ssize_t size = PyList_GET_SIZE(list);
        if (size >= ((PyListObject *)list)->allocated)
            return 0;
        PyList_SET_ITEM(list, size, item);
        Py_SET_SIZE(list, size + 1);
        return 1;
    }
    /* What a normalized stream (None, -1, or an int handle >= 0) is, read from the int
       in C without a Python compare: SV_HANDLE_OPT_OUT (-1), SV_HANDLE_DEFAULT (0, 1,
       2), SV_HANDLE_ORDINARY (any other handle), SV_HANDLE_UNKNOWN (not an exact int:
       the caller compares in Python).  ``h`` is normalized (_normalize_stream: never
       below -1), so an int too large to be compact is an ordinary handle. */
    #define SV_HANDLE_UNKNOWN 0
    #define SV_HANDLE_OPT_OUT 1
    #define SV_HANDLE_DEFAULT 2
    #define SV_HANDLE_ORDINARY 3
    static inline int sv_handle_kind(PyObject *h) {
        if (!PyLong_CheckExact(h))
            return SV_HANDLE_UNKNOWN;
    #if PY_VERSION_HEX >= 0x030C0000
        if (PyUnstable_Long_IsCompact((PyLongObject *)h)) {
            Py_ssize_t v = PyUnstable_Long_CompactValue((PyLongObject *)h);
            if (v == -1)
                return SV_HANDLE_OPT_OUT;
            if (v >= 0 && v <= 2)
                return SV_HANDLE_DEFAULT;
            return v > 2 ? SV_HANDLE_ORDINARY : SV_HANDLE_UNKNOWN;
        }
        return SV_HANDLE_ORDINARY;
    #elif PY_VERSION_HEX >= 0x030B0000
        {
            Py_ssize_t size = Py_SIZE(h);
            if (size == 0)
                return SV_HANDLE_DEFAULT;
            if (size == 1)
                return ((PyLongObject *)h)->ob_digit[0] <= 2 ? SV_HANDLE_DEFAULT : SV_HANDLE_ORDINARY;
            if (size == -1 && ((PyLongObject *)h)->ob_digit[0] == 1)
                return SV_HANDLE_OPT_OUT;
            return size > 1 ? SV_HANDLE_ORDINARY : SV_HANDLE_UNKNOWN;
        }
    #else
        return SV_HANDLE_UNKNOWN;  /* (3.10: its int internals are not read here) */
    #endif
    }
    """
    int sv_list_put_back_moved(object, PyObject *) noexcept nogil
    int sv_handle_kind(object) noexcept
    int SV_HANDLE_UNKNOWN, SV_HANDLE_OPT_OUT, SV_HANDLE_DEFAULT, SV_HANDLE_ORDINARY

cdef extern from "Python.h":
    Py_ssize_t PyList_GET_SIZE(object) nogil
    PyObject *PyList_GET_ITEM(object, Py_ssize_t) nogil
    # (The same on a borrowed pointer: no reference taken for the call.)
    Py_ssize_t PyList_GET_SIZE_ptr "PyList_GET_SIZE"(PyObject *) nogil
    PyObject *PyList_GET_ITEM_ptr "PyList_GET_ITEM"(PyObject *, Py_ssize_t) nogil
    void PyList_SET_ITEM(object, Py_ssize_t, object) nogil
    int PyList_SetSlice(object, Py_ssize_t, Py_ssize_t, PyObject *) except -1

cdef enum:
    _POLL_EVERY = 32  # view creations between two checks while hand-overs are pending
    # The oldest entries a check may release (it stops at the first one still running, so
    # it queries one entry more than it releases; release_pending looks at all of them).
    _POLL_ENTRIES = 8

# The bound on pending hand-overs (entries: one per hand-over, one per launch).
cdef Py_ssize_t _pending_limit = 4096
cdef list _pending_entries = []
cdef Py_ssize_t _pending_head = 0  # the oldest pending entry's index (slots before: None)
# Hand-overs to a stream that was capturing a graph: kept until exit.
cdef list _captured_entries = []
# Hand-overs whose record cannot be made now (a capture elsewhere, _driver.LATER): tried
# again at the registry's later checks, oldest first.
cdef list _deferred_entries = []
cdef bint _exiting = False
cdef enum:
    # What _record_entry did with a hand-over.
    _ENTRY_RELEASED = 0  # its holds, at once (the record failed)
    _ENTRY_CAPTURED = 1  # kept until exit (a capturing stream)
    _ENTRY_DEFERRED = 2  # nothing: to be tried again later
    _ENTRY_RECORDED = 3  # its events recorded


cdef enum:
    # A group's holds after its first kept in the _Handover itself (``slots``), no _Hold
    # made: a launch of up to 1 + _HOLD_SLOTS arguments makes no hold object nor list.
    _HOLD_SLOTS = 3

# A hold in a _Handover's slot: a _Hold's fields, its three references counted.
ctypedef struct sv_hold_slot:
    PyObject *exporting_obj
    PyObject *interface
    PyObject *memory_owner
    void *managed
    bint managed_is_versioned
    Py_buffer *held_buffer


@cython.no_gc
@cython.auto_pickle(False)
cdef class _Hold:
    """What a released view held on its memory, kept until its streams are done.

    Released once, by _release_hold (or, should it be dropped unreleased, by its
    deallocator): the buffer, then the deleter, then the references.  A _Handover
    is one too: its first hold is kept in these fields (``held``), a group's next
    _HOLD_SLOTS in its ``slots``, a _Hold made only for the ones after; one that
    joined a pending entry is linked from that entry's ``joined``, its own holds with
    it (_join_youngest).
    """

    cdef object exporting_obj
    cdef object interface
    cdef object memory_owner
    cdef void *managed
    cdef bint managed_is_versioned
    cdef Py_buffer *held_buffer
    # (Released if dropped unreleased by _hold_dealloc, _view_lifecycle.pxi: no Cython
    # __dealloc__, whose exception save and restore every hold would pay.)


@cython.final
@cython.no_gc
@cython.auto_pickle(False)
cdef class _Handover(_Hold):
    """The streams a view (or a launch's views) used, and what was handed to them.

    ``streams``: the places (_driver_door.pxi's _door_place) the view was recorded on,
    each once: ``(handle, context, thread)``, resolved where ``record_stream`` was called (or
    the view joined its launch); a hand-over recorded on one place has it in ``place``
    instead (``streams`` None until a second place is recorded, then a list of both);
    the first hold handed over in its own (_Hold) fields, ``held`` set while they
    hold it; the next _HOLD_SLOTS of a group in ``slots`` (``n_slots`` of them);
    ``holds``: the _Holds handed over after those (None until one more, and once
    released); ``joined``: the latest hand-over that joined this pending entry
    (_join_youngest), each linking the one before it through ``joined_next``
    (``n_joined`` of them), their holds released with this entry's; ``c_events``: the
    events recorded on its places when it was sealed (_record_entry), one item per place.
    A group (a launch's) is shared by its views and sealed when the launch ends.
    ``graph_state``: 0, or owned by graphs (_GRAPH_OWNED, with _GRAPH_AWAITING while a
    place that was capturing waits for its capture to end, _GRAPH_CLAIMED while a thread
    records such places, _GRAPH_RETURNED once the graphs gave it back during that).
    """

    cdef list streams
    cdef tuple place  # the one place of a single view's hand-over (streams None)
    cdef list holds
    cdef bint held  # the first hold is in this object's _Hold fields
    cdef int n_slots
    cdef sv_hold_slot slots[_HOLD_SLOTS]
    cdef _Handover joined
    cdef _Handover joined_next
    cdef int n_joined
    # Its places' events (_driver_door.h's sv_door_hev), given back to the releasing
    # thread's pools at release.
    cdef sv_door_hev *c_events
    cdef bint group
    cdef bint sealed
    cdef bint reported  # a failed record was reported once (it is tried again, not again)
    cdef int graph_state
    # (Dropped unreleased, only if its release failed: its events discarded by
    # _handover_dealloc, _view_lifecycle.pxi.)


cdef extern from *:
    """
    /* Released hand-overs kept for reuse (_keep_spare_handover): with the GIL only,
       which makes each take and put back one step (no Python code runs in either). */
    #ifdef Py_GIL_DISABLED
    #define SV_HANDOVER_REUSE 0
    #else
    #define SV_HANDOVER_REUSE 1
    #endif
    #define SV_SPARE_HANDOVERS 64
    static PyObject *sv_spare_handovers[SV_SPARE_HANDOVERS];
    static int sv_spare_handover_count = 0;
    """
    bint SV_HANDOVER_REUSE
    int SV_SPARE_HANDOVERS
    PyObject **sv_spare_handovers
    int sv_spare_handover_count


cdef _Handover _new_handover(list streams, bint group, tuple place=None):
    """A hand-over on ``streams``, or on ``place`` alone (``streams`` None); a group
    starts with neither, and no ``holds`` list (made by its second hold).  A spare one
    (_keep_spare_handover: as a new one is) when there is one."""
    global sv_spare_handover_count
    cdef _Handover handover
    cdef PyObject *spare
    if SV_HANDOVER_REUSE and sv_spare_handover_count > 0:
        # The spares' reference becomes the caller's; its fields hold None, as a new
        # one's do (only those given are set: no count changes for a group's).
        sv_spare_handover_count -= 1
        spare = sv_spare_handovers[sv_spare_handover_count]
        (<_Handover>spare).group = group
        if streams is not None:
            (<_Handover>spare).streams = streams
        if place is not None:
            (<_Handover>spare).place = place
        return _take_handover(spare)
    handover = _Handover.__new__(_Handover)
    handover.streams = streams
    handover.place = place
    handover.group = group
    return handover


cdef tuple _stream_place(StridedMemoryView view, object handle):
    """Where ``handle`` names a stream now (_driver_door.pxi's _door_place): a default-stream
    handle in the calling thread's current context, or with none current the view's
    device's primary context (a CUDA Array Interface view's device found from its pointer);
    CUDAError if the driver is unusable or the handle names no stream."""
    return _door_place(handle, view._device_id if view._device_id >= 0 else -1, view._ptr)


cdef bint _same_place(tuple place, tuple other):
    """Whether two places have the same handle and keys (int compares: no Python code).
    One tuple is the same place (_stream_place hands out its last one again)."""
    cdef int i
    if place is other:
        return True
    for i in range(3):
        if not (<object>PyTuple_GET_ITEM(other, i) == <object>PyTuple_GET_ITEM(place, i)):
            return False
    return True


cdef bint _has_stream(list streams, object handle):
    """Whether ``streams`` holds a place of ``handle`` (int compares: no Python code)."""
    cdef object place
    for place in streams:
        if (
            PyTuple_GET_ITEM(place, 0) == <PyObject *>handle
            or <object>PyTuple_GET_ITEM(place, 0) == handle
        ):
            return True
    return False


cdef bint _has_place(list streams, tuple place):
    """Whether ``streams`` holds ``place``: the same handle and keys (int compares: no
    Python code runs)."""
    cdef object other
    cdef int i
    for other in streams:
        if other is place:
            return True
        for i in range(3):
            if not (<object>PyTuple_GET_ITEM(other, i) == <object>PyTuple_GET_ITEM(place, i)):
                break
        else:
            return True
    return False


cdef object _record_stream_handle(object stream):
    """``stream`` as a handle >= 0; TypeError or ValueError naming record_stream."""
    cdef int overflow = 0
    if (
        type(stream) is int and sizeof(void *) >= 8
        and _exact_int_value(stream, &overflow) >= 0 and not overflow
    ):
        return stream  # the common case (a handle below 2**63), checked in C
    if stream is None or isinstance(stream, bool):
        raise TypeError(
            "record_stream: stream must be an int or an object with __cuda_stream__ "
            f"(got {stream!r})"
        )
    if type(stream) is int:
        handle = stream
    elif hasattr(stream, "__cuda_stream__"):
        handle = _handle_from_cuda_stream(stream)
    else:
        try:
            handle = PyNumber_Index(stream)
        except TypeError:
            raise TypeError(
                "record_stream: stream must be an int or an object with __cuda_stream__ "
                f"(got {stream!r})"
            ) from None
    if handle == -1:
        raise ValueError(
            "record_stream: stream must be a stream handle >= 0 (got -1): -1 names no stream"
        )
    if handle < 0 or handle >= _UINTPTR_LIMIT:
        raise ValueError(f"record_stream: stream must be a stream handle >= 0 (got {handle!r})")
    return handle


cdef int _record_stream(StridedMemoryView view, object stream) except -1:
    """``view.record_stream(stream)``: the view's memory is in use on ``stream``."""
    handle = _record_stream_handle(stream)
    if not view.is_device_accessible:
        return 0  # host memory: nothing a stream runs reads it behind the host's back
    place = _stream_place(view, handle)  # where the handle names a stream now
    return _hand_to_stream(view, place)


cdef int _hand_to_stream(StridedMemoryView view, tuple place) except -1:
    """``view`` hands over on its own on ``place``'s stream: a hand-over of its own
    made, or the stream added to the one it has."""
    cdef _Handover fresh = _new_handover(None, False, place)  # made before the lock
    cdef _Handover record = None
    cdef list places
    cdef bint more = False
    SV_HANDOVER_LOCK()
    if view._handover == NULL:
        Py_INCREF(fresh)
        view._handover = <void *>fresh
    else:
        record = <_Handover>view._handover  # (a reference taken, none dropped)
        if record.streams is not None:
            if not _has_place(record.streams, place):
                record.streams.append(place)  # appends drop no reference: no Python code
        else:
            more = not _same_place(record.place, place)
    SV_HANDOVER_UNLOCK()
    if not more:
        return 0
    # A second place: its list made outside the lock (``record.place`` never changes),
    # installed unless another thread's came first.
    places = [record.place, place]
    SV_HANDOVER_LOCK()
    if record.streams is None:
        record.streams = places  # (it held None: nothing dropped)
    elif not _has_place(record.streams, place):
        record.streams.append(place)
    SV_HANDOVER_UNLOCK()
    return 0


cdef int _join_group(StridedMemoryView view, _Handover group, object stream) except -1:
    """A launch's view, made with ``stream`` (as _normalize_stream returned it: None,
    -1 or a handle), joins the launch's hand-over (a launcher decorated with
    record_stream=True); host memory, no stream and -1 do not.

    A group already sealed (the launch ended while the view was made: the producer's
    code ran, and another thread made the view) has recorded its events on the
    streams it had: the view hands over on its own instead, on its stream, as
    ``record_stream`` makes it.  Which of the two is decided under the lock (a seal
    is never undone), so no stream is added to a group after it is sealed."""
    cdef bint joined = False
    if stream is None:
        return 0
    cdef int kind = sv_handle_kind(stream)  # (an exact int's value read in C)
    if kind == SV_HANDLE_UNKNOWN:
        kind = (
            SV_HANDLE_OPT_OUT if stream == -1
            else SV_HANDLE_DEFAULT if stream in (0, 1, 2) else SV_HANDLE_ORDINARY
        )
    if kind == SV_HANDLE_OPT_OUT or not view.is_device_accessible:
        return 0
    cdef tuple place  # set unless ``known``
    cdef tuple first
    cdef list places  # set once ``have_places``
    cdef bint have_places = False
    cdef bint known = False
    cdef PyObject *group_handle
    # An ordinary handle already in the group is the same stream (no driver call); a
    # default-stream handle is resolved for each view (its device may differ).
    if kind == SV_HANDLE_ORDINARY:
        SV_HANDOVER_LOCK()
        if group.streams is not None:
            known = _has_stream(group.streams, stream)
        elif group.place is not None:
            # The same int object as the group's place's handle (a launch's views are
            # usually made with the caller's one stream object), else an int compare.
            group_handle = PyTuple_GET_ITEM(group.place, 0)
            known = group_handle == <PyObject *>stream or <object>group_handle == stream
        SV_HANDOVER_UNLOCK()
    if not known:
        place = _stream_place(view, stream)
    # The group's first place is kept in ``place``; a second one makes the list of both,
    # outside the lock (an allocation may run the collector), and tries again.
    while True:
        SV_HANDOVER_LOCK()
        if group.sealed:
            break
        if not known:
            if group.streams is not None:
                if not _has_place(group.streams, place):
                    group.streams.append(place)  # appends drop no reference: no Python code
            elif group.place is None:
                group.place = place  # (it held None: nothing dropped)
            elif not _same_place(group.place, place):
                if not have_places or PyList_GET_ITEM(places, 0) != <PyObject *>group.place:
                    first = group.place  # (a reference taken, none dropped)
                    SV_HANDOVER_UNLOCK()
                    places = [first, place]
                    have_places = True
                    continue
                group.streams = places  # (it held None: nothing dropped)
        joined = True
        if view._handover == NULL:
            Py_INCREF(group)
            view._handover = <void *>group
        break
    SV_HANDOVER_UNLOCK()
    if joined:
        return 0
    if known:
        place = _stream_place(view, stream)
    return _hand_to_stream(view, place)


cdef extern from *:
    """
    #define SV_HOLD_STRUCT struct __pyx_obj_11stridedview_5_view__Hold
    /* A view's hold moved into an empty _Hold (object fields None, C fields NULL):
       each object field is exchanged with the hold's None, so no count changes and
       nothing is dropped (no code runs); the view keeps none of its C fields. */
    #define SV_MOVE_HOLD(view, hold) do { \
        SV_VIEW_STRUCT *sv_mv = (SV_VIEW_STRUCT *)(view); \
        SV_HOLD_STRUCT *sv_mh = (SV_HOLD_STRUCT *)(hold); \
        PyObject *sv_none; \
        sv_none = sv_mh->exporting_obj; \
        sv_mh->exporting_obj = sv_mv->exporting_obj; \
        sv_mv->exporting_obj = sv_none; \
        sv_none = sv_mh->interface; \
        sv_mh->interface = sv_mv->_interface; \
        sv_mv->_interface = sv_none; \
        sv_none = sv_mh->memory_owner; \
        sv_mh->memory_owner = (PyObject *)sv_mv->_memory_owner; \
        sv_mv->_memory_owner = (SV_VIEW_STRUCT *)sv_none; \
        sv_mh->managed = sv_mv->_managed; \
        sv_mh->managed_is_versioned = sv_mv->_managed_is_versioned; \
        sv_mh->held_buffer = sv_mv->_held_buffer; \
        sv_mv->_managed = NULL; \
        sv_mv->_held_buffer = NULL; \
    } while (0)
    /* The same into a _Handover's slot (raw fields, no None to exchange): the view's
       references move to the slot, and the view's fields take None. */
    #define SV_MOVE_HOLD_TO_SLOT(view, slot) do { \
        SV_VIEW_STRUCT *sv_mv = (SV_VIEW_STRUCT *)(view); \
        (slot)->exporting_obj = sv_mv->exporting_obj; \
        sv_mv->exporting_obj = SV_NONE_NEW(); \
        (slot)->interface = sv_mv->_interface; \
        sv_mv->_interface = SV_NONE_NEW(); \
        (slot)->memory_owner = (PyObject *)sv_mv->_memory_owner; \
        sv_mv->_memory_owner = (SV_VIEW_STRUCT *)SV_NONE_NEW(); \
        (slot)->managed = sv_mv->_managed; \
        (slot)->managed_is_versioned = sv_mv->_managed_is_versioned; \
        (slot)->held_buffer = sv_mv->_held_buffer; \
        sv_mv->_managed = NULL; \
        sv_mv->_held_buffer = NULL; \
    } while (0)
    #define SV_HANDOVER_STRUCT struct __pyx_obj_11stridedview_5_view__Handover
    /* A _Handover's list of holds and its first joined hand-over, taken out (the
       field left None): a reference moved, none taken or dropped. */
    #define SV_TAKE_HOLDS(h) sv_take_field(&((SV_HANDOVER_STRUCT *)(h))->holds)
    #define SV_TAKE_JOINED(h) \
        sv_take_field((PyObject **)&((SV_HANDOVER_STRUCT *)(h))->joined)
    #define SV_TAKE_JOINED_NEXT(h) \
        sv_take_field((PyObject **)&((SV_HANDOVER_STRUCT *)(h))->joined_next)
    /* ``entry`` linked in front of the hand-overs that joined ``youngest``: the
       youngest's reference to the one before moves to ``entry.joined_next`` (which
       held None), and the youngest takes one to ``entry`` (only None is dropped). */
    #define sv_link_joined(youngest, entry) do { \
        SV_HANDOVER_STRUCT *sv_y = (SV_HANDOVER_STRUCT *)(youngest); \
        SV_HANDOVER_STRUCT *sv_e = (SV_HANDOVER_STRUCT *)(entry); \
        PyObject *sv_none = (PyObject *)sv_e->joined_next; \
        sv_e->joined_next = sv_y->joined; \
        Py_INCREF((PyObject *)sv_e); \
        sv_y->joined = sv_e; \
        Py_DECREF(sv_none); \
    } while (0)
    /* A released hold's three references dropped, its fields None first (so a
       finalizer the drops run sees the hold empty), in _release_hold's order. */
    #define SV_HOLD_DROP_REFERENCES(hold) do { \
        PyObject *sv_owner = sv_take_field(&((SV_HOLD_STRUCT *)(hold))->memory_owner); \
        PyObject *sv_interface = sv_take_field(&((SV_HOLD_STRUCT *)(hold))->interface); \
        PyObject *sv_exporter = sv_take_field(&((SV_HOLD_STRUCT *)(hold))->exporting_obj); \
        Py_DECREF(sv_owner); \
        Py_DECREF(sv_interface); \
        Py_DECREF(sv_exporter); \
    } while (0)
    """
    void SV_MOVE_HOLD(PyObject *view, PyObject *hold) noexcept
    void SV_MOVE_HOLD_TO_SLOT(PyObject *view, sv_hold_slot *slot) noexcept
    list _take_holds "SV_TAKE_HOLDS"(PyObject *entry)
    # A _Handover's first joined hand-over, and the next one, taken out as a raw
    # pointer (the reference moved to the caller, no count change).
    PyObject *_take_joined_ptr "SV_TAKE_JOINED"(PyObject *entry) noexcept
    PyObject *_take_joined_next_ptr "SV_TAKE_JOINED_NEXT"(PyObject *entry) noexcept
    void sv_link_joined(PyObject *youngest, PyObject *entry) noexcept
    void SV_HOLD_DROP_REFERENCES(PyObject *hold) noexcept
    # The view's reference to its hand-over, taken (as _take_reference, typed).
    _Handover _take_handover "sv_take_reference"(PyObject *)


cdef inline void _move_hold(StridedMemoryView view, _Hold hold) noexcept:
    """Move what ``view`` holds on its memory into ``hold``, which must be empty (its
    fields None and NULL, as a new or released _Hold's are): the references move, no
    count changes, nothing is dropped and no Python code runs; the view keeps none."""
    SV_MOVE_HOLD(<PyObject *>view, <PyObject *>hold)


cdef void _release_hold_memory(_Hold hold) noexcept:
    """Release the held buffer and run the deleter, once each (the caller has no
    exception pending: a deleter written in Python cannot run with one)."""
    cdef void *managed = hold.managed
    cdef Py_buffer *buffer = hold.held_buffer
    hold.managed = NULL
    hold.held_buffer = NULL
    _release_memory(managed, hold.managed_is_versioned, buffer)


cdef inline void _move_hold_to_slot(StridedMemoryView view, sv_hold_slot *slot) noexcept:
    """_move_hold into a _Handover's slot: the view's references move to the slot,
    None takes their place (nothing is dropped, no Python code runs)."""
    SV_MOVE_HOLD_TO_SLOT(<PyObject *>view, slot)


cdef Py_ssize_t _release_slots(_Handover entry) noexcept:
    """Release the holds in ``entry``'s slots (once: taken out first), as _release_hold
    does: buffer, deleter, then the references, the pending exception saved around them
    only when there is one; how many."""
    cdef int n = entry.n_slots
    cdef int i
    cdef sv_hold_slot taken[_HOLD_SLOTS]
    cdef PyObject *error_type = NULL
    cdef PyObject *error_value = NULL
    cdef PyObject *error_traceback = NULL
    cdef bint saved
    if n == 0:
        return 0
    memcpy(taken, entry.slots, sizeof(taken))  # (a constant size: copied inline)
    entry.n_slots = 0
    saved = PyErr_Occurred() != NULL
    if saved:
        PyErr_Fetch(&error_type, &error_value, &error_traceback)
    for i in range(n):
        _release_memory(taken[i].managed, taken[i].managed_is_versioned, taken[i].held_buffer)
        Py_DECREF_ptr(taken[i].memory_owner)
        Py_DECREF_ptr(taken[i].interface)
        Py_DECREF_ptr(taken[i].exporting_obj)
    if saved:
        PyErr_Restore(error_type, error_value, error_traceback)
    elif PyErr_Occurred() != NULL:
        PyErr_Clear()
    return n


cdef void _release_memory(void *managed, bint managed_is_versioned, Py_buffer *buffer) noexcept:
    """A hold's buffer released and its deleter run (no exception pending)."""
    if buffer != NULL:
        _release_held_buffer(buffer)
    if managed == NULL:
        return
    if managed_is_versioned:
        if (<DLManagedTensorVersioned *>managed).deleter != NULL:
            (<DLManagedTensorVersioned *>managed).deleter(<DLManagedTensorVersioned *>managed)
    elif (<DLManagedTensor *>managed).deleter != NULL:
        (<DLManagedTensor *>managed).deleter(<DLManagedTensor *>managed)


cdef void _release_hold(_Hold hold) noexcept:
    """Give the memory back: buffer, deleter, then the references (which may run a
    producer's finalizer), with any pending exception saved around them (none
    pending, the usual case: any left set by them is cleared, as the restore of
    none would)."""
    cdef PyObject *error_type
    cdef PyObject *error_value
    cdef PyObject *error_traceback
    if PyErr_Occurred() == NULL:
        _release_hold_memory(hold)
        SV_HOLD_DROP_REFERENCES(<PyObject *>hold)
        if PyErr_Occurred() != NULL:
            PyErr_Clear()
        return
    PyErr_Fetch(&error_type, &error_value, &error_traceback)
    _release_hold_memory(hold)
    SV_HOLD_DROP_REFERENCES(<PyObject *>hold)
    PyErr_Restore(error_type, error_value, error_traceback)


cdef Py_ssize_t _release_holds(_Handover entry) noexcept:
    """Release every hold of ``entry`` (once: ``held`` cleared and the list taken);
    how many."""
    cdef list holds = None
    cdef bint held = entry.held
    cdef _Hold hold
    cdef PyObject *chain = NULL
    cdef PyObject *following
    cdef Py_ssize_t count = 0
    # (Each field taken out only when it holds something: the fields left None.)
    if entry.holds is not None:
        holds = _take_holds(<PyObject *>entry)
    if entry.joined is not None:
        chain = _take_joined_ptr(<PyObject *>entry)  # its reference, moved here
        entry.n_joined = 0
    entry.held = False
    if held:
        _release_hold(entry)  # its first, in its own fields
        count = 1
    count += _release_slots(entry)
    if holds is not None:
        for hold in holds:
            _release_hold(hold)
            count += 1
    # The hand-overs that joined this one (_join_youngest): all of theirs; each then
    # unlinked (its reference to the next moved to ``following``) and kept as a spare
    # when nothing else holds it, else let go.
    while chain != NULL:
        count += _release_holds(<_Handover>chain)
        following = _take_joined_next_ptr(chain)
        if following == <PyObject *>None:
            Py_DECREF_ptr(following)  # (the field's None)
            following = NULL
        if not _keep_spare_handover(chain):
            Py_DECREF_ptr(chain)
        chain = following
    return count


cdef inline bint _keep_spare_handover(PyObject *handover) noexcept:
    """``handover``, released (its holds, joins and events gone), kept for _new_handover,
    the caller's reference moved to the spares, when nothing but the caller holds it
    (with the GIL, a reference count of 1) and there is room: put back in the state a
    new one starts in (_reset_spare).  False: not kept, the reference still the
    caller's."""
    global sv_spare_handover_count
    if (
        not SV_HANDOVER_REUSE or sv_spare_handover_count >= SV_SPARE_HANDOVERS
        or Py_REFCNT_ptr(handover) != 1 or not _reset_spare(<_Handover>handover)
    ):
        return False
    sv_spare_handovers[sv_spare_handover_count] = handover
    sv_spare_handover_count += 1
    return True


cdef inline bint _reset_spare(_Handover handover) noexcept:
    """Whether ``handover`` is released (its holds, joins and events gone); if so, put
    back in the state a new one starts in (its places dropped: tuples and a list of
    ints, no Python code runs)."""
    if (
        handover.held or handover.n_slots or handover.holds is not None
        or handover.joined is not None or handover.joined_next is not None
        or handover.c_events != NULL or handover.graph_state != 0
        or handover.managed != NULL or handover.held_buffer != NULL
    ):
        return False
    if handover.streams is not None:
        handover.streams = None
    if handover.place is not None:
        handover.place = None
    handover.n_joined = 0
    handover.sealed = False
    handover.reported = False
    handover.managed_is_versioned = False
    # (exporting_obj, interface and memory_owner are None since the release.)
    return True


cdef Py_ssize_t _hold_count(_Handover entry):
    """How many holds ``entry`` has not released (for tests)."""
    cdef Py_ssize_t count = entry.held + entry.n_slots
    cdef _Handover chain = entry.joined
    if entry.holds is not None:
        count += len(entry.holds)
    while chain is not None:
        count += _hold_count(chain)
        chain = chain.joined_next
    return count


cdef Py_ssize_t _release_entry(_Handover entry) noexcept:
    """Release a sealed entry taken out of the registry, and give its events back."""
    cdef Py_ssize_t count = _release_holds(entry)
    SV_PENDING_ADD(sv_pending_entries, -1)
    _give_back_events(entry)
    return count


cdef void _give_back_events(_Handover entry) noexcept:
    """``entry``'s events back to the releasing thread's pools (or destroyed)."""
    cdef sv_door_hev *h = entry.c_events
    if h != NULL:
        entry.c_events = NULL
        sv_door_hev_release(h)


cdef void _hand_over_view(StridedMemoryView view) noexcept:
    """``view`` lets go of its memory: its hold goes to the streams it was recorded on.

    Called by the deallocator and by tp_clear, with ``_handover`` set and no
    exception pending.  Nothing is raised: a failure is reported as unraisable.
    """
    cdef PyObject *record = <PyObject *>view._handover  # the view's reference, taken
    cdef bint joined = False
    view._handover = NULL
    if not (<_Handover>record).group:
        # A view's own hand-over (one hold: its view hands over once): kept in it.
        _move_hold(view, <_Handover>record)
        (<_Handover>record).held = True
        _seal_and_register(<_Handover>record)
        Py_DECREF_ptr(record)
        return
    # A launch's view: its hold joins the group's while the launch runs (the first in
    # the group's own fields, the next ones in its slots, any later one in a _Hold of
    # its own, _hand_over_late).
    # (A group is released only once sealed: unsealed, its fields are unreleased.)
    SV_HANDOVER_LOCK()
    if not (<_Handover>record).sealed:
        if not (<_Handover>record).held:
            _move_hold(view, <_Handover>record)  # (the fields are empty: only None is dropped)
            (<_Handover>record).held = True
            joined = True
        elif (<_Handover>record).n_slots < _HOLD_SLOTS:
            _move_hold_to_slot(
                view, &(<_Handover>record).slots[(<_Handover>record).n_slots]
            )
            (<_Handover>record).n_slots += 1
            joined = True
    SV_HANDOVER_UNLOCK()
    if joined:
        Py_DECREF_ptr(record)  # (unsealed: its launch holds the group, nothing runs)
        return
    _hand_over_late(view, _take_handover(record))


cdef void _hand_over_late(StridedMemoryView view, _Handover record) noexcept:
    """_hand_over_view's rest, for a launch's view whose group's own fields and slots
    are taken, or that is sealed: its hold in a _Hold of its own, listed by the group
    while the launch runs, else handed over on its own on the group's streams."""
    cdef _Handover entry
    cdef _Hold hold
    cdef bint joined = False
    cdef bint listed
    cdef list holds
    cdef list streams
    cdef tuple place
    SV_HANDOVER_LOCK()
    listed = record.holds is not None  # (unsealed, a list once made stays)
    SV_HANDOVER_UNLOCK()
    holds = None
    try:
        hold = _Hold.__new__(_Hold)
        if not listed:
            holds = [hold]  # the group's list, should it still have none
    except BaseException as exc:
        # No memory for a hold: the view keeps its hold, released with it now.
        sv_write_unraisable(exc, "stridedview: handing a view's memory over to its streams")
        return
    _move_hold(view, hold)
    try:
        SV_HANDOVER_LOCK()
        if not record.sealed:
            if record.holds is not None:
                record.holds.append(hold)  # appends drop no reference: no Python code
                joined = True
            elif holds is not None:
                record.holds = holds  # (it held None: nothing dropped)
                joined = True
        SV_HANDOVER_UNLOCK()
        if joined:
            return
        # Released after its launch ended: on its own, on the launch's streams (sealed:
        # they no longer change).
        SV_HANDOVER_LOCK()
        streams = record.streams
        place = record.place
        SV_HANDOVER_UNLOCK()
        if streams is not None:
            entry = _new_handover(list(streams), False)
        else:
            entry = _new_handover(None, False, place)
        entry.holds = [hold]
    except BaseException as exc:
        _release_hold(hold)
        sv_write_unraisable(exc, "stridedview: handing a view's memory over to its streams")
        return
    _seal_and_register(entry)


# What a record answered that is expected, and not reported: a capture beside or on the
# stream (tried again once it ends), a host function (NOT_PERMITTED), an ended thread's
# per-thread stream with no final event (NOT_READY: kept).
cdef tuple _QUIET_LATER = (
    SV_CUDA_ERROR_NOT_PERMITTED, 906, 901, 900, 600,  # IMPLICIT, INVALIDATED, UNSUPPORTED, NOT_READY
)


cdef int _record_entry(_Handover entry) noexcept:
    """Record an event on each of ``entry``'s places (_driver_door.h's sv_door_place_record);
    what was done with it (_ENTRY_*).

    Each place is recorded in the context where it was resolved: an ordinary stream by its
    handle; 0, 1 and 2 with their context current; a per-thread stream of another live
    thread on its context's legacy stream, of an ended thread through the event that thread
    recorded as it ended.  A place that cannot be recorded now (a capture beside or on it,
    NOT_PERMITTED inside a host function, an unexpected answer: reported once) leaves the
    whole entry to be tried again (_ENTRY_DEFERRED; at exit it is released); a place whose
    context is gone counts as done (its work was discarded).  A place capturing a graph makes
    the entry the graphs' (_hand_to_graphs), its other places' events recorded; an entry the
    graphs gave back records its capturing places once their capture has ended
    (_record_awaited).  With no driver to record on (the driver changed since the view was
    recorded), the holds are released at once, reported."""
    cdef list streams = entry.streams
    cdef tuple place = entry.place
    cdef Py_ssize_t n, i
    cdef sv_door_hev *h
    cdef sv_door_thread temporary
    cdef sv_door_thread *t
    cdef int outcome
    cdef sv_CUresult why = 0
    cdef const char *call = NULL
    cdef void *graph = NULL
    cdef unsigned long long capture_id = 0
    cdef uintptr_t handle = 0
    cdef dict graphs = None
    if entry.c_events != NULL:  # given back by its graphs: its capturing places are left
        return _ENTRY_RECORDED if _record_awaited(entry) else _ENTRY_DEFERRED
    n = len(streams) if streams is not None else (1 if place is not None else 0)
    try:
        if sv_door_state_load() != 1:
            _door_require()
    except BaseException as exc:
        _release_holds(entry)
        if not _exiting:
            sv_write_unraisable(
                exc, "stridedview: recording a hand-over's event (its memory was released at once)"
            )
        return _ENTRY_RELEASED
    h = sv_door_hev_new(<int>n)
    if h == NULL:
        _release_holds(entry)
        sv_write_unraisable(MemoryError(), "stridedview: recording a hand-over's event (its memory was released at once)")
        return _ENTRY_RELEASED
    t = sv_door_thread_get()
    if t == NULL:
        t = sv_door_thread_or_temporary(&temporary)
    outcome = SV_PLACE_RECORDED
    for i in range(n):
        if streams is not None:
            place = <tuple>PyList_GET_ITEM_ptr(<PyObject *>streams, i)
        handle = <object>PyTuple_GET_ITEM(place, 0)
        outcome = sv_door_place_record(
            t, handle, PyLong_AsVoidPtr(<object>PyTuple_GET_ITEM(place, 1)),
            <object>PyTuple_GET_ITEM(place, 2), &h.item[i], &graph, &capture_id, &why, &call,
        )
        h.n = <int>(i + 1)
        if outcome == SV_PLACE_LATER:
            break
        if outcome == SV_PLACE_CAPTURING:
            if graphs is None:
                graphs = {}
            graphs[capture_id] = PyLong_FromVoidPtr(graph)
    if outcome == SV_PLACE_LATER:
        sv_door_thread_done(t)
        sv_door_hev_release(h)  # the events recorded so far, back
        if _exiting:
            _release_holds(entry)
            return _ENTRY_RELEASED
        if why not in _QUIET_LATER and not entry.reported:
            entry.reported = True
            _report_record_failure(why, call)
        return _ENTRY_DEFERRED
    if n == 1 and handle > 2 and graphs is None:
        # One place: its stream's id kept, so that later hand-overs on it may record this
        # entry's event again (_join_youngest).
        h.stream_id = sv_door_stream_id(handle)
        h.stream = handle
    t.handed += 1
    t.recorded += n
    sv_door_thread_done(t)
    if graphs is None and _nothing_to_wait_for(h):
        # Every place's context is gone (its work was discarded): released at once.
        sv_door_hev_release(h)
        _release_holds(entry)
        return _ENTRY_RELEASED
    entry.c_events = h
    if graphs is not None:
        return _hand_to_graphs(entry, graphs)
    if not entry.sealed:  # (a group's was set under the lock, and is read under it)
        entry.sealed = True
    return _ENTRY_RECORDED


cdef bint _nothing_to_wait_for(sv_door_hev *h) noexcept:
    """Whether no item of ``h`` waits for anything (every place's work is done or gone)."""
    cdef int i
    for i in range(h.n):
        if h.item[i].kind != SV_ITEM_DONE:
            return False
    return True


cdef void _report_record_failure(sv_CUresult why, const char *call) noexcept:
    """A hand-over's record failed with an answer that says nothing of the stream's work:
    reported (once per hand-over) through sys.unraisablehook; the hold is kept and tried
    again."""
    if call == NULL:
        call = "cuEventRecord"
    try:
        _door_raise(why, call)
    except BaseException as exc:
        sv_write_unraisable(
            exc, "stridedview: recording a hand-over's event (the hold is kept and tried again)"
        )


cdef enum:
    # _Handover.graph_state bits (the graphs own the entry until they give it back).
    _GRAPH_OWNED = 1
    _GRAPH_AWAITING = 2   # a place that was capturing is still to be recorded
    _GRAPH_CLAIMED = 4    # a thread is recording such places now
    _GRAPH_RETURNED = 8   # the graphs gave it back while it was claimed


# Entries the graphs own (not yet given back), for the checks that record their places once
# their captures end (_poll_graph_entries) and for release_driver_resources
# (_settle_graph_entries); changed under SV_HANDOVER_LOCK.
cdef list _graph_entries = []


cdef int _hand_to_graphs(_Handover entry, dict graphs) noexcept:
    """``entry`` has places capturing graphs: the graphs take it (a user object each holds,
    _graphs.pxi drains it back when they are gone); its other places' events are in
    ``c_events``, its capturing places are recorded once their capture ends (the work
    queued on them before the capture); _ENTRY_CAPTURED.  When that cannot be arranged it is
    kept until exit (the host cannot wait for a graph).  A graph that refuses the user
    object's reference (GraphOwnedError) may be replayed after the graphs that took it are
    gone: the entry is kept until exit, listed by _keep_refused before the object can come
    back (the drain then leaves it)."""
    if not entry.sealed:
        entry.sealed = True
    try:
        _register_exit()
        SV_HANDOVER_LOCK()
        _graph_entries.append(entry)
        entry.graph_state = _GRAPH_OWNED | _GRAPH_AWAITING
        SV_HANDOVER_UNLOCK()
    except BaseException as exc:  # (no memory): kept until exit
        sv_write_unraisable(exc, "stridedview: handing a hold to a captured graph (kept until exit)")
        _keep_until_exit(entry)
        return _ENTRY_CAPTURED
    try:
        _give_to_graphs(list(graphs.values()), entry, lambda: _keep_refused(entry))
    except BaseException as exc:
        if type(exc).__name__ == "GraphOwnedError":  # listed by _keep_refused already
            sv_write_unraisable(exc, "stridedview: handing a hold to a captured graph (kept until exit)")
            return _ENTRY_CAPTURED
        _forget_graph_entry(entry)
        sv_write_unraisable(exc, "stridedview: handing a hold to a captured graph (kept until exit)")
        _keep_until_exit(entry)
    return _ENTRY_CAPTURED


cdef void _forget_graph_entry(_Handover entry) noexcept:
    """``entry`` no longer the graphs' (given back, or never taken)."""
    cdef Py_ssize_t i
    SV_HANDOVER_LOCK()
    for i in range(len(_graph_entries)):
        if _graph_entries[i] is entry:
            del _graph_entries[i]  # (the list keeps another reference: nothing runs)
            break
    entry.graph_state = 0
    SV_HANDOVER_UNLOCK()


cdef void _keep_until_exit(_Handover entry) noexcept:
    """``entry`` kept until interpreter exit (its graphs' lives cannot be known)."""
    try:
        SV_HANDOVER_LOCK()
        _captured_entries.append(entry)
        SV_HANDOVER_UNLOCK()
    except BaseException as exc:  # (no memory): nothing can keep it; the graph may run
        sv_write_unraisable(exc, "stridedview: keeping a captured hold until exit")


cdef object _keep_refused(_Handover entry):
    """A graph refused ``entry``'s user object (_give_to_graphs calls this before the object
    can be given back): kept until exit.  Never raises."""
    _forget_graph_entry(entry)
    _keep_until_exit(entry)


cdef bint _kept_until_exit(_Handover entry) noexcept:
    """Whether ``entry`` is kept until exit (one a graph refused, _keep_refused)."""
    cdef bint kept = False
    SV_HANDOVER_LOCK()
    for other in _captured_entries:
        if other is entry:
            kept = True
            break
    SV_HANDOVER_UNLOCK()
    return kept


cdef bint _record_awaited(_Handover entry) noexcept:
    """Record ``entry``'s places that were capturing when it was handed over, where their
    capture has ended: the work queued on them before the capture is then waited for too (a
    record made later covers more work, never less).  Whether none is left to record."""
    cdef sv_door_hev *h = entry.c_events
    cdef sv_door_item *item
    cdef sv_door_thread temporary
    cdef sv_door_thread *t
    cdef int i, outcome, left = 0
    cdef sv_CUresult why = 0
    cdef const char *call = NULL
    cdef void *graph = NULL
    cdef unsigned long long capture_id = 0
    if h == NULL:
        return True
    if sv_door_state_load() != 1 or h.generation != sv_door_generation_load():
        return True  # (release_driver_resources settled them: _settle_graph_entries)
    t = sv_door_thread_or_temporary(&temporary)
    for i in range(h.n):
        item = &h.item[i]
        if item.kind != SV_ITEM_AWAIT:
            continue
        outcome = sv_door_place_record(
            t, item.handle, item.context, item.serial, item, &graph, &capture_id, &why, &call
        )
        if outcome != SV_PLACE_RECORDED:
            item.kind = SV_ITEM_AWAIT  # capturing again, or not recordable now: later
            left += 1
    sv_door_thread_done(t)
    return left == 0


cdef Py_ssize_t _poll_graph_entries() noexcept:
    """Record the capturing places of the entries graphs own whose capture has ended (each
    claimed by one thread at a time); an entry its graphs gave back meanwhile is then
    listed.  How many holds were released."""
    cdef list claimed = []
    cdef _Handover entry
    cdef bint done, returned
    cdef Py_ssize_t released = 0
    SV_HANDOVER_LOCK()
    try:
        for entry in _graph_entries:
            if entry.graph_state & _GRAPH_AWAITING and not entry.graph_state & _GRAPH_CLAIMED:
                entry.graph_state |= _GRAPH_CLAIMED
                claimed.append(entry)
    except BaseException:
        pass  # (no memory: the entries claimed so far are processed)
    SV_HANDOVER_UNLOCK()
    for entry in claimed:
        done = _record_awaited(entry)
        SV_HANDOVER_LOCK()
        returned = (entry.graph_state & _GRAPH_RETURNED) != 0
        entry.graph_state &= ~(_GRAPH_CLAIMED | _GRAPH_RETURNED)
        if done:
            entry.graph_state &= ~_GRAPH_AWAITING
        SV_HANDOVER_UNLOCK()
        if returned:
            released += _graphs_gave_back(entry)
    return released


cdef Py_ssize_t _hold_given_back(_Handover entry) noexcept:
    """The graphs that owned ``entry`` are gone (_graphs.pxi's drain): its capturing places
    recorded now where they can be, and it is listed (or released when nothing is left to
    wait for), or deferred until they can; one a thread is recording is left to it
    (_poll_graph_entries).  How many holds were released."""
    if _kept_until_exit(entry):  # a graph refused it: its life is not known
        return 0
    SV_HANDOVER_LOCK()
    if entry.graph_state & _GRAPH_CLAIMED:
        entry.graph_state |= _GRAPH_RETURNED
        SV_HANDOVER_UNLOCK()
        return 0
    SV_HANDOVER_UNLOCK()
    return _graphs_gave_back(entry)


cdef Py_ssize_t _graphs_gave_back(_Handover entry) noexcept:
    """_hold_given_back's rest, by whichever thread holds the entry now."""
    cdef sv_door_hev *h
    cdef int i
    _forget_graph_entry(entry)
    if not _record_awaited(entry):
        _defer(entry)  # recorded once its places' captures end (_retry_deferred)
        return 0
    h = entry.c_events
    if h != NULL and not _nothing_to_wait_for(h):
        return _register_recorded(entry)
    # Nothing to wait for (settled by release_driver_resources, or every context gone):
    # released now, or listed where no release may run (a host function), for the next check.
    _give_back_events(entry)
    if not sv_door_may_release():
        return _register_recorded(entry)
    return _release_holds(entry)


cdef int _settle_graph_entries() except -1:
    """release_driver_resources(): the entries graphs own wait for their places' streams now
    (recorded where their capture has ended; a place still capturing cannot be waited for,
    and the reset that follows discards its work) and give their events back, so that when
    their graphs give them back, nothing of the driver state let go of is named again."""
    cdef list entries
    cdef _Handover entry
    SV_HANDOVER_LOCK()
    entries = list(_graph_entries)
    SV_HANDOVER_UNLOCK()
    for entry in entries:
        if entry.c_events == NULL:
            continue
        _record_awaited(entry)
        sv_door_hev_wait(entry.c_events)
        _give_back_events(entry)
        SV_HANDOVER_LOCK()
        entry.graph_state &= ~_GRAPH_AWAITING
        SV_HANDOVER_UNLOCK()
    return 0


cdef bint _entry_done(_Handover entry) except -1:
    """Whether every event of ``entry`` has completed (never blocks): an answer that says
    neither done nor gone (NOT_PERMITTED in a host function, any unexpected error) is not
    done (_driver_door.h)."""
    if entry.c_events == NULL:
        return sv_door_may_release()  # (nothing to wait for; not inside a host function)
    return sv_door_hev_done(entry.c_events)


cdef bint _entry_wait(_Handover entry) except -1:
    """Block until every event of ``entry`` has completed; whether it has (a wait answered
    with something that says neither done nor gone is not)."""
    if entry.c_events == NULL:
        return sv_door_may_release()
    return sv_door_hev_wait(entry.c_events)


cdef extern from *:
    """
    /* Whether the exit function was registered: set once, by the one thread whose
       compare-and-swap wins (threads racing to their first hand-over agree). */
    static int sv_exit_registered = 0;
    #if defined(_MSC_VER)
    static int sv_exit_claim(void) {
        return _InterlockedCompareExchange((volatile long *)&sv_exit_registered, 1, 0) == 0;
    }
    static int sv_exit_claimed(void) { return *(volatile int *)&sv_exit_registered; }
    #else
    static int sv_exit_claim(void) {
        int expected = 0;
        return __atomic_compare_exchange_n(&sv_exit_registered, &expected, 1, 0,
                                           __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
    }
    static int sv_exit_claimed(void) { return __atomic_load_n(&sv_exit_registered, __ATOMIC_ACQUIRE); }
    #endif
    """
    bint sv_exit_claim() noexcept nogil
    bint sv_exit_claimed() noexcept nogil


cdef int _register_exit() except -1:
    """Register the exit function and use_api's drain (once, at the first hand-over)."""
    if sv_exit_claimed() or not sv_exit_claim():
        return 0
    import atexit

    atexit.register(_release_at_exit)
    _driver_module()._drain_hook = _drain_pending
    return 0


cdef void _defer(_Handover entry) noexcept:
    """List ``entry``, not recorded, as deferred (counted as pending, so that the
    checks on view creation run and try it again)."""
    try:
        _register_exit()
        SV_HANDOVER_LOCK()
        _deferred_entries.append(entry)
        SV_PENDING_ADD(sv_deferred_entries, 1)
        SV_PENDING_ADD(sv_pending_entries, 1)
        SV_HANDOVER_UNLOCK()
    except BaseException as exc:
        # No memory to keep it: nothing else can (the host cannot wait during a capture).
        _release_holds(entry)
        sv_write_unraisable(exc, "stridedview: keeping a hand-over for later (its memory was released)")


cdef enum:
    # The most later hand-overs on its place an entry takes (_join_youngest, linked from
    # its ``joined``): its first hold then waits for at most this many records of its
    # stream.
    _JOIN_LIMIT = 32


cdef inline PyObject *_one_place(_Handover entry) noexcept:
    """``entry``'s place when it has exactly one, else NULL; borrowed (``entry`` holds it:
    no count changes, no Python code runs)."""
    cdef PyObject *streams = <PyObject *>entry.streams
    if streams == <PyObject *>None:
        return NULL if entry.place is None else <PyObject *>entry.place
    if PyList_GET_SIZE_ptr(streams) == 1:
        return PyList_GET_ITEM_ptr(streams, 0)
    return NULL


cdef PyObject *_claim_youngest(PyObject *place) noexcept:
    """The youngest pending entry, taken out of the registry (as _claim_oldest takes the
    oldest), if a hand-over on ``place`` may join it: recorded on ``place`` alone,
    its stream's id known, joined by fewer than _JOIN_LIMIT; else NULL.  The registry's
    reference to it becomes the caller's (handed back by _put_back_youngest).  No Python
    code runs: int compares, no count changes."""
    cdef PyObject *entry = NULL
    cdef PyObject *youngest
    cdef PyObject *entries
    cdef PyObject *other
    cdef Py_ssize_t size
    SV_HANDOVER_LOCK()
    entries = <PyObject *>_pending_entries
    size = PyList_GET_SIZE_ptr(entries)
    if size > _pending_head:  # (the slots before the head hold None)
        youngest = PyList_GET_ITEM_ptr(entries, size - 1)
        if (
            (<_Handover>youngest).c_events != NULL and (<_Handover>youngest).c_events.n == 1
            and (<_Handover>youngest).c_events.stream_id != 0
            and (<_Handover>youngest).n_joined < _JOIN_LIMIT
        ):
            other = _one_place(<_Handover>youngest)
            if other != NULL and _same_place(<tuple>other, <tuple>place):
                entry = sv_list_take_last(entries)  # (the list's reference, moved)
    SV_HANDOVER_UNLOCK()
    return entry


cdef void _put_back_youngest(PyObject *entry) noexcept:
    """An entry _claim_youngest took back at the registry's end (after any listed since:
    a check then reaches it later, never too early), the caller's reference moved back
    to the registry.  With no room to list it (no memory), its events are waited for and
    it is released now."""
    cdef bint listed = False
    SV_HANDOVER_LOCK()
    listed = sv_list_put_back_moved(_pending_entries, entry)  # the slot it left: no allocation
    SV_HANDOVER_UNLOCK()
    if listed:
        return
    # (The list was cut meanwhile): appended, a reference of the list's own.
    listed = _append_youngest(<_Handover>entry)
    if not listed:
        PyErr_Clear()
        sv_door_hev_wait((<_Handover>entry).c_events)
        _release_entry(<_Handover>entry)
    Py_DECREF_ptr(entry)  # the claim's (an entry released, or listed: nothing runs)


cdef bint _append_youngest(_Handover entry) noexcept:
    """_put_back_youngest's append, when the registry's storage has no room left; False
    (no exception left set) when no memory."""
    cdef bint listed = False
    SV_HANDOVER_LOCK()
    try:
        _pending_entries.append(entry)
        listed = True
    except BaseException:
        pass
    SV_HANDOVER_UNLOCK()
    return listed


cdef bint _join_youngest(_Handover entry) noexcept:
    """Hand ``entry``'s holds (not recorded: one place) to the youngest pending entry
    instead, when that one was recorded on the same place alone and is still the same
    stream (its id): its event is recorded again on
    that stream, so its earlier holds wait for a later point of the same stream, never
    an earlier one (what a record covers only grows), and no event is made and no
    entry listed.  True when joined (``entry``, with its holds, is then linked from the
    youngest's ``joined``); False leaves ``entry`` as it was (the youngest put back
    unchanged, or recorded again, which only delays its holds)."""
    cdef PyObject *place
    cdef PyObject *youngest
    cdef sv_door_thread *t
    cdef sv_door_hev *events
    cdef bint joined = False
    if sv_door_state_load() != 1 or not (entry.held or entry.n_slots or entry.holds):
        return False
    place = _one_place(entry)
    if place == NULL:
        return False
    t = sv_door_thread_get()
    if t == NULL:
        return False
    youngest = _claim_youngest(place)
    if youngest == NULL:
        return False
    # (On the youngest's handle, kept in C when it was recorded: _claim_youngest found
    # ``place`` the same, its handle an equal int.)
    events = (<_Handover>youngest).c_events
    if sv_door_hev_record_again(t, events, events.stream) == SV_CUDA_SUCCESS:
        # ``entry`` joins, its own holds with it (_release_holds goes in): linked in
        # front of the ones before it (no Python code runs: only None is dropped).
        sv_link_joined(youngest, <PyObject *>entry)
        (<_Handover>youngest).n_joined += 1
        joined = True
    _put_back_youngest(youngest)
    return joined


cdef void _seal_and_register(_Handover entry) noexcept:
    """Record an event on each of ``entry``'s streams and list it as pending (or as
    deferred when it cannot be recorded now, _record_entry); after the exit function
    has run, the events are waited for at once.  One on the place of the youngest
    pending entry joins that one instead (_join_youngest)."""
    if not _exiting and _join_youngest(entry):
        return
    cdef int outcome = _record_entry(entry)
    if outcome == _ENTRY_DEFERRED:
        _defer(entry)
        return
    if outcome != _ENTRY_RECORDED:
        return
    if _exiting:
        _entry_wait(entry)
        SV_PENDING_ADD(sv_pending_entries, 1)
        _release_entry(entry)
        return
    _list_recorded(entry)


cdef Py_ssize_t _register_recorded(_Handover entry) noexcept:
    """List an entry whose events were recorded (one a graph gave back), without checking
    the registry (its caller is checking it); after the exit function, wait and release
    at once.  How many holds were released."""
    if _exiting:
        _entry_wait(entry)
        SV_PENDING_ADD(sv_pending_entries, 1)
        return _release_entry(entry)
    try:
        SV_HANDOVER_LOCK()
        _pending_entries.append(entry)
        SV_PENDING_ADD(sv_pending_entries, 1)
        SV_HANDOVER_UNLOCK()
    except BaseException as exc:
        _entry_wait(entry)  # no room to list it: its streams are waited for now
        SV_PENDING_ADD(sv_pending_entries, 1)
        sv_write_unraisable(exc, "stridedview: listing a hand-over (its streams were waited for)")
        return _release_entry(entry)
    return 0


cdef void _list_recorded(_Handover entry) noexcept:
    """_seal_and_register's listing of a recorded entry: the oldest checked first, the
    bound kept."""
    cdef bint checked = SV_PENDING_LOAD(sv_pending_entries) < _pending_limit
    if checked:
        # The oldest entries are checked before this one joins them (just recorded, it is
        # rarely done yet: the next check asks).
        _check_oldest(_POLL_ENTRIES)
    try:
        _register_exit()
        SV_HANDOVER_LOCK()
        _pending_entries.append(entry)
        SV_PENDING_ADD(sv_pending_entries, 1)
        SV_HANDOVER_UNLOCK()
    except BaseException as exc:
        _entry_wait(entry)  # no room to list it: its streams are waited for now
        SV_PENDING_ADD(sv_pending_entries, 1)
        _release_entry(entry)
        sv_write_unraisable(exc, "stridedview: listing a hand-over (its streams were waited for)")
        return
    if SV_PENDING_LOAD(sv_pending_entries) > _pending_limit:
        _make_room()
    elif not checked:
        _check_oldest(_POLL_ENTRIES)


cdef Py_ssize_t _retry_deferred(bint wait) except -1:
    """Try again to record each deferred entry (a record made later covers more work,
    never less): recorded, it joins the registry (or, with ``wait``, is waited for and
    released); still not recordable, it stays deferred.  How many holds were released."""
    global _deferred_entries
    cdef list fresh = []
    cdef list claimed
    cdef list kept = []
    cdef list recorded = []
    cdef Py_ssize_t released = 0, done = 0
    cdef _Handover entry
    cdef int outcome
    SV_HANDOVER_LOCK()
    claimed = _deferred_entries
    _deferred_entries = fresh
    SV_PENDING_ADD(sv_deferred_entries, -len(claimed))
    SV_HANDOVER_UNLOCK()
    if not claimed:
        return 0
    try:
        for entry in claimed:
            outcome = _record_entry(entry)
            done += 1
            if outcome == _ENTRY_DEFERRED:
                kept.append(entry)
            elif outcome != _ENTRY_RECORDED:
                SV_PENDING_ADD(sv_pending_entries, -1)  # released, or kept as captured
            elif wait and _entry_wait(entry):
                released += _release_entry(entry)
            else:
                recorded.append(entry)  # (still counted as pending)
    finally:
        kept.extend(claimed[done:])
        SV_HANDOVER_LOCK()
        if kept:
            _deferred_entries[0:0] = kept
            SV_PENDING_ADD(sv_deferred_entries, len(kept))
        if recorded:
            _pending_entries.extend(recorded)
        SV_HANDOVER_UNLOCK()
    return released


cdef Py_ssize_t _release_deferred() noexcept:
    """Release the holds of entries still deferred (exit and use_api only)."""
    global _deferred_entries
    cdef list fresh = []
    cdef list claimed
    cdef Py_ssize_t released = 0
    cdef _Handover entry
    SV_HANDOVER_LOCK()
    claimed = _deferred_entries
    _deferred_entries = fresh
    SV_PENDING_ADD(sv_deferred_entries, -len(claimed))
    SV_PENDING_ADD(sv_pending_entries, -len(claimed))
    SV_HANDOVER_UNLOCK()
    for entry in claimed:
        released += _release_holds(entry)
        _give_back_events(entry)
    return released


cdef _Handover _claim_oldest():
    """The oldest pending entry, taken out of the registry (None: none).

    Its slot is set to None and the head moves past it; once the claimed slots are
    half the list, and at least 64, they are cut off (amortised: a claim costs the
    same whatever the count).  No Python code runs: the entry is referenced here before its slot lets
    go, and the slots cut off hold None.
    """
    global _pending_head
    cdef _Handover entry = None
    cdef list entries
    cdef Py_ssize_t size
    cdef PyObject *item
    SV_HANDOVER_LOCK()
    entries = _pending_entries
    size = PyList_GET_SIZE(entries)
    if _pending_head < size:
        item = PyList_GET_ITEM(entries, _pending_head)
        entry = <_Handover>item  # a reference of its own
        Py_INCREF(None)
        PyList_SET_ITEM(entries, _pending_head, None)
        Py_DECREF_ptr(item)  # the slot's reference (``entry`` holds one: nothing runs)
        _pending_head += 1
        # (Not when fewer than 64 are claimed, even all of them: a list emptied and
        # grown again at each hand-over would free and allocate its items each time.)
        if _pending_head >= 64 and 2 * _pending_head >= size:
            PyList_SetSlice(entries, 0, _pending_head, NULL)  # (only Nones: no Python code runs)
            _pending_head = 0
    SV_HANDOVER_UNLOCK()
    return entry


cdef void _unclaim(_Handover entry) noexcept:
    """Put an entry still pending back in front of the registry (into the slot its
    claim left, when no cut came in between: the usual case, no copy)."""
    global _pending_head
    SV_HANDOVER_LOCK()
    try:
        if _pending_head > 0:
            _pending_head -= 1
            _pending_entries[_pending_head] = entry  # the slot held None
        else:
            _pending_entries.insert(0, entry)
    except BaseException:
        pass  # (insert only fails for want of memory; the entry is then waited for below)
    SV_HANDOVER_UNLOCK()


cdef Py_ssize_t _check_oldest(int limit) noexcept:
    """Release the oldest entries whose events have completed, stopping at the first
    still running or after ``limit``; how many holds were released."""
    cdef Py_ssize_t released = 0
    cdef _Handover entry
    cdef int i
    cdef bint done
    if sv_graph_any():
        released = _drain_graphs()
    if _graph_entries:
        released += _poll_graph_entries()
    if SV_PENDING_LOAD(sv_deferred_entries) > 0:
        try:
            released += _retry_deferred(False)
        except BaseException as exc:  # (no memory, a KeyboardInterrupt): they stay deferred
            sv_write_unraisable(exc, "stridedview: checking pending hand-overs")
    for i in range(limit):
        entry = _claim_oldest()
        if entry is None:
            break
        try:
            done = _entry_done(entry)
        except BaseException as exc:  # (a KeyboardInterrupt): the entry stays pending
            _unclaim(entry)
            sv_write_unraisable(exc, "stridedview: checking pending hand-overs")
            break
        if not done:
            _unclaim(entry)
            break
        released += _release_entry(entry)
    return released


cdef void _poll_on_creation() noexcept:
    """Called by _new_view while hand-overs are pending: every _POLL_EVERY calls, the
    oldest entries are checked; what destroyed graphs gave back, at once."""
    if sv_graph_any():
        _drain_graphs()
    if SV_COUNTDOWN(sv_poll_countdown) > 0:
        return
    SV_COUNTDOWN_RESET(sv_poll_countdown, _POLL_EVERY)  # (other threads count down atomically)
    _check_oldest(_POLL_ENTRIES)


cdef void _make_room() noexcept:
    """Past the bound: release every entry done, then wait for the oldest ones (a wait that
    cannot say the work is done, as in a host function, stops it)."""
    cdef _Handover entry
    cdef bint done
    try:
        _release_pending(False)
    except BaseException:
        pass
    while SV_PENDING_LOAD(sv_pending_entries) > _pending_limit:
        entry = _claim_oldest()
        if entry is None:
            break  # the rest are being checked by other threads
        try:
            done = _entry_wait(entry)
        except BaseException as exc:  # (a KeyboardInterrupt): the entry stays pending
            _unclaim(entry)
            sv_write_unraisable(exc, "stridedview: waiting for the oldest hand-over")
            break
        if not done:
            _unclaim(entry)
            break
        _release_entry(entry)


cdef Py_ssize_t _release_pending(bint wait) except -1:
    """release_pending()'s work: every entry in the registry checked (or waited for)."""
    global _pending_entries, _pending_head
    cdef list fresh = []
    cdef list claimed
    cdef list kept = []
    cdef Py_ssize_t released = 0, done = 0, head
    cdef _Handover entry
    if sv_graph_any():
        released = _drain_graphs()
    if _graph_entries:
        released += _poll_graph_entries()
    if SV_PENDING_LOAD(sv_deferred_entries) > 0:
        released += _retry_deferred(wait)
    SV_HANDOVER_LOCK()
    claimed = _pending_entries
    head = _pending_head
    _pending_entries = fresh
    _pending_head = 0
    SV_HANDOVER_UNLOCK()
    if head:
        del claimed[:head]  # the claimed slots (None)
    if not claimed:
        return released
    try:
        for entry in claimed:
            if not (_entry_wait(entry) if wait else _entry_done(entry)):
                kept.append(entry)
                done += 1
                continue
            released += _release_entry(entry)
            done += 1
    finally:
        kept.extend(claimed[done:])
        if kept:
            SV_HANDOVER_LOCK()
            _pending_entries[_pending_head:_pending_head] = kept
            SV_HANDOVER_UNLOCK()
    return released


cdef Py_ssize_t _release_remaining() noexcept:
    """Release every entry still in the registry, done or not (interpreter exit, after its
    waits; use_api, whose driver goes): how many holds."""
    global _pending_entries, _pending_head
    cdef list fresh = []
    cdef list claimed
    cdef Py_ssize_t released = 0
    cdef _Handover entry
    SV_HANDOVER_LOCK()
    claimed = _pending_entries[_pending_head:]
    _pending_entries = fresh
    _pending_head = 0
    SV_HANDOVER_UNLOCK()
    for entry in claimed:
        released += _release_entry(entry)
    return released


cdef Py_ssize_t _release_captured() except -1:
    """Release the holds handed to capturing streams (exit and use_api only)."""
    global _captured_entries
    cdef list fresh = []
    cdef list claimed
    cdef Py_ssize_t released = 0
    SV_HANDOVER_LOCK()
    claimed = _captured_entries
    _captured_entries = fresh
    SV_HANDOVER_UNLOCK()
    for entry in claimed:
        released += _release_holds(<_Handover>entry)
        _give_back_events(<_Handover>entry)
    return released


def _drain_pending():
    """Release every pending hand-over, waiting for its streams (``use_api`` calls it
    before the driver changes: the events are the old driver's); the holds graphs own wait
    for their streams' events now and give them back (they come back with their graphs,
    with nothing of this driver state to name)."""
    released = _release_pending(True)
    _settle_graph_entries()
    return released + _release_remaining() + _release_captured() + _release_deferred()


def _release_at_exit():
    """At interpreter exit: wait for every pending hand-over's streams and release it
    (those given back by graphs already destroyed included; graphs still alive keep
    theirs); from now on a hand-over waits at once.  A hold whose wait cannot say the work
    is done is released after the retries, as the process ends."""
    global _exiting
    _exiting = True
    for _ in range(8):  # releases may hand more over (a root view's own record)
        if (
            _release_pending(True) + _release_captured() + _release_deferred() == 0
            and _pending_head == len(_pending_entries)
            and not _deferred_entries
        ):
            break
    _release_remaining()


def release_pending(wait=False):
    """Release every hold whose streams are done; how many holds were released.

    A hold is what a view kept its memory alive with (its exporting object, a
    DLPack capsule's deleter, a CUDA Array Interface dict), handed to the streams
    it was recorded on (``StridedMemoryView.record_stream``, or a launcher
    decorated with ``record_stream=True``) when the view let go of it.  Holds are
    also released as their streams finish, checked on later view creations and
    hand-overs, so calling this is never needed for correctness; it releases now.
    ``wait=True`` first waits on the host for every pending hold's streams
    (``cuEventSynchronize``), so that none is left, but for those a CUDA graph owns:
    a hold handed to a stream that was capturing a graph comes back only once that
    graph and every executable graph made from it are destroyed (then released here,
    or at a later view creation, once its other streams are done), and is never
    waited for.  A hold whose stream cannot be recorded on yet (the legacy stream
    while a blocking stream of its context captures, a stream whose capture was
    invalidated) is tried again, recorded and waited for if it now can be, else kept.
    """
    if type(wait) is not bool:
        raise TypeError(f"release_pending: wait must be a bool (got {wait!r})")
    return _release_pending(wait)


def _pending_holds():
    """``(entries, holds, captured holds)`` pending now (deferred ones included), for
    tests."""
    SV_HANDOVER_LOCK()
    entries = _pending_entries[_pending_head:] + list(_deferred_entries)
    captured = list(_captured_entries)
    SV_HANDOVER_UNLOCK()
    return (
        len(entries),
        sum([_hold_count(<_Handover>entry) for entry in entries]),
        sum([_hold_count(<_Handover>entry) for entry in captured]),
    )


def _stream_handle_kind(stream):
    """What _join_group reads a normalized stream as, in C (sv_handle_kind): "opt-out"
    (-1), "default" (0, 1, 2), "ordinary" (another handle), "unknown" (not an exact
    int: compared in Python), for tests."""
    return ("unknown", "opt-out", "default", "ordinary")[sv_handle_kind(stream)]


def _spare_handovers():
    """How many released hand-overs are kept for reuse now (_keep_spare_handover), for
    tests."""
    return sv_spare_handover_count


def _deferred_holds():
    """The holds of hand-overs not yet recorded (a capture elsewhere), for tests."""
    SV_HANDOVER_LOCK()
    deferred = list(_deferred_entries)
    SV_HANDOVER_UNLOCK()
    return sum([_hold_count(<_Handover>entry) for entry in deferred])


def _set_pending_limit(Py_ssize_t limit):
    """Set the bound on pending hand-overs (at least 1); the previous one.  For tests."""
    global _pending_limit
    if limit < 1:
        raise ValueError(f"_set_pending_limit: limit must be >= 1 (got {limit})")
    previous = _pending_limit
    _pending_limit = limit
    return previous
