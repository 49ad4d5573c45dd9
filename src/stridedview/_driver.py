"""The one door to the CUDA driver.

Everything stridedview asks of the driver goes through this module: ordering one
stream after another (``order_after``) and finding the device of a pointer
(``device_of_pointer``).  The driver is reached through cuda-bindings, imported on
first need, so that ``import stridedview`` and every host-memory path work on a
machine with no driver.  Tests replace the bindings with a fake through
``use_api``.

Ordering never blocks the host: an event is recorded on the producer's stream
and the consumer's stream is made to wait on it (``cuEventRecord`` then
``cuStreamWaitEvent``), after asking whether the consumer is capturing a CUDA graph
(``cuStreamIsCapturing``; not asked of the legacy stream, which never captures).  A
plain wait would invalidate a capture (``CUDA_ERROR_STREAM_CAPTURE_ISOLATION``): a
capturing consumer waits instead on a new event recorded on the producer's stream,
with ``CU_EVENT_WAIT_EXTERNAL`` (an external event wait node: every replay of the graph
waits for what the producer had queued when the capture was made), the event owned by
the graph (a user object the graph holds; destroyed once the graph and its executable
graphs are gone, through the compiled core's ``_graphs.pxi``).  A producer stream in the
same capture is joined with a plain wait.

What a stream handle names:

- An ordinary handle names one stream, of one context (``cuStreamGetCtx``); that
  context is remembered per thread.
- The default-stream handles 0 (NULL), 1 (``CU_STREAM_LEGACY``) and 2
  (``CU_STREAM_PER_THREAD``) name a default stream of whichever context is current
  when a driver call is made, so what they mean is decided here, never remembered:

  * a *producer's* default stream is that of the device holding the data (the
    tensor's device through DLPack, the device owning the pointer for the CUDA
    Array Interface): it is resolved in that device's primary context, which is
    retained once, pushed around the record and popped, whatever context the
    calling thread has current (or none);
  * a *consumer's* default stream is that of the context current in the calling
    thread, where the consumer will launch; with none current, that of the data's
    device's primary context.  A producer and a consumer default stream are the
    same stream (nothing to order) only when both resolve to one context, and 0
    and 1 are the same stream;
  * when the data's device is not known (``device`` and ``ptr`` not given) both
    are resolved in the current context, as the driver would.

Events: one per (context, thread), reused.  A wait uses what the event captured
when the wait was enqueued, so recording it again later is harmless; sharing it
across threads is not, hence one per thread.  Each thread's events are held by a
``_ThreadEvents`` object in a ``threading.local``; when the thread ends the object
is dropped and its finalizer destroys the events (``cuEventDestroy``, with the
event's context pushed); ``use_api`` destroys every thread's events and releases
the retained primary contexts.  Code run as the thread ends, once its thread state's
dict was cleared (a hold released then, by an object of another ``threading.local``),
gets a ``_ThreadEvents`` kept by nobody, whose events go when the call that made it
returns: a ``threading.local`` reached then keeps what it is given in a new dict that
is never cleared (``_ThreadEnd``, and ``_thread_state.pxi``'s last section).  Nothing
is destroyed at interpreter exit: the process's driver resources go with it.

Hand-overs (``check_stream``, ``record_handover``, ``handover_done``,
``wait_handover``, ``give_back_events``): where a stream is, is decided when the
view is recorded on it (``check_stream``: an ordinary handle's context; for 0, 1
and 2 the context current then, else the data device's primary context, and for 2
the recording thread), and that *place* is what the hand-over records on, with its
context pushed, wherever and whenever the view is released.  When a view recorded
on streams lets go of its memory, one event is recorded on each stream, taken from
a pool of events per (context, thread): an event in flight belongs to its hand-over alone, and goes back to the
pool of whichever thread releases the hand-over (at most ``_POOL_LIMIT`` per
context, the rest destroyed), so a steady stream of hand-overs creates no events.
Completion is asked with ``cuEventQuery`` (never a host wait, but at the pending
bound and at interpreter exit, ``wait_handover``).  An event whose query fails
other than "not ready" (its context was reset) counts as done and is dropped.  A
hold is never released while a stream it was handed to may still run work; where
no event can be recorded to say when:

- a per-thread stream (2) released by another thread is recorded on its context's
  legacy stream, which waits for every blocking stream of the context, per-thread
  ones included; with the recording thread ended, the host waits for the context;
- a stream destroyed before the release (``CUDA_ERROR_INVALID_HANDLE``) may still
  run its queued work: the host waits for its context (``cuCtxSynchronize``), rare
  enough to afford; a context that is gone discarded its work (the record fails);
- a capture elsewhere (the legacy stream beside a capturing blocking stream:
  ``CUDA_ERROR_STREAM_CAPTURE_IMPLICIT``; a stream whose capture was invalidated)
  forbids both the record and a host wait: the record fails with a name in
  ``LATER`` and the compiled core tries it again later.

After warm-up, ordering after an ordinary producer stream costs three driver calls
(capture query, record, wait); after a producer's default stream, five (capture
query, push, record, pop, wait); the capture query is not made for a legacy consumer
stream.

The C door (``_driver_door.pxi`` in the compiled core) does ``order_after`` without
Python for an ordinary producer stream, and for a producer's default stream whose
data device is known, with the same calls through function pointers that the
driver's own ``cuGetProcAddress`` resolved, and its own per-thread caches and events
(the same rules as here: one event per (context, thread), stale entries retried
once, events destroyed when their thread ends and by ``use_api``; primary contexts
retained once, released by ``use_api``).  It also does the warm hand-overs: the place of
an ordinary handle or of 0 and 1 with a context current (``check_stream``'s tuple, the
context as an int), and a hand-over's records when every place's stream answers "not
capturing" (events from its own pools per (context, thread), never these); anything else,
or any failure there, comes to ``check_stream`` and ``record_handover`` here, for the whole
hand-over.
It is on only while ``_api`` is the real ``cuda.bindings.driver`` (loaded and
initialised here first: the door never loads a driver) and ``_c_door`` is true
(``STRIDEDVIEW_NO_C_DRIVER=1`` makes it false; a change takes effect at the next
``use_api``); whatever it does not handle (a default producer stream with no data
device, a default consumer stream with no current context after an ordinary producer,
a thread using more than 8 contexts, a fake driver) comes here.  Should a record fail with CUDA_ERROR_INVALID_HANDLE or
CUDA_ERROR_INVALID_CONTEXT (a driver reporting a remembered context or event stale), the
stale entries are dropped and the record tried once more with a fresh lookup and a fresh
event (for a hand-over, on an ordinary or a default stream alike: its pool is dropped).
A real driver does not report what a context reset (``cudaDeviceReset``) or a stream's
destruction left behind: naming such a handle is undefined and crashes it (driver 580:
SIGSEGV).  So ``stridedview.release_driver_resources()`` (``use_api`` with the driver in
use) must come before a reset, and a stream handed to ``record_stream`` must outlive the
view's release.
"""

from __future__ import annotations

import os
import threading
import weakref

from stridedview._errors import CUDAError

NO_DRIVER_HINT = "pass stream_ptr=-1 to order streams yourself (no driver call is then made)"
DEVICE_ID_HINT = (
    "a CUDA Array Interface view asks the driver for its pointer's device when its "
    "device_id is read or it is exported through DLPack (__dlpack_device__, "
    "from_dlpack); every other field and __cuda_array_interface__ work without a driver"
)

# CUDA's special stream handles: the legacy default stream and the per-thread
# default stream, both of whichever context is current.
CU_STREAM_LEGACY = 1
CU_STREAM_PER_THREAD = 2
# Handles that name a default stream of the current context (0 is the NULL stream,
# which the driver API takes as the legacy default stream).
_DEFAULT_STREAMS = (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD)

_CUDA_SUCCESS = 0
_INIT_FAILED = "the driver is there but cannot be initialised: no usable CUDA device"
_NO_DRIVER = "CUDA_ERROR_NO_DRIVER"
_INVALID_CONTEXT = "CUDA_ERROR_INVALID_CONTEXT"
# What a record on a dead event, or on a stream of another context, returns.
_STALE = ("CUDA_ERROR_INVALID_HANDLE", _INVALID_CONTEXT)
_CU_EVENT_DISABLE_TIMING = 2
_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

_api = None  # the module providing cu* calls: cuda.bindings.driver, or a test fake
_initialized = False
_init_lock = threading.Lock()
_per_thread = threading.local()
# device ordinal -> (CUdevice, its primary context), retained by this module.
_primary_contexts: dict[int, tuple] = {}
# device ordinal -> its compute capability (major, minor), read once per driver.
_capabilities: dict[int, tuple[int, int]] = {}
# Every thread's live _ThreadEvents, so that use_api can destroy their events.
_thread_events: weakref.WeakSet[_ThreadEvents] = weakref.WeakSet()
# Called by use_api before the driver changes: releases the pending hand-overs
# (set by the compiled core when it first hands one over).
_drain_hook = None
# Whether the compiled core's C door may do orderings (see the docstring); read by
# the core when it decides, i.e. after each use_api.
_c_door = os.environ.get("STRIDEDVIEW_NO_C_DRIVER", "") in ("", "0")
# Called by use_api before the driver changes: destroys the C door's events and
# empties its caches (set by the compiled core when it first orders streams).
_door_reset_hook = None
# Destroys the calling thread's free C hand-over events, how many (trim_event_pool; set
# by the compiled core when the door is decided).
_door_trim_hook = None


def use_api(api) -> None:
    """Make ``api`` (an object with cuda.bindings.driver's calls) the driver; None resets.

    First releases every pending hand-over (``stridedview.release_pending(wait=True)``:
    their events belong to the driver being replaced) and resets the C door (its
    events destroyed; it is switched on again only for the real bindings).  Destroys every thread's cached events and releases the retained primary
    contexts in the driver being replaced, and forgets every cached context: tests
    call it to install a fake.  No other thread may be ordering streams meanwhile.
    """
    global _api, _initialized, _per_thread, _primary_contexts, _capabilities
    if _drain_hook is not None and _api is not None:
        _drain_hook()  # pending hand-overs hold events of the driver being replaced
    if _door_reset_hook is not None:
        _door_reset_hook()  # the C door's events too; it decides again on next use
    with _init_lock:
        for holder in list(_thread_events):
            holder.close()
        _release_primary_contexts(_api, _primary_contexts)
        _api = api
        _initialized = False
        _per_thread = threading.local()
        _primary_contexts = {}
        _capabilities = {}


def release_driver_resources() -> None:
    """``stridedview.release_driver_resources()`` (its docstring states the contract):
    ``use_api`` with the driver in use, which drains, destroys and forgets."""
    use_api(_api)


def _load_api(hint: str):
    global _api
    if _api is None:
        try:
            from cuda.bindings import driver
        except ImportError as exc:
            raise CUDAError(
                f"cuda-bindings is not installed ({exc}): {hint}",
                _NO_DRIVER,
            ) from exc
        _api = driver
    return _api


def _call(api, name: str, *args, hint: str = NO_DRIVER_HINT):
    """Call ``api.<name>(*args)`` and return its values; CUDAError on failure.

    ``hint`` says, when the driver cannot be loaded at all, what to do instead.
    """
    try:
        result = getattr(api, name)(*args)
    except CUDAError:
        raise  # a driver error from below (a wrapper, a hook): not "no driver"
    except (RuntimeError, OSError) as exc:  # cuda-bindings' error when libcuda cannot be loaded
        raise CUDAError(
            f"the CUDA driver could not be used for {name} ({exc}): {hint}",
            _NO_DRIVER,
        ) from exc
    if int(result[0]) != _CUDA_SUCCESS:
        error_name = _error_name(api, result[0])
        raise CUDAError(f"{name} failed: {error_name}", error_name)
    if len(result) == 1:
        return None
    if len(result) == 2:
        return result[1]
    return result[1:]


def _error_name(api, error) -> str:
    try:
        code, name = api.cuGetErrorName(error)
        if int(code) == _CUDA_SUCCESS:
            return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        pass
    return getattr(error, "name", None) or f"CUresult {int(error)}"


def _driver(hint: str = NO_DRIVER_HINT):
    """The bindings, with cuInit(0) called once."""
    global _initialized
    api = _load_api(hint)
    if not _initialized:
        with _init_lock:
            if not _initialized:
                try:
                    _call(api, "cuInit", 0, hint=hint)
                except CUDAError as exc:
                    # A driver with no usable device (CUDA_ERROR_NO_DEVICE) or none at all:
                    # the way out is named, as for a missing driver library.
                    if exc.name == _NO_DRIVER:
                        raise
                    raise CUDAError(f"cuInit failed: {exc.name} ({_INIT_FAILED}): {hint}", exc.name) from None
                _initialized = True
    return api


# --- contexts -------------------------------------------------------------------------------

def _in_context(api, context, action):
    """``action()`` with ``context`` pushed as the calling thread's current context.

    The context is popped afterwards; if ``action`` fails, its error is the one
    raised even when the pop fails too.
    """
    _call(api, "cuCtxPushCurrent", context)
    try:
        result = action()
    except BaseException:
        try:
            _call(api, "cuCtxPopCurrent")
        except CUDAError:
            pass  # the first error is the one that explains what went wrong
        raise
    _call(api, "cuCtxPopCurrent")
    return result


def _primary_context(api, device: int):
    """The primary context of ``device`` (an ordinal), retained once per driver."""
    found = _primary_contexts.get(device)
    if found is None:
        with _init_lock:
            found = _primary_contexts.get(device)
            if found is None:
                handle = _call(api, "cuDeviceGet", device)
                found = (handle, _call(api, "cuDevicePrimaryCtxRetain", handle))
                _primary_contexts[device] = found
    return found[1]


def compute_capability(api, device: int) -> tuple[int, int]:
    """``device``'s compute capability (major, minor), asked of the driver once per device
    (``use_api`` forgets it).  No context is needed."""
    found = _capabilities.get(device)
    if found is None:
        kind = getattr(api, "CUdevice_attribute", None)

        def attribute(code):
            return int(_call(api, "cuDeviceGetAttribute", code if kind is None else kind(code), device))

        found = (
            attribute(_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            attribute(_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
        )
        _capabilities[device] = found  # a racing thread stores the same pair
    return found


def _release_primary_contexts(api, retained: dict) -> None:
    for handle, _ in retained.values():
        try:
            _call(api, "cuDevicePrimaryCtxRelease", handle)
        except Exception:  # noqa: BLE001 - a driver being replaced: nothing to report to
            pass


def _pointer_device(api, ptr: int, hint: str) -> int:
    if ptr == 0:
        return int(_call(api, "cuCtxGetDevice", hint=hint))
    # cuda-bindings wants its enum here, not a plain int.
    attributes = getattr(api, "CUpointer_attribute", None)
    attribute = (
        _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        if attributes is None
        else attributes.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    )
    return int(_call(api, "cuPointerGetAttribute", attribute, ptr, hint=hint))


# --- events, per thread ---------------------------------------------------------------------

class _ThreadEvents:
    """One thread's cached driver state: its events by context, and its streams' contexts.

    The thread's ``threading.local`` holds it; when the thread ends (or ``use_api``
    closes it) its finalizer destroys the events.
    """

    __slots__ = (
        "event_of_context", "context_of_stream", "pool_of_context", "_finalizer", "__weakref__"
    )

    def __init__(self, api):
        # int(context) -> (context, event); shared with the finalizer, which must
        # not hold the object itself.
        self.event_of_context: dict = {}
        # ordinary producer stream handle -> its context
        self.context_of_stream: dict = {}
        # int(context) -> (context, [events free for a hand-over]); the finalizer
        # destroys them too.
        self.pool_of_context: dict = {}
        self._finalizer = weakref.finalize(
            self, _destroy_events, api, self.event_of_context, self.pool_of_context
        )
        # At interpreter exit the process's driver resources go with it: the
        # driver may already be shutting down, so it is not called then.
        self._finalizer.atexit = False
        _thread_events.add(self)

    def close(self) -> None:
        """Destroy the events now (once); the caches start empty again."""
        self._finalizer()
        self.context_of_stream.clear()


def _destroy_events(api, event_of_context: dict, pool_of_context: dict | None = None) -> None:
    """Destroy each event (the cached ones and the pooled ones) with its own context
    pushed; errors are ignored (a reset context's events are already gone, and a
    finalizer has no one to tell)."""
    entries = list(event_of_context.values())
    event_of_context.clear()
    if pool_of_context is not None:
        for context, free in list(pool_of_context.values()):
            entries.extend((context, event) for event in free)
        pool_of_context.clear()
    for context, event in entries:
        _destroy_quietly(api, context, event)


def _destroy_quietly(api, context, event) -> None:
    try:
        _in_context(api, context, lambda: _call(api, "cuEventDestroy", event))
    except Exception:  # noqa: BLE001 - see _destroy_events
        pass


class _ThreadEnd:
    """Kept in a thread's ``_per_thread`` before its _ThreadEvents (so released first when
    the thread state's dict is cleared, as the thread ends): its release notes that thread
    state as ending (``_view._note_thread_state_cleared``), after which _thread_state keeps
    nothing for it (a threading.local reached then would keep it in a new dict that is
    never cleared, with its events: see _thread_state.pxi)."""

    __slots__ = ("mark",)

    def __init__(self, view_module):
        self.mark = view_module._thread_state_mark()

    def __del__(self):
        try:
            from stridedview import _view

            _view._note_thread_state_cleared(*self.mark)
        except Exception:  # noqa: BLE001 - at interpreter exit the module may be gone
            pass


def _thread_state(api) -> _ThreadEvents:
    """The calling thread's cached driver state, made on first use.  Code run as the thread
    ends (its thread state's dict cleared) gets a state of its own, kept by nobody: its
    events are destroyed when it is dropped, at the end of the call that made it."""
    state = _per_thread
    try:
        return state.events
    except AttributeError:
        pass
    from stridedview import _view

    if _view._thread_state_cleared():
        return _ThreadEvents(api)
    state.end = _ThreadEnd(_view)  # first in the thread's dict: released first
    state.events = _ThreadEvents(api)
    return state.events


def _new_event(api, state: _ThreadEvents, context):
    """Create an event in ``context``, which must be current, and cache it at once."""
    event = _call(api, "cuEventCreate", _CU_EVENT_DISABLE_TIMING)
    state.event_of_context[int(context)] = (context, event)
    return event


def _drop_event(api, state: _ThreadEvents, context) -> None:
    entry = state.event_of_context.pop(int(context), None)
    if entry is not None:
        _destroy_quietly(api, *entry)


def _event_in(api, state: _ThreadEvents, context):
    """This thread's event in ``context`` (created on first use), and whether it is new."""
    entry = state.event_of_context.get(int(context))
    if entry is not None:
        return entry[1], False
    current = _call(api, "cuCtxGetCurrent")
    if int(current) == int(context):
        return _new_event(api, state, context), True
    # Cached before the pop, so that an event is never lost if the pop fails.
    return _in_context(api, context, lambda: _new_event(api, state, context)), True


# --- ordering -------------------------------------------------------------------------------

def order_after(
    producer_stream: int, consumer_stream: int, device: int | None = None, ptr: int = 0
) -> None:
    """Make work later enqueued on ``consumer_stream`` wait for ``producer_stream``'s work so far.

    Both are stream handles; the host is never blocked.  ``device`` is the ordinal
    of the device holding the data, or None; then ``ptr``, when not 0, is a pointer
    into the data whose device the driver is asked for, only if a default-stream
    handle needs it.  A producer's default stream (0, 1, 2) is that device's
    primary context's; a consumer's, the calling thread's current context's (the
    data device's primary context's with none current).  With neither ``device``
    nor ``ptr``, both are the current context's.  CUDAError if a driver call fails.
    """
    if producer_stream == consumer_stream and producer_stream not in _DEFAULT_STREAMS:
        return
    api = _driver()
    state = _thread_state(api)
    if producer_stream in _DEFAULT_STREAMS:
        if device is None and ptr != 0:
            device = _pointer_device(api, ptr, NO_DRIVER_HINT)
        if device is None:
            _order_after_current_default(api, state, producer_stream, consumer_stream)
        else:
            _order_after_default(api, state, producer_stream, consumer_stream, device)
        return
    if _consumer_capturing(api, consumer_stream, device, ptr):
        _order_into_capture(api, state, producer_stream, None, consumer_stream, device, ptr)
        return
    event = _record_on_stream(api, state, producer_stream)
    _wait(api, event, consumer_stream, device, ptr)


def _same_default_stream(a: int, b: int) -> bool:
    """Whether default-stream handles ``a`` and ``b`` name one stream of one context."""
    return (a == CU_STREAM_PER_THREAD) == (b == CU_STREAM_PER_THREAD)


def _order_after_default(api, state, producer_stream, consumer_stream, device) -> None:
    """Order after the default stream ``producer_stream`` of ``device``'s primary context."""
    primary = _primary_context(api, device)
    wait_inside = False
    if consumer_stream in _DEFAULT_STREAMS:
        current = int(_call(api, "cuCtxGetCurrent"))
        wait_inside = current == 0  # no current context: the consumer's is the primary
        if current in (0, int(primary)) and _same_default_stream(producer_stream, consumer_stream):
            return

    if _consumer_capturing(api, consumer_stream, device, 0):
        _order_into_capture(api, state, producer_stream, primary, consumer_stream, device, 0)
        return

    def record():
        event = _record_in_current(api, state, primary, producer_stream)
        if wait_inside:
            _call(api, "cuStreamWaitEvent", consumer_stream, event, 0)
        return event

    event = _in_context(api, primary, record)
    if not wait_inside:
        _call(api, "cuStreamWaitEvent", consumer_stream, event, 0)


def _order_after_current_default(api, state, producer_stream, consumer_stream) -> None:
    """Order after the default stream ``producer_stream`` of the current context (never cached)."""
    if consumer_stream in _DEFAULT_STREAMS and _same_default_stream(producer_stream, consumer_stream):
        return  # one context, one stream
    context = _call(api, "cuCtxGetCurrent")
    if _consumer_capturing(api, consumer_stream, None, 0):
        _order_into_capture(api, state, producer_stream, context, consumer_stream, None, 0)
        return
    event = _record_in_current(api, state, context, producer_stream)
    _call(api, "cuStreamWaitEvent", consumer_stream, event, 0)


def _record_in_current(api, state, context, stream):
    """Record this thread's event of ``context``, the current context, on ``stream``.

    A cached event that fails as stale (its context was reset) is replaced by a
    fresh one and the record tried once more.
    """
    entry = state.event_of_context.get(int(context))
    if entry is None:
        event = _new_event(api, state, context)
        _call(api, "cuEventRecord", event, stream)
        return event
    try:
        _call(api, "cuEventRecord", entry[1], stream)
        return entry[1]
    except CUDAError as exc:
        if exc.name not in _STALE:
            raise
    _drop_event(api, state, context)
    event = _new_event(api, state, context)
    _call(api, "cuEventRecord", event, stream)
    return event


def _record_on_stream(api, state, stream):
    """Record this thread's event of ``stream``'s context on ``stream``; the event.

    When a remembered context or event fails as stale, the context is looked up
    afresh, a dead event replaced, and the record tried once more.
    """
    context = state.context_of_stream.get(stream)
    looked_up = context is None
    if looked_up:
        context = state.context_of_stream[stream] = _call(api, "cuStreamGetCtx", stream)
    event, created = _event_in(api, state, context)
    try:
        _call(api, "cuEventRecord", event, stream)
        return event
    except CUDAError as exc:
        if exc.name not in _STALE or (looked_up and created):
            raise
    state.context_of_stream.pop(stream, None)
    fresh = _call(api, "cuStreamGetCtx", stream)
    state.context_of_stream[stream] = fresh
    if int(fresh) == int(context):
        _drop_event(api, state, context)  # the stream is the same: the event is the dead one
    event, _ = _event_in(api, state, fresh)
    _call(api, "cuEventRecord", event, stream)
    return event


def _wait(api, event, consumer_stream, device, ptr) -> None:
    """``consumer_stream`` waits on ``event``; a default stream with no current
    context is the data device's primary context's."""
    try:
        _call(api, "cuStreamWaitEvent", consumer_stream, event, 0)
        return
    except CUDAError as exc:
        if (
            exc.name != _INVALID_CONTEXT
            or consumer_stream not in _DEFAULT_STREAMS
            or (device is None and ptr == 0)
            or int(_call(api, "cuCtxGetCurrent")) != 0
        ):
            raise
    if device is None:
        device = _pointer_device(api, ptr, NO_DRIVER_HINT)
    _in_context(
        api,
        _primary_context(api, device),
        lambda: _call(api, "cuStreamWaitEvent", consumer_stream, event, 0),
    )


# --- CUDA graphs: what a capture's graph must own ------------------------------------------

_CU_EVENT_WAIT_EXTERNAL = 1  # the wait becomes the graph's external event wait node
_CU_USER_OBJECT_NO_DESTRUCTOR_SYNC = 1  # the only flag cuUserObjectCreate takes
_CU_GRAPH_USER_OBJECT_MOVE = 1  # the caller's references become the graph's
_CAPTURE_ISOLATION = "CUDA_ERROR_STREAM_CAPTURE_ISOLATION"
# Handles of the legacy default stream, which cannot capture: 1, and 0 unless
# cuda-bindings makes 0 the per-thread stream (its per-thread mode).
_LEGACY_HANDLES = (
    (CU_STREAM_LEGACY,)
    if os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")
    else (0, CU_STREAM_LEGACY)
)


class GraphOwnedError(CUDAError):
    """A user object was made but a graph would not take it: what it carries is given back
    (queued by its destructor) once the graphs that did take it are gone; a hold is kept
    until exit instead (``give_to_graphs``' ``refused``)."""


def _capture_status(api, stream) -> int:
    """``cuStreamIsCapturing(stream)`` in the current context; CUDAError on failure."""
    return int(_call(api, "cuStreamIsCapturing", stream))


def _consumer_capturing(api, consumer_stream, device, ptr) -> bool:
    """Whether ``consumer_stream`` is capturing a graph (one driver call; none for the
    legacy stream, which never captures); a default stream with no current context is
    the data device's primary context's.  CUDAError when its
    capture was invalidated (no wait can be made on it until the capture ends) or the
    query fails (``CUDA_ERROR_STREAM_CAPTURE_IMPLICIT``: the legacy stream while a blocking
    stream of its context captures, which it may not wait beside)."""
    if consumer_stream in _LEGACY_HANDLES:
        return False
    result = api.cuStreamIsCapturing(consumer_stream)
    code = int(result[0])
    if code == _CUDA_SUCCESS:
        status = int(result[1])
    else:
        error = _failure(api, "cuStreamIsCapturing", result[0])
        if (
            error.name != _INVALID_CONTEXT
            or consumer_stream not in _DEFAULT_STREAMS
            or (device is None and ptr == 0)
            or int(_call(api, "cuCtxGetCurrent")) != 0
        ):
            raise error
        if device is None:
            device = _pointer_device(api, ptr, NO_DRIVER_HINT)
        status = _in_context(
            api, _primary_context(api, device), lambda: _capture_status(api, consumer_stream)
        )
    if status == _CAPTURE_INVALIDATED:
        raise CUDAError(
            "cuStreamIsCapturing: the consumer stream's capture was invalidated, and no wait "
            "can be added to it until the capture is ended",
            _CAPTURE_WAS_INVALIDATED,
        )
    return status == _CAPTURE_ACTIVE


def _capture_info(api, stream) -> tuple:
    """``(status, capture id, graph)`` of ``stream`` in the current context
    (``cuStreamGetCaptureInfo``; the id and graph mean something only while ACTIVE)."""
    status, capture_id, graph, *_ = _call(api, "cuStreamGetCaptureInfo", stream)
    return int(status), int(capture_id), graph


def _consumer_place(api, consumer_stream, device, ptr):
    """The context to make calls on ``consumer_stream`` in: None (the current one) but for
    a default stream with no current context: the data device's primary context."""
    if consumer_stream not in _DEFAULT_STREAMS or int(_call(api, "cuCtxGetCurrent")) != 0:
        return None
    if device is None:
        device = _pointer_device(api, ptr, NO_DRIVER_HINT)
    return _primary_context(api, device)


def _maybe_in(api, context, action):
    return action() if context is None else _in_place(api, context, action)


def _order_into_capture(api, state, producer_stream, producer_context, consumer_stream, device, ptr):
    """Order ``consumer_stream``, capturing a graph, after ``producer_stream``.

    ``producer_context``: the context a default producer stream is recorded in (None for
    an ordinary handle: its own).  A producer stream in the same capture (a stream the
    capture forked to) is joined with an event of its own, created, recorded, waited on
    and destroyed (the wait has become an edge of the graph).  A producer that is not
    capturing gets a new event recorded on it, given to the graph (a user object whose
    reference the graph takes; its destructor has the event destroyed once the graph and
    every executable graph made from it are gone), and the consumer waits on it with
    ``CU_EVENT_WAIT_EXTERNAL``: the graph's external event wait node, which each replay
    makes wait for the event's record as it stands then (the producer's work queued at
    capture time, as long as nothing records that event again: nothing does).  A producer
    capturing another graph cannot be ordered after (``CUDA_ERROR_STREAM_CAPTURE_ISOLATION``,
    raised before any call that would invalidate the consumer's capture).
    """
    wait_in = _consumer_place(api, consumer_stream, device, ptr)
    status, capture_id, graph = _maybe_in(api, wait_in, lambda: _capture_info(api, consumer_stream))
    if status != _CAPTURE_ACTIVE:  # its capture ended meanwhile: an ordinary wait then
        event = _maybe_in(
            api, producer_context, lambda: _record_fresh(api, state, producer_stream, producer_context)
        )
        _maybe_in(api, wait_in, lambda: _call(api, "cuStreamWaitEvent", consumer_stream, event, 0))
        return
    if producer_context is None:
        producer_context = state.context_of_stream.get(producer_stream)
        if producer_context is None:
            producer_context = _call(api, "cuStreamGetCtx", producer_stream)
            state.context_of_stream[producer_stream] = producer_context
    p_status, p_id, _ = _in_place(api, producer_context, lambda: _capture_info(api, producer_stream))
    if p_status == _CAPTURE_ACTIVE and p_id != capture_id:
        raise CUDAError(
            "cuStreamWaitEvent: the producer stream is capturing another graph, which the "
            "consumer's capture cannot depend on (CUDA_ERROR_STREAM_CAPTURE_ISOLATION); "
            "order the streams yourself and pass stream_ptr=-1",
            _CAPTURE_ISOLATION,
        )
    if p_status == _CAPTURE_INVALIDATED:
        raise CUDAError(
            "cuStreamIsCapturing: the producer stream's capture was invalidated",
            _CAPTURE_WAS_INVALIDATED,
        )

    def new_recorded_event():
        event = _call(api, "cuEventCreate", _CU_EVENT_DISABLE_TIMING)
        try:
            _call(api, "cuEventRecord", event, producer_stream)
        except BaseException:
            _destroy_quietly(api, producer_context, event)
            raise
        return event

    event = _in_place(api, producer_context, new_recorded_event)
    if p_status == _CAPTURE_ACTIVE:  # one capture: a join, an edge of the graph
        try:
            _maybe_in(api, wait_in, lambda: _call(api, "cuStreamWaitEvent", consumer_stream, event, 0))
        finally:
            _destroy_quietly(api, producer_context, event)
        return
    try:
        give_to_graphs([graph], (api, producer_context, event))
    except GraphOwnedError:
        raise  # the event is the graph's to give back: it is destroyed then
    except BaseException:
        _destroy_quietly(api, producer_context, event)
        raise
    _maybe_in(
        api, wait_in,
        lambda: _call(api, "cuStreamWaitEvent", consumer_stream, event, _CU_EVENT_WAIT_EXTERNAL),
    )


def _record_fresh(api, state, producer_stream, producer_context):
    """This thread's cached event of the producer's context recorded on it (the ordinary
    path's record, for a capture that ended between two queries)."""
    if producer_context is None:
        return _record_on_stream(api, state, producer_stream)
    return _record_in_current(api, state, producer_context, producer_stream)


def give_to_graphs(graphs: list, obj, refused=None) -> None:
    """Make ``obj`` live as long as each of ``graphs``: a user object whose destructor
    queues ``obj`` for the compiled core (``_graphs.pxi``), one reference moved into each
    graph.  Raises, ``obj`` not taken, when no user object can be made;
    ``GraphOwnedError``, ``obj`` taken (given back once the graphs that took it are gone),
    when a graph refuses its reference; ``refused()``, when given, is called first, before
    the references not moved are released (so before ``obj`` can be given back)."""
    from stridedview import _view

    api = _driver()  # (loaded and initialised: a capture was found through it)
    node = _view._graph_node(obj)
    try:
        destroy = api.CUhostFn(_view._graph_release_address())
        user_object = _call(
            api, "cuUserObjectCreate", node, destroy, len(graphs), _CU_USER_OBJECT_NO_DESTRUCTOR_SYNC
        )
    except BaseException:
        _view._graph_node_drop(node)
        raise
    for index, graph in enumerate(graphs):
        code = api.cuGraphRetainUserObject(graph, user_object, 1, _CU_GRAPH_USER_OBJECT_MOVE)[0]
        if int(code) != _CUDA_SUCCESS:
            error = _failure(api, "cuGraphRetainUserObject", code)
            if refused is not None:
                refused()
            api.cuUserObjectRelease(user_object, len(graphs) - index)  # the references not moved
            raise GraphOwnedError(f"cuGraphRetainUserObject failed: {error.name}", error.name)


def release_graph_event(held) -> None:
    """Destroy an ordering's event that a graph owned (``(api, context, event)``), now
    that the graph is gone; one of a driver since replaced (``use_api``) is left alone."""
    api, context, event = held
    if api is _api:
        _destroy_quietly(api, context, event)


def hand_to_graphs(places: list, held: tuple, refused=None) -> int:
    """Hand a hold to the graphs its capturing places are capturing into; how many graphs.

    ``held`` is ``(entry, events)``: ``events`` (a list) gets the ``[context, event]`` pairs
    recorded now on the places that are not capturing (released with the hold once they
    complete, after the graphs are gone); the capturing places' graphs take a user object
    carrying ``held`` (give_to_graphs).  0, nothing handed and the events given back, when
    a place's capture ended between its two queries (its graph can no longer be known).  CUDAError as record_handover (nothing handed, the
    events given back), or as give_to_graphs (``refused`` passed on: a graph that refuses
    the hold may still be replayed after the others are gone).
    """
    api = _driver()
    state = _thread_state(api)
    events = held[1]
    graphs: dict = {}
    lost = False
    try:
        for place in places:
            pair = _record_place(api, state, place)
            if pair is not None:
                events.append(pair)
                continue
            handle, _, _, context, _ = place
            status, capture_id, graph = _in_place(api, context, lambda: _capture_info(api, handle))
            if status != _CAPTURE_ACTIVE:
                lost = True  # its capture ended meanwhile: its graph is not known
            else:
                graphs.setdefault(capture_id, graph)
        if lost:
            graphs.clear()
        elif graphs:
            give_to_graphs(list(graphs.values()), held, refused)
    except GraphOwnedError:
        raise
    except BaseException:
        give_back_events(events)
        events.clear()
        raise
    if not graphs:
        give_back_events(events)
        events.clear()
    return len(graphs)


def with_context(api, device: int | None, action):
    """``action()`` with a context current: the calling thread's, or, with none,
    ``device``'s primary context pushed around it (copies and encodings need one)."""
    if device is None or int(_call(api, "cuCtxGetCurrent")) != 0:
        return action()
    return _in_context(api, _primary_context(api, device), action)


def device_of_pointer(ptr: int) -> int:
    """The ordinal of the device owning ``ptr``; for ptr 0, the current device."""
    return _pointer_device(_driver(DEVICE_ID_HINT), ptr, DEVICE_ID_HINT)


def device_count() -> int:
    """The number of CUDA devices; CUDAError when there is no usable driver."""
    return int(_call(_driver(), "cuDeviceGetCount"))



# --- hand-overs: events from a pool per (context, thread) ------------------------------------

# Events kept free per (context, thread) for later hand-overs (as many as a launcher far
# ahead of its device has in flight at once); more are destroyed.
_POOL_LIMIT = 1024
_NOT_READY = 600  # CUDA_ERROR_NOT_READY: what cuEventQuery answers for work still queued
_CAPTURE_ACTIVE = 1  # CU_STREAM_CAPTURE_STATUS_ACTIVE
_CAPTURE_INVALIDATED = 2  # CU_STREAM_CAPTURE_STATUS_INVALIDATED
_CAPTURE_WAS_INVALIDATED = "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED"
_STREAM_GONE = "CUDA_ERROR_INVALID_HANDLE"
# Record failures that mean "not now": a capture elsewhere in the stream's context (what
# the legacy stream answers beside a capturing blocking stream), or a capture invalidated
# and not yet ended.  The compiled core keeps such a hand-over and tries it again later.
# (A host synchronization refused beside a capture answers UNSUPPORTED.)
LATER = (
    "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", _CAPTURE_WAS_INVALIDATED,
    "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
)


def check_stream(stream: int, device: int | None = None, ptr: int = 0) -> tuple:
    """Where ``stream`` is now, as the hand-over's *place* ``(handle, context key, thread
    key, context, thread)``; CUDAError if the driver is unusable or an ordinary handle
    names no stream.

    ``view.record_stream`` (and a view joining a recording launch) calls it, so that a bad
    handle fails there and a default-stream handle means the stream it means there:

    - an ordinary handle: its context (``cuStreamGetCtx``, remembered for this thread);
    - 0 and 1: the legacy stream of the calling thread's current context, or, with none
      current, of the data device's primary context (``device``, or the device owning
      ``ptr``);
    - 2: the same context's per-thread default stream of the calling thread, whose
      ``threading.get_ident()`` is the thread key and whose ``_ThreadEvents``, weakly
      referenced, is ``thread`` (dead once the thread has ended).

    The keys are ints (the context's handle; the thread's identity, 0 for handles other
    than 2): two places are the same stream when handle and keys are equal.
    """
    api = _driver()
    state = _thread_state(api)
    if stream in _DEFAULT_STREAMS:
        context = _call(api, "cuCtxGetCurrent")
        if int(context) == 0:
            if device is None:
                device = _pointer_device(api, ptr, NO_DRIVER_HINT)
            context = _primary_context(api, device)
        if stream == CU_STREAM_PER_THREAD:
            return (stream, int(context), threading.get_ident(), context, weakref.ref(state))
        return (stream, int(context), 0, context, None)
    context = state.context_of_stream.get(stream)
    if context is None:
        context = state.context_of_stream[stream] = _call(api, "cuStreamGetCtx", stream)
    return (stream, int(context), 0, context, None)


def record_handover(streams: list) -> list | None:
    """Record one event on each of ``streams``; the ``[context, event]`` pairs, or None
    when a stream is capturing a CUDA graph (nothing is recorded then).

    ``streams`` holds the places ``check_stream`` made when the view was recorded: each
    record is made in the context remembered there (pushed when not current).  Each event
    comes from this thread's pool for that context (created there when the pool is
    empty); a pooled event found dead (a reset context) is replaced, its pool dropped, and
    the record tried once more.  Where the stream cannot be recorded on but its work may
    still run, the host waits for it instead (the pair's event is then None: nothing to
    query):

    - a per-thread default stream (2) released on another thread is recorded on the
      legacy stream (1) of its context, which waits for every blocking stream of that
      context, the recording thread's per-thread stream included; if the recording thread
      has ended (its per-thread stream went with it, its work maybe still queued), the
      context is synchronized;
    - an ordinary stream that is gone (``CUDA_ERROR_INVALID_HANDLE``: destroyed after the
      view was recorded, its queued work still running) while its context lives: the
      context is synchronized (``cuCtxSynchronize``, with it pushed).  A context that is
      gone itself fails (its work was discarded).

    CUDAError when a record fails: named ``CUDA_ERROR_STREAM_CAPTURE_IMPLICIT`` or
    ``..._INVALIDATED`` (``LATER``) when it cannot be made now because of a capture (the
    legacy stream beside a capturing blocking stream, a stream whose capture was
    invalidated): the caller tries again later.  The events recorded before a failure go
    back to the pool.
    """
    api = _driver()
    state = _thread_state(api)
    recorded: list = []
    try:
        for place in streams:
            pair = _record_place(api, state, place)
            if pair is None:
                give_back_events(recorded)
                return None
            recorded.append(pair)
    except BaseException:
        give_back_events(recorded)
        raise
    return recorded


def _in_place(api, context, action):
    """``action()`` with ``context`` current: pushed around it when it is not."""
    if int(_call(api, "cuCtxGetCurrent")) == int(context):
        return action()
    return _in_context(api, context, action)


def _record_place(api, state, place):
    """``[context, event]`` with a pooled event recorded on the stream of ``place``; None if
    it is capturing; ``[context, None]`` when its context was synchronized instead."""
    handle, _, _, context, thread = place
    if handle in _DEFAULT_STREAMS:
        if thread is not None:
            recorder = thread()
            if recorder is None:  # the recording thread has ended
                _settle_context(api, context)
                return [context, None]
            if recorder is not state:
                handle = CU_STREAM_LEGACY  # waits for the recorder's per-thread stream
        return _in_place(api, context, lambda: _record_default(api, state, context, handle))
    return _record_ordinary(api, state, handle, context)


def _record_default(api, state, context, handle):
    """Record on the default stream ``handle`` of ``context``, the current context; a dead
    pooled event (the context was reset) is replaced and the record tried once more."""
    try:
        return _record_pooled_in(api, state, context, handle)
    except CUDAError as exc:
        if exc.name not in _STALE:
            raise
    return _record_pooled_in(api, state, context, handle)  # the dead pool was dropped


def _record_ordinary(api, state, handle, context):
    """Record on the ordinary stream ``handle`` of ``context``; a gone stream's context is
    synchronized instead."""
    try:
        return _record_pooled_in(api, state, context, handle)
    except CUDAError as exc:
        if exc.name not in _STALE:
            raise
    state.context_of_stream.pop(handle, None)
    try:
        now = _call(api, "cuStreamGetCtx", handle)
    except CUDAError as exc:
        if exc.name != _STREAM_GONE:
            raise
        now = None
    if now is not None and int(now) == int(context):
        # The stream is there and the pooled event was dead (a reset context, whose pool
        # was dropped): once more, with a fresh event.
        return _record_pooled_in(api, state, context, handle)
    # The stream recorded on is gone (destroyed, maybe its handle reused since): the work
    # queued on it may still run, and only its context can say when it is done.
    _settle_context(api, context)
    if now is None:
        return [context, None]
    state.context_of_stream[handle] = now  # (or the remembered context was stale)
    return _record_pooled_in(api, state, now, handle)


def _settle_context(api, context) -> None:
    """Wait on the host for every stream of ``context`` (``cuCtxSynchronize``, with it
    pushed); CUDAError if the context is gone, and ``CUDA_ERROR_STREAM_CAPTURE_IMPLICIT``
    without waiting when a blocking stream of it is capturing (a host synchronization
    would invalidate that capture)."""

    def settle():
        result = api.cuStreamIsCapturing(CU_STREAM_LEGACY)
        if int(result[0]) != _CUDA_SUCCESS:
            error = _failure(api, "cuStreamIsCapturing", result[0])
            raise error
        _call(api, "cuCtxSynchronize")

    _in_place(api, context, settle)


def _record_pooled_in(api, state, context, handle):
    # The two calls of every hand-over, made directly (the driver is loaded by now);
    # _call only on failure, for its error.
    result = api.cuStreamIsCapturing(handle)
    if int(result[0]) != _CUDA_SUCCESS:
        # Named first, as below: tests/test_errors_contract.py reads a raise of a call as
        # a message it must find in docs/errors.md (the "failed" row covers _failure's).
        error = _failure(api, "cuStreamIsCapturing", result[0])
        raise error
    status = int(result[1])
    if status == _CAPTURE_ACTIVE:
        return None
    if status == _CAPTURE_INVALIDATED:  # until cuStreamEndCapture ends it
        raise CUDAError(
            "cuStreamIsCapturing: the stream's capture was invalidated, and it takes no record "
            "until the capture is ended",
            _CAPTURE_WAS_INVALIDATED,
        )
    event = _pool_take(api, state, context)
    code = api.cuEventRecord(event, handle)[0]
    if int(code) == _CUDA_SUCCESS:
        return [context, event]
    error = _failure(api, "cuEventRecord", code)
    if error.name in _STALE:
        _drop_pool(api, state, context)  # a reset context's events are all dead
    _destroy_quietly(api, context, event)
    raise error


def _failure(api, name: str, code) -> CUDAError:
    """The CUDAError ``_call`` raises for ``name`` returning ``code``."""
    error_name = _error_name(api, code)
    return CUDAError(f"{name} failed: {error_name}", error_name)


def _pool_take(api, state, context):
    """A free event of ``context`` from this thread's pool, or a new one."""
    entry = state.pool_of_context.get(int(context))
    if entry is not None and entry[1]:
        return entry[1].pop()
    if int(_call(api, "cuCtxGetCurrent")) == int(context):
        return _call(api, "cuEventCreate", _CU_EVENT_DISABLE_TIMING)
    return _in_context(api, context, lambda: _call(api, "cuEventCreate", _CU_EVENT_DISABLE_TIMING))


def _drop_pool(api, state, context) -> None:
    entry = state.pool_of_context.pop(int(context), None)
    if entry is not None:
        for event in entry[1]:
            _destroy_quietly(api, entry[0], event)


def handover_done(events: list) -> bool:
    """Whether the work each event of ``[context, event]`` pairs captured is done
    (``cuEventQuery``; the host is not blocked).  Never raises: an event whose query
    fails otherwise than "not ready" (its context was reset, the driver is gone) counts
    as done, and its pair's event is set to None so that it is not reused."""
    api = _api
    if api is None:  # (use_api released every hand-over before changing the driver)
        return True
    for pair in events:
        if pair[1] is None:
            continue
        try:
            result = int(api.cuEventQuery(pair[1])[0])
        except Exception:  # noqa: BLE001 - no driver left to ask: the work cannot be waited for
            result = -1
        if result == _NOT_READY:
            return False
        if result != _CUDA_SUCCESS:
            pair[1] = None
    return True


def wait_handover(events: list) -> None:
    """Block until each event's work is done (``cuEventSynchronize``): only at the
    pending bound, for ``release_pending(wait=True)`` and at interpreter exit.  Never
    raises; a failed wait marks its event as not reusable, as in ``handover_done``."""
    api = _api
    if api is None:
        return
    for pair in events:
        if pair[1] is None:
            continue
        try:
            result = int(api.cuEventSynchronize(pair[1])[0])
        except Exception:  # noqa: BLE001 - see handover_done
            result = -1
        if result != _CUDA_SUCCESS:
            pair[1] = None


def give_back_events(events: list) -> None:
    """Put each reusable event of ``events`` in the calling thread's pool for its context
    (destroyed beyond ``_POOL_LIMIT``).  Never raises."""
    try:
        api = _api
        if api is None:
            return
        state = _thread_state(api)  # kept to the end: a thread's last state dies with the call
        pools = state.pool_of_context
        for context, event in events:
            if event is None:
                continue
            entry = pools.get(int(context))
            if entry is None:
                entry = pools[int(context)] = (context, [])
            if len(entry[1]) < _POOL_LIMIT:
                entry[1].append(event)
            else:
                _destroy_quietly(api, context, event)
    except Exception:  # noqa: BLE001 - an event not reused is destroyed with its context
        pass


def trim_event_pool() -> int:
    """Destroy the calling thread's free hand-over events; how many (for tests, which
    then count the simulator's live events)."""
    if _api is None:
        return 0
    state = _thread_state(_api)
    count = sum(len(free) for _, free in state.pool_of_context.values())
    if _door_trim_hook is not None:
        count += _door_trim_hook()  # the C door's pools (hand-overs recorded in C)
    for context in list(state.pool_of_context):
        _drop_pool(_api, state, context)
    return count
