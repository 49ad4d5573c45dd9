"""What the driver knows of a view's memory (``view.allocation``), and making a view's data
ready on the host's timeline (``view.synchronize()``).

``view.allocation`` is an :class:`Allocation`: the allocation the view's element ``[0, ..., 0]``
lies in, as the driver answers ``cuPointerGetAttribute`` (its base and size, from
``CU_POINTER_ATTRIBUTE_RANGE_START_ADDR`` and ``_RANGE_SIZE``), what kind of memory it is, and
whether another process can map it (CUDA IPC): what sending a view to another process needs,
and what communication libraries' buffer registration asks for.  The kinds:

- ``"device"``: ``cuMemAlloc`` memory (shareable when the driver says it is legacy-IPC capable);
- ``"pool"``: a stream-ordered pool's block (``cuMemAllocAsync``, ``cuMemAllocFromPoolAsync``;
  shareable when its pool was made with a POSIX file descriptor handle type);
- ``"managed"``: ``cuMemAllocManaged`` memory (never shareable);
- ``"pinned"``: page-locked host memory the driver knows (``cuMemHostAlloc``,
  ``cuMemHostRegister``; never shareable through CUDA IPC);
- ``"host"``: host memory the driver does not know (pageable), or any host view where no
  driver can be loaded: ``base`` and ``size`` are then the span the view covers
  (``byte_bounds``), the only allocation stridedview can name.

A host view asks the driver only once stridedview has loaded and initialised one (host
paths never load a driver): page-locked memory is then ``"pinned"``; before, and on a
machine without a driver, a host view answers ``"host"``.  A device view with no driver is
a CUDAError saying what was asked.
"""

from __future__ import annotations

from dataclasses import dataclass

from stridedview import _driver
from stridedview._errors import CUDAError

# CUmemAllocationHandleType's bit for a POSIX file descriptor (what pools export for IPC).
POSIX_FILE_DESCRIPTOR = 1
_CU_MEMORYTYPE_HOST = 1
_ALLOCATION_HINT = "view.allocation of device memory asks the driver, which must be usable"
_CU_EVENT_DISABLE_TIMING = 2


@dataclass(frozen=True)
class Allocation:
    """The allocation a view's memory lies in, as the driver knows it.

    ``base`` and ``size``: its first byte and length (for ``"host"`` memory, the view's
    span).  ``kind``: ``"device"``, ``"pool"``, ``"managed"``, ``"pinned"`` or ``"host"``.
    ``shareable``: another process on this node can map it (CUDA IPC: a legacy IPC handle
    for ``"device"``, the pool's file descriptor for ``"pool"``).  ``device_id``: the
    device's ordinal, -1 for host memory.  ``handle_types``: the
    ``CUmemAllocationHandleType`` bits its pool can export, and ``pool`` that pool's handle
    (both 0 for memory of no pool).
    """

    base: int
    size: int
    kind: str
    shareable: bool
    device_id: int
    handle_types: int = 0
    pool: int = 0


def _span(view) -> Allocation:
    low, high = view.byte_bounds
    return Allocation(low, high - low, "host", False, -1)


def _attribute(api, name: str, ptr: int):
    return _driver._call(api, "cuPointerGetAttribute", getattr(api.CUpointer_attribute, name), ptr)


def _optional(api, name: str, ptr: int, default):
    """An attribute a driver may not answer for this kind of memory: ``default`` then."""
    try:
        return _attribute(api, name, ptr)
    except CUDAError:
        return default


def allocation_of(view) -> Allocation:
    """``view.allocation``: the driver's answers for the memory at ``view.ptr``."""
    host_only = not view.is_device_accessible
    if host_only and not _driver._initialized:
        return _span(view)
    api = _driver._driver(_ALLOCATION_HINT)
    ptr = view.ptr
    try:
        memory_type = int(_attribute(api, "CU_POINTER_ATTRIBUTE_MEMORY_TYPE", ptr))
    except CUDAError:
        if host_only:
            return _span(view)  # pageable: the driver knows no allocation
        raise
    if memory_type == 0:
        return _span(view)
    base = int(_attribute(api, "CU_POINTER_ATTRIBUTE_RANGE_START_ADDR", ptr))
    size = int(_attribute(api, "CU_POINTER_ATTRIBUTE_RANGE_SIZE", ptr))
    if int(_optional(api, "CU_POINTER_ATTRIBUTE_IS_MANAGED", ptr, 0)):
        return Allocation(base, size, "managed", False, _driver._pointer_device(api, ptr, _ALLOCATION_HINT))
    if memory_type == _CU_MEMORYTYPE_HOST:
        return Allocation(base, size, "pinned", False, -1)
    device = _driver._pointer_device(api, ptr, _ALLOCATION_HINT)
    pool = _optional(api, "CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE", ptr, None)
    if pool is not None and int(pool) != 0:
        handle_types = int(_optional(api, "CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES", ptr, 0))
        shareable = bool(handle_types & POSIX_FILE_DESCRIPTOR)
        return Allocation(base, size, "pool", shareable, device, handle_types, int(pool))
    legacy = bool(int(_optional(api, "CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE", ptr, 0)))
    return Allocation(base, size, "device", legacy, device)


def synchronize(view) -> None:
    """``view.synchronize()``: block the calling thread until every write ordered before the
    view's ``ready_stream`` (at the time of the call) has completed, so that a reader with no
    stream (MPI, the host reading pinned or managed memory) sees the data.

    An event is recorded on ``ready_stream`` and waited for by the host: later work on that
    stream is not waited for.  A view with ``ready_stream`` None (host memory, or a view whose
    caller ordered streams itself with -1) returns at once: nothing is known to be pending.
    """
    stream = view.ready_stream
    if stream is None:
        return
    api = _driver._driver()
    device = view.device_id if view.device_id >= 0 else None

    def record_and_wait():
        event = _driver._call(api, "cuEventCreate", _CU_EVENT_DISABLE_TIMING)
        try:
            _driver._call(api, "cuEventRecord", event, api.CUstream(stream))
            _driver._call(api, "cuEventSynchronize", event)
        finally:
            _driver._call(api, "cuEventDestroy", event)

    _driver.with_context(api, device, record_and_wait)
