"""Views across processes: tests/mpi/views_across_ranks.py run under ``mpiexec -n 2``.

mpi4py and an MPI (mpich, from PyPI) are in the test extra, so CI runs this; the test
skips only when mpi4py is missing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from stridedview import StridedMemoryView

SCRIPT = Path(__file__).parent / "mpi" / "views_across_ranks.py"


def _mpiexec() -> str:
    """The mpiexec beside this Python (mpich's wheel installs it there), else on PATH."""
    beside = Path(sys.executable).with_name("mpiexec")
    if beside.exists():
        return str(beside)
    found = shutil.which("mpiexec")
    if found is None:
        pytest.fail("mpi4py is installed but no mpiexec was found (install mpich: pip install mpich)")
    return found


@pytest.mark.slow
def test_views_sent_received_and_reduced_by_two_ranks():
    """Two ranks Send/Recv, Allreduce and refuse read-only views as MPI buffers, each check passing."""
    pytest.importorskip("mpi4py")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    result = subprocess.run(
        [_mpiexec(), "-n", "2", sys.executable, str(SCRIPT)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    # The ranks' lines may interleave in the shared stdout: found anywhere in it.
    reports = dict(re.findall(r"OK (\d) (\d+)", result.stdout))
    assert sorted(reports) == ["0", "1"], result.stdout
    assert int(reports["0"]) == 4 and int(reports["1"]) == 7, result.stdout


@pytest.mark.parametrize("dtype", ["u1", "i4", "f8", "c16"])
def test_an_empty_view_is_a_contiguous_mpi_buffer_through_memoryview(dtype):
    """mpi4py takes an empty 1-d view, and a memoryview of it, as a contiguous buffer of no
    bytes, as it takes numpy's (an exported stride of 0 made memoryview call it
    non-contiguous, and mpi4py's buffer tests failed so)."""
    MPI = pytest.importorskip("mpi4py.MPI")
    empty = np.zeros(0, dtype)
    for obj in (StridedMemoryView(empty), memoryview(StridedMemoryView(empty))):
        assert len(MPI.buffer(obj)) == 0
        received = bytearray()
        MPI.COMM_SELF.Sendrecv(obj, 0, 0, recvbuf=received, source=0)
