"""benchmarks/device.py's agreement mode on a CUDA driver (the simulated device or a GPU).

``python benchmarks/device.py --check`` runs every case of the device benchmark without
valgrind (each with its setup: hand-overs pending on a blocked stream for some) and checks
that stridedview's and cuda.core's views of the same producers have the same ``ptr``,
``shape``, ``strides`` and ``dtype``; on the simulated device also that the ordered CAI cases
wait on the consumer stream and the ``-1`` ones do not.  In a fresh interpreter: the
benchmark makes its own context current, streams and pending hand-overs.
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


def test_device_benchmark_cases_run_and_agree():
    gpu_import("cuda.core")
    if not (ROOT / "benchmarks" / "device.py").exists():
        pytest.skip("benchmarks/device.py is not beside the tests (the sdist ships no benchmarks)")
    import stridedview

    # The stridedview this test imported, wherever it is installed.
    env = dict(os.environ)
    home = str(Path(stridedview.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [home, env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "device.py"), "--check"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "every case ran, every pair agrees" in result.stdout
