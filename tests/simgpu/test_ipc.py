"""CUDA IPC between two real processes, one rule each, through cuda.bindings.driver only.

This process (pytest's) and one peer process, started once for the module, share memory and
events the way the driver documents: the exporter gets a 64-byte handle (a
``CUipcMemHandle``, ``CUipcEventHandle`` or ``CUmemPoolPtrExportData``), the bytes travel to
the other process, which opens them; a pool's shareable handle is a file descriptor, sent over
the Unix socket that joins the two (``multiprocessing.reduction.send_handle``, as
``multiprocessing`` itself passes descriptors).  The peer runs the snippets the tests send it
(``peer.run(code, **values)``: the snippet's ``result`` comes back).

Order between the processes is proved by order, not by time: the exporter's work is held by a
host function (``Gate``) until the test opens it, so a copy in the peer that sees the data was
ordered after it by the wait.
"""

from __future__ import annotations

import ctypes
import os
import socket
import subprocess
import sys
import textwrap
from multiprocessing import reduction
from multiprocessing.connection import Connection

import numpy as np
import pytest

from .simgpu_support import _SIMGPU_TREE, CUresult, Gate, drv, ok, run_python, wait_until

E = CUresult
N = 4096
INTERPROCESS = int(drv.CUevent_flags.CU_EVENT_INTERPROCESS) | int(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING)
POSIX_FD = drv.CUmemAllocationHandleType.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
PA = drv.CUpointer_attribute
DA = drv.CUdevice_attribute

PEER_PRELUDE = r'''
import ctypes, sys, threading
from multiprocessing import reduction
from multiprocessing.connection import Connection
import numpy as np
from cuda.bindings import driver as drv
N = 4096

def ok(r):
    code, *v = r if isinstance(r, tuple) else (r,)
    assert code == drv.CUresult.CUDA_SUCCESS, code
    return v[0] if len(v) == 1 else (tuple(v) or None)

def code(r):
    return r[0] if isinstance(r, tuple) else r

def to_bytes(h):
    return ctypes.string_at(h.getPtr(), 64)

def from_bytes(kind, data):
    h = kind()
    ctypes.memmove(h.getPtr(), data, 64)
    return h

def pull(ptr, n):
    out = np.zeros(n, np.uint8)
    ok(drv.cuMemcpyDtoH(out.ctypes.data, ptr, n))
    return out

def copy_later(ptr, n, stream):
    """A copy of [ptr, +n) on stream into memory of this process (device to device: a copy
    to pageable host memory would hold the host until the stream reaches it)."""
    out = int(ok(drv.cuMemAlloc(n)))
    ok(drv.cuMemcpyDtoDAsync(out, ptr, n, stream))
    return out

def push(ptr, data):
    ok(drv.cuMemcpyHtoD(ptr, data.ctypes.data, data.nbytes))
    ok(drv.cuCtxSynchronize())

def attr(a, ptr):
    return int(ok(drv.cuPointerGetAttribute(a, ptr)))

HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
keep = []
class Gate:
    def __init__(self):
        self.opened = threading.Event()
    def enqueue(self, stream):
        cb = HOST_FN(lambda _d: self.opened.wait(20))
        keep.append(cb)
        ok(drv.cuLaunchHostFunc(stream, drv.CUhostFn(ctypes.cast(cb, ctypes.c_void_p).value), 0))
        return self
    def open(self):
        self.opened.set()

sys.path.insert(0, sys.argv[2])  # the simulator's Python side, if not installed
from stridedview_simgpu._control import simulator
sim = simulator()  # None on a real driver
ok(drv.cuInit(0))
ctx = ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0))))
ok(drv.cuCtxSetCurrent(ctx))
conn = Connection(int(sys.argv[1]))
def send_fd(fd):
    reduction.send_handle(conn, fd, 0)
def recv_fd():
    return reduction.recv_handle(conn)
ns = dict(globals())
while True:
    message = conn.recv()
    if message is None:
        break
    source, values = message
    ns.update(values)
    ns["result"] = None
    try:
        exec(source, ns)
        conn.send(("ok", ns["result"]))
    except BaseException as exc:  # the test reads it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
'''


class Peer:
    """Another process on the simulated device (device 0's primary context current), running
    the snippets it is sent, with values bound first; ``result`` comes back."""

    def __init__(self):
        mine, theirs = socket.socketpair()
        self.socket = mine
        self.conn = Connection(os.dup(mine.fileno()))
        self.proc = subprocess.Popen(
            [sys.executable, "-c", PEER_PRELUDE, str(theirs.fileno()), _SIMGPU_TREE], pass_fds=(theirs.fileno(),)
        )
        theirs.close()
        self.pid = self.proc.pid

    def run(self, source: str, *, send_fd: int | None = None, recv_fd: bool = False, **values):
        """The snippet's ``result``; ``send_fd``: a descriptor the snippet takes with
        ``recv_fd()``; ``recv_fd``: the snippet sends one with ``send_fd(fd)``, returned as
        ``(result, fd)``."""
        self.conn.send((textwrap.dedent(source), values))
        if send_fd is not None:
            reduction.send_handle(self.conn, send_fd, self.pid)
        fd = reduction.recv_handle(self.conn) if recv_fd else None
        status, value = self.conn.recv()
        if status != "ok":
            raise AssertionError(f"peer: {value}")
        return (value, fd) if recv_fd else value

    def close(self):
        try:
            self.conn.send(None)
        finally:
            self.proc.wait(timeout=20)
            self.conn.close()
            self.socket.close()


@pytest.fixture(scope="module")
def peer(driver):
    p = Peer()
    yield p
    p.close()


def handle_bytes(h) -> bytes:
    return ctypes.string_at(h.getPtr(), 64)


def pattern(seed: int, n: int = N) -> np.ndarray:
    return ((np.arange(n) * 7 + seed) % 251).astype(np.uint8)


def push(ptr, data: np.ndarray) -> None:
    """Writes data at ptr, and waits for the copy (a pageable one may still be going on when
    cuMemcpyHtoD returns)."""
    ok(drv.cuMemcpyHtoD(ptr, data.ctypes.data, data.nbytes))
    ok(drv.cuCtxSynchronize())


def pull(ptr, n: int = N) -> np.ndarray:
    out = np.zeros(n, np.uint8)
    ok(drv.cuMemcpyDtoH(out.ctypes.data, ptr, n))
    return out


def ipc_pool():
    props = drv.CUmemPoolProps()
    props.allocType = drv.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
    props.handleTypes = POSIX_FD
    props.location.type = drv.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
    props.location.id = 0
    return ok(drv.cuMemPoolCreate(props))


# ---- attributes ----------------------------------------------------------------------------------


def test_device_attributes_say_ipc(driver, peer):
    """The device reports IPC events and pools exporting POSIX file descriptors (but not the
    POSIX export of cuMemCreate memory: HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED promises
    virtual memory management, which is absent); its UUID is the same in every process."""
    dev = ok(drv.cuDeviceGet(0))
    assert ok(drv.cuDeviceGetAttribute(DA.CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, dev)) == 1
    assert ok(drv.cuDeviceGetAttribute(DA.CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES, dev)) & int(POSIX_FD)
    assert ok(drv.cuDeviceGetAttribute(DA.CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev)) == 0
    for i in range(ok(drv.cuDeviceGetCount())):
        mine = bytes(ok(drv.cuDeviceGetUuid(ok(drv.cuDeviceGet(i)))).bytes)
        theirs = peer.run("result = bytes(ok(drv.cuDeviceGetUuid(ok(drv.cuDeviceGet(i)))).bytes)", i=i)
        assert mine == theirs


def test_pointer_attributes_of_local_memory(res):
    """cuMemAlloc memory is legacy-IPC capable with no handle types; pool memory names its
    pool and the pool's handle types; managed and pinned memory neither."""
    p = res.alloc(N)
    assert int(ok(drv.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p))) == 1
    assert int(ok(drv.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, p))) == 0
    assert int(ok(drv.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, p))) == 0
    pool = ipc_pool()
    stream = res.stream()
    q = int(ok(drv.cuMemAllocFromPoolAsync(N, pool, stream)))
    try:
        assert int(ok(drv.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, q))) == 0
        assert int(ok(drv.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, q))) == int(POSIX_FD)
        assert int(ok(drv.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, q))) == int(pool)
        assert int(ok(drv.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, q))) == int(
            drv.CUmemorytype.CU_MEMORYTYPE_DEVICE)
    finally:
        ok(drv.cuMemFreeAsync(q, stream))
        ok(drv.cuStreamSynchronize(stream))
        ok(drv.cuMemPoolDestroy(pool))
    managed = int(ok(drv.cuMemAllocManaged(N, 1)))
    pinned = res.host_alloc(N)
    try:
        for ptr, managed_flag, kind in ((managed, 1, drv.CUmemorytype.CU_MEMORYTYPE_DEVICE),
                                        (pinned, 0, drv.CUmemorytype.CU_MEMORYTYPE_HOST)):
            assert int(ok(drv.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, ptr))) == 0
            assert int(ok(drv.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_IS_MANAGED, ptr))) == managed_flag
            assert int(ok(drv.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, ptr))) == int(kind)
            assert int(ok(drv.cuPointerGetAttribute(PA.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, ptr))) == 0
    finally:
        ok(drv.cuMemFree(managed))


# ---- legacy memory handles -----------------------------------------------------------------------


def test_memory_written_in_one_process_is_read_in_the_other(res, peer):
    """An opened handle maps the exporter's bytes at an address of the importer's own: each
    process sees what the other wrote, and the import answers as device memory."""
    p = res.alloc(N)
    push(p, pattern(1))
    h = handle_bytes(ok(drv.cuIpcGetMemHandle(p)))
    seen = peer.run("""
        q = int(ok(drv.cuIpcOpenMemHandle(from_bytes(drv.CUipcMemHandle, h),
                                          drv.CUipcMem_flags.CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)))
        got = pull(q, N).tobytes()
        push(q, ((np.arange(N) * 7 + 2) % 251).astype(np.uint8))
        base, size = ok(drv.cuMemGetAddressRange(q))
        result = dict(q=q, got=got, base=int(base), size=size,
                      kind=attr(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, q),
                      legacy=attr(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, q),
                      managed=attr(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_IS_MANAGED, q),
                      start=attr(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, q + 100),
                      rsize=attr(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_RANGE_SIZE, q + 100))
        ok(drv.cuIpcCloseMemHandle(q))
    """, h=h, N=N)
    assert seen["got"] == pattern(1).tobytes()
    assert (seen["base"], seen["size"]) == (seen["q"], N)
    assert seen["kind"] == int(drv.CUmemorytype.CU_MEMORYTYPE_DEVICE)
    assert (seen["legacy"], seen["managed"]) == (0, 0)
    assert (seen["start"], seen["rsize"]) == (seen["q"], N)
    assert np.array_equal(pull(p), pattern(2))


def test_same_handle_opened_twice_shares_one_mapping(res, peer):
    """Opening a handle again in the same process returns the same address and counts a
    reference: the first close leaves the mapping, the second unmaps it; cuMemFree refuses
    an opened handle's memory."""
    p = res.alloc(N)
    push(p, pattern(3))
    h = handle_bytes(ok(drv.cuIpcGetMemHandle(p)))
    seen = peer.run("""
        handle = from_bytes(drv.CUipcMemHandle, h)
        a = int(ok(drv.cuIpcOpenMemHandle(handle, 1)))
        b = int(ok(drv.cuIpcOpenMemHandle(handle, 1)))
        freed = int(code(drv.cuMemFree(a)))  # not memory of this process's to free
        ok(drv.cuIpcCloseMemHandle(a))
        still = pull(a, N).tobytes()
        ok(drv.cuIpcCloseMemHandle(b))
        result = dict(a=a, b=b, freed=freed, still=still, gone=int(code(drv.cuMemGetAddressRange(a))),
                      again=int(code(drv.cuIpcCloseMemHandle(a))))
    """, h=h, N=N)
    assert seen["a"] == seen["b"]
    assert seen["freed"] == int(E.CUDA_ERROR_INVALID_VALUE)
    assert seen["still"] == pattern(3).tobytes()
    assert seen["gone"] == int(E.CUDA_ERROR_NOT_FOUND)
    assert seen["again"] == int(E.CUDA_ERROR_INVALID_VALUE)


def test_interior_pointer_names_the_whole_allocation(res, peer):
    """A handle got from an address inside an allocation opens the whole allocation, at its
    base."""
    p = res.alloc(N)
    push(p, pattern(4))
    h = handle_bytes(ok(drv.cuIpcGetMemHandle(p + 256)))
    seen = peer.run("""
        q = int(ok(drv.cuIpcOpenMemHandle(from_bytes(drv.CUipcMemHandle, h), 1)))
        result = (ok(drv.cuMemGetAddressRange(q))[1], pull(q, N).tobytes())
        ok(drv.cuIpcCloseMemHandle(q))
    """, h=h, N=N)
    assert seen == (N, pattern(4).tobytes())


def test_refused_exports(res):
    """Only cuMemAlloc memory has a legacy handle (pool, managed and pinned memory are
    INVALID_VALUE); opening a handle in its exporting process is INVALID_CONTEXT; a pool made
    without a shareable handle type exports none."""
    stream = res.stream()
    q = int(ok(drv.cuMemAllocAsync(N, stream)))
    managed = int(ok(drv.cuMemAllocManaged(N, 1)))
    pinned = res.host_alloc(N)
    try:
        for ptr in (q, managed, pinned):
            assert drv.cuIpcGetMemHandle(ptr)[0] == E.CUDA_ERROR_INVALID_VALUE
    finally:
        ok(drv.cuMemFreeAsync(q, stream))
        ok(drv.cuStreamSynchronize(stream))
        ok(drv.cuMemFree(managed))
    p = res.alloc(N)
    h = ok(drv.cuIpcGetMemHandle(p))
    assert drv.cuIpcOpenMemHandle(h, 1)[0] == E.CUDA_ERROR_INVALID_CONTEXT
    default = ok(drv.cuDeviceGetDefaultMemPool(ok(drv.cuDeviceGet(0))))
    assert drv.cuMemPoolExportToShareableHandle(default, POSIX_FD, 0)[0] == E.CUDA_ERROR_INVALID_VALUE


def test_handle_of_freed_memory_opens_nothing(peer):
    """A handle whose allocation the exporter freed is refused (INVALID_HANDLE), even if
    another allocation now lies at the same place."""
    p = int(ok(drv.cuMemAlloc(N)))
    h = handle_bytes(ok(drv.cuIpcGetMemHandle(p)))
    ok(drv.cuMemFree(p))
    again = int(ok(drv.cuMemAlloc(N)))
    try:
        assert again == p
        result = peer.run("result = int(code(drv.cuIpcOpenMemHandle(from_bytes(drv.CUipcMemHandle, h), 1)))", h=h)
        assert result == int(E.CUDA_ERROR_INVALID_HANDLE)
    finally:
        ok(drv.cuMemFree(again))


EXPORT_AND_EXIT = r"""
import ctypes, sys
from cuda.bindings import driver as drv
assert drv.cuInit(0)[0] == 0
ctx = drv.cuDevicePrimaryCtxRetain(drv.cuDeviceGet(0)[1])[1]
drv.cuCtxSetCurrent(ctx)
p = drv.cuMemAlloc(4096)[1]
e = drv.cuEventCreate(6)[1]
mem = ctypes.string_at(drv.cuIpcGetMemHandle(p)[1].getPtr(), 64)
ev = ctypes.string_at(drv.cuIpcGetEventHandle(e)[1].getPtr(), 64)
print((mem + ev).hex())
"""


def test_handles_of_an_exited_process_open_nothing(driver, primary):
    """Once the exporting process has exited, its memory and event handles are refused
    (INVALID_HANDLE), not mapped."""
    done = run_python(EXPORT_AND_EXIT, timeout=60)
    assert done.returncode == 0, done.stderr
    data = bytes.fromhex(done.stdout.strip())
    mem, ev = drv.CUipcMemHandle(), drv.CUipcEventHandle()
    ctypes.memmove(mem.getPtr(), data[:64], 64)
    ctypes.memmove(ev.getPtr(), data[64:], 64)
    assert drv.cuIpcOpenMemHandle(mem, 1)[0] == E.CUDA_ERROR_INVALID_HANDLE
    assert drv.cuIpcOpenEventHandle(ev)[0] == E.CUDA_ERROR_INVALID_HANDLE


def test_garbage_handle_is_invalid_value(driver, primary):
    """64 bytes that no exporter wrote are INVALID_VALUE."""
    assert drv.cuIpcOpenMemHandle(drv.CUipcMemHandle(), 1)[0] == E.CUDA_ERROR_INVALID_VALUE
    assert drv.cuIpcOpenEventHandle(drv.CUipcEventHandle())[0] == E.CUDA_ERROR_INVALID_VALUE


# ---- pools ---------------------------------------------------------------------------------------


def test_pool_pointer_roundtrip_and_free_in_the_importer(res, peer):
    """A pool exported as a file descriptor is imported in another process, and a pointer
    from it too: the importer reads and writes the exporter's bytes, sees the imported pool in
    the pointer's attributes, allocates nothing from it, and its cuMemFreeAsync unmaps the
    pointer there alone."""
    pool = ipc_pool()
    stream = res.stream()
    try:
        fd = ok(drv.cuMemPoolExportToShareableHandle(pool, POSIX_FD, 0))
        p = int(ok(drv.cuMemAllocFromPoolAsync(N, pool, stream)))
        ok(drv.cuStreamSynchronize(stream))
        push(p, pattern(5))
        data = handle_bytes(ok(drv.cuMemPoolExportPointer(p)))
        seen = peer.run("""
            pool = ok(drv.cuMemPoolImportFromShareableHandle(recv_fd(), POSIX_FD, 0))
            q = int(ok(drv.cuMemPoolImportPointer(pool, from_bytes(drv.CUmemPoolPtrExportData, data))))
            got = pull(q, N).tobytes()
            push(q, ((np.arange(N) * 7 + 6) % 251).astype(np.uint8))
            s = ok(drv.cuStreamCreate(1))
            result = dict(got=got, pool=int(pool),
                          mempool=attr(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, q),
                          types=attr(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, q),
                          kind=attr(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, q),
                          legacy=attr(drv.CUpointer_attribute.CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, q),
                          size=ok(drv.cuMemGetAddressRange(q))[1],
                          alloc=int(code(drv.cuMemAllocFromPoolAsync(N, pool, s))))
            ok(drv.cuMemFreeAsync(q, s))
            ok(drv.cuStreamSynchronize(s))
            result["after"] = int(code(drv.cuMemGetAddressRange(q)))
            ok(drv.cuStreamDestroy(s))
            ok(drv.cuMemPoolDestroy(pool))
        """, send_fd=fd, data=data, N=N, POSIX_FD=POSIX_FD)
        os.close(fd)
        assert seen["got"] == pattern(5).tobytes()
        assert seen["mempool"] == seen["pool"]
        assert seen["types"] == int(POSIX_FD)
        assert seen["kind"] == int(drv.CUmemorytype.CU_MEMORYTYPE_DEVICE)
        assert (seen["legacy"], seen["size"]) == (0, N)
        assert seen["alloc"] == int(E.CUDA_ERROR_INVALID_VALUE)
        assert seen["after"] == int(E.CUDA_ERROR_NOT_FOUND)
        assert np.array_equal(pull(p), pattern(6))  # the exporter's pointer is untouched
        ok(drv.cuMemFreeAsync(p, stream))
        ok(drv.cuStreamSynchronize(stream))
    finally:
        ok(drv.cuMemPoolDestroy(pool))


def test_pool_pointer_freed_by_the_exporter_imports_nothing(res, peer):
    """Export data of a pointer the exporter freed is refused (INVALID_HANDLE)."""
    pool = ipc_pool()
    stream = res.stream()
    try:
        fd = ok(drv.cuMemPoolExportToShareableHandle(pool, POSIX_FD, 0))
        p = int(ok(drv.cuMemAllocFromPoolAsync(N, pool, stream)))
        data = handle_bytes(ok(drv.cuMemPoolExportPointer(p)))
        ok(drv.cuMemFreeAsync(p, stream))
        ok(drv.cuStreamSynchronize(stream))
        result = peer.run("""
            pool = ok(drv.cuMemPoolImportFromShareableHandle(recv_fd(), POSIX_FD, 0))
            result = int(code(drv.cuMemPoolImportPointer(pool, from_bytes(drv.CUmemPoolPtrExportData, data))))
            ok(drv.cuMemPoolDestroy(pool))
        """, send_fd=fd, data=data, POSIX_FD=POSIX_FD)
        os.close(fd)
        assert result == int(E.CUDA_ERROR_INVALID_HANDLE)
    finally:
        ok(drv.cuMemPoolDestroy(pool))


# ---- events --------------------------------------------------------------------------------------


def test_interprocess_event_flags(res):
    """INTERPROCESS needs DISABLE_TIMING (INVALID_VALUE alone); only an interprocess event has
    an IPC handle; opening it in the exporting process is INVALID_CONTEXT."""
    assert drv.cuEventCreate(int(drv.CUevent_flags.CU_EVENT_INTERPROCESS))[0] == E.CUDA_ERROR_INVALID_VALUE
    plain = res.event(int(drv.CUevent_flags.CU_EVENT_DISABLE_TIMING))
    assert drv.cuIpcGetEventHandle(plain)[0] == E.CUDA_ERROR_INVALID_VALUE
    event = res.event(INTERPROCESS)
    assert drv.cuIpcOpenEventHandle(ok(drv.cuIpcGetEventHandle(event)))[0] == E.CUDA_ERROR_INVALID_CONTEXT


@pytest.fixture
def shared(res, peer):
    """A buffer and an interprocess event of this process, opened by the peer (as q, ev)."""
    p = res.alloc(N)
    push(p, pattern(0))
    event = res.event(INTERPROCESS)
    peer.run("""
        q = int(ok(drv.cuIpcOpenMemHandle(from_bytes(drv.CUipcMemHandle, h), 1)))
        ev = ok(drv.cuIpcOpenEventHandle(from_bytes(drv.CUipcEventHandle, e)))
        s = ok(drv.cuStreamCreate(1))
    """, h=handle_bytes(ok(drv.cuIpcGetMemHandle(p))), e=handle_bytes(ok(drv.cuIpcGetEventHandle(event))))
    yield p, event
    peer.run("""
        ok(drv.cuStreamSynchronize(s))
        ok(drv.cuStreamDestroy(s))
        ok(drv.cuEventDestroy(ev))
        ok(drv.cuIpcCloseMemHandle(q))
    """)


def test_stream_wait_on_an_imported_event_orders_by_the_record(res, peer, shared):
    """The importer's stream waits, on the device, for the exporter's record: a copy enqueued
    after the wait sees the exporter's write made after a held host function, and the wait is
    no host wait (host_waits does not move); the event reads NOT_READY meanwhile."""
    p, event = shared
    stream = res.stream(1)
    gate = Gate().enqueue(stream)
    src = pattern(7)
    ok(drv.cuMemcpyHtoDAsync(p, src.ctypes.data, N, stream))
    ok(drv.cuEventRecord(event, stream))
    seen = peer.run("""
        before = sim.counter("host_waits") if sim else 0
        ok(drv.cuStreamWaitEvent(s, ev, 0))
        copied = copy_later(q, N, s)
        result = dict(waits=(sim.counter("host_waits") if sim else 0) - before, query=int(code(drv.cuEventQuery(ev))),
                      stream=int(code(drv.cuStreamQuery(s))))
    """)
    assert seen == dict(waits=0, query=int(E.CUDA_ERROR_NOT_READY), stream=int(E.CUDA_ERROR_NOT_READY))
    gate.open()
    got = peer.run("""
        ok(drv.cuStreamSynchronize(s))
        result = (pull(copied, N).tobytes(), int(code(drv.cuEventQuery(ev))))
        ok(drv.cuMemFree(copied))
    """)
    assert got == (src.tobytes(), int(E.CUDA_SUCCESS))
    ok(drv.cuStreamSynchronize(stream))


def test_wait_is_for_the_record_before_it_not_a_later_one(res, peer, shared):
    """A wait made after record 1 waits for record 1 only: record 2, made later on another
    stream and still held when record 1 completes, does not hold the wait back; a wait made
    after record 2 does wait for it."""
    p, event = shared
    first, second = res.stream(1), res.stream(1)
    gate1 = Gate().enqueue(first)
    ok(drv.cuEventRecord(event, first))  # record 1, held
    peer.run("ok(drv.cuStreamWaitEvent(s, ev, 0)); ok(drv.cuMemsetD8Async(q, 9, N, s))")
    gate2 = Gate().enqueue(second)
    ok(drv.cuEventRecord(event, second))  # record 2, held
    assert peer.run("result = int(code(drv.cuStreamQuery(s)))") == int(E.CUDA_ERROR_NOT_READY)
    gate1.open()
    assert peer.run("ok(drv.cuStreamSynchronize(s)); result = pull(q, 4).tolist()") == [9] * 4
    assert drv.cuEventQuery(event)[0] == E.CUDA_ERROR_NOT_READY  # record 2 still held
    peer.run("ok(drv.cuStreamWaitEvent(s, ev, 0)); ok(drv.cuMemsetD8Async(q, 10, N, s))")
    assert peer.run("result = int(code(drv.cuStreamQuery(s)))") == int(E.CUDA_ERROR_NOT_READY)
    gate2.open()
    assert peer.run("ok(drv.cuStreamSynchronize(s)); result = pull(q, 4).tolist()") == [10] * 4


def test_event_synchronize_on_an_imported_event_is_a_host_wait(res, peer, shared):
    """cuEventSynchronize of an imported event blocks until the exporter's record completes
    and counts as one host wait (the simulator's host_waits)."""
    p, event = shared
    stream = res.stream(1)
    gate = Gate().enqueue(stream)
    ok(drv.cuEventRecord(event, stream))
    peer.run("""
        import threading
        before = sim.counter("host_waits") if sim else None
        waiter = threading.Thread(target=lambda: ok(drv.cuEventSynchronize(ev)))
        waiter.start()
    """)
    assert gate.entered.wait(10)
    assert peer.run("waiter.join(0.05); result = waiter.is_alive()") is True
    gate.open()
    done = peer.run("waiter.join(20); result = (waiter.is_alive(), sim and sim.counter('host_waits') - before)")
    assert done[0] is False
    assert done[1] in (None, 1)  # None: a real driver, no counter


def test_record_in_the_importer_is_seen_by_the_exporter(res, peer, shared):
    """Either process may record the event: the importer's record, held there, keeps the
    exporter's query NOT_READY and its stream wait pending until it completes."""
    p, event = shared
    peer.run("g = Gate().enqueue(s); ok(drv.cuMemsetD8Async(q, 11, N, s)); ok(drv.cuEventRecord(ev, s))")
    assert drv.cuEventQuery(event)[0] == E.CUDA_ERROR_NOT_READY
    stream = res.stream(1)
    ok(drv.cuStreamWaitEvent(stream, event, 0))
    out = res.alloc(N)
    ok(drv.cuMemcpyDtoDAsync(out, p, N, stream))
    assert drv.cuStreamQuery(stream)[0] == E.CUDA_ERROR_NOT_READY
    peer.run("g.open()")
    ok(drv.cuStreamSynchronize(stream))
    assert (pull(out) == 11).all()
    assert wait_until(lambda: drv.cuEventQuery(event)[0] == E.CUDA_SUCCESS)


RECORD_HELD_THEN_WAIT = r"""
import ctypes, sys, time
from cuda.bindings import driver as drv
assert drv.cuInit(0)[0] == 0
ctx = drv.cuDevicePrimaryCtxRetain(drv.cuDeviceGet(0)[1])[1]
drv.cuCtxSetCurrent(ctx)
e = drv.cuEventCreate(6)[1]
s = drv.cuStreamCreate(1)[1]
hold = ctypes.CFUNCTYPE(None, ctypes.c_void_p)(lambda _d: time.sleep(600))
drv.cuLaunchHostFunc(s, drv.CUhostFn(ctypes.cast(hold, ctypes.c_void_p).value), 0)
assert drv.cuEventRecord(e, s)[0] == 0
print(ctypes.string_at(drv.cuIpcGetEventHandle(e)[1].getPtr(), 64).hex(), flush=True)
sys.stdin.read()
"""


def test_wait_on_a_record_of_an_exited_process_ends(res, sim_only):
    """A stream waiting for a record that its exporting process never completes (it exited
    with the record pending) does not wait forever: the record is gone with the process."""
    proc = subprocess.Popen([sys.executable, "-c", RECORD_HELD_THEN_WAIT], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        h = drv.CUipcEventHandle()
        ctypes.memmove(h.getPtr(), bytes.fromhex(proc.stdout.readline().strip()), 64)
        event = ok(drv.cuIpcOpenEventHandle(h))
        res.events.append(event)
        stream = res.stream(1)
        ok(drv.cuStreamWaitEvent(stream, event, 0))
        assert drv.cuStreamQuery(stream)[0] == E.CUDA_ERROR_NOT_READY
        assert drv.cuEventQuery(event)[0] == E.CUDA_ERROR_NOT_READY
    finally:
        proc.kill()
        proc.wait(timeout=20)
    ok(drv.cuStreamSynchronize(stream))
    assert drv.cuEventQuery(event)[0] == E.CUDA_SUCCESS


# ---- the checker ---------------------------------------------------------------------------------


def test_checker_sees_imports_as_the_importers_allocations(res, peer, shared, sim_only):
    """For the importer's checker an import is one of its allocations: two of its streams
    writing it unordered race, and a kernel given it after cuIpcCloseMemHandle is a use after
    free.  (Order across processes is not checked.)"""
    reports = peer.run(r"""
        previous = sim.set_check(1)
        start = sim.check_report_count()
        a, b = ok(drv.cuStreamCreate(1)), ok(drv.cuStreamCreate(1))
        ok(drv.cuMemsetD8Async(q, 1, N, a))
        ok(drv.cuMemsetD8Async(q, 2, N, b))
        ok(drv.cuCtxSynchronize())
        extra = int(ok(drv.cuIpcOpenMemHandle(from_bytes(drv.CUipcMemHandle, h2), 1)))
        ok(drv.cuIpcCloseMemHandle(extra))
        ptx = (b".version 8.0\n.target sm_90\n.address_size 64\n"
               b".visible .entry touch(.param .u64 .ptr .global .align 8 touch_p)\n{\n ret;\n}\n\0")
        module = ok(drv.cuModuleLoadData(ptx))
        fn = ok(drv.cuModuleGetFunction(module, b"touch"))
        arg = ctypes.c_uint64(extra)
        params = (ctypes.c_void_p * 1)(ctypes.addressof(arg))
        ok(drv.cuLaunchKernel(fn, 1, 1, 1, 32, 1, 1, 0, a, ctypes.addressof(params), 0))
        ok(drv.cuCtxSynchronize())
        result = sim.check_reports(start)
        sim.set_check(previous)
        for x in (a, b):
            ok(drv.cuStreamDestroy(x))
        ok(drv.cuModuleUnload(module))
    """, h2=handle_bytes(ok(drv.cuIpcGetMemHandle(res.alloc(N)))), N=N)
    assert len(reports) == 2, reports
    assert reports[0].startswith("simgpu: check: race: ") and "cuIpcOpenMemHandle" in reports[0], reports[0]
    assert "use after free" in reports[1] and "cuIpcCloseMemHandle" in reports[1], reports[1]
