"""Shared pytest configuration: the ``gpu`` skips and the CI guard against silent skips.

The markers ``gpu``, ``real_gpu``, ``simgpu`` and ``interop`` are declared in pyproject.toml;
nothing is registered here.

``gpu``: a test marked ``pytest.mark.gpu`` is skipped with the reason "needs a CUDA GPU and
driver" when the CUDA driver cannot be loaded or reports no device. The driver is probed with
ctypes the first time a ``gpu`` test is set up, never at collection, and ``cuda.bindings`` is not
imported, so collecting and running the host tests never touches CUDA.  The simulated device
(tests/simgpu: ``tests/simgpu/run.sh tests -m gpu`` puts it first on ``LD_LIBRARY_PATH``) is
such a driver: every ``gpu`` test runs on it, through the real cuda-bindings.

The simulated device is told from a real driver by the symbol ``simgpu_is_simulator``, which
only the simulator exports (``simulated_gpu()``).  Two markers narrow ``gpu``:

- ``real_gpu``: needs a real GPU, because it needs the CUDA runtime (CuPy, torch's or JAX's
  CUDA build) or runs real kernels; skipped on the simulated device with ``REAL_GPU_SKIP_REASON``.
- ``simgpu``: needs the simulator's test hooks (its per-operation delay, call counters, a
  device count set by ``SIMGPU_DEVICES``); skipped on a real GPU with ``SIMULATOR_SKIP_REASON``.

Both imply ``gpu``: with no driver at all they skip with the ``gpu`` reason.

``gpu_import(name)``: in a ``gpu`` test, import a GPU library.  On a machine with a GPU a missing
library FAILS the test (naming the ``gpu`` extra) instead of skipping it: a GPU machine that skips
the GPU tests proves nothing.  On the simulated device the failure names the ``full`` extra
instead (numba-cuda; the ``gpu`` extra's CuPy cannot run there).  A library that
``STRIDEDVIEW_ALLOW_MISSING`` names and that is not installed is skipped as an ``importorskip``
would be (below).

``STRIDEDVIEW_REQUIRE_INTEROP=1`` (set by CI): every skip makes the run fail except a skip for
missing hardware (the reasons in ``HARDWARE_SKIP_REASONS``: no CUDA GPU and driver, or fewer GPUs
than a test needs), whether the test is marked ``gpu`` or not; a module skipped at collection by
``pytest.importorskip`` counts too. The skips are listed in the terminal summary. A collection skip
cannot see the module's markers (the module failed to import), so a GPU-only module must skip
itself with the reason ``GPU_SKIP_REASON`` rather than with ``importorskip`` if it is to be exempt.

``STRIDEDVIEW_REQUIRE_DEVICE=simulated`` (set by CI's simulated-GPU stage, with the simulator
first on ``LD_LIBRARY_PATH``): the hardware skips are no longer allowed, but for the real-GPU
one: with a simulated device at hand, a ``gpu`` test that skips for want of a GPU, of a second
device or of the simulator proves that the stage ran on something else.

A bare ``python -m pytest`` (no test path, no ``-m``, no ``-k``) is the quick run of README.md's
Quick start: it leaves out the tests marked ``torch``, ``jax``, ``numba`` or ``slow``
(``LEFT_OUT``) and the modules that need torch to be imported at all (``tests/test_torch_*.py``,
not even collected), and says at the end how many it left out and the one command that runs them
(``REST_COMMAND``).  ``--rest`` runs exactly those, ``--all`` everything; paths, ``-m`` or ``-k``
run what they select, as pytest does.  A test marked ``torch``, ``jax`` or ``numba`` needs that
library (torch, jax, numba-cuda: the ``full`` extra); ``slow`` marks the long-running ones (about
half a second or more each, or seconds as a family: subprocesses, compilers, leak and thread
checks, fuzzing).  CI runs the quick run with none of the three installed and under
``STRIDEDVIEW_REQUIRE_INTEROP=1``, so a test that needs one of them and is not marked fails it.

``STRIDEDVIEW_ALLOW_MISSING=torch,jax,...`` (set only by CI's interpreter matrix, where some
producers have no wheel at hand for that Python): an ``importorskip`` skip of a module named
there, or of a submodule of one (``gpu_import``'s too), is allowed, and only while that module is truly not installed
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
REAL_GPU_SKIP_REASON = (
    "needs a real CUDA GPU: the CUDA runtime (CuPy, torch's or JAX's CUDA build) and kernels "
    "do not run on the simulated device"
)
SIMULATOR_SKIP_REASON = "needs the simulated device's test hooks (tests/simgpu), not a real GPU"
# A real GPU below compute capability 10.0 (an H100, H200) for a Blackwell feature; the
# simulated device is switched to 10.0 instead, so there it never skips.
CAPABILITY_10_SKIP_REASON = "needs a CUDA GPU of compute capability 10.0 or higher"
# A machine with a driver installed system-wide (ld.so.cache) cannot run a process without one.
NO_LIBCUDA_SKIP_REASON = (
    "a libcuda.so.1 is found on the system search path (ld.so.cache) even with LD_LIBRARY_PATH "
    "empty: no process without a driver can be made on this machine"
)
HARDWARE_SKIP_REASONS = (
    GPU_SKIP_REASON, TWO_GPUS_SKIP_REASON, REAL_GPU_SKIP_REASON, SIMULATOR_SKIP_REASON,
    NO_LIBCUDA_SKIP_REASON, CAPABILITY_10_SKIP_REASON,
)
REQUIRE_INTEROP_ENV = "STRIDEDVIEW_REQUIRE_INTEROP"
# CI's wheel stage runs the suite with no compiler on PATH, on purpose (a user's machine
# installing the wheel): there, and only where this variable is 1, tests/test_capi.py
# (which compiles extensions against the package) skips with this reason, allowed.
NO_COMPILER_ENV = "STRIDEDVIEW_NO_COMPILER"
NO_COMPILER_SKIP_REASON = "needs a C compiler (none on PATH, on purpose: STRIDEDVIEW_NO_COMPILER=1)"

REQUIRE_DEVICE_ENV = "STRIDEDVIEW_REQUIRE_DEVICE"

ALLOW_MISSING_ENV = "STRIDEDVIEW_ALLOW_MISSING"
_IMPORTORSKIP_REASON = re.compile(r"^could not import '([A-Za-z0-9_.]+)'")

# --- The quick run and the rest -----------------------------------------------------------

#: The markers a bare run leaves out, each with what its tests need, for the closing summary.
LEFT_OUT = {
    "torch": "torch",
    "jax": "jax",
    "numba": "numba-cuda",
    "slow": "time (subprocesses, compilers, leak and thread checks, fuzzing)",
}
#: Modules that import torch as they load (each is marked ``torch`` whole): a quick run does
#: not collect them, so that it imports no torch even where torch is installed.
TORCH_MODULES = "test_torch_*.py"
#: The one command that runs what a quick run leaves out (README.md, "All the tests").
REST_COMMAND = 'pip install -e ".[test,full]" && python -m pytest --rest'


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("stridedview")
    group.addoption(
        "--rest", action="store_true",
        help="run only what a bare run leaves out: the tests marked " + ", ".join(LEFT_OUT),
    )
    group.addoption("--all", action="store_true", help="run every test (the quick run and --rest)")


def run_kind(config: pytest.Config) -> str:
    """"quick" (a bare run), "rest" (--rest), "all" (--all) or "chosen" (paths, -m or -k)."""
    if config.getoption("--all"):
        return "all"
    if config.getoption("--rest"):
        return "rest"
    chosen = (
        config.args_source is not pytest.Config.ArgsSource.TESTPATHS
        or config.getoption("markexpr") or config.getoption("keyword")
    )
    return "chosen" if chosen else "quick"


def left_out_by(item: pytest.Item) -> list[str]:
    """The LEFT_OUT markers of ``item``."""
    return [name for name in LEFT_OUT if item.get_closest_marker(name) is not None]


def pytest_ignore_collect(collection_path, config: pytest.Config):
    if run_kind(config) == "quick" and collection_path.match(TORCH_MODULES):
        return True
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    kind = run_kind(config)
    if kind not in ("quick", "rest"):
        return
    keep, drop = [], []
    for item in items:
        (drop if bool(left_out_by(item)) == (kind == "quick") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    if kind == "quick":
        config.stash[_LEFT_OUT_KEY] = drop


_LEFT_OUT_KEY = pytest.StashKey[list]()


def _left_out_summary(terminalreporter, config: pytest.Config) -> None:
    """What a quick run did not run, and the one command that runs it."""
    import textwrap

    drop = config.stash.get(_LEFT_OUT_KEY, None)
    if drop is None:
        return
    modules = sorted(p.name for p in (config.rootpath / "tests").glob(TORCH_MODULES))
    if not drop and not modules:
        return
    counts = {name: 0 for name in LEFT_OUT}
    for item in drop:
        names = left_out_by(item)
        # A test both long-running and needing a library is counted with the library.
        counts[next((n for n in names if n != "slow"), "slow")] += 1
    parts = [f"{count} {'test needs' if count == 1 else 'tests need'} {LEFT_OUT[name]}"
             for name, count in counts.items() if count]
    if modules:
        parts.append(f"every test of {', '.join(modules)} (they need torch: not collected)")
    text = (
        f"{'; '.join(parts)}. The one command that runs them: {REST_COMMAND} (the full "
        "extra installs torch, jax and numba-cuda; on a machine without a GPU, install torch's "
        "CPU build first, as README.md says under \"All the tests\": PyPI's Linux torch is a "
        "CUDA build of several GB)."
    )
    terminalreporter.section("not run: a quick run leaves these out", sep="=", yellow=True)
    width = max(60, min(terminalreporter._tw.fullwidth, 100))
    # The command on a line of its own, so that it can be copied whole.
    before, _, after = text.partition(REST_COMMAND)
    for line in textwrap.wrap(before.rstrip(), width):
        terminalreporter.line(line)
    terminalreporter.line(f"    {REST_COMMAND}")
    for line in textwrap.wrap(after.strip(), width):
        terminalreporter.line(line)


# (node id, reason) of every skip that fails the run under STRIDEDVIEW_REQUIRE_INTEROP=1;
# reset when a session starts (pytest runs one session per process).
_SKIPS: list[tuple[str, str]] = []


def _libcuda():
    """The CUDA driver library this process loads (ctypes), or None."""
    if sys.platform == "win32":
        names = ["nvcuda.dll"]
    else:
        names = ["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda")]
    for name in names:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


@functools.cache
def simulated_gpu() -> bool:
    """Return True when the CUDA driver this process loads is the simulated device (tests/simgpu)."""
    lib = _libcuda()
    return lib is not None and getattr(lib, "simgpu_is_simulator", None) is not None


@functools.cache
def has_cuda_gpu() -> bool:
    """Return True when the CUDA driver loads, initialises and reports at least one device
    (a real GPU or the simulated device)."""
    lib = _libcuda()
    if lib is not None:
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
    the extra to install, never a skip.  On the simulated device it is a skip that names the
    full extra (which CI, under STRIDEDVIEW_REQUIRE_INTEROP=1, refuses like any skip).
    """
    import importlib

    if not has_cuda_gpu():
        pytest.skip(GPU_SKIP_REASON)
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        reason = f"could not import {name!r}: {exc}"
        if _allowed_missing(reason):
            # An interpreter of CI's matrix with no wheel of it (STRIDEDVIEW_ALLOW_MISSING).
            pytest.skip(reason)
        if simulated_gpu():
            # The gpu extra's CuPy cannot run on the simulator (no CUDA runtime); the gpu
            # tests that run there need the full extra's numba-cuda (and cuda-core, in test).
            # A skip, so that README's "No GPU?" command is green in the quick start's
            # environment (the test extra alone); CI, which installs everything, refuses it
            # (STRIDEDVIEW_REQUIRE_INTEROP=1).
            pytest.skip(
                f"{reason}: on the simulated CUDA device this gpu test needs the full extra "
                "(pip install -e \".[test,full]\"; not the gpu extra, whose CuPy needs a real GPU)"
            )
        pytest.fail(
            f"this machine has a CUDA GPU but {name} cannot be imported ({exc}): the gpu tests "
            "need every GPU library (pip install -e \".[test,gpu]\" and torch with CUDA)",
            pytrace=False,
        )


def pytest_runtest_setup(item: pytest.Item) -> None:
    real = item.get_closest_marker("real_gpu") is not None
    simulator = item.get_closest_marker("simgpu") is not None
    if not (real or simulator or item.get_closest_marker("gpu") is not None):
        return
    if not has_cuda_gpu():
        pytest.skip(GPU_SKIP_REASON)
    if real and simulated_gpu():
        pytest.skip(REAL_GPU_SKIP_REASON)
    if simulator and not simulated_gpu():
        pytest.skip(SIMULATOR_SKIP_REASON)


def _allowed_skip_reasons() -> tuple[str, ...]:
    """The skips that never fail a run: missing hardware (only a real GPU where CI runs on the
    simulated device), and no compiler where CI says so."""
    hardware = HARDWARE_SKIP_REASONS
    if os.environ.get(REQUIRE_DEVICE_ENV, "") == "simulated":
        hardware = (REAL_GPU_SKIP_REASON,)
    if os.environ.get(NO_COMPILER_ENV, "") == "1":
        return (*hardware, NO_COMPILER_SKIP_REASON)
    return hardware


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
    _left_out_summary(terminalreporter, config)
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
    """The fake driver (tests/fake_driver.py: the host-only calls, no stream ordering),
    installed with use_api for the test and reset after it.

    The test fails afterwards if the library asked the fake for a call it does not serve
    (``unserved``: a copy or an encoding reaching the driver, say), even where the library
    caught the error.  Installed after ``forbidden_driver`` where a module
    uses both.
    """
    from fake_driver import FakeDriver
    from stridedview import _driver

    if "forbidden_driver" in request.fixturenames:
        request.getfixturevalue("forbidden_driver")
    driver = FakeDriver()
    _driver.use_api(driver)
    yield driver
    _driver.use_api(None)
    if driver.unserved:
        pytest.fail(f"driver calls the fake does not serve: {driver.unserved}")


# --- The real driver, for gpu tests (a real GPU or the simulated device) ----------------


@pytest.fixture
def gpu(request):
    """A ``gpu`` test's driver state: stridedview on the real cuda.bindings.driver (whatever an
    earlier test installed), device 0's primary context current on this thread, the simulator's
    delay at 0 and no injected failure (``Simulator.fail``, cleared again after the test); yields a ``driver_support.Resources`` whose streams and memory are released after
    the test, its queued work finished first.

    With the simulator's stream-order checker on (``SIMGPU_CHECK=1``, as CI runs the gpu
    tests), a test that made the checker report (a race on device memory, a free while in use,
    a use after free, whatever the timing) fails, naming each report; one marked ``races``
    (a control that leaves streams unordered on purpose) must make it report at least once."""
    import driver_support
    from stridedview import _driver

    simulator = driver_support.simulator()
    if simulator is not None:
        simulator.fail_clear()
    _driver.use_api(None)
    driver_support.make_current(0)
    if simulator is not None:
        simulator.set_delay_us(0)
    checking = simulator is not None and simulator.check_mode() != 0
    reports = simulator.check_report_count() if checking else 0
    resources = driver_support.Resources()
    yield resources
    if simulator is not None:
        simulator.fail_clear()
        simulator.set_delay_us(0)
    driver_support.make_current(0)
    # Holds handed to this test's streams may keep its memory (or call deleters that read
    # it): released before the memory goes, whatever the test left.
    from stridedview import _view

    _view._drain_pending()
    resources.release()
    _driver.use_api(None)
    if checking:
        _check_reports(request, simulator, reports)


_CALL_PASSED = pytest.StashKey[bool]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """Note whether a test's body ran and passed (the gpu fixture's checker looks)."""
    report = yield
    if report.when == "call":
        item.stash[_CALL_PASSED] = report.passed
    return report


def _check_reports(request, simulator, before: int) -> None:
    """Fail the test for the checker's reports it caused (or, marked ``races``, for none,
    once its body ran and passed: a skipped control made no access to report)."""
    made = simulator.check_reports(since=before)
    if request.node.get_closest_marker("races") is not None:
        if not request.node.stash.get(_CALL_PASSED, False):
            return
        if not made:
            pytest.fail(
                "marked races, yet the stream-order checker (SIMGPU_CHECK) reported nothing: "
                "the control no longer leaves its streams unordered",
                pytrace=False,
            )
        return
    if made:
        pytest.fail(
            f"the simulator's stream-order checker (SIMGPU_CHECK) reported {len(made)} "
            "access(es) not ordered as CUDA requires:\n" + "\n".join(made[:10]),
            pytrace=False,
        )


@pytest.fixture
def sim(gpu):
    """The simulated device's hooks (``simgpu_support.Simulator``), or None on a real GPU."""
    import driver_support

    return driver_support.simulator()


@pytest.fixture
def simulator(gpu):
    """The simulated device's hooks; the test must be marked ``simgpu`` (skipped on a real GPU)."""
    import driver_support

    found = driver_support.simulator()
    if found is None:
        pytest.fail("the simulator fixture needs a test marked simgpu", pytrace=False)
    return found


@pytest.fixture
def two_gpus(gpu):
    """Skip with the hardware reason when the driver has fewer than two devices."""
    import driver_support

    if driver_support.device_count() < 2:
        pytest.skip(TWO_GPUS_SKIP_REASON)
