"""The examples run where the docs say: the host ones anywhere, the GPU ones on a GPU, and
each GPU example, on a machine without what it needs, says what that is and exits with 0."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import has_cuda_gpu

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
