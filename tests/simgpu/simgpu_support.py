"""Helpers of the simulated-GPU tests: driver results, the simulator's own exports, gates.

Everything here works against any ``libcuda.so.1``: ``simulator()`` returns None on a real
driver, and the tests use the simulator-only features (the launch log, counters, the
per-operation delay) only when it is not None.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

from cuda.bindings import driver as drv

# The simulator's Python side (simgpu/stridedview_simgpu) is imported from the tree these tests
# belong to when it is not installed.
_SIMGPU_TREE = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "simgpu")
try:
    import stridedview_simgpu  # noqa: F401
except ImportError:
    sys.path.insert(0, _SIMGPU_TREE)

CUresult = drv.CUresult
SUCCESS = CUresult.CUDA_SUCCESS


class DriverError(AssertionError):
    """A driver call returned something other than CUDA_SUCCESS."""

    def __init__(self, code):
        self.code = code
        super().__init__(f"driver call failed: {code!r}")


def ok(result):
    """The values of a binding's ``(CUresult, value...)`` tuple, after checking it succeeded."""
    code, *values = result if isinstance(result, tuple) else (result,)
    if code != SUCCESS:
        raise DriverError(code)
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


def code(result):
    """The CUresult of a binding call's result."""
    return result[0] if isinstance(result, tuple) else result


# ---- the simulator's exports: the product's own module (simgpu/stridedview_simgpu) ----------

from stridedview_simgpu._control import Call, CallRecordC, LaunchInfo, Simulator, simulator  # noqa: E402,F401


# ---- host functions --------------------------------------------------------------------

HOST_FN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_keep_alive: list = []  # callbacks a stream may still call


def host_fn(stream, fn) -> None:
    """Enqueues ``fn()`` on ``stream`` (cuLaunchHostFunc)."""
    callback = HOST_FN(lambda _data: fn())
    _keep_alive.append(callback)
    ok(drv.cuLaunchHostFunc(stream, drv.CUhostFn(ctypes.cast(callback, ctypes.c_void_p).value), 0))


class Gate:
    """A host function that holds its stream until ``open()`` (at most ``timeout`` seconds).

    ``entered`` is set once the stream reached it.
    """

    def __init__(self, timeout: float = 20.0):
        self.timeout = timeout
        self.entered = threading.Event()
        self._open = threading.Event()

    def enqueue(self, stream) -> "Gate":
        def wait():
            self.entered.set()
            self._open.wait(self.timeout)

        host_fn(stream, wait)
        return self

    def open(self) -> None:
        self._open.set()


def wait_until(predicate, timeout: float = 10.0) -> bool:
    """Polls ``predicate`` until it holds or ``timeout`` seconds pass."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.002)
    return predicate()


# ---- subprocesses ------------------------------------------------------------------------


def child_paths() -> list[str]:
    """For a child script that puts them first on ``sys.path``: the suite's tests/ directory
    and the directory this run imported stridedview from (the tree's src/, or an installed
    copy's site-packages: never a tree whose extension was not built)."""
    import stridedview

    tests = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return [tests, os.path.dirname(os.path.dirname(os.path.abspath(stridedview.__file__)))]


def run_python(
    source: str, env: dict | None = None, timeout: float = 120.0, args: tuple | list = ()
) -> subprocess.CompletedProcess:
    """Runs ``source`` in a fresh interpreter with this process's environment (plus ``env``),
    ``args`` (strings) as its ``sys.argv[1:]``."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-c", source, *args], env=full_env, capture_output=True, text=True,
        timeout=timeout,
    )
