"""The simulator's own exports, reached through ctypes on the loaded ``libcuda.so.1``.

``simulator()`` returns a :class:`Simulator` when this process's driver is the simulated one,
and None on a real driver (or none): code written against it runs on both.  Nothing here
loads a driver at import; ``simulator()`` loads the one the process would load anyway.
"""

from __future__ import annotations

import ctypes
import functools
import typing

CUDA_ERROR_INVALID_HANDLE = 400


class LaunchInfo(ctypes.Structure):
    """One entry of the simulator's launch log (simgpu_launch_get)."""

    _fields_ = [
        ("name", ctypes.c_char * 256),
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_bytes", ctypes.c_uint),
        ("nparams", ctypes.c_int),
        ("stream_arg", ctypes.c_ulonglong),
        ("stream", ctypes.c_ulonglong),
        ("context", ctypes.c_ulonglong),
        ("device", ctypes.c_int),
        ("executed", ctypes.c_int),
        ("captured", ctypes.c_int),
        ("from_graph", ctypes.c_int),
        ("function", ctypes.c_ulonglong),
        ("params_size", ctypes.c_ulonglong),
    ]


class CallRecordC(ctypes.Structure):
    """One entry of the simulator's call log (simgpu_call_log_get), as C lays it out."""

    _fields_ = [
        ("seq", ctypes.c_uint64),
        ("name", ctypes.c_char_p),
        ("thread", ctypes.c_int64),
        ("result", ctypes.c_int32),
        ("nargs", ctypes.c_int32),
        ("flags", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("args", ctypes.c_uint64 * 6),
    ]


class Call(typing.NamedTuple):
    """A driver call in the simulator's call log (``Simulator.call_log``).

    ``name``: the entry point that ran (``cuEventRecord``, ``cuCtxPushCurrent_v2``; a
    per-thread-default-stream variant is logged under its base entry point, ``per_thread``
    set); ``args``: its arguments as signed 64-bit ints (handles and ints by value, an
    out-parameter as the value the call wrote, 0 if it failed; the simulator's README lists
    them); ``result``: the CUresult as an int, None if the call had not returned when the log
    was read; ``thread``: the OS thread id (``threading.get_native_id()``); ``injected``: the
    result came from ``Simulator.fail``."""

    name: str
    args: tuple
    result: int | None
    thread: int
    per_thread: bool = False
    injected: bool = False


_CALL_RETURNED, _CALL_PER_THREAD, _CALL_INJECTED = 1, 2, 4


def _signed64(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


class Simulator:
    """The simulator's test exports, reached through ctypes on the loaded libcuda.so.1."""

    def __init__(self, lib):
        self.lib = lib
        lib.simgpu_counter.restype = ctypes.c_longlong
        lib.simgpu_counter.argtypes = [ctypes.c_char_p]
        lib.simgpu_call_count.restype = ctypes.c_longlong
        lib.simgpu_call_count.argtypes = [ctypes.c_char_p]
        lib.simgpu_launch_count.restype = ctypes.c_long
        lib.simgpu_launch_get.argtypes = [ctypes.c_long, ctypes.POINTER(LaunchInfo)]
        lib.simgpu_launch_params.restype = ctypes.c_longlong
        lib.simgpu_launch_params.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_size_t]
        lib.simgpu_launch_param_sizes.argtypes = [ctypes.c_long, ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
        lib.simgpu_set_delay_us.argtypes = [ctypes.c_uint]
        lib.simgpu_set_compute_capability.restype = ctypes.c_int
        lib.simgpu_set_compute_capability.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.simgpu_set_version_not_sufficient.restype = ctypes.c_int
        lib.simgpu_set_version_not_sufficient.argtypes = [ctypes.c_char_p]
        lib.simgpu_set_kernel_params.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_size_t)]
        lib.simgpu_calls_report.restype = ctypes.c_size_t
        lib.simgpu_calls_report.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.simgpu_calls_reset.restype = None
        lib.simgpu_fail.restype = ctypes.c_int
        lib.simgpu_fail.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.simgpu_fail_clear.restype = None
        lib.simgpu_fail_fired.restype = ctypes.c_longlong
        lib.simgpu_fail_fired.argtypes = [ctypes.c_char_p]
        lib.simgpu_check_mode.restype = ctypes.c_int
        lib.simgpu_check_mode.argtypes = []
        lib.simgpu_set_check.restype = ctypes.c_int
        lib.simgpu_set_check.argtypes = [ctypes.c_int]
        lib.simgpu_check_report.restype = ctypes.c_size_t
        lib.simgpu_check_report.argtypes = [ctypes.c_long, ctypes.c_char_p, ctypes.c_size_t]
        lib.simgpu_set_kernel_param_access.restype = ctypes.c_int
        lib.simgpu_set_kernel_param_access.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int]
        lib.simgpu_call_log_start.restype = ctypes.c_int
        lib.simgpu_call_log_start.argtypes = [ctypes.c_int]
        lib.simgpu_call_log_stop.restype = None
        lib.simgpu_call_log_stop.argtypes = []
        lib.simgpu_call_log_count.restype = ctypes.c_long
        lib.simgpu_call_log_count.argtypes = []
        lib.simgpu_call_log_dropped.restype = ctypes.c_long
        lib.simgpu_call_log_dropped.argtypes = []
        lib.simgpu_call_log_get.restype = ctypes.c_int
        lib.simgpu_call_log_get.argtypes = [ctypes.c_long, ctypes.POINTER(CallRecordC)]
        lib.simgpu_stream_move.restype = ctypes.c_int
        lib.simgpu_stream_move.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.simgpu_handle_report_gone.restype = ctypes.c_int
        lib.simgpu_handle_report_gone.argtypes = [ctypes.c_uint64, ctypes.c_int]

    def counter(self, name: str) -> int:
        return self.lib.simgpu_counter(name.encode())

    def calls(self, name: str) -> int:
        return self.lib.simgpu_call_count(name.encode())

    def calls_report(self) -> dict[str, int]:
        size = self.lib.simgpu_calls_report(None, 0)
        buffer = ctypes.create_string_buffer(size + 1)
        self.lib.simgpu_calls_report(buffer, size + 1)
        return {name: int(n) for name, n in (line.split() for line in buffer.value.decode().splitlines())}

    def calls_reset(self) -> None:
        """Sets every entry point's call count (``calls``, ``calls_report``) back to 0."""
        self.lib.simgpu_calls_reset()

    def fail(self, entry_point: str, code, count: int = 1, skip: int = 0) -> None:
        """Injects failures: the next ``skip`` calls of ``entry_point`` run as usual, then the
        following ``count`` calls (-1: every call until cleared) return ``code`` (a CUresult or
        an int) and do nothing else.

        ``"cuFoo"`` also names the versioned variants the bindings call (``cuFoo_v2``, ...), and
        the per-thread-default-stream variants run their base entry point, so every route to
        the entry point meets the failure.  A call answered with a failure is still counted by
        ``calls``.  Process-wide: calls from every thread count.  Replaces an earlier rule for
        the same name; ``count=0`` removes it.
        """
        if self.lib.simgpu_fail(entry_point.encode(), int(code), int(count), int(skip)) != 0:
            raise ValueError(f"simgpu_fail({entry_point!r}, {code!r}, {count}, {skip}) refused")

    def fail_clear(self) -> None:
        """Removes every injected failure (``fail``)."""
        self.lib.simgpu_fail_clear()

    def fail_fired(self, entry_point: str) -> int:
        """How many failures the rule set by ``fail(entry_point, ...)`` has injected (-1: none set)."""
        return self.lib.simgpu_fail_fired(entry_point.encode())

    # ---- the stream-order checker (SIMGPU_CHECK) ----

    CHECK_MODES = {"off": 0, "report": 1, "abort": 2}

    def check_mode(self) -> int:
        """The stream-order checker's mode: 0 off, 1 report (``SIMGPU_CHECK=1``), 2 abort at
        the first report (``SIMGPU_CHECK=abort``)."""
        return self.lib.simgpu_check_mode()

    def set_check(self, mode) -> int:
        """Switches the checker (0 or "off", 1 or "report", 2 or "abort"); returns the previous
        mode.  Switching it on starts from an empty history: work enqueued before is unknown to
        it and can cause no report."""
        value = self.CHECK_MODES[mode] if isinstance(mode, str) else int(mode)
        previous = self.lib.simgpu_set_check(value)
        if previous < 0:
            raise ValueError(f"simgpu_set_check({mode!r}) refused")
        return previous

    def check_report_count(self) -> int:
        """How many reports the checker has made in this process (``simgpu_counter("check_reports")``)."""
        return self.counter("check_reports")

    def check_reports(self, since: int | None = None) -> list[str]:
        """The texts of the checker's reports from index ``since`` on (each the line it wrote to
        stderr, without the newline), or of all those kept (the last 256) when ``since`` is None."""
        count = self.check_report_count()
        start = max(0, count - 256) if since is None else since
        texts = []
        for index in range(start, count):
            n = self.lib.simgpu_check_report(index, None, 0)
            if n == 0:
                continue
            buffer = ctypes.create_string_buffer(n + 1)
            self.lib.simgpu_check_report(index, buffer, n + 1)
            texts.append(buffer.value.decode())
        return texts

    def set_kernel_param_access(self, name: str, index: int, mode) -> None:
        """How the checker takes parameter ``index`` of kernels called ``name`` when it points
        into an allocation: 0 not accessed, 1 read, 2 written, 3 read and written (the default:
        the whole allocation, a pointer does not say how far a kernel reaches)."""
        if self.lib.simgpu_set_kernel_param_access(name.encode(), int(index), int(mode)) != 0:
            raise ValueError(f"simgpu_set_kernel_param_access({name!r}, {index}, {mode}) refused")

    # ---- the call log ----

    def call_log_start(self, all_threads: bool = False) -> None:
        """Starts the call log from empty: every driver call the calling OS thread makes
        (``all_threads``: any thread) is logged, in the order the calls begin, with its
        arguments and result, until ``call_log_stop``.  The first 100,000 calls are kept, later
        ones only counted (``call_log_dropped``)."""
        if self.lib.simgpu_call_log_start(1 if all_threads else 0) != 0:
            raise MemoryError("simgpu_call_log_start refused")

    def call_log_stop(self) -> None:
        """Logs no further call; the log stays readable until the next ``call_log_start``."""
        self.lib.simgpu_call_log_stop()

    def call_log_dropped(self) -> int:
        """Calls made while logging that found the log full (not logged)."""
        return self.lib.simgpu_call_log_dropped()

    def call_log(self) -> list[Call]:
        """The calls logged, in call order (``Call`` records)."""
        record = CallRecordC()
        calls = []
        for index in range(self.lib.simgpu_call_log_count()):
            if self.lib.simgpu_call_log_get(index, ctypes.byref(record)) != 0:
                break
            calls.append(
                Call(
                    name=record.name.decode() if record.name else "?",
                    args=tuple(_signed64(record.args[i]) for i in range(record.nargs)),
                    result=record.result if record.flags & _CALL_RETURNED else None,
                    thread=record.thread,
                    per_thread=bool(record.flags & _CALL_PER_THREAD),
                    injected=bool(record.flags & _CALL_INJECTED),
                )
            )
        return calls

    # ---- handles made stale ----

    @staticmethod
    def _handle(value) -> int:
        """A handle's value: an int, or a cuda.bindings handle object (CUstream, CUevent, ...)."""
        return value if isinstance(value, int) else int(value)

    def stream_move(self, stream, context) -> None:
        """Stream handle ``stream`` names a new, empty stream of ``context`` from now on, as
        if the driver had reused a destroyed stream's handle for another context's stream:
        ``cuStreamGetCtx`` answers ``context``, and an event of the old context recorded on it
        answers CUDA_ERROR_INVALID_HANDLE.  The stream it named is destroyed as by
        ``cuStreamDestroy`` (its queued work drains)."""
        if self.lib.simgpu_stream_move(self._handle(stream), self._handle(context)) != 0:
            raise ValueError(f"simgpu_stream_move({stream!r}, {context!r}) refused")

    def handle_report_gone(self, handle, code=None) -> None:
        """The driver reports stream or event ``handle`` gone: a live one is destroyed as its
        destroy call would (a stream's queued work drains), and from now on every call naming
        it answers ``code`` (default CUDA_ERROR_INVALID_HANDLE; a CUresult or an int), where a
        destroyed handle would otherwise end the process (a stream) or answer
        CUDA_ERROR_CONTEXT_IS_DESTROYED (an event)."""
        value = CUDA_ERROR_INVALID_HANDLE if code is None else int(code)
        if self.lib.simgpu_handle_report_gone(self._handle(handle), value) != 0:
            raise ValueError(f"simgpu_handle_report_gone({handle!r}, {code!r}) refused")

    def set_delay_us(self, microseconds: int) -> None:
        self.lib.simgpu_set_delay_us(microseconds)

    def set_compute_capability(self, major: int, minor: int = 0) -> None:
        """Every device reports compute capability ``major.minor`` from now on (9.0 to 12.9;
        ``SIMGPU_COMPUTE_CAPABILITY`` sets it at start, default 9.0); from 10.0 the tensor maps
        take the packed sub-byte types and the 128B_ATOM swizzles."""
        if self.lib.simgpu_set_compute_capability(int(major), int(minor)) != 0:
            raise ValueError(f"simgpu_set_compute_capability({major}, {minor}) refused")

    def set_version_not_sufficient(self, symbol: str | None) -> None:
        """cuGetProcAddress answers ``symbol`` from now on as a driver older than the symbol
        does (CUDA_SUCCESS, a NULL function, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT),
        at every version asked for; ``None`` undoes it.  One symbol at a time."""
        if self.lib.simgpu_set_version_not_sufficient(None if symbol is None else symbol.encode()) != 0:
            raise ValueError(f"simgpu_set_version_not_sufficient({symbol!r}) refused")

    def launch_count(self) -> int:
        return self.lib.simgpu_launch_count()

    def launch(self, index: int) -> dict:
        info = LaunchInfo()
        if self.lib.simgpu_launch_get(index, ctypes.byref(info)) != 0:
            raise IndexError(index)
        n = info.nparams
        sizes = (ctypes.c_size_t * max(n, 1))()
        self.lib.simgpu_launch_param_sizes(index, sizes, max(n, 1))
        raw = ctypes.create_string_buffer(max(info.params_size, 1))
        self.lib.simgpu_launch_params(index, raw, info.params_size)
        return {
            "name": info.name.decode(),
            "grid": tuple(info.grid),
            "block": tuple(info.block),
            "shared_bytes": info.shared_bytes,
            "nparams": n,
            "param_sizes": tuple(sizes[:n]) if n > 0 else (),
            "params": raw.raw[: info.params_size],
            "stream_arg": info.stream_arg,
            "stream": info.stream,
            "context": info.context,
            "device": info.device,
            "executed": bool(info.executed),
            "captured": bool(info.captured),
            "from_graph": bool(info.from_graph),
            "function": info.function,
        }

    def set_kernel_params(self, name: str, sizes) -> None:
        array = (ctypes.c_size_t * max(len(sizes), 1))(*sizes)
        self.lib.simgpu_set_kernel_params(name.encode(), len(sizes), array)


@functools.cache
def simulator() -> Simulator | None:
    """The simulator behind this process's libcuda.so.1, or None for a real driver (the
    same object each call: a process's driver is chosen once)."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    if getattr(lib, "simgpu_is_simulator", None) is None:
        return None
    return Simulator(lib)
