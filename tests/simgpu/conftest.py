"""The simulated-GPU tests: collected only when a driver is chosen for them.

The simulator must be the process's ``libcuda.so.1`` before anything loads the driver, so
it is chosen outside Python: ``tests/simgpu/run.sh [pytest args]`` builds it (once per
source change) into ``build/simgpu/``, puts that folder first on ``LD_LIBRARY_PATH``, sets
``SIMGPU_LIB_DIR`` and runs pytest on this folder.  On a machine with a real GPU,
``SIMGPU_REAL_DRIVER=1 python -m pytest tests/simgpu`` runs the same tests against the
real driver (the simulator-only checks skip there).

Without either variable (the main suite, ``python -m pytest`` from the root) nothing here
is collected, so a missing simulator neither fails nor skips anything.
"""

from __future__ import annotations

import ctypes
import os
import threading

import pytest

_SIMULATED = bool(os.environ.get("SIMGPU_LIB_DIR"))
_REAL = os.environ.get("SIMGPU_REAL_DRIVER") == "1"

if not (_SIMULATED or _REAL):
    collect_ignore_glob = ["test_*.py"]
elif _SIMULATED:
    # The library the process loads must be the simulator just built, not a real driver.
    try:
        _lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        pytest.exit(f"tests/simgpu: libcuda.so.1 cannot be loaded ({exc}); run tests/simgpu/run.sh", returncode=4)
    if getattr(_lib, "simgpu_is_simulator", None) is None:
        pytest.exit(
            "tests/simgpu: SIMGPU_LIB_DIR is set but the libcuda.so.1 found first is not the simulator "
            f"(LD_LIBRARY_PATH={os.environ.get('LD_LIBRARY_PATH', '')!r}); run tests/simgpu/run.sh",
            returncode=4,
        )

SIM_ONLY_REASON = "simulator-only check (SIMGPU_REAL_DRIVER=1)"
TWO_GPUS_SKIP_REASON = "needs two CUDA GPUs and a driver"


def pytest_report_header(config):
    if _SIMULATED:
        return f"simgpu: simulated driver from {os.environ['SIMGPU_LIB_DIR']}"
    if _REAL:
        return "simgpu: tests/simgpu against the real CUDA driver"
    return "simgpu: tests/simgpu not collected (run tests/simgpu/run.sh)"


@pytest.fixture(scope="session")
def driver():
    """cuda.bindings.driver, initialised."""
    from .simgpu_support import drv, ok

    ok(drv.cuInit(0))
    return drv


@pytest.fixture(scope="session")
def sim(driver):
    """The simulator's exports (simgpu_support.Simulator), or None on a real driver."""
    from .simgpu_support import simulator

    return simulator()


@pytest.fixture
def sim_only(sim):
    """The simulator's exports; the test is skipped against a real driver."""
    if sim is None:
        pytest.skip(SIM_ONLY_REASON)
    return sim


@pytest.fixture(scope="session")
def device_count(driver):
    from .simgpu_support import ok

    return ok(driver.cuDeviceGetCount())


@pytest.fixture(scope="session")
def primary(driver, device_count):
    """primary[i]: device i's primary context, retained for the whole session."""
    from .simgpu_support import ok

    return [ok(driver.cuDevicePrimaryCtxRetain(ok(driver.cuDeviceGet(i)))) for i in range(device_count)]


@pytest.fixture
def two_devices(device_count):
    if device_count < 2:
        pytest.skip(TWO_GPUS_SKIP_REASON)


@pytest.fixture(autouse=True)
def _main_thread_context(request):
    """Each test starts with device 0's primary context current on the main thread, no
    operation delay and no injected failure (``Simulator.fail``); whatever it leaves queued
    is finished before the next test starts, and a call log it started is stopped."""
    if "driver" not in request.fixturenames and "primary" not in request.fixturenames:
        yield
        return
    from .simgpu_support import drv, ok

    primary = request.getfixturevalue("primary")
    sim = request.getfixturevalue("sim")
    if sim is not None:
        sim.fail_clear()
    ok(drv.cuCtxSetCurrent(primary[0]))
    if sim is not None:
        sim.set_delay_us(0)
    yield
    if sim is not None:
        sim.fail_clear()
        sim.set_delay_us(0)
        sim.call_log_stop()
    if threading.current_thread() is threading.main_thread():
        for ctx in primary:
            ok(drv.cuCtxSetCurrent(ctx))
            ok(drv.cuCtxSynchronize())
        ok(drv.cuCtxSetCurrent(primary[0]))


class Resources:
    """Streams, events and allocations a test makes, released after it (work finished first)."""

    def __init__(self, drv):
        self.drv = drv
        self.streams, self.events, self.device, self.host = [], [], [], []

    def stream(self, flags=0, priority=None):
        from .simgpu_support import ok

        if priority is None:
            s = ok(self.drv.cuStreamCreate(flags))
        else:
            s = ok(self.drv.cuStreamCreateWithPriority(flags, priority))
        self.streams.append(s)
        return s

    def event(self, flags=0):
        from .simgpu_support import ok

        e = ok(self.drv.cuEventCreate(flags))
        self.events.append(e)
        return e

    def alloc(self, nbytes):
        from .simgpu_support import ok

        p = ok(self.drv.cuMemAlloc(nbytes))
        self.device.append(p)
        return int(p)

    def host_alloc(self, nbytes, flags=0):
        from .simgpu_support import ok

        p = ok(self.drv.cuMemHostAlloc(nbytes, flags))
        self.host.append(p)
        return int(p)

    def release(self):
        drv = self.drv
        for s in self.streams:
            drv.cuStreamSynchronize(s)
            drv.cuStreamDestroy(s)
        for e in self.events:
            drv.cuEventDestroy(e)
        for p in self.device:
            drv.cuMemFree(p)
        for p in self.host:
            drv.cuMemFreeHost(p)


@pytest.fixture
def res(driver, primary):
    resources = Resources(driver)
    yield resources
    resources.release()
