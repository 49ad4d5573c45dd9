"""The one door to the CUDA driver.

Everything stridedview asks of the driver goes through this module: ordering one
stream after another (``order_after``) and finding the device of a pointer
(``device_of_pointer``).  The driver is reached through cuda-bindings, imported on
first need, so that ``import stridedview`` and every host-memory path work on a
machine with no driver.  Tests replace the bindings with a fake through
``use_api``.

Ordering never blocks the host: an event is recorded on the producer's stream
and the consumer's stream is made to wait on it (``cuEventRecord`` then
``cuStreamWaitEvent``), which also works under CUDA graph capture.  One event is
kept per (context, thread) and reused: a wait uses what the event captured when
the wait was enqueued, so recording it again later is harmless; sharing it across
threads is not, hence one per thread.  The context of each producer stream is
remembered per thread too, so that an ordering after warm-up costs two driver
calls.  Should a remembered context be stale (a stream destroyed and its handle
reused in another context), the record fails with CUDA_ERROR_INVALID_HANDLE; the
context is then looked up afresh and the record tried once more.
"""

from __future__ import annotations

import threading

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

_CUDA_SUCCESS = 0
_CUDA_ERROR_INVALID_HANDLE = 400
_CU_EVENT_DISABLE_TIMING = 2
_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9

_api = None  # the module providing cu* calls: cuda.bindings.driver, or a test fake
_initialized = False
_init_lock = threading.Lock()
_per_thread = threading.local()


def use_api(api) -> None:
    """Make ``api`` (an object with cuda.bindings.driver's calls) the driver; None resets.

    Forgets every cached context and event: tests call it to install a fake.
    """
    global _api, _initialized, _per_thread
    with _init_lock:
        _api = api
        _initialized = False
        _per_thread = threading.local()


def _load_api(hint: str):
    global _api
    if _api is None:
        try:
            from cuda.bindings import driver
        except ImportError as exc:
            raise CUDAError(
                f"cuda-bindings is not installed ({exc}): {hint}",
                "CUDA_ERROR_NO_DRIVER",
            ) from exc
        _api = driver
    return _api


def _call(api, name: str, *args, hint: str = NO_DRIVER_HINT):
    """Call ``api.<name>(*args)`` and return its values; CUDAError on failure.

    ``hint`` says, when the driver cannot be loaded at all, what to do instead.
    """
    try:
        result = getattr(api, name)(*args)
    except (RuntimeError, OSError) as exc:  # cuda-bindings' error when libcuda cannot be loaded
        raise CUDAError(
            f"the CUDA driver could not be used for {name} ({exc}): {hint}",
            "CUDA_ERROR_NO_DRIVER",
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
                _call(api, "cuInit", 0, hint=hint)
                _initialized = True
    return api


def _thread_state():
    state = _per_thread
    try:
        return state.context_of_stream, state.event_of_context
    except AttributeError:
        state.context_of_stream = {}
        state.event_of_context = {}
        return state.context_of_stream, state.event_of_context


def _context_of(api, stream: int):
    if stream in (CU_STREAM_LEGACY, CU_STREAM_PER_THREAD):
        return _call(api, "cuCtxGetCurrent")
    return _call(api, "cuStreamGetCtx", stream)


def _event_in(api, context, event_of_context):
    key = int(context)
    event = event_of_context.get(key)
    if event is None:
        current = _call(api, "cuCtxGetCurrent")
        if int(current) == key:
            event = _call(api, "cuEventCreate", _CU_EVENT_DISABLE_TIMING)
        else:
            _call(api, "cuCtxPushCurrent", context)
            try:
                event = _call(api, "cuEventCreate", _CU_EVENT_DISABLE_TIMING)
            finally:
                _call(api, "cuCtxPopCurrent")
        event_of_context[key] = event
    return event


def order_after(producer_stream: int, consumer_stream: int) -> None:
    """Make work later enqueued on ``consumer_stream`` wait for ``producer_stream``'s work so far.

    Both are stream handles (1 and 2 the current context's default streams); the
    host is never blocked.
    """
    api = _driver()
    context_of_stream, event_of_context = _thread_state()
    context = context_of_stream.get(producer_stream)
    fresh = context is None
    if fresh:
        context = context_of_stream[producer_stream] = _context_of(api, producer_stream)
    event = _event_in(api, context, event_of_context)
    try:
        _call(api, "cuEventRecord", event, producer_stream)
    except CUDAError as exc:
        if fresh or exc.name != "CUDA_ERROR_INVALID_HANDLE":
            raise
        context = context_of_stream[producer_stream] = _context_of(api, producer_stream)
        event = _event_in(api, context, event_of_context)
        _call(api, "cuEventRecord", event, producer_stream)
    _call(api, "cuStreamWaitEvent", consumer_stream, event, 0)


def device_of_pointer(ptr: int) -> int:
    """The ordinal of the device owning ``ptr``; for ptr 0, the current device."""
    api = _driver(DEVICE_ID_HINT)
    if ptr == 0:
        return int(_call(api, "cuCtxGetDevice", hint=DEVICE_ID_HINT))
    # cuda-bindings wants its enum here, not a plain int.
    attributes = getattr(api, "CUpointer_attribute", None)
    attribute = (
        _CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
        if attributes is None
        else attributes.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
    )
    return int(_call(api, "cuPointerGetAttribute", attribute, ptr, hint=DEVICE_ID_HINT))


def device_count() -> int:
    """The number of CUDA devices; CUDAError when there is no usable driver."""
    return int(_call(_driver(), "cuDeviceGetCount"))
