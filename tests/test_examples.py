"""The examples run where the docs say: the host ones anywhere, the GPU ones on a GPU, and
each GPU example, on a machine without what it needs, says what that is and exits with 0."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import gpu_import, has_cuda_gpu

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
GPU_EXAMPLES = sorted(path.name for path in EXAMPLES.glob("gpu_*.py"))


def _run(name: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / name)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), EXAMPLES / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_there_are_four_gpu_examples():
    """The examples checked below are the ones in examples/ (a new one is picked up)."""
    assert GPU_EXAMPLES == ["gpu_cupy.py", "gpu_graphs.py", "gpu_numba_jax.py", "gpu_torch.py"]


@pytest.mark.slow
@pytest.mark.parametrize("name", GPU_EXAMPLES)
def test_gpu_example_without_a_gpu_says_what_it_needs(name, tmp_path):
    """Without a GPU (or its libraries) a GPU example prints what it needs and exits with 0, no traceback."""
    result = _run(name, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    if not has_cuda_gpu():  # on a GPU machine it may run (test_gpu_example_runs insists)
        assert result.stdout.startswith(f"{name} skipped: it needs a CUDA GPU"), result.stdout


@pytest.mark.parametrize("name", GPU_EXAMPLES)
@pytest.mark.parametrize("absent", ["torch", "cupy", "numba", "numba.cuda", "jax", "cuda.core"])
def test_gpu_example_names_each_missing_library(name, absent, monkeypatch):
    """missing() names a library the example imports when that library is not installed."""
    module = _load(name)
    real = importlib.util.find_spec

    def find_spec(spec_name, *args):
        if spec_name == absent or spec_name.startswith(absent + "."):
            return None
        return real(spec_name, *args)

    source = (EXAMPLES / name).read_text()
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    lacking = module.missing()
    imported = f"import {absent}" in source or f"from {absent} import" in source
    if imported:
        assert lacking is not None and "not installed" in lacking, lacking


@pytest.mark.gpu
@pytest.mark.real_gpu
@pytest.mark.parametrize("name", GPU_EXAMPLES)
def test_gpu_example_runs(name, tmp_path):
    """On a GPU machine with the gpu extra, each GPU example runs to the end (CuPy, jax's and
    torch's CUDA builds: a real GPU, not the simulated device)."""
    result = _run(name, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "skipped" not in result.stdout, result.stdout


# --- launchers: ordering never silently off, temporaries kept (record_stream) ---------------


def test_launcher_example_refuses_device_memory_without_a_stream():
    """examples/launcher.py's axpy has no stream default that orders nothing: device arrays
    passed without stream_ptr are refused as ambiguous (BufferError), host arrays need none."""
    from producers import make_producer

    module = _load("launcher.py")
    x = make_producer(device=(2, 0), shape=(2, 3), dtype="float32")
    y = make_producer(device=(2, 0), shape=(2, 3), dtype="float32")
    with pytest.raises(BufferError, match=r"stream_ptr=None is ambiguous for CUDA memory"):
        module.axpy(1.0, x, y)
    import numpy as np

    out = np.zeros((2, 3), np.float32)
    module.axpy(2.0, np.ones((2, 3), np.float32), out)
    assert (out == 2.0).all()


@pytest.mark.slow
def test_temporaries_example_without_a_driver_says_what_it_needs(tmp_path):
    """Without a CUDA driver, examples/launcher_temporaries.py says what it needs and exits 0."""
    result = _run("launcher_temporaries.py", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    if not has_cuda_gpu():
        assert result.stdout.startswith(
            "launcher_temporaries.py skipped: it needs a CUDA GPU or the simulated device"
        ), result.stdout


@pytest.mark.gpu
def test_temporaries_example_keeps_every_temporary(tmp_path):
    """On a device (the simulated one in CI), the record_stream=True launcher reads the temporary
    it was given in every round, though each is dropped right after its launch."""
    gpu_import("cuda.core")  # the example's allocator
    result = _run("launcher_temporaries.py", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "with record_stream=True: 20 of 20 launches read the temporary they were given, 0 read" \
        in result.stdout


@pytest.mark.gpu
@pytest.mark.simgpu
def test_temporaries_example_unsafe_reads_reused_memory(tmp_path):
    """Control: the same example without record_stream, every stream operation delayed (the
    simulator's SIMGPU_DELAY_US), reads memory the pool handed to the next allocation and exits
    with 1: the safe run above can fail."""
    import os
    import re

    gpu_import("cuda.core")  # the example's allocator
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "launcher_temporaries.py"), "--unsafe"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
        env=dict(os.environ, SIMGPU_DELAY_US="100", SIMGPU_CHECK="0"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    reused = re.search(r"without record_stream: \d+ of 20 launches read the temporary they were "
                       r"given, (\d+) read memory reused", result.stdout)
    assert reused and int(reused.group(1)) >= 1, result.stdout


@pytest.mark.gpu
@pytest.mark.simgpu
@pytest.mark.parametrize("unsafe", [True, False], ids=["unsafe", "safe"])
def test_temporaries_example_is_checked_by_order_with_no_delay(tmp_path, unsafe):
    """With the stream-order checker on and no delay at all (SIMGPU_DELAY_US=0, where a stale
    read is a matter of luck), the example without record_stream is reported at its first
    round, every time, and exits with 1; with it, never."""
    import os

    gpu_import("cuda.core")
    for _ in range(3):
        result = subprocess.run(
            [sys.executable, str(EXAMPLES / "launcher_temporaries.py"), *(["--unsafe"] if unsafe else [])],
            cwd=tmp_path, capture_output=True, text=True, timeout=600,
            env=dict(os.environ, SIMGPU_DELAY_US="0", SIMGPU_CHECK="1"),
        )
        reports = [line for line in result.stderr.splitlines() if line.startswith("simgpu: check: ")]
        if unsafe:
            assert result.returncode == 1, result.stdout + result.stderr
            assert reports and reports[0].startswith("simgpu: check: free while in use: cuMemFreeAsync"), reports
            assert "stream-order checker reported" in result.stdout
        else:
            assert result.returncode == 0 and reports == [], result.stdout + result.stderr


@pytest.mark.slow
def test_with_simulator_runs_a_command_on_the_simulated_device(tmp_path):
    """simgpu/with-simulator.sh builds the simulator (into SIMGPU_BUILD_DIR), makes it the
    command's libcuda.so.1 and runs the command in the caller's directory, its status kept."""
    import os
    import shutil

    if shutil.which(os.environ.get("CC", "cc")) is None:
        pytest.skip("needs a C compiler")  # not skipped in CI: its machines have one
    script = EXAMPLES.parent / "simgpu" / "with-simulator.sh"
    build = tmp_path / "sim"
    probe = (
        "import ctypes, os, sys\n"
        "lib = ctypes.CDLL('libcuda.so.1')\n"
        "print(hasattr(lib, 'simgpu_is_simulator'), os.environ['SIMGPU_LIB_DIR'], os.getcwd())\n"
        "sys.exit(3)\n"
    )
    result = subprocess.run(
        [str(script), sys.executable, "-c", probe], cwd=tmp_path, capture_output=True, text=True,
        timeout=600, env=dict(os.environ, SIMGPU_BUILD_DIR=str(build)),
    )
    assert result.returncode == 3, result.stdout + result.stderr
    assert result.stdout.split() == ["True", str(build), str(tmp_path)]
    assert (build / "libcuda.so.1").is_file()
    usage = subprocess.run([str(script)], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and usage.stderr.startswith("usage: ")


@pytest.mark.gpu
@pytest.mark.simgpu
def test_gpu_graphs_example_runs_on_the_simulated_device(tmp_path):
    """examples/gpu_graphs.py needs only cuda-bindings and a driver: it runs on the simulated
    device, every operation delayed (so that a replay not waiting for the producer reads
    zeros and the example fails), and its holds come back after the graph is gone."""
    import os

    env = dict(os.environ, SIMGPU_DELAY_US="2000")
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "gpu_graphs.py")], cwd=tmp_path, capture_output=True,
        text=True, timeout=600, env=env,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[:3] == [
        "captured one launch into a graph",
        "replayed 10 times: every replay read the producer's bytes",
        "destroying the graph and its executable graph",
    ], result.stdout
    assert lines[3:] == ["  producer array released"] * 2, result.stdout


def _ipc_pipeline(tmp_path: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / "ipc_pipeline.py")], cwd=tmp_path, capture_output=True,
        text=True, timeout=600, env=env,
    )


@pytest.mark.gpu
@pytest.mark.simgpu
@pytest.mark.parametrize("broken", [None, "no wait"])
def test_ipc_pipeline_example_runs_on_the_simulated_device(tmp_path, broken):
    """examples/ipc_pipeline.py: two processes, every stream operation delayed; as written
    every sum matches.  Its consumer viewing with -1 (no wait on the producer's event) reads
    each batch long before the producer's eight delayed writes of it: the example says the
    sums differ and fails.  (Without its record_stream the producer would free a batch
    before the copy: when depends on timing here, so tests/test_gpu_ipc.py proves the
    hold by order, with a gate.)"""
    import os

    source = (EXAMPLES / "ipc_pipeline.py").read_text()
    if broken == "no wait":
        source = source.replace("view = StridedMemoryView(received, stream_ptr=int(stream))", "view = StridedMemoryView(received, stream_ptr=-1)")
    assert (source != (EXAMPLES / "ipc_pipeline.py").read_text()) == (broken is not None)
    (tmp_path / "ipc_pipeline.py").write_text(source)
    env = dict(os.environ, SIMGPU_DELAY_US="2000", PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run(
        [sys.executable, str(tmp_path / "ipc_pipeline.py")], cwd=tmp_path, capture_output=True,
        text=True, timeout=600, env=env,
    )
    if broken is None:
        assert result.returncode == 0, result.stdout + result.stderr
        assert result.stdout.endswith("sums match\n"), result.stdout
    else:
        assert result.returncode == 1 and result.stdout.endswith("sums DIFFER\n"), result.stdout + result.stderr


@pytest.mark.slow
def test_ipc_pipeline_example_without_a_driver_says_what_it_needs(tmp_path):
    """On a machine with no CUDA driver the example says what it needs and exits with 0."""
    import os

    if has_cuda_gpu():
        pytest.skip("a CUDA driver is here: test_ipc_pipeline_example_runs_on_the_simulated_device runs it")
    result = _ipc_pipeline(tmp_path, dict(os.environ))
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    assert result.stdout.startswith("ipc_pipeline.py skipped: it needs a CUDA driver"), result.stdout


COMPUTED_KERNEL = EXAMPLES / "computed_kernel"


def _saxpy_suite(tmp_path: Path, broken: str | None) -> subprocess.CompletedProcess:
    """examples/computed_kernel's tests, copied to a folder of their own (as a user's launcher
    and tests), the launcher with its ordering (``broken="order"``: views made with no stream)
    or its record_stream (``"record_stream"``) taken out, run with ``pytest --simgpu``."""
    import os

    folder = tmp_path / (broken or "as-written")
    folder.mkdir()
    for name in ("saxpy.py", "conftest.py", "test_saxpy.py"):
        text = (COMPUTED_KERNEL / name).read_text()
        if name == "saxpy.py" and broken == "order":
            text = text.replace("out.view(stream), x.view(stream), y.view(stream)", "out.view(-1), x.view(-1), y.view(-1)")
        if name == "saxpy.py" and broken == "record_stream":
            text = text.replace("record_stream=True)", "record_stream=False)")
        assert text != (COMPUTED_KERNEL / name).read_text() or name != "saxpy.py" or broken is None
        (folder / name).write_text(text)
    import stridedview

    env = dict(os.environ, PYTEST_DISABLE_PLUGIN_AUTOLOAD="1", PYTHONPATH=os.pathsep.join(
        [str(EXAMPLES.parent / "simgpu"), str(Path(stridedview.__file__).parents[1])]))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "stridedview_simgpu.pytest_plugin", "-p", "no:cacheprovider",
         "-q", "--simgpu"], cwd=folder, capture_output=True, text=True, timeout=300, env=env,
    )


@pytest.mark.gpu
@pytest.mark.simgpu
@pytest.mark.parametrize("broken", [None, "order", "record_stream"])
def test_computed_kernel_example_passes_and_fails_without_its_ordering(tmp_path, broken):
    """examples/computed_kernel: the saxpy launcher's tests pass on the simulated device, its
    kernel computed by a numpy implementation; without its stream ordering, or without
    record_stream, the stream-order checker fails them (by order, not by timing)."""
    gpu_import("cuda.bindings.driver")
    result = _saxpy_suite(tmp_path, broken)
    if broken is None:
        assert result.returncode == 0 and "4 passed" in result.stdout, result.stdout + result.stderr
        return
    assert result.returncode == 1, result.stdout + result.stderr
    expected = "simgpu: check: race: cuLaunchKernel of kernel saxpy" if broken == "order" else \
        "simgpu: check: free while in use: cuMemFreeAsync"
    assert expected in result.stdout, result.stdout  # the failure's message, or its "simgpu" section
