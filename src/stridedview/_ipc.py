"""Views sent to another process on the same node: CUDA IPC, stream-ordered both ways.

Pickling a device view (``pickle.dumps``; ``multiprocessing`` queues and pipes with the
spawn or forkserver start method) exports it; unpickling it in another process gives a
:class:`ReceivedView` of the same memory.  The contract, as ``docs/interop.md`` states it:

- **What travels.** The layout (shape, strides in elements, the exact DLPack element type,
  read-only), the device by UUID (ordinals differ between processes), the memory's handle
  (``cuMemAlloc`` memory: the legacy IPC handle of the whole allocation and the view's
  offset in it; an IPC-enabled pool's block: the pool's file descriptor, passed as
  ``multiprocessing`` passes descriptors, and the block's export data), an IPC event
  recorded on the view's ``ready_stream`` at export, and a ticket naming the export.
- **Order into the importer.** ``StridedMemoryView(received, stream_ptr=s)`` (DLPack) makes
  ``s`` wait on that event (``cuStreamWaitEvent``): no host wait; -1 orders nothing, None is
  the legacy default stream, as DLPack says.
- **Lifetime.** The exporter keeps the view it pickled (and so its producer, through the
  view's own hand-over when ``record_stream`` was used) until the importer lets go.  The
  importer lets go when the last object holding the imported memory is released: a view
  whose ``record_stream(s)`` was called hands over first, so that happens only once the
  work of every such stream is complete (asked of events, never waited for by the host).
  The release closes the importer's mapping (handles are opened once per allocation and
  process, a few idle ones kept for reuse) or frees its imported pool block, then tells the
  exporter, which drops its hold at once.  Imported memory is thus untouched before its
  producer's work completes and freed in every importer before the exporter frees it.
- **Processes that die.** Each importer talks to an exporter over one Unix socket (an
  abstract address and a random key, both in the pickled record), one way: its pid once,
  then "released" messages, never awaited, so a busy exporter (its thread waiting for the
  GIL) delays no import.  An importer that dies closes it: the exporter releases the
  tickets that importer's pid redeemed (process liveness, no timeout).
  An exporter that exits first closes it too: its memory is gone on a real GPU, so a
  ``ReceivedView`` whose exporter has exited refuses to be viewed again (BufferError naming
  the process); views made before keep their pointer, which must not be used.
- **One ticket, one importer.** A pickled view is redeemed once, in the exporter's ticket
  slot (shared memory under a record lock): a second unpickling is a BufferError, so pickle
  once per receiving process.  A ticket never unpickled keeps its view until the exporter
  exits.
- **What cannot be shared** (managed memory, pinned or pageable host memory, a pool made
  without a POSIX file descriptor handle type, memory another process exported to this
  one) is refused at pickling with a BufferError naming why and what to allocate instead.
  Host views pickle by value (a copy of their elements), as numpy arrays do.

Invariants this module rests on: the exporter's share table and the importer's link,
mapping and device tables are each guarded by one lock (no reliance on the GIL); driver
calls are made with the device's primary context current when the caller has none.
"""

from __future__ import annotations

import ctypes
import fcntl
import itertools
import os
import secrets
import select
import struct
import threading
import weakref
from collections import OrderedDict
from typing import NoReturn
from multiprocessing import AuthenticationError, connection, reduction

from stridedview import _driver
from stridedview._allocation import POSIX_FILE_DESCRIPTOR, allocation_of
from stridedview._errors import CUDAError

_RECORD_VERSION = 1
_HANDLE_BYTES = 64
_CU_EVENT_DISABLE_TIMING = 2
_CU_EVENT_INTERPROCESS = 4
_CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1
_CU_STREAM_LEGACY = 1
_IDLE_MAPPINGS = 8  # closed mappings kept open for a later view of the same allocation
# The exporter's ticket slots (a memfd the importers reopen through /proc/<pid>/fd): one
# slot of (ticket, state, importer's pid) per ticket modulo _SLOTS, each read and written under a record
# lock (fcntl) by exporter and importers, so that a redemption takes no round trip.
_SLOTS = 1 << 16
_SLOT = struct.Struct("<QII")  # ticket, state, the redeeming process's pid
_ISSUED, _REDEEMED = 1, 2

_PICKLING_HINT = (
    "pickling a device view shares its memory through CUDA IPC, which needs the driver of "
    "the GPU that holds it; copy the data to host memory to pickle them by value"
)
_SHARE_INSTEAD = (
    "allocate with cuMemAlloc (cuda.core: DeviceMemoryResource with ipc_enabled, or a "
    "legacy allocation) or from a memory pool created with a POSIX file descriptor handle "
    "type, or copy the data into such memory before sending"
)


# --- the exporting side -------------------------------------------------------------------

class _Share:
    """One pickled view, held for its importer: the view (and so its producer) and the
    IPC event recorded at export, ``(device, event, handle)``, back to the pool at release."""

    __slots__ = ("view", "event")

    def __init__(self, view, event):
        self.view = view
        self.event = event


class _Exporter:
    """This process's sharing service: the share table and the thread answering importers."""

    def __init__(self):
        self.authkey = secrets.token_bytes(32)
        self.address = f"\0stridedview-ipc-{os.getpid()}-{secrets.token_hex(8)}"
        self.listener = connection.Listener(self.address, family="AF_UNIX", authkey=self.authkey)
        self.lock = threading.Lock()
        self.shares: dict[int, _Share] = {}
        self.tickets = itertools.count(1)
        self.links = itertools.count(1)
        # device -> free IPC events [(event, handle bytes)]: an event goes back once its
        # share is released, when its importer has let go of the view that waited on it, so
        # a new record on it is never what an older import waits for.
        self.free_events: dict[int, list] = {}
        self.slots = os.memfd_create("stridedview-ipc-tickets")
        os.ftruncate(self.slots, _SLOTS * _SLOT.size)
        threading.Thread(target=self._accept, name="stridedview-ipc-exports", daemon=True).start()

    def share(self, view, event) -> int:
        with self.lock:
            ticket = next(self.tickets)
            if ticket - _SLOTS in self.shares:
                raise BufferError(
                    f"ipc: too many pickled views held for importers ({len(self.shares)}): let "
                    "importers release views (or exit) before sending more"
                )
            self.shares[ticket] = _Share(view, event)
        _write_slot(self.slots, ticket, _ISSUED)
        return ticket

    def _accept(self) -> None:
        while True:
            try:
                conn = self.listener.accept()
            except (OSError, EOFError, AuthenticationError):
                continue  # a stranger, or a peer that went away during the handshake
            link = next(self.links)
            threading.Thread(
                target=self._serve, args=(conn, link), name=f"stridedview-ipc-link-{link}", daemon=True
            ).start()

    def _serve(self, conn, link: int) -> None:
        """One importer's link: its pid first, then the tickets it releases; when it
        closes (the importer exited, or was killed), every ticket its pid redeemed goes."""
        importer = None
        try:
            kind, sender = conn.recv()
            if kind != "hello":
                return
            importer = sender
            while True:
                kind, ticket = conn.recv()
                if kind == "release":
                    self._release(ticket)
        except (EOFError, OSError, ValueError, TypeError):
            pass  # the importer exited (or closed): what it held is released below
        finally:
            conn.close()
            if importer is not None:
                with self.lock:
                    held = list(self.shares)
                for ticket in held:
                    if _read_slot(self.slots, ticket) == (ticket, _REDEEMED, importer):
                        self._release(ticket)

    def _release(self, ticket: int) -> None:
        with self.lock:
            share = self.shares.get(ticket)
            if share is None:
                return
            del self.shares[ticket]
            if share.event is not None:
                device, event, handle = share.event
                self.free_events.setdefault(device, []).append((event, handle))
        share.view = None  # the producer goes with the exporter's view, by its own rules

    def event(self, api, device: int):
        """An interprocess event of ``device`` (the caller's context current) and its handle."""
        with self.lock:
            free = self.free_events.get(device)
            if free:
                return free.pop()
        event = _driver._call(api, "cuEventCreate", _CU_EVENT_INTERPROCESS | _CU_EVENT_DISABLE_TIMING)
        try:
            return event, _handle_bytes(_driver._call(api, "cuIpcGetEventHandle", event))
        except BaseException:
            _destroy_event(event)
            raise

    def pid_changed(self) -> bool:
        """True in a forked child: the service (thread and socket) is the parent's."""
        return not self.address.startswith(f"\0stridedview-ipc-{os.getpid()}-")

    def held(self) -> int:
        with self.lock:
            return len(self.shares)


_exporter: _Exporter | None = None
_exporter_lock = threading.Lock()


def _the_exporter() -> _Exporter:
    global _exporter
    if _exporter is None or _exporter.pid_changed():
        with _exporter_lock:
            if _exporter is None or _exporter.pid_changed():
                _exporter = _Exporter()
    return _exporter


def shares_held() -> int:
    """How many pickled views this process holds for importers (0 with none exported)."""
    return 0 if _exporter is None else _exporter.held()


def _write_slot(fd: int, ticket: int, state: int) -> None:
    offset = (ticket % _SLOTS) * _SLOT.size
    fcntl.lockf(fd, fcntl.LOCK_EX, _SLOT.size, offset)
    try:
        os.pwrite(fd, _SLOT.pack(ticket, state, 0), offset)
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN, _SLOT.size, offset)


def _read_slot(fd: int, ticket: int) -> tuple[int, int, int]:
    offset = (ticket % _SLOTS) * _SLOT.size
    fcntl.lockf(fd, fcntl.LOCK_SH, _SLOT.size, offset)
    try:
        return _SLOT.unpack(os.pread(fd, _SLOT.size, offset))
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN, _SLOT.size, offset)


def _redeem_slot(fd: int, ticket: int) -> str:
    """Mark ``ticket`` redeemed by this process in its slot: "ok", or why it cannot be
    ("redeemed", "released")."""
    offset = (ticket % _SLOTS) * _SLOT.size
    fcntl.lockf(fd, fcntl.LOCK_EX, _SLOT.size, offset)
    try:
        found, state, _ = _SLOT.unpack(os.pread(fd, _SLOT.size, offset))
        if found != ticket:
            return "released"
        if state != _ISSUED:
            return "redeemed"
        os.pwrite(fd, _SLOT.pack(ticket, _REDEEMED, os.getpid()), offset)
        return "ok"
    finally:
        fcntl.lockf(fd, fcntl.LOCK_UN, _SLOT.size, offset)


def _destroy_event(event) -> None:
    if event is None:
        return
    try:
        _driver._call(_driver._driver(), "cuEventDestroy", event)
    except CUDAError:
        pass  # a driver being torn down: the event goes with it


def _handle_bytes(handle) -> bytes:
    return ctypes.string_at(handle.getPtr(), _HANDLE_BYTES)


def _handle_from(kind, data: bytes):
    handle = kind()
    ctypes.memmove(handle.getPtr(), data, _HANDLE_BYTES)
    return handle


_WHY_NOT_SHAREABLE = {
    "managed": "managed memory (cuMemAllocManaged) cannot be shared between processes",
    "pinned": "pinned host memory cannot be shared through CUDA IPC",
    "host": "host memory the driver does not know cannot be shared through CUDA IPC",
    "pool": "its memory pool was not created with a POSIX file descriptor handle type",
    "device": "the driver says this allocation cannot be shared (not legacy-IPC capable: "
    "memory imported from another process, or a VMM allocation)",
}


_pool_handles: dict[int, int] = {}  # pool handle -> its exported file descriptor (kept open)
_pool_lock = threading.Lock()


def _pool_descriptor(api, pool: int) -> int:
    with _pool_lock:
        fd = _pool_handles.get(pool)
        if fd is None:
            handle_type = api.CUmemAllocationHandleType(POSIX_FILE_DESCRIPTOR)
            fd = int(_driver._call(api, "cuMemPoolExportToShareableHandle", api.CUmemoryPool(pool), handle_type, 0))
            _pool_handles[pool] = fd
    return fd


def export_record(view) -> dict:
    """The record a device view pickles into (see the module's docstring); BufferError if
    its memory cannot be shared."""
    api = _driver._driver(_PICKLING_HINT)
    allocation = allocation_of(view)
    if not allocation.shareable:
        raise BufferError(
            f"ipc: cannot pickle a view of {allocation.kind} memory at {allocation.base:#x}: "
            f"{_WHY_NOT_SHAREABLE[allocation.kind]}; {_SHARE_INSTEAD}"
        )
    if view.itemsize_bits % 8:
        raise BufferError(
            f"ipc: cannot pickle a view of packed {view.itemsize_bits}-bit elements "
            f"({view.dlpack_dtype}): view its bytes (view(dtype=numpy.uint8)) instead"
        )
    low, high = view.byte_bounds
    device = allocation.device_id
    ready = view.ready_stream

    def under_context():
        memory: tuple
        if allocation.kind == "device":
            memory = ("legacy", _handle_bytes(_driver._call(api, "cuIpcGetMemHandle", allocation.base)))
        else:
            data = _driver._call(api, "cuMemPoolExportPointer", allocation.base)
            fd = _pool_descriptor(api, allocation.pool)
            memory = ("pool", reduction.DupFd(fd), allocation.pool, _handle_bytes(data))
        if ready is None:
            return memory, None
        event, handle = exporter.event(api, device)
        try:
            _driver._call(api, "cuEventRecord", event, api.CUstream(ready))
        except BaseException:
            _destroy_event(event)
            raise
        return memory, (device, event, handle)

    exporter = _the_exporter()
    memory, event = _driver.with_context(api, device, under_context)
    ticket = exporter.share(view, event)
    dl_dtype = view.dlpack_dtype
    return {
        "version": _RECORD_VERSION,
        "pid": os.getpid(),
        "address": exporter.address,
        "authkey": exporter.authkey,
        "ticket": ticket,
        "slots": exporter.slots,
        "device_uuid": _device_uuid(api, device),
        "memory": memory,
        "span_offset": low - allocation.base,  # the span's first byte in the allocation
        "span_bytes": high - low,
        "ptr_offset": view.ptr - low,  # element [0, ..., 0] in the span
        "shape": view.shape,
        "strides": view.strides,
        "dlpack_dtype": None if dl_dtype is None else tuple(dl_dtype),
        "dtype": view.dtype,
        "readonly": view.readonly,
        "event": None if event is None else event[2],
    }


def reduce_view(view):
    """``StridedMemoryView.__reduce__``: host views by value, device views through CUDA IPC."""
    if not view.is_device_accessible:
        return _reduce_host(view)
    return (_receive, (export_record(view),))


def _reduce_host(view):
    """A host view pickles a copy of its elements: a numpy array of its dtype, or, for an
    element type numpy cannot name (bfloat16 from DLPack, float8), of opaque elements of its
    size, reinterpreted as the exact DLPack type when unpickled."""
    import numpy

    try:
        return (_host_view, (numpy.array(view, copy=True), view.readonly, None))
    except (TypeError, ValueError, BufferError):
        pass
    if view.itemsize_bits % 8 or view.dlpack_dtype is None:
        raise TypeError(
            f"ipc: cannot pickle a host view of {view.dtype} elements ({view.dlpack_dtype}): "
            "view its bytes (view(dtype=numpy.uint8)) and pickle that"
        )
    opaque = _OpaqueHost(view)
    return (_host_view, (numpy.array(opaque, copy=True), view.readonly, tuple(view.dlpack_dtype)))


class _OpaqueHost:
    """A host view's elements as numpy's array interface of opaque ``V<itemsize>`` items."""

    def __init__(self, view):
        self.owner = view
        self.__array_interface__ = {
            "version": 3, "data": (view.ptr, True), "shape": view.shape,
            "strides": view.byte_strides, "typestr": f"|V{view.itemsize}",
        }


def _host_view(elements, readonly, dlpack_dtype=None):
    from stridedview import DLPackDType, StridedMemoryView

    if readonly:
        elements.flags.writeable = False
    view = StridedMemoryView.from_array_interface(elements)  # any numpy dtype, byte order kept
    return view if dlpack_dtype is None else view.view(dtype=DLPackDType(*dlpack_dtype))


# --- the importing side -------------------------------------------------------------------

class _Link:
    """This process's connection to one exporting process."""

    def __init__(self, record):
        self.pid = record["pid"]
        self.lock = threading.Lock()
        self.gone = False
        try:
            self.conn = connection.Client(record["address"], family="AF_UNIX", authkey=record["authkey"])
            self.conn.send(("hello", os.getpid()))  # the tickets this pid redeems go with the link
            # The exporter sends nothing: the socket becoming readable means it closed.
            self.closed = select.poll()
            self.closed.register(self.conn.fileno(), select.POLLIN | select.POLLHUP)
            self.slots = os.open(f"/proc/{self.pid}/fd/{record['slots']}", os.O_RDWR | os.O_CLOEXEC)
        except (OSError, EOFError, AuthenticationError) as exc:
            _raise_exporter_gone(self.pid, exc)

    def redeem(self, ticket: int) -> None:
        """Take ``ticket`` in its slot (which says whether it can be), writing this
        process's pid there: the exporter reads it if the link closes; no message, no wait."""
        with self.lock:
            answer = _redeem_slot(self.slots, ticket)
        if answer != "ok":
            raise BufferError(
                f"ipc: a pickled view was already {answer} (ticket {ticket} of process {self.pid}): "
                "a pickled view is redeemed by one importer; pickle it once per receiving process"
            )

    def release(self, ticket: int) -> None:
        with self.lock:
            if self.gone:
                return
            try:
                self.conn.send(("release", ticket))
            except (OSError, ValueError):
                self.gone = True

    def alive(self) -> bool:
        """False once the exporter's end of the link has closed (it exited)."""
        with self.lock:
            if not self.gone and self.closed.poll(0):
                self.gone = True
            return not self.gone


def _raise_exporter_gone(pid: int, detail) -> NoReturn:
    raise BufferError(
        f"ipc: the exporting process {pid} has exited (or stopped sharing: {detail!r}); "
        "the memory it shared is gone with it"
    )


_links: dict[str, _Link] = {}
_import_lock = threading.Lock()  # guards _links, _mappings, _idle, _pools, _devices
_mappings: dict[tuple, list] = {}  # (exporter pid, handle) -> [base, live imports]
_idle: OrderedDict = OrderedDict()  # mapping keys with no live import, oldest first
_pools: dict[tuple, object] = {}  # (exporter pid, exporter's pool) -> imported pool
_devices: dict[bytes, int] = {}  # device UUID -> ordinal in this process
# (exporter pid, event handle) -> the opened event: an exporter re-records an event only
# after the import that waited on it was released, so a wait always sees its own record.
_events: dict[tuple, object] = {}


def _link(record) -> _Link:
    with _import_lock:
        found = _links.get(record["address"])
        if found is not None and not found.gone:
            return found
    made = _Link(record)
    with _import_lock:
        found = _links.get(record["address"])
        if found is not None and not found.gone:
            made.conn.close()
            return found
        _links[record["address"]] = made
    return made


def _device_uuid(api, device: int) -> bytes:
    uuid = _driver._call(api, "cuDeviceGetUuid", _driver._call(api, "cuDeviceGet", device))
    return bytes(uuid.bytes)


def _local_device(api, uuid: bytes) -> int:
    with _import_lock:
        found = _devices.get(uuid)
    if found is not None:
        return found
    for ordinal in range(int(_driver._call(api, "cuDeviceGetCount"))):
        if _device_uuid(api, ordinal) == uuid:
            with _import_lock:
                _devices[uuid] = ordinal
            return ordinal
    raise BufferError(
        f"ipc: the view's device (UUID {uuid.hex()}) is not visible in this process "
        f"(CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES')!r})"
    )


def _open_legacy(api, device: int, key: tuple, handle: bytes) -> int:
    with _import_lock:
        found = _mappings.get(key)
        if found is not None:
            found[1] += 1
            _idle.pop(key, None)
            return found[0]

    def opened():
        return int(_driver._call(
            api, "cuIpcOpenMemHandle", _handle_from(api.CUipcMemHandle, handle), _CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS
        ))

    try:
        base = _driver.with_context(api, device, opened)
    except CUDAError as exc:
        raise BufferError(f"ipc: the memory of a received view could not be opened ({exc})") from exc
    with _import_lock:
        found = _mappings.get(key)
        if found is None:
            _mappings[key] = [base, 1]
            return base
        found[1] += 1  # another thread opened it meanwhile: the driver counted ours too
    _close_legacy(api, device, base)
    return found[0]


def _close_legacy(api, device: int, base: int) -> None:
    try:
        _driver.with_context(api, device, lambda: _driver._call(api, "cuIpcCloseMemHandle", base))
    except CUDAError:
        pass  # the driver is going away: the mapping goes with it


def _let_go_legacy(api, device: int, key: tuple) -> None:
    closing = []
    with _import_lock:
        found = _mappings.get(key)
        if found is None:
            return
        found[1] -= 1
        if found[1] == 0:
            _idle[key] = found[0]
            while len(_idle) > _IDLE_MAPPINGS:
                old, base = _idle.popitem(last=False)
                del _mappings[old]
                closing.append(base)
    for base in closing:
        _close_legacy(api, device, base)


def _imported_pool(api, device: int, record):
    """The exporter's pool imported once per process (the driver keeps its own copy of the
    descriptor, which is closed here either way)."""
    _, descriptor, pool_key, _ = record["memory"]
    fd = descriptor.detach()
    handle_type = api.CUmemAllocationHandleType(POSIX_FILE_DESCRIPTOR)

    def imported():
        return _driver.with_context(
            api, device, lambda: _driver._call(api, "cuMemPoolImportFromShareableHandle", fd, handle_type, 0)
        )

    def destroy(pool):
        _driver._call(api, "cuMemPoolDestroy", pool)

    try:
        return _cached(_pools, (record["pid"], pool_key), imported, destroy)
    finally:
        os.close(fd)


class _Import:
    """The imported memory of one received view, as a buffer ``from_buffer`` takes; its
    release (when the last view of it is released) lets go of the memory and tells the
    exporter."""

    __slots__ = ("handle", "size", "device_id", "is_device_accessible", "__weakref__")

    def __init__(self, handle: int, size: int, device_id: int):
        self.handle = handle
        self.size = size
        self.device_id = device_id
        self.is_device_accessible = True


def _cached(table: dict, key, make, discard):
    """``table[key]``, made by ``make()`` outside ``_import_lock`` on a miss (a driver call);
    a thread that loses the race to store what it made gives it to ``discard``."""
    with _import_lock:
        found = table.get(key)
    if found is not None:
        return found
    made = make()
    with _import_lock:
        found = table.setdefault(key, made)
    if found is not made:
        discard(made)
    return found


def _opened_event(api, device: int, pid: int, handle: bytes):
    ipc_handle = _handle_from(api.CUipcEventHandle, handle)
    return _cached(
        _events, (pid, handle),
        lambda: _driver.with_context(api, device, lambda: _driver._call(api, "cuIpcOpenEventHandle", ipc_handle)),
        _destroy_event,
    )


def _release_import(api, device, link, ticket, memory) -> None:
    if memory[0] == "legacy":
        _let_go_legacy(api, device, memory[1])
    else:
        try:
            _driver.with_context(api, device, lambda: _driver._call(api, "cuMemFree", memory[1]))
        except CUDAError:
            pass
    link.release(ticket)


def _receive(record) -> ReceivedView:
    """Unpickling: redeem the ticket, open the memory and the event, and make the view."""
    if record.get("version") != _RECORD_VERSION:
        raise BufferError(
            f"ipc: a pickled view of record version {record.get('version')!r} (this is "
            f"{_RECORD_VERSION}): pickle and unpickle with the same stridedview"
        )
    if record["pid"] == os.getpid():
        raise BufferError(
            "ipc: a pickled device view was unpickled in the process that pickled it: "
            "use the view itself (CUDA IPC maps memory into other processes only)"
        )
    api = _driver._driver()
    device = _local_device(api, record["device_uuid"])
    link = _link(record)
    link.redeem(record["ticket"])
    event = None
    memory: tuple | None = None
    try:
        if record["memory"][0] == "legacy":
            key = (record["pid"], record["memory"][1])
            base = _open_legacy(api, device, key, record["memory"][1])
            memory = ("legacy", key)
        else:
            pool = _imported_pool(api, device, record)
            data = _handle_from(api.CUmemPoolPtrExportData, record["memory"][3])
            base = int(_driver.with_context(
                api, device, lambda: _driver._call(api, "cuMemPoolImportPointer", pool, data)
            ))
            memory = ("pool", base)
        if record["event"] is not None:
            event = _opened_event(api, device, record["pid"], record["event"])
        imported = _Import(base + record["span_offset"], record["span_bytes"], device)
        weakref.finalize(imported, _release_import, api, device, link, record["ticket"], memory)
    except BaseException:
        if memory is not None:
            _release_import(api, device, link, record["ticket"], memory)
        else:
            link.release(record["ticket"])
        raise
    return ReceivedView(_received_view(imported, record), event, link, device)


class _Layout:
    __slots__ = ("shape", "strides", "itemsize", "slice_offset")

    def __init__(self, shape, strides, itemsize, slice_offset):
        self.shape = shape
        self.strides = strides
        self.itemsize = itemsize
        self.slice_offset = slice_offset


def _received_view(imported: _Import, record):
    """The exporter's layout over the imported span: in one step where element [0, ..., 0]
    is the span's first byte (no negative stride) and numpy's dtype names the exact DLPack
    type; else the span's bytes retyped, then laid out."""
    import numpy

    from stridedview import DLPackDType, StridedMemoryView

    exact = None if record["dlpack_dtype"] is None else DLPackDType(*record["dlpack_dtype"])
    if record["ptr_offset"] == 0 and record["dtype"] is not None:
        view = StridedMemoryView.from_buffer(
            imported, record["shape"], record["strides"], dtype=record["dtype"], is_readonly=record["readonly"]
        )
        if view.dlpack_dtype == exact:
            return view
    span = StridedMemoryView.from_buffer(
        imported, (record["span_bytes"],), None, dtype=numpy.uint8, is_readonly=record["readonly"]
    )
    typed = span.view(dtype=record["dtype"] if exact is None else exact)
    itemsize = typed.itemsize
    layout = _Layout(tuple(record["shape"]), tuple(record["strides"]), itemsize, record["ptr_offset"] // itemsize)
    return typed.view(layout=layout)


class ReceivedView:
    """A device view received from another process (an unpickled ``StridedMemoryView``).

    ``StridedMemoryView(received, stream_ptr=s)`` views it through DLPack: ``s`` is made to
    wait on the IPC event the exporter recorded on its view's ``ready_stream`` at pickling
    (``cuStreamWaitEvent``; no host wait); -1 orders nothing; None is the legacy default
    stream.  The fields (``ptr``, ``shape``, ``strides`` in elements, ``dtype``,
    ``device_id`` in this process, ``readonly``) are those of the memory as mapped here.
    Once its exporter has exited, viewing it again is a BufferError naming the process.
    """

    __slots__ = ("_view", "_event", "_link", "_device")

    def __init__(self, view, event, link, device):
        self._view = view
        self._event = event
        self._link = link
        self._device = device

    def _order(self, stream) -> None:
        if not self._link.alive():
            _raise_exporter_gone(self._link.pid, "its sharing socket closed")
        if stream == -1 or self._event is None:
            return
        if stream is None or stream == 0:
            stream = _CU_STREAM_LEGACY
        api = _driver._driver()
        handle = api.CUstream(int(stream))
        if int(stream) > 2:  # an ordinary stream names its context
            _driver._call(api, "cuStreamWaitEvent", handle, self._event, 0)
            return
        _driver.with_context(api, self._device, lambda: _driver._call(api, "cuStreamWaitEvent", handle, self._event, 0))

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule of the memory, ``stream`` first made to wait for the exporter's work."""
        self._order(stream)
        return self._view.__dlpack__(stream=-1, max_version=max_version, dl_device=dl_device, copy=copy)

    def __dlpack_device__(self):
        return self._view.__dlpack_device__()

    @property
    def exporter_pid(self) -> int:
        """The process that pickled the view."""
        return self._link.pid

    @property
    def exporter_alive(self) -> bool:
        """False once the exporting process has exited (its socket closed)."""
        return self._link.alive()

    @property
    def ptr(self) -> int:
        """Address of element [0, ..., 0] in this process."""
        return self._view.ptr

    @property
    def shape(self) -> tuple[int, ...]:
        """Tuple of extents."""
        return self._view.shape

    @property
    def strides(self) -> tuple[int, ...]:
        """Strides in elements."""
        return self._view.strides

    @property
    def dtype(self):
        """The element type (a numpy.dtype; None for packed sub-byte types)."""
        return self._view.dtype

    @property
    def dlpack_dtype(self):
        """The exact DLPack element type, as the exporter's view had it."""
        return self._view.dlpack_dtype

    @property
    def device_id(self) -> int:
        """The device's ordinal in this process."""
        return self._view.device_id

    @property
    def readonly(self) -> bool:
        """Whether the exporter's view was read-only."""
        return self._view.readonly

    def __repr__(self):
        return (
            f"ReceivedView(ptr={self.ptr:#x}, shape={self.shape}, strides={self.strides}, "
            f"dtype={self.dtype}, device_id={self.device_id}, from process {self.exporter_pid})"
        )
