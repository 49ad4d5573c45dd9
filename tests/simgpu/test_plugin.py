"""The pytest plugin of stridedview-simgpu, run as a user runs it: ``pytest --simgpu`` on a
folder of tests, in a child process started without the simulated driver."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from .simgpu_support import _SIMGPU_TREE

ROOT = Path(_SIMGPU_TREE).parent

USER_TESTS = r'''
import ctypes
import pytest
from cuda.bindings import driver as drv

def ok(result):
    assert result[0] == drv.CUresult.CUDA_SUCCESS, result
    return result[1] if len(result) > 1 else None

@pytest.fixture
def two_streams():
    ok(drv.cuInit(0))
    ctx = ok(drv.cuDevicePrimaryCtxRetain(ok(drv.cuDeviceGet(0))))
    ok(drv.cuCtxSetCurrent(ctx))
    streams = [ok(drv.cuStreamCreate(1)) for _ in range(2)]
    buffers = [ok(drv.cuMemAlloc(4096)) for _ in range(2)]
    yield streams, buffers
    ok(drv.cuCtxSynchronize())

def race(streams, buffers):
    a, b = streams
    ok(drv.cuMemsetD8Async(buffers[0], 1, 4096, a))
    ok(drv.cuMemcpyDtoDAsync(buffers[1], buffers[0], 4096, b))  # not ordered after a's write

@pytest.mark.needs_gpu
def test_the_driver_is_the_simulator():
    assert ctypes.CDLL("libcuda.so.1").simgpu_is_simulator() == 1

def test_a_race_fails_the_test(two_streams):
    race(*two_streams)

def test_an_expected_race_passes(two_streams, simgpu):
    with simgpu.expect_reports() as expected:
        race(*two_streams)
    assert len(expected.reports) == 1 and expected.reports[0].startswith("simgpu: check: race: ")

def test_an_injected_failure(two_streams, simgpu):
    simgpu.fail("cuStreamSynchronize", 2, count=-1)
    assert drv.cuStreamSynchronize(two_streams[0][0])[0] == drv.CUresult.CUDA_ERROR_OUT_OF_MEMORY

def test_injected_failures_are_cleared_after_the_test(two_streams):
    ok(drv.cuStreamSynchronize(two_streams[0][0]))

def test_a_host_kernel_that_raises_fails_the_test(two_streams, simgpu):
    ptx = b""".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry boom(.param .u64 p)\n{ ret; }\n\0"""
    function = ok(drv.cuModuleGetFunction(ok(drv.cuModuleLoadData(ptx)), b"boom"))

    @simgpu.kernel("boom", params=("ptr",))
    def boom(launch, p):
        raise RuntimeError("the kernel failed")

    value = ctypes.c_uint64(int(two_streams[1][0]))
    args = (ctypes.c_void_p * 1)(ctypes.addressof(value))
    ok(drv.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, two_streams[0][0], ctypes.addressof(args), 0))
    ok(drv.cuStreamSynchronize(two_streams[0][0]))
    assert [launch["name"] for launch in simgpu.launches()] == ["boom"]
'''


def outcomes(stdout: str) -> dict[str, str]:
    return {name: outcome for outcome, name in re.findall(r"^(PASSED|FAILED|SKIPPED|ERROR) \S*::(\w+)", stdout, re.M)}


@pytest.fixture(scope="module")
def user_env(tmp_path_factory):
    """A user's environment: no simulated driver on the path; the plugin (-p, as the
    installed distribution's entry point loads it), stridedview and the simulator's package
    importable; the simulator built into a folder of its own."""
    import stridedview

    env = {k: v for k, v in os.environ.items() if k not in ("LD_LIBRARY_PATH", "SIMGPU_LIB_DIR", "SIMGPU_CHECK")}
    env["PYTHONPATH"] = os.pathsep.join([_SIMGPU_TREE, str(Path(stridedview.__file__).parents[1])])
    env["SIMGPU_BUILD_DIR"] = str(tmp_path_factory.mktemp("simgpu-build"))
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # the plugin comes by -p, once, installed or not
    return env


def run_pytest(folder: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "stridedview_simgpu.pytest_plugin", "-p", "no:cacheprovider",
         "-q", "-rA", *args],
        cwd=folder, env=env, capture_output=True, text=True, timeout=300,
    )


def test_pytest_simgpu_runs_the_tests_on_the_simulated_driver(tmp_path, user_env):
    """--simgpu starts the run again on the simulator (saying so first): a needs_gpu test runs
    there, a test with an unordered access fails with the checker's report, expected reports
    pass, injected failures and host kernels are the fixture's for one test, and a host
    kernel that raises fails its test."""
    (tmp_path / "test_user.py").write_text(USER_TESTS)
    result = run_pytest(tmp_path, user_env, "--simgpu")
    assert result.stderr.startswith("simgpu: pytest --simgpu: the tests run on the SIMULATED CUDA driver ("), result.stderr
    assert outcomes(result.stdout) == {
        "test_the_driver_is_the_simulator": "PASSED",
        "test_a_race_fails_the_test": "FAILED",
        "test_an_expected_race_passes": "PASSED",
        "test_an_injected_failure": "PASSED",
        "test_injected_failures_are_cleared_after_the_test": "PASSED",
        "test_a_host_kernel_that_raises_fails_the_test": "FAILED",
    }, result.stdout + result.stderr
    assert "the simulated device found:\n  simgpu: check: race: cuMemcpyDtoDAsync" in result.stdout
    assert "the kernel failed" in result.stdout
    assert result.returncode == 1


def test_without_simgpu_a_needs_gpu_test_is_skipped_naming_the_flag(tmp_path, user_env):
    (tmp_path / "test_user.py").write_text(
        "import pytest\n\n@pytest.mark.needs_gpu\ndef test_gpu():\n    pass\n\n"
        "def test_fixture(simgpu):\n    pass\n"
    )
    result = run_pytest(tmp_path, user_env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SKIPPED [1] test_user.py:3: needs a CUDA device (" in result.stdout
    assert "pytest --simgpu runs it on the simulated one" in result.stdout
    assert "needs the simulated CUDA driver: run pytest --simgpu" in result.stdout
    assert "SIMULATED" not in result.stderr


def test_simgpu_run_runs_a_command_on_the_simulated_driver(tmp_path, user_env):
    probe = "import ctypes, os; print(ctypes.CDLL('libcuda.so.1').simgpu_is_simulator(), os.getcwd())"
    result = subprocess.run(
        [sys.executable, "-m", "stridedview_simgpu", sys.executable, "-c", probe + "; raise SystemExit(5)"],
        cwd=tmp_path, env=user_env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 5, result.stderr
    assert result.stdout.split() == ["1", str(tmp_path)]
    assert re.match(r"simgpu: running `\S+ -c .*` on the SIMULATED CUDA driver \(", result.stderr), result.stderr
    usage = subprocess.run([sys.executable, "-m", "stridedview_simgpu"], env=user_env, capture_output=True, text=True)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: simgpu-run COMMAND")
