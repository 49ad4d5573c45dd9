"""Shared pytest configuration: the ``gpu`` skip and the CI guard against silent skips.

The markers ``gpu`` and ``interop`` are declared in pyproject.toml; nothing is registered here.

``gpu``: a test marked ``pytest.mark.gpu`` is skipped with the reason "needs a CUDA GPU and
driver" when the CUDA driver cannot be loaded or reports no device. The driver is probed with
ctypes the first time a ``gpu`` test is set up, never at collection, and ``cuda.bindings`` is not
imported, so collecting and running the host tests never touches CUDA.

``gpu_import(name)``: in a ``gpu`` test, import a GPU library.  On a machine with a GPU a missing
library FAILS the test (naming the ``gpu`` extra) instead of skipping it: a GPU machine that skips
the GPU tests proves nothing.

``STRIDEDVIEW_REQUIRE_INTEROP=1`` (set by CI): every skip makes the run fail except a skip for
missing hardware (the reasons in ``HARDWARE_SKIP_REASONS``: no CUDA GPU and driver, or fewer GPUs
than a test needs), whether the test is marked ``gpu`` or not; a module skipped at collection by
``pytest.importorskip`` counts too. The skips are listed in the terminal summary. A collection skip
cannot see the module's markers (the module failed to import), so a GPU-only module must skip
itself with the reason ``GPU_SKIP_REASON`` rather than with ``importorskip`` if it is to be exempt.

``STRIDEDVIEW_ALLOW_MISSING=torch,jax,...`` (set only by CI's interpreter matrix, where some
producers have no wheel at hand for that Python): an ``importorskip`` skip of a module named
there, or of a submodule of one, is allowed, and only while that module is truly not installed
(an installed module that fails to import still fails the run).  Every other skip still fails it.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import importlib.util
import os
import re
import sys

import pytest

pytest_plugins = ["pytester"]

GPU_SKIP_REASON = "needs a CUDA GPU and driver"
TWO_GPUS_SKIP_REASON = "needs two CUDA GPUs and a driver"
HARDWARE_SKIP_REASONS = (GPU_SKIP_REASON, TWO_GPUS_SKIP_REASON)
REQUIRE_INTEROP_ENV = "STRIDEDVIEW_REQUIRE_INTEROP"
# CI's wheel stage runs the suite with no compiler on PATH, on purpose (a user's machine
# installing the wheel): there, and only where this variable is 1, tests/test_capi.py
# (which compiles extensions against the package) skips with this reason, allowed.
NO_COMPILER_ENV = "STRIDEDVIEW_NO_COMPILER"
NO_COMPILER_SKIP_REASON = "needs a C compiler (none on PATH, on purpose: STRIDEDVIEW_NO_COMPILER=1)"

ALLOW_MISSING_ENV = "STRIDEDVIEW_ALLOW_MISSING"
_IMPORTORSKIP_REASON = re.compile(r"^could not import '([A-Za-z0-9_.]+)'")

# (node id, reason) of every skip that fails the run under STRIDEDVIEW_REQUIRE_INTEROP=1;
# reset when a session starts (pytest runs one session per process).
_SKIPS: list[tuple[str, str]] = []


@functools.cache
def has_cuda_gpu() -> bool:
    """Return True when the CUDA driver loads, initialises and reports at least one device."""
    if sys.platform == "win32":
        names = ["nvcuda.dll"]
    else:
        names = ["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda")]
    for name in names:
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        try:
            if lib.cuInit(0) != 0:
                return False
            count = ctypes.c_int(0)
            if lib.cuDeviceGetCount(ctypes.byref(count)) != 0:
                return False
        except AttributeError:
            return False
        return count.value > 0
    return False


def _require_interop() -> bool:
    return os.environ.get(REQUIRE_INTEROP_ENV, "") == "1"


def _skip_reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def gpu_import(name: str):
    """Import ``name`` for a ``gpu`` test: skip without a GPU, FAIL when the library is missing.

    On a machine with a GPU, a GPU library that is not installed is a failure that names
    the extra to install, never a skip.
    """
    import importlib

    if not has_cuda_gpu():
        pytest.skip(GPU_SKIP_REASON)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        pytest.fail(
            f"this machine has a CUDA GPU but {name} cannot be imported ({exc}): the gpu tests "
            "need every GPU library (pip install -e \".[test,gpu]\" and torch with CUDA)",
            pytrace=False,
        )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("gpu") is not None and not has_cuda_gpu():
        pytest.skip(GPU_SKIP_REASON)


def _allowed_skip_reasons() -> tuple[str, ...]:
    """The skips that never fail a run: missing hardware, and no compiler where CI says so."""
    if os.environ.get(NO_COMPILER_ENV, "") == "1":
        return (*HARDWARE_SKIP_REASONS, NO_COMPILER_SKIP_REASON)
    return HARDWARE_SKIP_REASONS


def _allowed_missing(reason: str) -> bool:
    """True for an importorskip skip of a module STRIDEDVIEW_ALLOW_MISSING names, not installed."""
    allowed = [name.strip() for name in os.environ.get(ALLOW_MISSING_ENV, "").split(",") if name.strip()]
    match = _IMPORTORSKIP_REASON.match(reason)
    if not allowed or match is None:
        return False
    module = match.group(1)
    for name in allowed:
        if module == name or module.startswith(name + "."):
            try:
                return importlib.util.find_spec(name) is None
            except (ImportError, ValueError):  # a parent package that is not installed
                return True
    return False


def _skip_allowed(reason: str) -> bool:
    return reason in _allowed_skip_reasons() or _allowed_missing(reason)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail"):
        return
    if _skip_allowed(_skip_reason(report)):
        return
    _record(report)


def pytest_collectreport(report: pytest.CollectReport) -> None:
    if not report.skipped:
        return
    if _skip_allowed(_skip_reason(report)):
        return
    _record(report)


def _record(report: pytest.TestReport | pytest.CollectReport) -> None:
    _SKIPS.append((report.nodeid or "<session>", _skip_reason(report)))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _SKIPS.clear()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    # NO_TESTS_COLLECTED too: a run whose only module was skipped at collection collects nothing.
    ok = (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED)
    if _require_interop() and _SKIPS and exitstatus in ok:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if not _require_interop() or not _SKIPS:
        return
    terminalreporter.section(f"{REQUIRE_INTEROP_ENV}=1: skips not allowed", sep="=", red=True)
    terminalreporter.line(
        f"{len(_SKIPS)} test(s) or module(s) not marked gpu were skipped; this run fails:",
        red=True,
    )
    for nodeid, reason in _SKIPS:
        terminalreporter.line(f"SKIPPED {nodeid}: {reason}")


# --- The CUDA driver seam ------------------------------------------------------------


@pytest.fixture
def forbidden_driver():
    """No test reaches the CUDA driver unless it installs the fake itself (``fake``)."""
    from fake_driver import ForbiddenDriver
    from stridedview import _driver

    forbidden = ForbiddenDriver(on_use=pytest.fail)
    _driver.use_api(forbidden)
    yield forbidden
    _driver.use_api(None)


@pytest.fixture
def fake(request):
    """The modelling fake driver, installed with use_api for the test and reset after it.

    The test fails afterwards if the library made a host-blocking driver call or
    shared an event across threads.  Installed after ``forbidden_driver`` where a
    module uses both.
    """
    from fake_driver import HOST_BLOCKING_CALLS, FakeDriver
    from stridedview import _driver

    if "forbidden_driver" in request.fixturenames:
        request.getfixturevalue("forbidden_driver")
    driver = FakeDriver()
    _driver.use_api(driver)
    yield driver
    _driver.use_api(None)
    if driver.violations:
        pytest.fail(f"host-blocking or cross-thread driver use: {driver.violations}")
    blocking = [name for name in driver.names() if name in HOST_BLOCKING_CALLS]
    if blocking:
        pytest.fail(f"host-blocking driver calls: {blocking}")
