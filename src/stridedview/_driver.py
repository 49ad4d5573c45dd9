"""The one door to the CUDA driver, on the Python side: loading and initialising it.

``import stridedview`` loads no driver.  The first ordering, hand-over or pointer lookup that
needs one imports cuda-bindings here and calls ``cuInit(0)`` (``_driver()``); a machine with no
driver gets a CUDAError naming the way out (``stream_ptr=-1``).  Every ordering and hand-over
decision (what a stream handle names, how a consumer stream waits for a producer's, where a
hand-over's events are recorded and when they count as done) is the compiled core's driver
door (``_driver_door.h``, through ``_driver_door.pxi``), written once, in C: it calls the
library cuda-bindings loaded through the driver's own ``cuGetProcAddress``.  What stays here:
loading and initialising the driver, naming its errors (``CUDAError``), a pointer's device,
the device count and compute capability, a context made current around the copies and
tensor maps (which call cuda-bindings by name), and ``use_api``, which resets all of it (tests
install a fake driver with it for the host-only contracts, which never order streams: with a
fake installed the door stays off and an ordering raises CUDAError).

``stridedview.release_driver_resources()`` (``use_api`` with the driver in use) must come
before a primary-context reset (``cudaDeviceReset``): a real driver does not report what a
reset left behind, and naming such a handle crashes it (driver 580: SIGSEGV).
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

_CUDA_SUCCESS = 0
_INIT_FAILED = "the driver is there but cannot be initialised: no usable CUDA device"
_NO_DRIVER = "CUDA_ERROR_NO_DRIVER"
_CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
_CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76

_api = None  # the module providing cu* calls: cuda.bindings.driver, or a test fake
_initialized = False
_init_lock = threading.Lock()
# device ordinal -> (CUdevice, its primary context), retained by this module.
_primary_contexts: dict[int, tuple] = {}
# device ordinal -> its compute capability (major, minor), read once per driver.
_capabilities: dict[int, tuple[int, int]] = {}
# Called by use_api before the driver changes: releases the pending hand-overs
# (set by the compiled core when it first hands one over).
_drain_hook = None
# Called by use_api before the driver changes: destroys the driver door's events and
# empties its caches (set by the compiled core when it first decides the door).
_door_reset_hook = None
# Destroys the calling thread's free hand-over events, how many (trim_event_pool; set by
# the compiled core when the door is decided).
_door_trim_hook = None


def use_api(api) -> None:
    """Make ``api`` (an object with cuda.bindings.driver's calls) the driver; None resets.

    First releases every pending hand-over (``stridedview.release_pending(wait=True)``:
    their events belong to the driver being replaced; the holds CUDA graphs own wait for
    their events now and give them back) and resets the driver door (every event it made
    destroyed, its primary contexts released, its caches forgotten; it is decided again at
    the next need, on only for the real bindings).  Releases the primary contexts retained
    here and forgets the compute capabilities: tests call it to install a fake.  No other
    thread may be ordering streams meanwhile.
    """
    global _api, _initialized, _primary_contexts, _capabilities
    if _drain_hook is not None and _api is not None:
        _drain_hook()  # pending hand-overs hold events of the driver being replaced
    if _door_reset_hook is not None:
        _door_reset_hook()  # the door's events too; it decides again on next use
    with _init_lock:
        _release_primary_contexts(_api, _primary_contexts)
        _api = api
        _initialized = False
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


class GraphOwnedError(CUDAError):
    """A user object was made but a graph would not take it: what it carries is given back
    (queued by its destructor) once the graphs that did take it are gone; a hold is kept
    until exit instead (_driver_door.pxi's ``_give_to_graphs``, its ``refused``)."""


def with_context(api, device: int | None, action):
    """``action()`` with a context current: the calling thread's, or, with none,
    ``device``'s primary context pushed around it (copies and encodings need one)."""
    if device is None or int(_call(api, "cuCtxGetCurrent")) != 0:
        return action()
    return _in_context(api, _primary_context(api, device), action)


def device_of_pointer(ptr: int, owner: str | None = None) -> int:
    """The ordinal of the device owning ``ptr``; for ptr 0, the current device.  With
    ``owner`` (the type name of a CUDA Array Interface view's exporter), a pointer the driver
    does not know is a CUDAError naming that exporter and the pointer, the driver's name kept."""
    api = _driver(DEVICE_ID_HINT)
    if ptr == 0 or owner is None:
        return _pointer_device(api, ptr, DEVICE_ID_HINT)
    try:
        return _pointer_device(api, ptr, DEVICE_ID_HINT)
    except CUDAError as exc:
        if exc.name == _NO_DRIVER:
            raise
        raise CUDAError(
            f"device_id: the CUDA Array Interface view of a {owner!r} object points at "
            f"{ptr:#x}, which the CUDA driver does not know as device, managed or pinned "
            f"memory ({exc}): is the producer's \"data\" a device pointer of this process, and "
            "the memory still allocated?",
            exc.name,
        ) from exc


def device_count() -> int:
    """The number of CUDA devices; CUDAError when there is no usable driver."""
    return int(_call(_driver(), "cuDeviceGetCount"))


def order_after(
    producer_stream: int, consumer_stream: int, device: int | None = None, ptr: int = 0
) -> None:
    """Make work later enqueued on ``consumer_stream`` wait for ``producer_stream``'s work so
    far, without blocking the host (the driver door's ordering: _driver_door.pxi's
    ``_order_after`` states the rules).  CUDAError if a driver call fails."""
    from stridedview import _view

    _view._order_after_for(producer_stream, consumer_stream, device, ptr)


def trim_event_pool() -> int:
    """Destroy the calling thread's free hand-over events; how many (for tests, which then
    count the simulator's live events)."""
    if _door_trim_hook is None:
        return 0
    return _door_trim_hook()
