"""A fake of ``cuda.bindings.driver`` for the host suite's contracts that never order streams.

Stream ordering and hand-overs run on the simulated device only (tests/simgpu: a C
``libcuda.so.1`` that the real cuda-bindings load).  Every ordering and hand-over decision is
the driver door's (src/stridedview/_driver_door.h), which calls the driver cuda-bindings
loaded and no other: with this fake installed (``stridedview._driver.use_api``) an ordering or
a hand-over raises CUDAError CUDA_ERROR_NO_DRIVER before any call reaches it
(tests/test_stream_ordering.py, tests/test_record_stream.py show it).  The call sequences, the
events per thread and context, the retries after stale handles, the holds released once and
never early are tests/test_gpu_stream_ordering.py, test_gpu_record_stream.py,
test_gpu_driver_door.py, test_gpu_hold_rule.py and test_gpu_driver_faults.py, on the simulator's
call log, stream-order checker, gates and injected failures.

What this module still serves, without any driver:

- ``ForbiddenDriver`` (the ``forbidden_driver`` fixture): no driver call at all on a host
  path; the first attribute asked of it fails the test;
- ``FakeDriver`` (the ``fake`` fixture), the calls of the host-only paths of
  ``stridedview._driver``: ``cuInit`` (which ``fail`` or ``no_device`` make fail: the error
  contract's init failure), ``cuGetErrorName``/``cuGetErrorString``, a pointer's device for a
  CUDA Array Interface view's ``device_id`` and its DLPack export (``cuPointerGetAttribute``
  over the ranges given to ``register_pointer``; ``cuCtxGetDevice`` for pointer 0, the current
  device), ``cuCtxGetCurrent`` (a copy or an encoding checks a context is current),
  ``cuDeviceGetAttribute`` (the compute capability tensor maps ask, 9.0 by default,
  ``compute_capability``), ``cuDeviceGetCount`` and ``cuDeviceGet``; and ``new_stream()``,
  stream handles for the views' fields, which no driver ever sees.

A call the fake does not serve is an AttributeError where the library makes it, and is
listed in ``unserved``: the ``fake`` fixture fails a test that made one, even if the library
swallowed the error.  Every call served is appended to ``calls`` as ``(name, args)``, in
order (``names()``, ``clear_calls()``).  Results are tuples ``(CUresult, values...)`` as in
cuda-bindings; on failure the values are None.  Like cuda-bindings, ``cuPointerGetAttribute``
converts its attribute with ``attribute.value`` and so raises AttributeError for a plain int
(``enum_attributes=False`` accepts ints too).  Each thread has a current device: the
constructing thread ``current_device`` (0 by default; None for none), any other thread none
(``cuCtxGetCurrent`` answers a NULL context, ``cuCtxGetDevice`` CUDA_ERROR_INVALID_CONTEXT),
until ``set_current_device``.

Nothing here uses ``assert``: the checks hold under ``python -O``.
"""

from __future__ import annotations

import enum
import itertools
import re
import threading

__all__ = [
    "CUresult",
    "CUpointer_attribute",
    "CUcontext",
    "CUdevice",
    "HOST_BLOCKING_CALLS",
    "FakeDriver",
    "ForbiddenDriver",
    "ForbiddenDriverCall",
]

_CALL_NAME = re.compile(r"cu[A-Z]")

#: The calls that block the host until device work is done (none is served here).
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
    CUDA_ERROR_INVALID_HANDLE = 400
    CUDA_ERROR_NOT_FOUND = 500
    CUDA_ERROR_NOT_READY = 600
    CUDA_ERROR_ILLEGAL_ADDRESS = 700
    CUDA_ERROR_LAUNCH_FAILED = 719
    CUDA_ERROR_NOT_PERMITTED = 800
    CUDA_ERROR_NOT_SUPPORTED = 801
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


class CUdevice(_Handle):
    __slots__ = ()

    def __repr__(self):
        return f"<CUdevice {self._value}>"


class DriverError(Exception):
    """Raised inside the fake to return a CUresult from a call."""

    def __init__(self, code):
        super().__init__(code)
        self.code = CUresult(code)


def _driver_call(outputs: int, *, needs_init: bool = True):
    """Make a method a recorded driver call returning ``(CUresult, *outputs values)``."""

    def decorate(impl):
        name = impl.__name__

        def call(self, *args):
            if name == "cuPointerGetAttribute" and self.enum_attributes and args:
                args[0].value  # AttributeError for a plain int, as cuda-bindings raises
            with self._lock:
                self.calls.append((name, args))
                try:
                    if needs_init and not self.initialized:
                        raise DriverError(CUresult.CUDA_ERROR_NOT_INITIALIZED)
                    self._injected_failure(name)
                    values = impl(self, *args)
                except DriverError as exc:
                    return (exc.code,) + (None,) * outputs
            if outputs == 0:
                return (CUresult.CUDA_SUCCESS,)
            if outputs == 1:
                return (CUresult.CUDA_SUCCESS, values)
            return (CUresult.CUDA_SUCCESS, *values)

        call.__name__ = name
        call.__qualname__ = impl.__qualname__
        call.__doc__ = impl.__doc__
        call.driver_call = True
        return call

    return decorate


class FakeDriver:
    """The fake driver: see the module docstring for what it serves."""

    CUresult = CUresult
    CUpointer_attribute = CUpointer_attribute
    CUcontext = CUcontext
    CUdevice = CUdevice

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
        self.unserved: list[str] = []
        self.pointers: list[tuple[int, int, int]] = []  # (start, end, device)
        self._failures: list[list] = []
        #: Each device's primary context handle, as a runtime library would have made it.
        self.primary_contexts = [CUcontext(next(self._handles)) for _ in range(devices)]
        self._constructor_thread = threading.get_ident()
        self._first_device = current_device

    def __getattr__(self, name):
        # Only for names not found otherwise: a driver call (cuXxx) the fake does not serve.
        if _CALL_NAME.match(name):
            self.unserved.append(name)
            raise AttributeError(f"the fake driver does not serve {name} (tests/fake_driver.py)")
        raise AttributeError(name)

    # -- helpers (not driver calls: what other libraries or the test do) -----

    def new_stream(self) -> int:
        """A new stream handle for a view's fields: no stream behind it, no driver sees it."""
        with self._lock:
            return next(self._handles)

    def register_pointer(self, ptr: int, nbytes: int, device: int = 0) -> None:
        """Make ``[ptr, ptr + nbytes)`` device memory of ``device`` for cuPointerGetAttribute."""
        with self._lock:
            self.pointers.append((int(ptr), int(ptr) + max(int(nbytes), 1), device))

    def set_current_device(self, device: int | None) -> None:
        """Make ``device``'s primary context (None: no context) the calling thread's current."""
        if device is not None:
            self._device(device)
        self._tls.device = device

    def fail(self, name: str, code, *, times: int = 1) -> None:
        """Make the next ``times`` calls of ``name`` return ``code`` (after the cuInit check)."""
        with self._lock:
            self._failures.append([name, CUresult(code), times])

    def names(self, calls=None) -> list[str]:
        """The names of the calls recorded (or of ``calls``)."""
        return [name for name, _ in (self.calls if calls is None else calls)]

    def clear_calls(self) -> None:
        """Forget the calls recorded so far."""
        with self._lock:
            self.calls.clear()

    # -- internals ------------------------------------------------------------

    def _current_device(self) -> int | None:
        try:
            return self._tls.device
        except AttributeError:
            # A new thread has no current context; the constructing thread has its device's.
            device = self._first_device if threading.get_ident() == self._constructor_thread else None
            self._tls.device = device
            return device

    def _device(self, dev) -> int:
        value = int(dev)
        if not 0 <= value < self.devices:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_DEVICE)
        return value

    def _injected_failure(self, name: str) -> None:
        for failure in self._failures:
            if failure[0] == name and failure[2] > 0:
                failure[2] -= 1
                raise DriverError(failure[1])

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
        return CUdevice(self._device(ordinal))

    @_driver_call(1)
    def cuCtxGetCurrent(self):
        device = self._current_device()
        return CUcontext(0) if device is None else self.primary_contexts[device]

    @_driver_call(1)
    def cuCtxGetDevice(self):
        device = self._current_device()
        if device is None:
            raise DriverError(CUresult.CUDA_ERROR_INVALID_CONTEXT)
        return CUdevice(device)

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
