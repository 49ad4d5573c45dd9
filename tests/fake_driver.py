"""A fake of ``cuda.bindings.driver`` that models what the CUDA driver promises.

Kept where nothing else can serve (issue 36: the device paths run on the simulated device,
tests/simgpu, whose C entry points can now be made to fail: ``Simulator.fail``):

- no driver call at all on host paths: ``ForbiddenDriver`` (the ``forbidden_driver``
  fixture) fails a test at the first call, in the host suite, which never loads a driver;
- an exact call sequence with its arguments (the ``names(state_calls(fake)) == [...]`` tests of
  test_stream_ordering.py, record_stream's ``cuCtxPushCurrent`` before ``cuCtxSynchronize``):
  the simulator counts calls but keeps neither their order nor their arguments;
- a stream handle reused by another context (``reuse_stream_handle``: the stale lookup of
  test_stale_context_retried_after_invalid_handle; the simulator never reuses a handle);
- a made-up handle (test_invalid_handle_on_fresh_lookup_is_not_retried,
  test_record_stream_with_an_unknown_handle_is_a_cuda_error): not safe on a real driver;
- ``hooks`` that stop a thread inside a call so that two threads interleave exactly
  (test_interleaved_threads_each_wait_for_their_own_producer);
- the exact, deterministic visibility model the random interleavings of test_driver_model.py
  need;
- a Python-level driver that raises instead of returning a code (test_cai.py's
  ``Unloadable``, test_stream_ordering.py's ``RaisingDriver``), and no cuda-bindings at all
  (test_missing_cuda_bindings_is_cuda_error_no_driver blocks the import);
- the host-only tests of the error contract (test_errors_contract.py) and of the views'
  fields (test_cai.py, test_export.py, ...), which must run without a device.

The fake's tests that the simulated device repeats with real data read back
(tests/test_gpu_driver_faults.py: each failing ordering call and its error, the retry after a
failure, a failed ``cuInit`` not remembered, a failing pop not hiding the first error, no event
leaked when a pop fails, a failed hand-over record released and reported) were removed from the
host suite; the real bindings' acceptance of every call's arguments is proven by every gpu test.
A process with no ``libcuda.so.1`` at all is a child process (test_cai.py's
test_process_with_no_libcuda_is_cuda_error_no_driver), not a fake.

Device memory, copies and tensor maps are no longer modelled here: those tests run on the
simulated device.  Install it with ``stridedview._driver.use_api(FakeDriver())`` (and
``use_api(None)`` afterwards).  It does not only record calls: it keeps the state the real driver
keeps, and refuses what the real driver refuses (the CUDA driver API reference):

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
- ``cuDeviceGetAttribute`` answers the compute capability (``COMPUTE_CAPABILITY_MAJOR`` 75,
  ``_MINOR`` 76) of every device: ``compute_capability``, 9.0 as the simulated device's
  default (tensor maps ask it); any other attribute is ``CUDA_ERROR_INVALID_VALUE``.
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
        self.done = 0  # how many of ops the "device" has finished (``FakeDriver.finish``)

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
        self.compute_capability = (9, 0)
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

    def enqueue(self, stream, tag="work") -> None:
        """Put an operation on ``stream`` (a handle of an ordinary stream), not yet done."""
        with self._lock:
            self._stream(stream).ops.append(("write", tag))

    def finish(self, stream=None) -> None:
        """The device finishes every operation queued so far on ``stream`` (an ordinary
        stream's handle; None: on every stream): the events recorded there complete."""
        with self._lock:
            if stream is None:
                targets = list(self.streams.values())
                for context in self.contexts.values():
                    targets.append(context.legacy_stream)
                    targets.extend(context.per_thread_streams.values())
            else:
                targets = [self._stream(stream)]
            for target in targets:
                target.done = len(target.ops)

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
        found = self._event(event)
        self._host_blocking("cuEventSynchronize", (event,))
        if found.captured is not None:  # the host waits until the device gets there
            stream, length = found.captured
            stream.done = max(stream.done, length)

    @_driver_call(0)
    def cuEventQuery(self, event):
        """CUDA_SUCCESS once the work the event captured is done (``finish``), else
        CUDA_ERROR_NOT_READY; an event never recorded is done."""
        found = self._event(event)
        if found.captured is not None:
            stream, length = found.captured
            if stream.done < length:
                raise DriverError(CUresult.CUDA_ERROR_NOT_READY)

    @_driver_call(1)
    def cuStreamIsCapturing(self, stream):
        """No stream of the fake is ever capturing: CU_STREAM_CAPTURE_STATUS_NONE."""
        self._stream(stream)
        return 0

    @_driver_call(1)
    def cuDeviceGetAttribute(self, attribute, dev):
        self._device(dev)  # CUDA_ERROR_INVALID_DEVICE for no such device
        capability = {75: self.compute_capability[0], 76: self.compute_capability[1]}
        if int(attribute) not in capability:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        return capability[int(attribute)]

    @_driver_call(1)
    def cuPointerGetAttribute(self, attribute, ptr):
        if int(attribute) != CUpointer_attribute.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)
        address = int(ptr)
        for start, end, device in reversed(self.pointers):  # the newest registration wins
            if start <= address < end:
                return device
        raise DriverError(CUresult.CUDA_ERROR_INVALID_VALUE)


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
