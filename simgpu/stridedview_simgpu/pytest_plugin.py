"""The pytest plugin of stridedview-simgpu (loaded by pytest from the installed distribution).

- ``pytest --simgpu ...`` runs the test run on the simulated CUDA driver.  A driver is chosen
  when a process first loads one, so the run starts again at once in a new pytest process
  (same arguments, same folder) whose ``libcuda.so.1`` is the simulator's, with the
  stream-order checker on (``SIMGPU_CHECK=1`` unless set).  Its first line says so.
- ``@pytest.mark.needs_gpu``: the test needs a CUDA device.  Without a usable one it is
  skipped, saying ``--simgpu`` runs it; under ``--simgpu`` it runs on the simulated device.
- Under ``--simgpu`` (not merely under ``simgpu-run``, where a suite may have checks of its
  own) a test during which the stream-order checker reports (an access not
  ordered after the write it reads, a free while in use, a use after free) fails with the
  reports, unless it expected them (``simgpu.expect_reports()``), and so does a test during
  which a host kernel implementation raised.
- The ``simgpu`` fixture: the simulator's controls for one test (:class:`SimgpuFixture`),
  everything it changed undone at the end.  Outside ``--simgpu`` it skips the test.

Without ``--simgpu`` and without those names in a test, the plugin does nothing.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys

import pytest

from . import kernels
from ._control import simulator
from ._library import SimulatorNotBuilt, environment, runs_on_simulator
from ._run import banner

_REEXEC_MARK = "STRIDEDVIEW_SIMGPU_PYTEST"  # set in the pytest process started on the simulator
_reports_key = pytest.StashKey[int]()
_expected_key = pytest.StashKey[int]()
_errors_key = pytest.StashKey[int]()


def pytest_addoption(parser):
    group = parser.getgroup("simgpu", "the simulated CUDA device (stridedview-simgpu)")
    group.addoption(
        "--simgpu", action="store_true", default=False,
        help="run the tests on the simulated CUDA driver (no GPU needed), the stream-order checker on",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config, parser, args):
    """With ``--simgpu``, before any conftest or test can load a driver: start the run again
    in a process whose driver is the simulator (this process never returns)."""
    if not getattr(early_config.known_args_namespace, "simgpu", False):
        return
    if os.environ.get(_REEXEC_MARK) == "1":
        if not runs_on_simulator():
            raise pytest.UsageError("--simgpu: the restarted run does not have the simulated driver first")
        return
    if runs_on_simulator():  # started under simgpu-run (or with-simulator.sh): no restart needed
        os.environ[_REEXEC_MARK] = "1"
        print(banner(os.environ["SIMGPU_LIB_DIR"], "pytest --simgpu: the tests run"), file=sys.stderr)
        return
    try:
        env = environment()
    except SimulatorNotBuilt as exc:
        raise pytest.UsageError(str(exc)) from None
    env[_REEXEC_MARK] = "1"
    argv = [sys.executable, "-m", "pytest", *early_config.invocation_params.args]
    capture = early_config.pluginmanager.getplugin("capturemanager")
    if capture is not None:  # pytest captures fds 1 and 2 already: the new run gets the real ones
        capture.stop_global_capturing()
    print(banner(env["SIMGPU_LIB_DIR"], "pytest --simgpu: the tests run"), file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    os.chdir(early_config.invocation_params.dir)
    os.execve(sys.executable, argv, env)


def _active(config) -> bool:
    """Whether this is the run ``--simgpu`` started on the simulated driver."""
    return bool(config.getoption("simgpu", False)) and os.environ.get(_REEXEC_MARK) == "1"


def pytest_report_header(config):
    if _active(config) and os.environ.get("SIMGPU_LIB_DIR"):
        return banner(os.environ["SIMGPU_LIB_DIR"], "this test run is")
    return None


def pytest_configure(config):
    config.addinivalue_line(
        "markers",
        "needs_gpu: the test needs a CUDA device; skipped without one, run on the simulated "
        "device under --simgpu",
    )


@functools.cache
def _device_missing() -> str | None:
    """Why this process has no usable CUDA device (None: it has one)."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver"
    count = ctypes.c_int(0)
    if lib.cuInit(0) != 0 or lib.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value < 1:
        return "the CUDA driver reports no device"
    return None


def pytest_collection_modifyitems(config, items):
    marked = [item for item in items if item.get_closest_marker("needs_gpu") is not None]
    if not marked or _active(config):
        return
    reason = _device_missing()
    if reason is not None:
        skip = pytest.mark.skip(reason=f"needs a CUDA device ({reason}): pytest --simgpu runs it on the simulated one")
        for item in marked:
            item.add_marker(skip)


# ---- the checker's reports and host kernels' errors fail the test that caused them ----


def _counts():
    sim = simulator()
    return (sim.check_report_count() if sim is not None else 0), len(kernels.errors())


def pytest_runtest_setup(item):
    if _active(item.config):
        item.stash[_reports_key], item.stash[_errors_key] = _counts()
        item.stash[_expected_key] = 0


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    return (yield from _checked(item, "call", ""))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    return (yield from _checked(item, "teardown", " (in its teardown)"))


def _checked(item, when: str, where: str):
    """Runs the phase; fails it with what the simulated device found during it (a phase
    that failed anyway gets them as a report section)."""
    try:
        result = yield
    except BaseException:
        found = _found(item)
        if found:
            item.add_report_section(when, "simgpu", "\n".join(found))
        raise
    found = _found(item)
    if found:
        pytest.fail("\n".join([f"the simulated device found{where}:", *(f"  {line}" for line in found)]), pytrace=False)
    return result


def _found(item) -> list[str]:
    """The checker's reports and the host kernels' errors since the last look, less the
    reports the test expected."""
    if not _active(item.config) or _reports_key not in item.stash:
        return []
    sim = simulator()
    since, errors_since = item.stash[_reports_key], item.stash[_errors_key]
    reports, errors = _counts()
    item.stash[_reports_key], item.stash[_errors_key] = reports, errors
    unexpected = reports - since - item.stash[_expected_key]
    item.stash[_expected_key] = 0
    texts = sim.check_reports(since) if sim is not None and unexpected > 0 else []
    return texts + [str(error) for error in kernels.errors()[errors_since:]]


# ---- the fixture ----


class SimgpuFixture:
    """The simulated device's controls for one test; what the test changes is undone after it.

    ``sim``: the :class:`~stridedview_simgpu.Simulator` (every export); ``counter(name)``,
    ``calls(name)``: counts (``launches``, ``events_live``, ``host_waits``, ...);
    ``launches()``: the launches since the test began (name, grid, block, parameter bytes,
    stream, whether it ran); ``fail(entry_point, code, count=1, skip=0)``: injected
    failures; ``delay(us)``: every stream operation waits first; ``check_reports()``: the
    checker's reports since the test began; ``expect_reports()``: a block whose reports the
    test expects (they do not fail it; the block's ``reports`` lists them);
    ``kernel(name, params=..., reads=..., writes=...)``: registers a host implementation
    (:mod:`stridedview_simgpu.kernels`) for the test."""

    def __init__(self, sim, item):
        self.sim = sim
        self._item = item
        self._launches_from = sim.launch_count()
        self._reports_from = sim.check_report_count()
        self._kernels: list[str] = []
        self._delay_changed = False
        self._failures = False

    def counter(self, name: str) -> int:
        return self.sim.counter(name)

    def calls(self, name: str) -> int:
        return self.sim.calls(name)

    def launches(self) -> list[dict]:
        return [self.sim.launch(i) for i in range(self._launches_from, self.sim.launch_count())]

    def fail(self, entry_point: str, code, count: int = 1, skip: int = 0) -> None:
        self._failures = True
        self.sim.fail(entry_point, code, count, skip)

    def delay(self, microseconds: int) -> None:
        self._delay_changed = True
        self.sim.set_delay_us(int(microseconds))

    def check_reports(self) -> list[str]:
        return self.sim.check_reports(self._reports_from)

    @contextlib.contextmanager
    def expect_reports(self):
        block = _ExpectedReports()
        before = self.sim.check_report_count()
        try:
            yield block
        finally:
            after = self.sim.check_report_count()
            block.reports = self.sim.check_reports(before)
            if _expected_key in self._item.stash:
                self._item.stash[_expected_key] += after - before

    def kernel(self, name: str, params=None, reads=None, writes=None):
        def decorate(fn):
            kernels.register(name, fn, params, reads, writes)
            self._kernels.append(name)
            return fn

        return decorate

    def _undo(self) -> None:
        for name in self._kernels:
            kernels.unregister(name)
        if self._failures:
            self.sim.fail_clear()
        if self._delay_changed:
            self.sim.set_delay_us(int(os.environ.get("SIMGPU_DELAY_US", "0") or 0))


class _ExpectedReports:
    reports: list[str] = []


@pytest.fixture
def simgpu(request):
    """The simulated device's controls for this test (:class:`SimgpuFixture`); skips the test
    unless the run is on the simulated driver (``pytest --simgpu``, or under ``simgpu-run``)."""
    sim = simulator() if _active(request.config) or runs_on_simulator() else None
    if sim is None:
        pytest.skip("needs the simulated CUDA driver: run pytest --simgpu")
    controls = SimgpuFixture(sim, request.node)
    try:
        yield controls
    finally:
        controls._undo()
