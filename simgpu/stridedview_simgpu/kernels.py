"""Kernels that compute on the simulated device: a host implementation per kernel name.

A kernel launched on the simulator validates its launch, is logged, and runs nothing, unless
a host implementation is registered for its name (the name its image gives it: a PTX
``.entry``, or the name declared with ``Simulator.set_kernel_params`` for a cubin).  Then::

    import numpy as np
    from stridedview_simgpu import kernels

    @kernels.host_kernel("scale", params=("ptr", "ptr", "float32", "uint64"), writes=(0,))
    def scale(launch, dst, src, factor, n):
        launch.array(dst, n, np.float32)[:] = launch.array(src, n, np.float32) * factor

The implementation runs on the launch's stream, in its place in stream order: after the
stream's earlier work and the work it waits for, before its later work, and on every replay
of a graph that holds it.  It is called with a :class:`KernelLaunch` and the launch's
parameters unpacked as ``params`` says (``"ptr"``: a device address, an int; a numpy scalar
type name: that scalar; no ``params``: each parameter's bytes).  ``launch.array`` and
``launch.memory`` read and write device (and managed, and pinned host) memory.

What it reaches is what the stream-order checker sees: each pointer parameter's allocation,
read and written unless ``reads=`` / ``writes=`` name the parameters read and the ones
written (the others then count as not accessed).

Rules, as for a CUDA host function: the implementation must not call the driver (every call
answers ``CUDA_ERROR_NOT_PERMITTED`` there) and must not wait for other stream work.  A
Python implementation takes the GIL on the stream's worker thread: a thread that holds the
GIL while it waits for the device (a C extension blocking in ``cuStreamSynchronize``
without releasing it) would wait forever.  cuda-bindings, cuda.core, numba-cuda and
stridedview release it.  An exception raised in an implementation is printed on stderr,
kept (:func:`errors`), and fails the test under ``pytest --simgpu``.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import struct
import sys
import threading
import traceback
import typing

from ._control import simulator

_MAX_PARAMS = 64

_FORMATS = {
    "ptr": "Q", "bool": "?", "int8": "b", "uint8": "B", "int16": "h", "uint16": "H",
    "int32": "i", "uint32": "I", "int64": "q", "uint64": "Q", "float16": "e",
    "float32": "f", "float64": "d",
}


class _LaunchC(ctypes.Structure):
    """simgpu_kernel_launch, as simgpu/src/module.c lays it out."""

    _fields_ = [
        ("name", ctypes.c_char_p),
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_bytes", ctypes.c_uint),
        ("nparams", ctypes.c_int),
        ("params", ctypes.POINTER(ctypes.c_ubyte)),
        ("params_size", ctypes.c_size_t),
        ("offsets", ctypes.POINTER(ctypes.c_size_t)),
        ("sizes", ctypes.POINTER(ctypes.c_size_t)),
        ("stream", ctypes.c_ulonglong),
        ("device", ctypes.c_int),
    ]


_KERNEL_FN = ctypes.CFUNCTYPE(None, ctypes.POINTER(_LaunchC), ctypes.c_void_p)


class KernelError(RuntimeError):
    """A host implementation raised, or was given a launch it cannot unpack."""


class KernelLaunch:
    """One launch, as its host implementation sees it: ``name``, ``grid``, ``block``,
    ``shared_bytes``, ``stream`` (the handle it runs on), ``device`` (ordinal), ``params``
    (each parameter's bytes, in order)."""

    def __init__(self, launch: _LaunchC, memory):
        self.name = launch.name.decode()
        self.grid = tuple(launch.grid)
        self.block = tuple(launch.block)
        self.shared_bytes = launch.shared_bytes
        self.stream = launch.stream
        self.device = launch.device
        raw = ctypes.string_at(launch.params, launch.params_size) if launch.params_size else b""
        count = max(launch.nparams, 0)
        self.params = tuple(
            raw[launch.offsets[i]: launch.offsets[i] + launch.sizes[i]] for i in range(count)
        )
        self._memory = memory

    def memory(self, address: int, nbytes: int) -> memoryview:
        """``nbytes`` of memory at ``address`` (a device pointer), readable and writable, valid
        while the implementation runs.  Raises :class:`KernelError` where they do not lie in
        one allocation (as a GPU would fault)."""
        if nbytes < 0:
            raise KernelError(f"simgpu: kernel {self.name}: negative size {nbytes}")
        host = self._memory(address, nbytes)
        if not host:
            raise KernelError(
                f"simgpu: kernel {self.name}: {nbytes} bytes at {address:#x} are not in one "
                "allocation (an illegal address on a GPU)"
            )
        return memoryview((ctypes.c_char * max(nbytes, 1)).from_address(host)).cast("B")[:nbytes]

    def array(self, address: int, shape, dtype, strides: tuple | None = None):
        """A numpy array over device memory at ``address``: ``shape`` (an int or a tuple),
        ``dtype``, ``strides`` in elements (C order when None).  Writes go to the device."""
        import numpy as np

        dtype = np.dtype(dtype)
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        steps: list[int] = []
        if strides is None:
            step = 1
            for extent in reversed(shape):
                steps.insert(0, step)
                step *= extent
        else:
            steps = [int(stride) for stride in strides]
        if any(extent == 0 for extent in shape):
            return np.empty(shape, dtype)
        span = 1 + sum((extent - 1) * abs(stride) for extent, stride in zip(shape, steps))
        low = sum((extent - 1) * stride for extent, stride in zip(shape, steps) if stride < 0)
        base = np.frombuffer(self.memory(address + low * dtype.itemsize, span * dtype.itemsize), dtype)
        return np.lib.stride_tricks.as_strided(
            base[-low:], shape, tuple(s * dtype.itemsize for s in steps), writeable=True
        )


# The C callback of each kernel registered from Python: referenced while the simulator may call it.
_registered: dict[str, object] = {}
_declared: dict[str, int] = {}  # kernel name -> how many parameters' accesses were declared
_errors: list[KernelError] = []
_lock = threading.Lock()
_exit_hook = False


def errors() -> list[KernelError]:
    """The errors host implementations raised in this process, oldest first."""
    with _lock:
        return list(_errors)


def _unpack(name: str, params: tuple | None, launch: KernelLaunch) -> tuple:
    if params is None:
        return launch.params
    if len(params) != len(launch.params):
        raise KernelError(
            f"simgpu: kernel {name}: registered with {len(params)} parameters, launched with "
            f"{len(launch.params)} (sizes {[len(p) for p in launch.params]})"
        )
    values = []
    for index, (kind, raw) in enumerate(zip(params, launch.params)):
        fmt = "<" + _FORMATS[kind]
        if struct.calcsize(fmt) != len(raw):
            raise KernelError(
                f"simgpu: kernel {name}: parameter {index} registered as {kind!r} "
                f"({struct.calcsize(fmt)} bytes), the kernel's is {len(raw)} bytes"
            )
        values.append(struct.unpack(fmt, raw)[0])
    return tuple(values)


@functools.cache
def _library():
    sim = simulator()
    if sim is None:
        raise RuntimeError(
            "simgpu: host kernels need the simulated CUDA driver as this process's libcuda.so.1: "
            "run under simgpu-run, or pytest --simgpu"
        )
    lib = sim.lib
    lib.simgpu_register_kernel.restype = ctypes.c_int
    lib.simgpu_register_kernel.argtypes = [ctypes.c_char_p, _KERNEL_FN, ctypes.c_void_p]
    lib.simgpu_kernel_memory.restype = ctypes.c_void_p
    lib.simgpu_kernel_memory.argtypes = [ctypes.c_ulonglong, ctypes.c_size_t]
    lib.simgpu_kernel_registered.restype = ctypes.c_int
    lib.simgpu_kernel_registered.argtypes = [ctypes.c_char_p]
    return sim


def register(name: str, fn: typing.Callable, params: typing.Sequence[str] | None = None,
             reads: typing.Iterable[int] | None = None, writes: typing.Iterable[int] | None = None) -> None:
    """Makes ``fn(launch, *params)`` the host implementation of kernels called ``name``
    (replacing an earlier one once its running calls return).  ``params``: each parameter's
    type (``"ptr"`` or a numpy scalar type name), or None for raw bytes.  ``reads`` and
    ``writes``: the indices of the pointer parameters the kernel reads and writes, for the
    stream-order checker (both None: every pointer parameter is read and written)."""
    global _exit_hook
    if params is not None:
        params = tuple(params)
        unknown = [p for p in params if p not in _FORMATS]
        if unknown or len(params) > _MAX_PARAMS:
            raise ValueError(f"simgpu: kernel {name}: parameter types {unknown} are not among {sorted(_FORMATS)}")
    sim = _library()
    lib = sim.lib

    def call(launch_ptr, _user):
        try:
            launch = KernelLaunch(launch_ptr.contents, lib.simgpu_kernel_memory)
            fn(launch, *_unpack(name, params, launch))
        except BaseException as exc:  # noqa: BLE001 - nothing may escape into the driver's worker
            error = exc if isinstance(exc, KernelError) else KernelError(
                f"simgpu: kernel {name}'s host implementation raised {type(exc).__name__}: {exc}"
            )
            with _lock:
                _errors.append(error)
            print(f"simgpu: kernel {name}: host implementation failed\n"
                  + "".join(traceback.format_exception(exc)), file=sys.stderr, flush=True)

    callback = _KERNEL_FN(call)
    _forget_accesses(sim, name)
    if reads is not None or writes is not None:
        reads, writes = set(reads or ()), set(writes or ())
        count = len(params) if params is not None else _MAX_PARAMS
        for index in range(count):
            mode = (1 if index in reads else 0) | (2 if index in writes else 0)
            sim.set_kernel_param_access(name, index, mode)
        with _lock:
            _declared[name] = count
    if lib.simgpu_register_kernel(name.encode(), callback, None) != 0:
        raise KernelError(f"simgpu: registering kernel {name} was refused (inside a host implementation?)")
    with _lock:  # the callback replaced stays referenced until its running calls returned (above)
        _registered[name] = callback
        if not _exit_hook:
            atexit.register(unregister_all)
            _exit_hook = True


def _forget_accesses(sim, name: str) -> None:
    """The checker takes kernel ``name``'s pointer parameters as read and written again (the
    default), where a registration declared otherwise."""
    with _lock:
        count = _declared.pop(name, 0)
    for index in range(count):
        sim.set_kernel_param_access(name, index, 3)


def host_kernel(name: str, params: typing.Sequence[str] | None = None,
                reads: typing.Iterable[int] | None = None, writes: typing.Iterable[int] | None = None):
    """Decorator form of :func:`register`; returns the function unchanged."""

    def decorate(fn):
        register(name, fn, params, reads, writes)
        return fn

    return decorate


def unregister(name: str) -> None:
    """Removes kernel ``name``'s implementation, once its running calls return (later
    launches of it run nothing), and the accesses it declared (the checker takes every
    pointer parameter as read and written again)."""
    sim = _library()
    sim.lib.simgpu_register_kernel(name.encode(), _KERNEL_FN(), None)
    _forget_accesses(sim, name)
    with _lock:
        _registered.pop(name, None)


def unregister_all() -> None:
    """Removes every implementation registered from Python (at exit too, so that no stream
    calls into a finishing interpreter)."""
    with _lock:
        names = list(_registered)
    for name in names:
        unregister(name)


def registered(name: str) -> bool:
    """Whether kernel ``name`` has a host implementation (from Python or from C)."""
    return bool(_library().lib.simgpu_kernel_registered(name.encode()))
