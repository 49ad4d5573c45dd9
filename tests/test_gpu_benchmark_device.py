"""benchmarks/device.py's agreement mode on a CUDA driver (the simulated device or a GPU).

``python benchmarks/device.py --check`` runs every case of the device benchmark without
valgrind (each with its setup: hand-overs pending on a blocked stream for some) and checks
that stridedview's and cuda.core's views of the same producers have the same ``ptr``,
``shape``, ``strides`` and ``dtype``; on the simulated device also that the ordered CAI cases
wait on the consumer stream and the ``-1`` ones do not.  In a fresh interpreter: the
benchmark makes its own context current, streams and pending hand-overs.  ``--wall`` (the
mode for a real GPU, where no valgrind runs) times the same cases and prints each pair's
ratio.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import gpu_import

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent


def _run_device_benchmark(*args: str) -> subprocess.CompletedProcess:
    """benchmarks/device.py with ``args``, in a fresh interpreter, on the stridedview this
    test imported (wherever it is installed)."""
    gpu_import("cuda.core")
    if not (ROOT / "benchmarks" / "device.py").exists():
        pytest.skip("benchmarks/device.py is not beside the tests (the sdist ships no benchmarks)")
    import stridedview

    env = dict(os.environ)
    home = str(Path(stridedview.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [home, env.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "device.py"), *args],
        env=env, capture_output=True, text=True, timeout=120,
    )


def test_device_benchmark_cases_run_and_agree():
    result = _run_device_benchmark("--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every case ran, every pair agrees" in result.stdout


def test_device_benchmark_wall_times_the_chosen_cases_and_pairs():
    result = _run_device_benchmark(
        "--wall", "--calls", "20", "--cases", "CAI view, ordered", "--cases", "1 pending"
    )
    assert result.returncode == 0, result.stdout + result.stderr
    timed = [line.split("us  ", 1)[1] for line in result.stdout.splitlines() if " us  " in line]
    assert sorted(timed) == sorted([
        "stridedview CAI view, ordered",
        "cuda.core CAI view, ordered",
        "view on s, record_stream(s), 1 pending",
        "launch x3 on s, record_stream=True, 1 pending",
    ]), result.stdout
    for line in result.stdout.splitlines():
        if " us  " in line:
            assert float(line.split()[0]) > 0, line
    ratio = [line for line in result.stdout.splitlines() if line.endswith(" us)")]
    assert len(ratio) == 1 and "x  CAI view, ordered (" in ratio[0], result.stdout
