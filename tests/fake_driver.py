"""A fake of ``cuda.bindings.driver`` that models what the CUDA driver promises.

Install it with ``stridedview._driver.use_api(FakeDriver())`` (and ``use_api(None)``
afterwards).  It does not only record calls: it keeps the state the real driver
keeps, and refuses what the real driver refuses (shared/CUDA_SEMANTICS.md):

- ``cuInit(0)`` must come first; any other call before it is
  ``CUDA_ERROR_NOT_INITIALIZED`` (``cuGetErrorName``/``cuGetErrorString`` excepted).
- ``devices`` devices (``cuDeviceGetCount``, ``cuDeviceGet``), each with one
  primary context (``primary_contexts[d]``), retained once by "the runtime" at
  start; ``cuDevicePrimaryCtxRetain``/``Release`` count references, and
  ``cuDevicePrimaryCtxReset`` (what ``cudaDeviceReset`` does) destroys every
  event and stream of that context but keeps its handle, which stays usable.
  ``reset_device(d)`` does the same on behalf of another library.
- Each thread has a stack of current contexts (``cuCtxGetCurrent``,
  ``cuCtxSetCurrent``, ``cuCtxPushCurrent``, ``cuCtxPopCurrent``).  Every new
  thread starts with NONE: ``cuCtxGetCurrent`` gives a NULL context, and calls
  that need one (``cuEventCreate``, ``cuCtxGetDevice``, handles 0/1/2 ...) fail
  with ``CUDA_ERROR_INVALID_CONTEXT``.  Only the thread that constructs the fake
  gets ``current_device``'s primary context made current (default device 0, as
  a test's setup would; None for none).
- A stream belongs to one context (``cuStreamGetCtx``); handles 0 and 1 name the
  legacy default stream of the context current in the calling thread AT THE TIME
  OF THE CALL, 2 its per-thread default stream (one per thread and context).
- A stream is a list of operations.  ``cuEventRecord(event, stream)`` captures
  the stream's current length, and fails with ``CUDA_ERROR_INVALID_HANDLE`` if the
  event and the stream belong to different contexts; recording again overwrites
  the capture.  ``cuStreamWaitEvent(stream, event, 0)`` appends to ``stream`` a
  dependency on the point the event captured *when the wait is made* (the event
  may come from another context or device); an event never recorded captures
  nothing.  An event belongs to the context current at ``cuEventCreate``.
  ``cuEventDestroy`` ends it (conservatively, with some context current, as its
  documented CUDA_ERROR_INVALID_CONTEXT allows); ``live_events()`` counts the
  events alive, ``created_events`` keeps every event ever created.
- ``enqueue_write(stream, tag)`` puts a producer kernel on a stream and
  ``enqueue_read(stream)`` a consumer kernel, returning the set of write tags the
  consumer is guaranteed to see: every write earlier on its stream, plus,
  transitively, every write captured by the events its stream waited on.  Both
  take ``context=`` to resolve handles 0/1/2 in that context (a library launching
  with it current) instead of the calling thread's current one.
- ``cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)`` knows the
  ranges given to ``register_pointer``; any other pointer (host memory) is
  ``CUDA_ERROR_INVALID_VALUE``.
- Device memory: ``allocate(nbytes, device)`` gives an address backed by a bytearray
  (and registered as with ``register_pointer``); ``device_bytes`` reads it back.
  ``cuMemcpyAsync``, ``cuMemcpy2DAsync`` and ``cuMemcpy3DAsync`` really copy, between
  such memory and real host memory (read and written through ctypes), checking what
  the driver checks: a current context, a live stream, pitches at least the width,
  each side's memory type matching its address (a host address given as device
  memory is ``CUDA_ERROR_INVALID_VALUE``).  Each copy is appended to ``copies`` as
  ``(name, stream model, write tags it is guaranteed to see, arguments)`` and to its
  stream as a write tagged ``("copy", n)``.
- ``cuTensorMapEncodeTiled`` checks the documented rules (alignment, rank, strides,
  box and element strides, interleave and swizzle, NaN out-of-bounds fill only for a
  floating-point data type) and returns a ``CUtensorMap``
  holding the arguments it was given (``encoded``).
- Host-blocking calls (``cuStreamSynchronize``, ``cuEventSynchronize``,
  ``cuCtxSynchronize``) succeed but are appended to ``violations``; so is an event
  recorded by one thread and waited on by another (one event per thread is the
  rule that keeps ordering correct under threads).

Every driver call is appended to ``calls`` as ``(name, args)``, in order, and to
``calls_by_thread[threading.get_ident()]``.  Helper methods without the ``cu``
prefix (``new_context``, ``new_stream``, ``reuse_stream_handle`` ...) stand for what
another library does; they are not recorded.

Results are tuples ``(CUresult, values...)`` as in cuda-bindings; on failure the
values are None.  Handles are small objects (``CUcontext``, ``CUstream``,
``CUevent``, ``CUdevice``) that ``int()`` turns into their address, and every
handle argument accepts an int or any such object, as cuda-bindings does.  Like
cuda-bindings, ``cuPointerGetAttribute`` converts its attribute with
``attribute.value`` and so raises AttributeError for a plain int
(``enum_attributes=False`` accepts ints too).

Nothing here uses ``assert``: the checks hold under ``python -O``.
"""

from __future__ import annotations

import enum
import itertools
import threading
from collections import defaultdict

__all__ = [
    "CUresult",
    "CUpointer_attribute",
    "CUevent_flags",
    "CUcontext",
    "CUstream",
    "CUevent",
    "CUdevice",
    "CU_STREAM_LEGACY",
    "CU_STREAM_PER_THREAD",
    "HOST_BLOCKING_CALLS",
    "FakeDriver",
    "ForbiddenDriver",
]

CU_STREAM_LEGACY = 1
CU_STREAM_PER_THREAD = 2

#: The calls that block the host until device work is done.
HOST_BLOCKING_CALLS = ("cuStreamSynchronize", "cuEventSynchronize", "cuCtxSynchronize")


class CUresult(enum.IntEnum):
    """The driver's result codes (real names and values; a subset)."""

    CUDA_SUCCESS = 0
    CUDA_ERROR_INVALID_VALUE = 1
    CUDA_ERROR_OUT_OF_MEMORY = 2
    CUDA_ERROR_NOT_INITIALIZED = 3
    CUDA_ERROR_DEINITIALIZED = 4
    CUDA_ERROR_NO_DEVICE = 100
    CUDA_ERROR_INVALID_DEVICE = 101
    CUDA_ERROR_INVALID_CONTEXT = 201
    CUDA_ERROR_CONTEXT_ALREADY_CURRENT = 202
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_NOT_READY = 600
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_NOT_PERMITTED = 800
    CUDA_ERROR_NOT_SUPPORTED = 801
    CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED = 900
    CUDA_ERROR_UNKNOWN = 999


_ERROR_TEXT = {
    CUresult.CUDA_SUCCESS: b"no error",
    CUresult.CUDA_ERROR_INVALID_VALUE: b"invalid argument",
    CUresult.CUDA_ERROR_NOT_INITIALIZED: b"initialization error",
    CUresult.CUDA_ERROR_NO_DEVICE: b"no CUDA-capable device is detected",
    CUresult.CUDA_ERROR_INVALID_CONTEXT: b"invalid device context",
    CUresult.CUDA_ERROR_INVALID_HANDLE: b"invalid resource handle",
    CUresult.CUDA_ERROR_ILLEGAL_ADDRESS: b"an illegal memory access was encountered",
}


class CUpointer_attribute(enum.IntEnum):
    """Pointer attributes (real names and values; a subset)."""

    CU_POINTER_ATTRIBUTE_CONTEXT = 1
    CU_POINTER_ATTRIBUTE_MEMORY_TYPE = 2
    CU_POINTER_ATTRIBUTE_DEVICE_POINTER = 3
    CU_POINTER_ATTRIBUTE_HOST_POINTER = 4
    CU_POINTER_ATTRIBUTE_IS_MANAGED = 8
    CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9


class CUevent_flags(enum.IntEnum):
    """Flags of cuEventCreate."""

    CU_EVENT_DEFAULT = 0
    CU_EVENT_BLOCKING_SYNC = 1
    CU_EVENT_DISABLE_TIMING = 2
    CU_EVENT_INTERPROCESS = 4


_EVENT_FLAGS_MASK = 0x7
_STREAM_WAIT_FLAGS = (0, 1)  # CU_EVENT_WAIT_DEFAULT, CU_EVENT_WAIT_EXTERNAL


class CUmemorytype(enum.IntEnum):
    CU_MEMORYTYPE_HOST = 1
    CU_MEMORYTYPE_DEVICE = 2
    CU_MEMORYTYPE_ARRAY = 3
    CU_MEMORYTYPE_UNIFIED = 4


class CUtensorMapDataType(enum.IntEnum):
    CU_TENSOR_MAP_DATA_TYPE_UINT8 = 0
    CU_TENSOR_MAP_DATA_TYPE_UINT16 = 1
    CU_TENSOR_MAP_DATA_TYPE_UINT32 = 2
    CU_TENSOR_MAP_DATA_TYPE_INT32 = 3
    CU_TENSOR_MAP_DATA_TYPE_UINT64 = 4
    CU_TENSOR_MAP_DATA_TYPE_INT64 = 5
    CU_TENSOR_MAP_DATA_TYPE_FLOAT16 = 6
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32 = 7
    CU_TENSOR_MAP_DATA_TYPE_FLOAT64 = 8
    CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 = 9
    CU_TENSOR_MAP_DATA_TYPE_FLOAT32_FTZ = 10
    CU_TENSOR_MAP_DATA_TYPE_TFLOAT32 = 11
    CU_TENSOR_MAP_DATA_TYPE_TFLOAT32_FTZ = 12


class CUtensorMapInterleave(enum.IntEnum):
    CU_TENSOR_MAP_INTERLEAVE_NONE = 0
    CU_TENSOR_MAP_INTERLEAVE_16B = 1
    CU_TENSOR_MAP_INTERLEAVE_32B = 2


class CUtensorMapSwizzle(enum.IntEnum):
    CU_TENSOR_MAP_SWIZZLE_NONE = 0
    CU_TENSOR_MAP_SWIZZLE_32B = 1
    CU_TENSOR_MAP_SWIZZLE_64B = 2
    CU_TENSOR_MAP_SWIZZLE_128B = 3


class CUtensorMapL2promotion(enum.IntEnum):
    CU_TENSOR_MAP_L2_PROMOTION_NONE = 0
    CU_TENSOR_MAP_L2_PROMOTION_L2_64B = 1
    CU_TENSOR_MAP_L2_PROMOTION_L2_128B = 2
    CU_TENSOR_MAP_L2_PROMOTION_L2_256B = 3


class CUtensorMapFloatOOBfill(enum.IntEnum):
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE = 0
    CU_TENSOR_MAP_FLOAT_OOB_FILL_NAN_REQUEST_ZERO_FMA = 1


class _Params:
    """A copy-parameter struct of cuda-bindings: every field 0 until set; unknown fields refused."""

    _FIELDS: tuple[str, ...] = ()

    def __init__(self):
        for name in self._FIELDS:
            object.__setattr__(self, name, 0)

    def __setattr__(self, name, value):
        if name not in self._FIELDS:
            raise AttributeError(f"{type(self).__name__} has no field {name!r}")
        object.__setattr__(self, name, value)


_SIDE = ("MemoryType", "Host", "Device", "Pitch", "XInBytes", "Y")


class CUDA_MEMCPY2D(_Params):
    _FIELDS = tuple(side + f for side in ("src", "dst") for f in _SIDE) + ("WidthInBytes", "Height")


class CUDA_MEMCPY3D(_Params):
    _FIELDS = tuple(
        side + f for side in ("src", "dst") for f in _SIDE + ("Z", "LOD", "Height")
    ) + ("WidthInBytes", "Height", "Depth", "reserved0", "reserved1")


class CUtensorMap:
    """What cuTensorMapEncodeTiled returns; the fake keeps the arguments in ``encoded``."""

    def __init__(self, encoded: dict):
        self.encoded = encoded


class _Handle:
    """An opaque driver handle: ``int()`` gives its address, like cuda-bindings' types."""

    __slots__ = ("_value",)

    def __init__(self, value=0):
        self._value = int(value)

    def __int__(self):
        return self._value

    __index__ = __int__

    def getPtr(self):
        return self._value

    def __eq__(self, other):
        if isinstance(other, _Handle):
            return type(other) is type(self) and other._value == self._value
        return NotImplemented

    def __hash__(self):
        return hash((type(self).__name__, self._value))

    def __repr__(self):
        return f"<{type(self).__name__} {self._value:#x}>"


class CUcontext(_Handle):
    __slots__ = ()


class CUstream(_Handle):
    __slots__ = ()


class CUevent(_Handle):
    __slots__ = ()


class CUdevice(_Handle):
    __slots__ = ()

    def __repr__(self):
        return f"<CUdevice {self._value}>"


class DriverError(Exception):
    """Raised inside the fake to return a CUresult from a call."""

    def __init__(self, code):
        super().__init__(code)
        self.code = CUresult(code)


# --- the modelled state ------------------------------------------------------

class Context:
    """A context: its device and its default streams."""

    def __init__(self, handle: int, device: int):
        self.handle = handle
        self.device = device
        self.legacy_stream = Stream(CU_STREAM_LEGACY, self, "legacy")
        self.per_thread_streams: dict[int, Stream] = {}

    def per_thread_stream(self, thread: int) -> "Stream":
        stream = self.per_thread_streams.get(thread)
        if stream is None:
            stream = self.per_thread_streams[thread] = Stream(
                CU_STREAM_PER_THREAD, self, f"per-thread {thread}"
            )
        return stream

    def __repr__(self):
        return f"Context({self.handle:#x}, device={self.device})"


class Stream:
    """A stream: its context and its operations, in order.

    Operations are ``("write", tag)``, ``("read", visible tags)`` and
    ``("wait", captured point or None, event handle)``.
    """

    def __init__(self, handle: int, context: Context, label: str = ""):
        self.handle = handle
        self.context = context
        self.label = label
        self.ops: list[tuple] = []
        self.alive = True

    def __repr__(self):
        return f"Stream({self.handle:#x} {self.label}, context={self.context.handle:#x})"


class Event:
    """An event: its context, its flags and what its last record captured."""

    def __init__(self, handle: int, context: Context, flags: int, thread: int):
        self.handle = handle
        self.context = context
        self.flags = flags
        self.created_by = thread
        self.captured: tuple[Stream, int] | None = None
        self.recorded_by: int | None = None
        self.records = 0
        self.alive = True

    def __repr__(self):
        return f"Event({self.handle:#x}, context={self.context.handle:#x}, flags={self.flags})"


def _visible(stream: Stream, length: int, seen: set) -> set:
    """Write tags guaranteed done before operation ``length`` of ``stream`` starts."""
    key = (id(stream), length)
    if key in seen:
        return set()
    seen.add(key)
    tags = set()
    for op in stream.ops[:length]:
        if op[0] == "write":
            tags.add(op[1])
        elif op[0] == "wait" and op[1] is not None:
            waited_stream, waited_length = op[1]
            tags |= _visible(waited_stream, waited_length, seen)
    return tags


def _driver_call(outputs: int, *, needs_init: bool = True):
    """Make a method a recorded driver call returning ``(CUresult, *outputs values)``."""

    def decorate(impl):
        name = impl.__name__

        def call(self, *args):
            with self._lock:
                self.calls.append((name, args))
                self.calls_by_thread[threading.get_ident()].append((name, args))
                self._convert_arguments(name, args)
                try:
                    if needs_init and not self.initialized:
                        raise DriverError(CUresult.CUDA_ERROR_NOT_INITIALIZED)
                    self._injected_failure(name)
                    values = impl(self, *args)
                except DriverError as exc:
                    result = (exc.code,) + (None,) * outputs
                else:
                    if outputs == 0:
                        result = (CUresult.CUDA_SUCCESS,)
                    elif outputs == 1:
                        result = (CUresult.CUDA_SUCCESS, values)
                    else:
                        result = (CUresult.CUDA_SUCCESS, *values)
            for hook in list(self.hooks):
                hook(name, args, result)
            return result

        call.__name__ = name
        call.__qualname__ = impl.__qualname__
        call.__doc__ = impl.__doc__
        call.driver_call = True
        return call

    return decorate


class FakeDriver:
    """The fake driver: see the module docstring for what it models."""

    CUresult = CUresult
    CUpointer_attribute = CUpointer_attribute
    CUevent_flags = CUevent_flags
    CUcontext = CUcontext
    CUstream = CUstream
    CUevent = CUevent
    CUdevice = CUdevice
    CU_STREAM_LEGACY = CU_STREAM_LEGACY
    CU_STREAM_PER_THREAD = CU_STREAM_PER_THREAD
    CUmemorytype = CUmemorytype
    CUDA_MEMCPY2D = CUDA_MEMCPY2D
    CUDA_MEMCPY3D = CUDA_MEMCPY3D
    CUtensorMap = CUtensorMap
    CUtensorMapDataType = CUtensorMapDataType
    CUtensorMapInterleave = CUtensorMapInterleave
    CUtensorMapSwizzle = CUtensorMapSwizzle
    CUtensorMapL2promotion = CUtensorMapL2promotion
    CUtensorMapFloatOOBfill = CUtensorMapFloatOOBfill

    def __init__(
        self, *, devices: int = 2, current_device: int | None = 0, enum_attributes: bool = True
    ):
        self._lock = threading.RLock()
        self._handles = itertools.count(0x7F0000001000, 0x100)
        self._tls = threading.local()
        self.devices = devices
        self.enum_attributes = enum_attributes
        self.initialized = False
        self.no_device = False
        self.calls: list[tuple[str, tuple]] = []
        self.calls_by_thread: defaultdict[int, list] = defaultdict(list)
        self.violations: list[tuple[str, tuple]] = []
        self.hooks: list = []
        self.contexts: dict[int, Context] = {}
        self.streams: dict[int, Stream] = {}
        self.events: dict[int, Event] = {}  # the live ones
        self.created_events: list[Event] = []  # every event ever created, in order
        self.pointers: list[tuple[int, int, int]] = []  # (start, end, device)
        self._failures: list[list] = []
        self.allocations: dict[int, tuple[bytearray, int]] = {}  # address -> (bytes, device)
        self._next_allocation = 0x7E0000000000
        self.copies: list[tuple] = []
        #: The primary context of each device, made (and retained once) as a runtime library would.
        self.primary_contexts = [self.new_context(device) for device in range(devices)]
        #: References to each device's primary context (cuDevicePrimaryCtxRetain/Release).
        self.primary_retains = [1] * devices
        if current_device is not None:
            self.set_current(self.primary_contexts[current_device])

    # -- helpers (not driver calls: what other libraries or the test do) -----

    def new_context(self, device: int = 0) -> CUcontext:
        """Create a context on ``device`` (not made current)."""
        if not 0 <= device < self.devices:
            raise ValueError(f"no device {device}")
        with self._lock:
            handle = next(self._handles)
            self.contexts[handle] = Context(handle, device)
            return CUcontext(handle)

    def new_stream(self, context=None, *, handle: int | None = None) -> int:
        """Create a stream in ``context`` (default: the calling thread's current one); its handle."""
        with self._lock:
            ctx = self._context(context) if context is not None else self._current_or_fail()
            if handle is None:
                handle = next(self._handles)
            handle = int(handle)
            if handle in (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD):
                raise ValueError(f"stream handle {handle} is reserved")
            if handle in self.streams:
                raise ValueError(f"stream handle {handle:#x} is in use")
            self.streams[handle] = Stream(handle, ctx)
            return handle

    def destroy_stream(self, stream) -> None:
        """Destroy a stream; its handle becomes unknown (and may be reused)."""
        with self._lock:
            handle = int(stream)
            found = self.streams.pop(handle, None)
            if found is None:
                raise ValueError(f"no stream {handle:#x}")
            found.alive = False

    def reuse_stream_handle(self, stream, context) -> int:
        """Destroy ``stream`` and create a new one with the same handle in ``context``."""
        with self._lock:
            self.destroy_stream(stream)
            return self.new_stream(context, handle=int(stream))

    def reset_device(self, device: int) -> None:
        """What ``cudaDeviceReset`` in another library does: reset ``device``'s primary context."""
        with self._lock:
            self._reset(self.contexts[int(self.primary_contexts[device])])

    def live_events(self, context=None) -> int:
        """How many events are alive (in ``context`` only, when given)."""
        with self._lock:
            if context is None:
                return len(self.events)
            return sum(1 for e in self.events.values() if e.context.handle == int(context))

    def set_current(self, context) -> None:
        """Make ``context`` (or nothing, for None) the calling thread's only current context."""
        stack = self._stack()
        stack.clear()
        if context is not None:
            stack.append(self._context(context))

    def current_context(self) -> CUcontext | None:
        """The calling thread's current context, or None."""
        stack = self._stack()
        return CUcontext(stack[-1].handle) if stack else None

    def context_depth(self) -> int:
        """How many contexts the calling thread has on its stack (1 after balanced push/pop)."""
        return len(self._stack())

    def register_pointer(self, ptr: int, nbytes: int, device: int = 0) -> None:
        """Make ``[ptr, ptr + nbytes)`` device memory of ``device`` for cuPointerGetAttribute."""
        with self._lock:
            self.pointers.append((int(ptr), int(ptr) + max(int(nbytes), 1), device))

    def allocate(self, nbytes: int, device: int = 0, fill: int = 0) -> int:
        """Device memory of ``device``: a 256-byte aligned address backed by a bytearray."""
        with self._lock:
            address = self._next_allocation
            self._next_allocation += (max(int(nbytes), 1) + 0x1FF) & ~0xFF
            self.allocations[address] = (bytearray([fill]) * int(nbytes), device)
            self.register_pointer(address, nbytes, device)
            return address

    def device_bytes(self, address: int, nbytes: int) -> bytes:
        """``nbytes`` of fake device memory from ``address``."""
        with self._lock:
            memory, offset = self._device_memory(address, nbytes)
            return bytes(memory[offset:offset + nbytes])

    def _device_memory(self, address: int, nbytes: int):
        """(backing bytearray, offset) of ``[address, address + nbytes)``, or None if not device memory."""
        for start, (memory, _) in self.allocations.items():
            if start <= address and address + nbytes <= start + len(memory):
                return memory, address - start
            if start <= address < start + len(memory) or start < address + nbytes <= start + len(memory):
                raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)  # straddles an allocation
        return None

    def _move(self, dst: int, dst_device: bool, src: int, src_device: bool, nbytes: int) -> None:
        """Copy ``nbytes``; each side device memory (fake) or host memory (real), as said."""
        import ctypes

        if nbytes == 0:
            return
        found = self._device_memory(src, nbytes)
        if (found is not None) != src_device:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        data = bytes(found[0][found[1]:found[1] + nbytes]) if found else ctypes.string_at(src, nbytes)
        found = self._device_memory(dst, nbytes)
        if (found is not None) != dst_device:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        if found:
            found[0][found[1]:found[1] + nbytes] = data
        else:
            ctypes.memmove(dst, data, nbytes)

    def _record_copy(self, name: str, stream, args: tuple) -> None:
        self._current_or_fail()
        target = self._stream(stream)
        seen = frozenset(_visible(target, len(target.ops), set()))
        self.copies.append((name, target, seen, args))
        target.ops.append(("write", ("copy", len(self.copies))))

    def _side(self, params, side: str):
        """(address, is device memory) of one side of a copy-parameter struct."""
        kind = int(getattr(params, side + "MemoryType"))
        if kind == CUmemorytype.CU_MEMORYTYPE_HOST:
            return int(getattr(params, side + "Host")), False
        address = int(getattr(params, side + "Device"))
        if kind == CUmemorytype.CU_MEMORYTYPE_DEVICE:
            return address, True
        if kind == CUmemorytype.CU_MEMORYTYPE_UNIFIED:
            return address, self._device_memory(address, 1) is not None
        raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)

    def stream(self, stream, context=None) -> Stream:
        """The model of a stream handle (0, 1 and 2 in ``context``, default the current one)."""
        with self._lock:
            return self._stream(stream, context)

    def event(self, event) -> Event:
        """The model of an event handle."""
        with self._lock:
            found = self.events.get(int(event))
            if found is None:
                raise KeyError(f"no event {int(event):#x}")
            return found

    def context_of(self, handle) -> Context:
        """The model of a context handle."""
        return self._context(handle)

    def enqueue_write(self, stream, tag, context=None) -> None:
        """A producer kernel on ``stream`` writing; ``tag`` names the write.

        Handles 0, 1 and 2 name a default stream of ``context`` when given, else
        of the calling thread's current context (a ValueError when none is).
        """
        with self._lock:
            self._helper_stream(stream, context).ops.append(("write", tag))

    def enqueue_read(self, stream, context=None) -> frozenset:
        """A consumer kernel on ``stream``; the write tags it is guaranteed to see (``context`` as above)."""
        with self._lock:
            target = self._helper_stream(stream, context)
            tags = frozenset(_visible(target, len(target.ops), set()))
            target.ops.append(("read", tags))
            return tags

    def fail(self, name: str, code, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``name`` return ``code`` (after the cuInit check)."""
        with self._lock:
            self._failures.append([name, CUresult(code), times])

    def names(self, calls=None) -> list[str]:
        """The names of the calls recorded (all threads, or ``calls``)."""
        return [name for name, _ in (self.calls if calls is None else calls)]

    def thread_calls(self, thread: int | None = None) -> list[tuple[str, tuple]]:
        """The calls made by ``thread`` (default: the calling thread)."""
        return list(self.calls_by_thread.get(thread or threading.get_ident(), []))

    def clear_calls(self) -> None:
        """Forget the calls recorded so far (the state stays)."""
        with self._lock:
            self.calls.clear()
            self.calls_by_thread.clear()

    # -- internals ------------------------------------------------------------

    def _stack(self) -> list[Context]:
        try:
            return self._tls.stack
        except AttributeError:
            self._tls.stack = []  # a new thread has no current context
            return self._tls.stack

    def _reset(self, context: Context) -> None:
        """Destroy every event and stream of ``context``; its handle stays valid."""
        for handle, event in list(self.events.items()):
            if event.context is context:
                event.alive = False
                del self.events[handle]
        for handle, stream in list(self.streams.items()):
            if stream.context is context:
                stream.alive = False
                del self.streams[handle]
        context.legacy_stream.alive = False
        context.legacy_stream = Stream(CU_STREAM_LEGACY, context, "legacy")
        for stream in context.per_thread_streams.values():
            stream.alive = False
        context.per_thread_streams.clear()

    def _helper_stream(self, stream, context) -> Stream:
        try:
            return self._stream(stream, context)
        except DriverError as exc:
            raise ValueError(f"no stream {int(stream or 0):#x} here: {exc.code.name}") from None

    def _current_or_fail(self) -> Context:
        stack = self._stack()
        if not stack:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT)
        return stack[-1]

    def _context(self, handle) -> Context:
        found = self.contexts.get(0 if handle is None else int(handle))
        if found is None:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT)
        return found

    def _stream(self, handle, context=None) -> Stream:
        value = 0 if handle is None else int(handle)
        if value in (0, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD):
            owner = self._current_or_fail() if context is None else self._context(context)
            if value == CU_STREAM_PER_THREAD:
                return owner.per_thread_stream(threading.get_ident())
            return owner.legacy_stream
        found = self.streams.get(value)
        if found is None:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_HANDLE)
        return found

    def _event(self, handle) -> Event:
        found = self.events.get(0 if handle is None else int(handle))
        if found is None:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_HANDLE)
        return found

    def _injected_failure(self, name: str) -> None:
        for failure in self._failures:
            if failure[0] == name and failure[2] > 0:
                failure[2] -= 1
                raise DriverError(failure[1])

    def _convert_arguments(self, name: str, args: tuple) -> None:
        """What cuda-bindings does to the arguments before calling the driver.

        Handles and flags must be None or convertible with int() ("an integer is
        required" otherwise); with ``enum_attributes`` the pointer attribute must be
        an enum (cuda-bindings reads ``attribute.value``).
        """
        if name == "cuPointerGetAttribute" and args:
            if self.enum_attributes:
                args[0].value  # AttributeError for a plain int, as in cuda-bindings
            rest = args[1:]
        elif name in ("cuGetErrorName", "cuGetErrorString"):
            rest = ()
        elif name in ("cuMemcpy2DAsync", "cuMemcpy3DAsync"):
            rest = args[1:]  # the struct is checked by the call
        elif name == "cuTensorMapEncodeTiled":
            rest = args[1:3]  # rank and address; the sequences and enums by the call
        else:
            rest = args
        for arg in rest:
            if arg is not None and not isinstance(arg, (int, _Handle)) and not hasattr(arg, "__index__"):
                raise TypeError("an integer is required")

    def _host_blocking(self, name: str, args: tuple) -> None:
        self.violations.append((name, args))

    # -- the driver calls -------------------------------------------------------

    @_driver_call(0, needs_init=False)
    def cuInit(self, flags):
        """Initialise the driver; flags must be 0."""
        if int(flags) != 0:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        if self.no_device:
            raise DriverError(CUresult.CUDA_ERROR_NO_DEVICE)
        self.initialized = True

    @_driver_call(1, needs_init=False)
    def cuDriverGetVersion(self):
        return 13000

    @_driver_call(1, needs_init=False)
    def cuGetErrorName(self, error):
        try:
            code = CUresult(int(error))
        except ValueError:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE) from None
        return code.name.encode()

    @_driver_call(1, needs_init=False)
    def cuGetErrorString(self, error):
        try:
            code = CUresult(int(error))
        except ValueError:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE) from None
        return _ERROR_TEXT.get(code, code.name.lower().encode())

    @_driver_call(1)
    def cuDeviceGetCount(self):
        return self.devices

    @_driver_call(1)
    def cuDeviceGet(self, ordinal):
        if not 0 <= int(ordinal) < self.devices:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_DEVICE)
        return CUdevice(int(ordinal))

    def _device(self, dev) -> int:
        value = int(dev)
        if not 0 <= value < self.devices:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_DEVICE)
        return value

    @_driver_call(1)
    def cuDevicePrimaryCtxRetain(self, dev):
        device = self._device(dev)
        self.primary_retains[device] += 1
        return CUcontext(self.primary_contexts[device])

    @_driver_call(0)
    def cuDevicePrimaryCtxRelease(self, dev):
        device = self._device(dev)
        if self.primary_retains[device] == 0:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT)
        self.primary_retains[device] -= 1
        if self.primary_retains[device] == 0:
            self._reset(self.contexts[int(self.primary_contexts[device])])

    @_driver_call(0)
    def cuDevicePrimaryCtxReset(self, dev):
        self._reset(self.contexts[int(self.primary_contexts[self._device(dev)])])

    @_driver_call(1)
    def cuCtxGetCurrent(self):
        stack = self._stack()
        return CUcontext(stack[-1].handle if stack else 0)

    @_driver_call(0)
    def cuCtxSetCurrent(self, ctx):
        stack = self._stack()
        if ctx is None or int(ctx) == 0:
            if stack:
                stack.pop()
            return
        context = self._context(ctx)
        if stack:
            stack[-1] = context
        else:
            stack.append(context)

    @_driver_call(0)
    def cuCtxPushCurrent(self, ctx):
        self._stack().append(self._context(ctx))

    @_driver_call(1)
    def cuCtxPopCurrent(self):
        stack = self._stack()
        if not stack:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT)
        return CUcontext(stack.pop().handle)

    @_driver_call(1)
    def cuCtxGetDevice(self):
        return CUdevice(self._current_or_fail().device)

    @_driver_call(0)
    def cuCtxSynchronize(self):
        self._current_or_fail()
        self._host_blocking("cuCtxSynchronize", ())

    @_driver_call(1)
    def cuStreamCreate(self, flags):
        return CUstream(self.new_stream(CUcontext(self._current_or_fail().handle)))

    @_driver_call(0)
    def cuStreamDestroy(self, stream):
        value = 0 if stream is None else int(stream)
        if value not in self.streams:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_HANDLE)
        self.destroy_stream(value)

    @_driver_call(1)
    def cuStreamGetCtx(self, stream):
        return CUcontext(self._stream(stream).context.handle)

    @_driver_call(0)
    def cuStreamSynchronize(self, stream):
        self._stream(stream)
        self._host_blocking("cuStreamSynchronize", (stream,))

    @_driver_call(0)
    def cuStreamWaitEvent(self, stream, event, flags):
        if int(flags) not in _STREAM_WAIT_FLAGS:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        target = self._stream(stream)
        waited = self._event(event)
        thread = threading.get_ident()
        if waited.recorded_by is not None and waited.recorded_by != thread:
            self.violations.append(
                ("event recorded by another thread", (int(event), waited.recorded_by, thread))
            )
        target.ops.append(("wait", waited.captured, waited.handle))

    @_driver_call(1)
    def cuEventCreate(self, flags):
        if int(flags) & ~_EVENT_FLAGS_MASK:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        context = self._current_or_fail()
        handle = next(self._handles)
        event = self.events[handle] = Event(handle, context, int(flags), threading.get_ident())
        self.created_events.append(event)
        return CUevent(handle)

    @_driver_call(0)
    def cuEventDestroy(self, event):
        found = self._event(event)
        self._current_or_fail()
        found.alive = False
        del self.events[int(event)]

    @_driver_call(0)
    def cuEventRecord(self, event, stream):
        recorded = self._event(event)
        target = self._stream(stream)
        if target.context is not recorded.context:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_HANDLE)
        recorded.captured = (target, len(target.ops))
        recorded.recorded_by = threading.get_ident()
        recorded.records += 1

    @_driver_call(0)
    def cuEventSynchronize(self, event):
        self._event(event)
        self._host_blocking("cuEventSynchronize", (event,))

    @_driver_call(0)
    def cuMemcpyAsync(self, dst, src, nbytes, stream):
        self._stream(stream)
        self._current_or_fail()
        d, s_ = int(dst), int(src)
        self._move(d, self._device_memory(d, 1) is not None, s_, self._device_memory(s_, 1) is not None, int(nbytes))
        self._record_copy("cuMemcpyAsync", stream, (d, s_, int(nbytes)))

    def _copy_2d(self, params, z: int = 0, src_height: int = 0, dst_height: int = 0) -> None:
        width, height = int(params.WidthInBytes), int(params.Height)
        src, src_device = self._side(params, "src")
        dst, dst_device = self._side(params, "dst")
        src_pitch, dst_pitch = int(params.srcPitch), int(params.dstPitch)
        if height and (src_pitch < width or dst_pitch < width):
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        for row in range(height):
            self._move(
                dst + (z * dst_height + row) * dst_pitch, dst_device,
                src + (z * src_height + row) * src_pitch, src_device, width,
            )

    @_driver_call(0)
    def cuMemcpy2DAsync(self, params, stream):
        self._stream(stream)
        self._current_or_fail()
        if not isinstance(params, CUDA_MEMCPY2D):
            raise TypeError("cuMemcpy2DAsync takes a CUDA_MEMCPY2D")
        self._copy_2d(params)
        self._record_copy("cuMemcpy2DAsync", stream, (_fields(params),))

    @_driver_call(0)
    def cuMemcpy3DAsync(self, params, stream):
        self._stream(stream)
        self._current_or_fail()
        if not isinstance(params, CUDA_MEMCPY3D):
            raise TypeError("cuMemcpy3DAsync takes a CUDA_MEMCPY3D")
        src_height, dst_height = int(params.srcHeight), int(params.dstHeight)
        if src_height < int(params.Height) or dst_height < int(params.Height):
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        for z in range(int(params.Depth)):
            self._copy_2d(params, z, src_height, dst_height)
        self._record_copy("cuMemcpy3DAsync", stream, (_fields(params),))

    @_driver_call(1)
    def cuTensorMapEncodeTiled(
        self, data_type, rank, address, dims, strides, box, element_strides, interleave,
        swizzle, l2_promotion, oob_fill,
    ):
        """The documented rules of cuTensorMapEncodeTiled; a CUtensorMap holding the arguments."""
        self._current_or_fail()
        for value, kind in (
            (data_type, CUtensorMapDataType), (interleave, CUtensorMapInterleave),
            (swizzle, CUtensorMapSwizzle), (l2_promotion, CUtensorMapL2promotion),
            (oob_fill, CUtensorMapFloatOOBfill),
        ):
            if not isinstance(value, kind):
                raise TypeError(f"expected {kind.__name__}, got {value!r}")
        size = {0: 1, 1: 2, 2: 4, 3: 4, 4: 8, 5: 8, 6: 2, 7: 4, 8: 8, 9: 2}.get(int(data_type), 4)
        rank = int(rank)
        align = 32 if interleave == 2 else 16
        invalid = (
            not 1 <= rank <= 5
            or (interleave != 0 and rank < 3)
            or int(address) % align
            or len(dims) != rank or len(strides) != rank - 1
            or len(box) != rank or len(element_strides) != rank
            or any(not 0 < d <= 2**32 for d in dims)
            or any(s % align or not 0 < s < 2**40 for s in strides)
            or any(not 1 <= b <= 256 for b in box)
            or any(not 1 <= e <= 8 for e in element_strides)
            or (interleave == 0 and (box[0] * size) % 16)
            or (interleave == 0 and swizzle != 0 and box[0] * size > 16 << int(swizzle))
            or (interleave == 2 and swizzle != 1)
            # NAN_REQUEST_ZERO_FMA "can only be used when tensorDataType represents a
            # floating-point data type": not uint8/16/32/64 or int32/64 (0 to 5).
            or (oob_fill != 0 and int(data_type) <= 5)
        )
        if invalid:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        return CUtensorMap({
            "data_type": int(data_type), "rank": rank, "address": int(address),
            "dims": tuple(dims), "strides": tuple(strides), "box": tuple(box),
            "element_strides": tuple(element_strides), "interleave": int(interleave),
            "swizzle": int(swizzle), "l2_promotion": int(l2_promotion), "oob_fill": int(oob_fill),
        })

    @_driver_call(1)
    def cuPointerGetAttribute(self, attribute, ptr):
        if int(attribute) != CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        address = int(ptr)
        for start, end, device in reversed(self.pointers):  # the newest registration wins
            if start <= address < end:
                return device
        raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)


def _fields(params) -> dict:
    """A copy-parameter struct's fields, as a dict (what the fake records)."""
    return {name: int(getattr(params, name)) for name in params._FIELDS}


class ForbiddenDriver:
    """A driver no call may reach: any attribute access records it and calls ``on_use``.

    ``on_use`` defaults to raising ``ForbiddenDriverCall`` (a BaseException, so that
    no ``except Exception`` in the library can swallow it); pass ``pytest.fail``.
    """

    def __init__(self, on_use=None):
        self.__dict__["used"] = []
        self.__dict__["on_use"] = on_use

    def __getattr__(self, name):
        self.used.append(name)
        if self.on_use is not None:
            self.on_use(f"the CUDA driver was used ({name}) where no driver call may be made")
        raise ForbiddenDriverCall(name)


class ForbiddenDriverCall(BaseException):
    """A driver call where none may be made."""
