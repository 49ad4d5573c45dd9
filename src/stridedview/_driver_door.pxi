# The driver door: every ordering and hand-over decision made with the CUDA driver, in C
# (_driver_door.h, whose opening comment states the invariants), and this file its
# Cython face: what the rest of the core calls.
#
# - _order_after(producer, consumer, device, ptr): ``consumer`` waits for the work
#   ``producer`` has queued so far (an event recorded on the producer's stream, waited on by
#   the consumer's; never the host).  A producer's default stream (0, 1, 2) is that of the
#   data device's primary context (``device``, or the device owning ``ptr``), with neither
#   that of the calling thread's current context; a consumer's default stream is the current
#   context's, with none current the data device's primary context's.  A consumer capturing
#   a graph waits with CU_EVENT_WAIT_EXTERNAL on an event the graph owns (a user object,
#   _graphs.pxi); a producer in the same capture is joined with a plain wait; one capturing
#   another graph is refused before anything could invalidate the consumer's capture.
# - _door_place(handle, view): where a stream handle names a stream now, as a hand-over's
#   *place* ``(handle, context, thread)``: an ordinary handle's own context; for 0, 1 and 2
#   the calling thread's current context, else the view's device's primary context; for 2
#   the recording thread's serial (_handover.pxi records on it, wherever the view is
#   released).
# - The records of a hand-over's places, and when they count as done: _handover.pxi's
#   _record_entry, _entry_done and _entry_wait, through sv_door_place_record and
#   sv_door_hev_check.
#
# The door is decided at the first need, after _driver.py has loaded cuda-bindings and
# called cuInit (the door never loads a driver): on when the driver in use is cuda-bindings'
# own and every entry point resolves; else every ordering and hand-over raises CUDAError
# naming what is missing (a fake driver installed with _driver.use_api serves the host-only
# tests, which never order streams).  ``use_api`` (and release_driver_resources) resets it.
#
# Tests: tests/test_gpu_driver_door.py (the calls each ordering makes, events per thread and
# context, thread ends, resets), tests/test_gpu_hold_rule.py (answers that say neither done
# nor gone), the gpu suite on the simulated device.

cdef extern from "_driver_door.h":
    int SV_DOOR_AVAILABLE
    int SV_DOOR_NOT_HANDLED
    int SV_DOOR_CAPTURING
    int SV_DOOR_CONSUMER_INVALIDATED
    int SV_CUDA_SUCCESS
    int SV_CAPTURE_ACTIVE
    int SV_CAPTURE_INVALIDATED
    int SV_CU_EVENT_WAIT_EXTERNAL
    int SV_PLACE_RECORDED
    int SV_PLACE_CAPTURING
    int SV_PLACE_LATER
    int SV_ITEM_DONE
    int SV_ITEM_AWAIT
    int SV_CUDA_ERROR_NOT_PERMITTED
    int SV_CUDA_ERROR_INVALID_CONTEXT
    ctypedef int sv_CUresult

    ctypedef struct sv_door_item:
        int kind
        void *context
        void *event
        uintptr_t handle
        unsigned long long serial
    ctypedef struct sv_door_hev:
        int n
        unsigned generation
        unsigned long long stream_id
        uintptr_t stream
        sv_door_item item[1]
    ctypedef struct sv_door_thread:
        unsigned long long serial
        int temporary
        unsigned long long handed
        unsigned long long recorded

    const char *sv_door_missing
    int sv_door_state_load() nogil
    unsigned sv_door_generation_load() nogil
    int sv_door_open(int zero_is_per_thread) nogil
    void sv_door_close() nogil
    void sv_door_reset() nogil
    const char *sv_door_error_name(sv_CUresult code) nogil
    uintptr_t sv_door_handle(uintptr_t h) nogil

    sv_door_thread *sv_door_thread_get()
    sv_door_thread *sv_door_thread_or_temporary(sv_door_thread *temporary)
    void sv_door_thread_done(sv_door_thread *t)

    sv_CUresult sv_door_order(sv_door_thread *t, uintptr_t producer, uintptr_t consumer,
                              int ordinal, uintptr_t ptr, const char **call)
    sv_CUresult sv_door_order_default(sv_door_thread *t, uintptr_t producer, uintptr_t consumer,
                                      void *context, const char **call)
    sv_CUresult sv_door_pointer_device(uintptr_t ptr, int *ordinal, const char **call) nogil
    sv_CUresult sv_door_primary_context(int ordinal, void **context, const char **call) nogil
    sv_CUresult sv_door_default_context(int ordinal, uintptr_t ptr, void **context, const char **call) nogil
    sv_CUresult sv_door_context_of(sv_door_thread *t, uintptr_t stream, void **context,
                                   int *looked_up, const char **call)
    sv_CUresult sv_door_consumer_context(uintptr_t consumer, int ordinal, uintptr_t ptr,
                                         void **context, const char **call)
    sv_CUresult sv_door_capture_info(uintptr_t stream, void *context, int *status,
                                     unsigned long long *capture_id, void **graph, const char **call)
    sv_CUresult sv_door_record_on_stream(sv_door_thread *t, uintptr_t stream, void **context,
                                         void **event, const char **call)
    sv_CUresult sv_door_record_in_current(sv_door_thread *t, void *context, uintptr_t stream,
                                          void **event, const char **call)
    sv_CUresult sv_door_enter(void *context, int *pushed, const char **call)
    sv_CUresult sv_door_leave(int pushed, sv_CUresult r, const char **call)
    sv_CUresult sv_door_wait(uintptr_t consumer, void *event, void *context, unsigned flags,
                             const char **call)
    sv_CUresult sv_door_new_recorded_event(void *context, uintptr_t stream, void **event,
                                           const char **call)
    void sv_door_destroy_event(void *context, void *event)
    void sv_door_destroy_graph_event(void *context, void *event, unsigned generation)
    sv_CUresult sv_door_user_object(void **object, void *data, void (*destroy)(void *) noexcept,
                                    unsigned count, const char **call)
    sv_CUresult sv_door_graph_take(void *graph, void *object, const char **call)
    void sv_door_user_object_release(void *object, unsigned count)

    sv_door_hev *sv_door_hev_new(int n) nogil
    void sv_door_hev_release(sv_door_hev *h)
    void sv_door_hev_discard(sv_door_hev *h) nogil
    int sv_door_hev_done(sv_door_hev *h) nogil
    int sv_door_hev_wait(sv_door_hev *h) nogil
    int sv_door_may_release() nogil
    int sv_door_place_record(sv_door_thread *t, uintptr_t handle, void *context,
                             unsigned long long serial, sv_door_item *item, void **graph,
                             unsigned long long *capture_id, sv_CUresult *why, const char **call)
    void sv_door_note_ptds(sv_door_thread *t, void *context)
    unsigned long long sv_door_stream_id(uintptr_t stream)
    sv_CUresult sv_door_hev_record_again(sv_door_thread *t, sv_door_hev *h, uintptr_t stream) nogil

    unsigned long long sv_door_thread_ordered() nogil
    int sv_door_thread_events() nogil
    long long sv_door_live_events() nogil
    unsigned long long sv_door_thread_handed() nogil
    unsigned long long sv_door_thread_recorded() nogil
    long long sv_door_thread_pooled() nogil
    long long sv_door_handover_events() nogil
    long long sv_door_trim_pools() nogil
    int sv_door_final_entries() nogil
    unsigned long long sv_door_thread_serial() nogil
    int sv_door_thread_ending() noexcept


cdef extern from "Python.h":
    object PyLong_FromVoidPtr(void *)
    void *PyLong_AsVoidPtr(object) except? NULL


cdef extern from *:
    """
    /* An exact int's value as a handle (``*out``); 0, no exception left set, when it is
       negative or past 2**64.  A small int's digits read in C (no exception state saved
       around a conversion that may fail), else PyLong_AsSize_t. */
    static inline int sv_handle_value(PyObject *o, uintptr_t *out) {
        size_t v;
    #if PY_VERSION_HEX >= 0x030C0000
        if (PyUnstable_Long_IsCompact((PyLongObject *)o)) {
            Py_ssize_t c = PyUnstable_Long_CompactValue((PyLongObject *)o);
            if (c < 0)
                return 0;
            *out = (uintptr_t)c;
            return 1;
        }
    #elif PY_VERSION_HEX >= 0x030B0000
        {
            Py_ssize_t size = Py_SIZE(o);
            const digit *d = ((PyLongObject *)o)->ob_digit;
            if (size >= 0 && size <= 2) {
                v = size == 0 ? 0 : size == 1 ? (size_t)d[0]
                    : (size_t)d[0] | (size_t)d[1] << PyLong_SHIFT;
                *out = (uintptr_t)v;
                return 1;
            }
        }
    #endif
        v = PyLong_AsSize_t(o);
        if (v == (size_t)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        *out = (uintptr_t)v;
        return 1;
    }
    """
    int sv_handle_value(object, uintptr_t *) noexcept


cdef int _door_decide() except -1:
    """Decide the door (state 0): _driver.py loads the driver and calls cuInit first (the same
    CUDAError, with its stream_ptr=-1 hint, when there is none), then the door opens on the
    library cuda-bindings loaded, or stays off for any other driver."""
    import os
    import sys

    driver = _driver_module()
    driver._door_reset_hook = _driver_door_reset
    driver._door_trim_hook = _door_trim_pools
    if driver._api is None or not driver._initialized:
        driver._driver()
    if driver._api is not sys.modules.get("cuda.bindings.driver"):
        sv_door_close()
        return 0
    sv_door_open(
        os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")
    )
    return 0


cdef int _door_require() except -1:
    """The door on (decided now if it was not); CUDAError, with the stream_ptr=-1 hint, when
    it cannot be."""
    cdef int state = sv_door_state_load()
    if state == 1:
        return 0
    if state == 0:
        _door_decide()
        if sv_door_state_load() == 1:
            return 0
    from stridedview._errors import CUDAError

    driver = _driver_module()
    missing = sv_door_missing.decode() if sv_door_missing != NULL else "its entry points"
    if missing == "cuda.bindings.driver":
        raise CUDAError(
            "stream ordering and hand-overs go through the CUDA driver cuda-bindings loaded, and "
            f"the driver in use (installed with stridedview._driver.use_api) is not it: "
            f"{driver.NO_DRIVER_HINT}",
            "CUDA_ERROR_NO_DRIVER",
        )
    raise CUDAError(
        f"the CUDA driver cannot order streams here ({missing} not found): {driver.NO_DRIVER_HINT}",
        "CUDA_ERROR_NO_DRIVER",
    )


cdef int _door_raise(sv_CUresult code, const char *call) except -1:
    """Raise the CUDAError for ``call`` failing with ``code``: "<call> failed: <its name>"."""
    from stridedview._errors import CUDAError

    cdef const char *found = sv_door_error_name(code)
    name = found.decode() if found != NULL else f"CUresult {code}"
    raise CUDAError(f"{call.decode()} failed: {name}", name)


cdef uintptr_t _door_handle(object handle) except? 0:
    """A normalized stream handle (an int >= 0) as the door takes it: ValueError for anything
    that is not one (the callers pass handles their parsers checked)."""
    cdef uintptr_t value = 0
    if type(handle) is not int or not sv_handle_value(handle, &value):
        raise ValueError(f"stream: not a stream handle (got {handle!r})")
    return value


cdef int _order_after(object producer, object consumer, object device=None, object ptr=0) except -1:
    """Make work later enqueued on ``consumer`` wait for ``producer``'s work so far; the host is
    never blocked.  ``device``: the ordinal of the device holding the data, or None; then
    ``ptr``, when not 0, a pointer into the data whose device the driver is asked for, only if
    a default-stream handle needs it.  CUDAError if a driver call fails.

    0, or 1 when ``consumer`` is capturing a graph that waits for ``producer`` through an
    external event wait node: then only the graph's replays wait, never ``consumer`` itself
    outside its capture, and a view made for it is ready on ``producer``'s stream (the
    callers set its ready_stream so)."""
    cdef uintptr_t p = 0, c = 0
    cdef sv_door_thread *t
    cdef const char *call = NULL
    cdef sv_CUresult r
    if (
        type(producer) is not int or not sv_handle_value(producer, &p)
        or type(consumer) is not int or not sv_handle_value(consumer, &c)
    ):
        _door_handle(producer)
        _door_handle(consumer)  # (raises for what is not a handle)
    if p == c and p > 2:
        return 0  # one stream: nothing to order, no driver loaded
    if sv_door_state_load() != 1:
        _door_require()
    p = sv_door_handle(p)
    c = sv_door_handle(c)
    if p > 2 and c > 2 and (t := sv_door_thread_get()) != NULL:
        # The common case (two ordinary streams, this thread's struct): no data device needed.
        r = sv_door_order(t, p, c, -1, 0, &call)
        if r == SV_CUDA_SUCCESS:
            return 0
        if r != SV_DOOR_CAPTURING and r != SV_DOOR_CONSUMER_INVALIDATED:
            _door_raise(r, call)
    return _order_after_general(p, c, device, ptr)


cdef int _order_after_general(uintptr_t p, uintptr_t c, object device, object ptr) except -1:
    """_order_after's every other case: default streams, a capturing consumer, code run as
    its thread ends (a temporary per-thread struct)."""
    cdef uintptr_t address = 0
    cdef int ordinal = -1
    cdef const char *call = NULL
    cdef sv_CUresult r
    cdef void *context = NULL
    cdef sv_door_thread temporary
    cdef sv_door_thread *t
    if device is not None:
        ordinal = device
    elif type(ptr) is int and ptr != 0:
        address = _door_handle(ptr)
    t = sv_door_thread_or_temporary(&temporary)
    try:
        if p > 2:
            r = sv_door_order(t, p, c, ordinal, address, &call)
        else:
            r = SV_CUDA_SUCCESS
            if ordinal < 0 and address != 0:
                r = sv_door_pointer_device(address, &ordinal, &call)
            if r == SV_CUDA_SUCCESS and ordinal >= 0:
                r = sv_door_primary_context(ordinal, &context, &call)
            elif r == SV_CUDA_SUCCESS:
                # No data device: both default streams are the current context's.
                if c <= 2 and (p == 2) == (c == 2):
                    return 0
                r = _current_context(&context, &call)
            if r == SV_CUDA_SUCCESS:
                r = sv_door_order_default(t, p, c, context, &call)
        if r == SV_DOOR_CAPTURING:
            return _order_into_capture(t, p, context if p <= 2 else NULL, c, ordinal, address)
        elif r == SV_DOOR_CONSUMER_INVALIDATED:
            from stridedview._errors import CUDAError

            raise CUDAError(
                "cuStreamIsCapturing: the consumer stream's capture was invalidated, and no wait "
                "can be added to it until the capture is ended",
                "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
            )
        elif r != SV_CUDA_SUCCESS:
            _door_raise(r, call)
    finally:
        sv_door_thread_done(t)
    return 0


cdef sv_CUresult _current_context(void **context, const char **call) noexcept:
    """The calling thread's current context; INVALID_CONTEXT (as cuEventCreate answers there)
    when it has none."""
    cdef sv_CUresult r = sv_door_default_context(-1, 0, context, call)
    return r


cdef int _order_into_capture(
    sv_door_thread *t, uintptr_t producer, void *producer_context, uintptr_t consumer,
    int ordinal, uintptr_t ptr,
) except -1:
    """Order ``consumer``, capturing a graph, after ``producer`` (``producer_context``: the
    context a default producer stream is recorded in, NULL for an ordinary one, its own).

    A producer in the same capture is joined with an event of its own, recorded, waited on and
    destroyed (the wait is an edge of the graph).  A producer that is not capturing gets a new
    event recorded on it, which the graph owns (a user object; destroyed once the graph and
    every executable graph made from it are gone), and the consumer waits on it with
    CU_EVENT_WAIT_EXTERNAL: the graph's external event wait node, which each replay makes wait
    for the event as recorded now (nothing records it again).  A producer capturing another
    graph cannot be waited on (CUDA_ERROR_STREAM_CAPTURE_ISOLATION), refused before any call
    that would invalidate the consumer's capture.  1 when the consumer waits through the
    graph's external wait node, else 0."""
    from stridedview._errors import CUDAError

    cdef const char *call = NULL
    cdef sv_CUresult r
    cdef void *wait_context = NULL
    cdef void *graph = NULL
    cdef void *producer_graph = NULL
    cdef void *event = NULL
    cdef void *context = NULL
    cdef unsigned long long capture_id = 0, producer_id = 0
    cdef int status = 0, producer_status = 0, looked_up = 0, pushed = 0
    r = sv_door_consumer_context(consumer, ordinal, ptr, &wait_context, &call)
    if r == SV_CUDA_SUCCESS:
        r = sv_door_capture_info(consumer, wait_context, &status, &capture_id, &graph, &call)
    if r != SV_CUDA_SUCCESS:
        _door_raise(r, call)
    if status != SV_CAPTURE_ACTIVE:  # its capture ended meanwhile: an ordinary wait then
        if producer_context == NULL:
            r = sv_door_record_on_stream(t, producer, &context, &event, &call)
        else:
            r = sv_door_enter(producer_context, &pushed, &call)
            if r == SV_CUDA_SUCCESS:
                r = sv_door_leave(
                    pushed, sv_door_record_in_current(t, producer_context, producer, &event, &call), &call
                )
        if r == SV_CUDA_SUCCESS:
            r = sv_door_wait(consumer, event, wait_context, 0, &call)
        if r != SV_CUDA_SUCCESS:
            _door_raise(r, call)
        return 0
    if producer_context == NULL:
        r = sv_door_context_of(t, producer, &producer_context, &looked_up, &call)
        if r != SV_CUDA_SUCCESS:
            _door_raise(r, call)
    r = sv_door_capture_info(
        producer, producer_context, &producer_status, &producer_id, &producer_graph, &call
    )
    if r != SV_CUDA_SUCCESS:
        _door_raise(r, call)
    if producer_status == SV_CAPTURE_ACTIVE and producer_id != capture_id:
        raise CUDAError(
            "cuStreamWaitEvent: the producer stream is capturing another graph, which the "
            "consumer's capture cannot depend on (CUDA_ERROR_STREAM_CAPTURE_ISOLATION); "
            "order the streams yourself and pass stream_ptr=-1",
            "CUDA_ERROR_STREAM_CAPTURE_ISOLATION",
        )
    if producer_status == SV_CAPTURE_INVALIDATED:
        raise CUDAError(
            "cuStreamIsCapturing: the producer stream's capture was invalidated",
            "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
        )
    r = sv_door_new_recorded_event(producer_context, producer, &event, &call)
    if r != SV_CUDA_SUCCESS:
        _door_raise(r, call)
    if producer_status == SV_CAPTURE_ACTIVE:  # one capture: a join, an edge of the graph
        r = sv_door_wait(consumer, event, wait_context, 0, &call)
        sv_door_destroy_event(producer_context, event)
        if r != SV_CUDA_SUCCESS:
            _door_raise(r, call)
        return 0
    held = (PyLong_FromVoidPtr(producer_context), PyLong_FromVoidPtr(event), sv_door_generation_load())
    try:
        _give_to_graphs([PyLong_FromVoidPtr(graph)], held, None)
    except BaseException as exc:
        if type(exc).__name__ != "GraphOwnedError":
            sv_door_destroy_event(producer_context, event)  # not taken: still ours
        raise
    r = sv_door_wait(consumer, event, wait_context, SV_CU_EVENT_WAIT_EXTERNAL, &call)
    if r != SV_CUDA_SUCCESS:
        _door_raise(r, call)
    return 1


cdef int _give_to_graphs(list graphs, object obj, object refused) except -1:
    """Make ``obj`` live as long as each of ``graphs`` (ints, CUgraph handles): a user object
    whose destructor queues ``obj`` for the compiled core (_graphs.pxi), one reference moved
    into each graph.  Raises, ``obj`` not taken, when no user object can be made;
    GraphOwnedError, ``obj`` taken (given back once the graphs that took it are gone), when a
    graph refuses its reference; ``refused()``, when given, is called first, before the
    references not moved are released (so before ``obj`` can be given back)."""
    cdef const char *call = NULL
    cdef sv_CUresult r
    cdef void *user_object = NULL
    cdef Py_ssize_t index, count = len(graphs)
    node = _graph_node(obj)
    r = sv_door_user_object(
        &user_object, PyLong_AsVoidPtr(node), <void (*)(void *) noexcept>sv_graph_release_address(),
        <unsigned>count, &call,
    )
    if r != SV_CUDA_SUCCESS:
        _graph_node_drop(node)
        _door_raise(r, call)
    for index in range(count):
        r = sv_door_graph_take(PyLong_AsVoidPtr(graphs[index]), user_object, &call)
        if r != SV_CUDA_SUCCESS:
            name = sv_door_error_name(r)
            error_name = name.decode() if name != NULL else f"CUresult {r}"
            if refused is not None:
                refused()
            sv_door_user_object_release(user_object, <unsigned>(count - index))
            GraphOwnedError = _driver_module().GraphOwnedError
            raise GraphOwnedError(f"cuGraphRetainUserObject failed: {error_name}", error_name)
    return 0


# The place _door_place made last, reused while the handle and context are the same (read
# and replaced under SV_HANDOVER_LOCK, _handover.pxi).
cdef tuple _last_place = None
cdef uintptr_t _last_place_stream = 0
cdef void *_last_place_context = NULL


cdef tuple _door_place(object handle, int device_id, uintptr_t ptr):
    """Where ``handle`` names a stream now: ``(handle, context, thread)``, the context as an
    int, the thread the recording thread's serial for the per-thread stream (2), else 0.  An
    ordinary handle's context is its own (cuStreamGetCtx, remembered per thread); 0, 1 and 2
    name the calling thread's current context's, or with none current the primary context's
    of device ``device_id`` (-1: that of the memory at ``ptr``).  CUDAError if the driver is
    unusable or the handle names no stream."""
    global _last_place, _last_place_stream, _last_place_context
    cdef uintptr_t h = _door_handle(handle)
    cdef void *context = NULL
    cdef const char *call = NULL
    cdef sv_CUresult r
    cdef int looked_up = 0
    cdef unsigned long long serial = 0
    cdef sv_door_thread temporary
    cdef sv_door_thread *t
    cdef tuple place
    _door_require()
    h = sv_door_handle(h)
    t = sv_door_thread_or_temporary(&temporary)
    try:
        if h > 2:
            r = sv_door_context_of(t, h, &context, &looked_up, &call)
        else:
            r = sv_door_default_context(device_id, ptr, &context, &call)
            if r == SV_CUDA_SUCCESS and h == 2:
                serial = t.serial
                sv_door_note_ptds(t, context)
    finally:
        sv_door_thread_done(t)
    if r != SV_CUDA_SUCCESS:
        _door_raise(r, call)
    if h == 2:
        return (2, PyLong_FromVoidPtr(context), serial)
    SV_HANDOVER_LOCK()
    if _last_place is not None and _last_place_stream == h and _last_place_context == context:
        place = _last_place
        SV_HANDOVER_UNLOCK()
        return place
    SV_HANDOVER_UNLOCK()
    place = (h, PyLong_FromVoidPtr(context), 0)
    SV_HANDOVER_LOCK()
    old = _last_place  # (a tuple of ints: its release runs no Python code)
    _last_place = place
    _last_place_stream = h
    _last_place_context = context
    SV_HANDOVER_UNLOCK()
    return place


def _door_trim_pools():
    """Destroy the calling thread's free hand-over events; how many (_driver.trim_event_pool)."""
    return sv_door_trim_pools()


def _driver_door_reset():
    """Destroy every thread's door events and forget its caches; the door is decided again by
    the next need (``_driver.use_api`` calls it before the driver changes)."""
    global _last_place
    SV_HANDOVER_LOCK()
    old = _last_place
    _last_place = None
    SV_HANDOVER_UNLOCK()
    sv_door_reset()


def _driver_door_info():
    """For tests: the door's state (1 on, -1 off, 0 undecided), the orderings it did on this
    thread, this thread's ordering events and every thread's live ordering events."""
    return {
        "state": sv_door_state_load(),
        "ordered": sv_door_thread_ordered(),
        "thread_events": sv_door_thread_events(),
        "live_events": sv_door_live_events(),
        "available": bool(SV_DOOR_AVAILABLE),
        "generation": sv_door_generation_load(),
        "thread_serial": sv_door_thread_serial(),
        "final_entries": sv_door_final_entries(),
    }


def _driver_door_handover_info():
    """For tests: the hand-overs recorded on this thread and their events, this thread's free
    hand-over events, and every thread's hand-over events (free or in flight)."""
    return {
        "handed": sv_door_thread_handed(),
        "recorded": sv_door_thread_recorded(),
        "pooled": sv_door_thread_pooled(),
        "handover_events": sv_door_handover_events(),
    }


def _thread_state_cleared():
    """Whether the calling thread state was cleared: code run as its thread ends, seen by this
    thread's door struct, closed with that thread state."""
    return bool(sv_door_thread_ending())


def _order_after_for(producer, consumer, device=None, ptr=0):
    """``_order_after`` for Python callers (_driver.order_after: the copies, tests)."""
    _order_after(producer, consumer, device, ptr)
