"""Helpers of the ``gpu`` tests that run on any CUDA driver: the simulated device or a real GPU.

Everything goes through the real ``cuda.bindings.driver`` (never tests/fake_driver.py):
device, pinned and managed memory, streams and copies, and a hand-made CUDA Array Interface
v3 producer over such memory.  The simulator's own hooks (delay, call counters) are reached
through ``simulator()``, which is None on a real driver.

Imported only by ``gpu`` tests, inside the test or its fixtures' setup, so that the host suite
never loads the driver.
"""

from __future__ import annotations

import ctypes
import threading

import numpy as np

from cuda.bindings import driver as drv

from simgpu.simgpu_support import DriverError, ok, simulator  # noqa: F401 - re-exported

NON_BLOCKING = 1  # CU_STREAM_NON_BLOCKING
DISABLE_TIMING = 2  # CU_EVENT_DISABLE_TIMING
MEM_ATTACH_GLOBAL = 1  # CU_MEM_ATTACH_GLOBAL

_lock = threading.Lock()
_primary: dict[int, object] = {}


def init() -> None:
    ok(drv.cuInit(0))


def device_count() -> int:
    init()
    return ok(drv.cuDeviceGetCount())


def primary(device: int):
    """Device ``device``'s primary context, retained once for the process (as the runtime does)."""
    with _lock:
        if device not in _primary:
            init()
            _primary[device] = ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(device))))
        return _primary[device]


def create_context(device: int):
    """A new context on ``device``, current to the calling thread: ``cuCtxCreate`` as the
    installed cuda-bindings spells it (13 takes the creation parameters first, 12 does not)."""
    import cuda.bindings

    handle = ok(drv.cuDeviceGet(device))
    if cuda.bindings.__version__.split(".")[0] == "12":
        return ok(drv.cuCtxCreate(0, handle))
    return ok(drv.cuCtxCreate(None, 0, handle))


def make_current(device: int) -> None:
    """Make ``device``'s primary context the calling thread's current context."""
    ok(drv.cuCtxSetCurrent(primary(device)))


def current_context() -> int:
    return int(ok(drv.cuCtxGetCurrent()))


class on_device:
    """``with on_device(d):`` device ``d``'s primary context pushed, popped afterwards."""

    def __init__(self, device: int):
        self.device = device

    def __enter__(self):
        ok(drv.cuCtxPushCurrent(primary(self.device)))
        return self

    def __exit__(self, *exc):
        ok(drv.cuCtxPopCurrent())


class Stream:
    """A driver stream of ``device``'s primary context (non-blocking unless ``flags`` say)."""

    def __init__(self, device: int = 0, flags: int = NON_BLOCKING):
        self.device = device
        with on_device(device):
            self.handle = ok(drv.cuStreamCreate(flags))
        self.ptr = int(self.handle)

    def __cuda_stream__(self):
        return (0, self.ptr)

    def synchronize(self) -> None:
        ok(drv.cuStreamSynchronize(self.handle))

    def close(self) -> None:
        if self.handle is not None:
            drv.cuStreamSynchronize(self.handle)
            ok(drv.cuStreamDestroy(self.handle))
            self.handle = None


class DeviceMemory:
    """``nbytes`` of device memory (cuMemAlloc) on ``device``; freed by ``close``."""

    kind = "device"

    def __init__(self, nbytes: int, device: int = 0):
        self.nbytes, self.device = nbytes, device
        with on_device(device):
            self.handle = ok(drv.cuMemAlloc(nbytes))
        self.ptr = int(self.handle)

    def upload(self, data: np.ndarray, offset: int = 0) -> None:
        """Copy ``data``'s bytes to ``ptr + offset``, done when this returns.

        cuMemcpyHtoD from pageable memory returns once the source is staged, its write still
        queued on the legacy stream, which a non-blocking stream does not wait for: the
        context is synchronized so that no later copy on such a stream can be overwritten.
        """
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        with on_device(self.device):
            ok(drv.cuMemcpyHtoD(self.ptr + offset, raw.ctypes.data, raw.nbytes))
            ok(drv.cuCtxSynchronize())

    def download(self, nbytes: int | None = None, offset: int = 0) -> np.ndarray:
        """The bytes at ``ptr + offset`` as a uint8 array (synchronous)."""
        nbytes = self.nbytes - offset if nbytes is None else nbytes
        out = np.zeros(nbytes, np.uint8)
        with on_device(self.device):
            ok(drv.cuCtxSynchronize())
            ok(drv.cuMemcpyDtoH(out.ctypes.data, self.ptr + offset, nbytes))
        return out

    def close(self) -> None:
        if self.handle is not None:
            with on_device(self.device):
                ok(drv.cuMemFree(self.handle))
            self.handle = None


class ManagedMemory(DeviceMemory):
    """``nbytes`` of managed memory (cuMemAllocManaged): host-readable, device ``device``'s."""

    kind = "managed"

    def __init__(self, nbytes: int, device: int = 0):
        self.nbytes, self.device = nbytes, device
        with on_device(device):
            self.handle = ok(drv.cuMemAllocManaged(nbytes, MEM_ATTACH_GLOBAL))
        self.ptr = int(self.handle)

    def array(self, dtype=np.uint8, shape=None) -> np.ndarray:
        """numpy over the memory itself (host-readable)."""
        return _host_array(self, dtype, shape)


class PinnedMemory:
    """``nbytes`` of page-locked host memory (cuMemHostAlloc); numpy reads it directly."""

    kind = "pinned"

    def __init__(self, nbytes: int, device: int = 0):
        self.nbytes, self.device = nbytes, device
        with on_device(device):
            self.ptr = int(ok(drv.cuMemHostAlloc(nbytes, 0)))
        ctypes.memset(self.ptr, 0, nbytes)

    def array(self, dtype=np.uint8, shape=None) -> np.ndarray:
        return _host_array(self, dtype, shape)

    def close(self) -> None:
        if self.ptr:
            with on_device(self.device):
                ok(drv.cuMemFreeHost(self.ptr))
            self.ptr = 0


def _host_array(memory, dtype, shape) -> np.ndarray:
    dtype = np.dtype(dtype)
    count = memory.nbytes // dtype.itemsize
    buffer = (ctypes.c_char * (count * dtype.itemsize)).from_address(memory.ptr)
    array = np.frombuffer(buffer, dtype=dtype, count=count)
    return array if shape is None else array.reshape(shape)


class CAIArray:
    """A hand-made CUDA Array Interface v3 producer over driver memory (cuda-bindings' own
    allocations carry no protocol): ``shape``, ``dtype``, byte ``strides`` (None: C order),
    ``offset`` bytes into ``memory``, ``stream`` the producer's stream (None: no key value)."""

    def __init__(self, memory, shape, dtype, *, strides=None, offset=0, stream=None, readonly=False):
        self.memory = memory
        self.ptr = memory.ptr + offset
        self.__cuda_array_interface__ = {
            "version": 3,
            "shape": tuple(shape),
            "typestr": np.dtype(dtype).str,
            "descr": [("", np.dtype(dtype).str)],
            "data": (self.ptr, readonly),
            "strides": None if strides is None else tuple(strides),
            "stream": stream,
        }


def span_bytes(shape, byte_strides, itemsize) -> tuple[int, int]:
    """(lowest, highest + itemsize) byte offsets from element 0 that a layout reaches."""
    low = high = 0
    for extent, stride in zip(shape, byte_strides):
        if extent == 0:
            return 0, 0
        step = (extent - 1) * stride
        low, high = (low + step, high) if step < 0 else (low, high + step)
    return low, high + itemsize


class Resources:
    """Streams and memory a test makes, released after it (its work finished first)."""

    def __init__(self):
        self.items: list = []

    def stream(self, device: int = 0, flags: int = NON_BLOCKING) -> Stream:
        return self._keep(Stream(device, flags))

    def device(self, nbytes: int, device: int = 0) -> DeviceMemory:
        return self._keep(DeviceMemory(nbytes, device))

    def managed(self, nbytes: int, device: int = 0) -> ManagedMemory:
        return self._keep(ManagedMemory(nbytes, device))

    def pinned(self, nbytes: int, device: int = 0) -> PinnedMemory:
        return self._keep(PinnedMemory(nbytes, device))

    def _keep(self, item):
        self.items.append(item)
        return item

    def release(self) -> None:
        for item in reversed(self.items):
            if isinstance(item, Stream):
                item.close()
        for device in list(_primary):
            with on_device(device):
                drv.cuCtxSynchronize()
        for item in reversed(self.items):
            if not isinstance(item, Stream):
                item.close()
        self.items.clear()
