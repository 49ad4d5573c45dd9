"""``python -m stridedview``: the interop report (stridedview/_report.py).

docs/contract-draft.md ("Issue 4 additions"): ``build_report(timing=True)`` gives
"environment", "libraries" and "rows" (producer, device, view, view_us, error,
cells of consumer/ok/reason); ``format_report`` renders the matrix; ``main``
takes ``--json`` and ``--no-timing``.  The checks are on structure and on the
cells whose outcome is guaranteed, not on exact text.

The one expected failure on the CPU: jax copies host buffers that are not
64-byte aligned (PROTOCOLS.md: "jax copies unaligned host buffers"), so a numpy
or array-api-strict array whose allocation happens to be unaligned shows as a
copy in the jax column.  Such a cell must say "copied" and its view's pointer
must indeed be unaligned.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
import time

import pytest

from stridedview import _report

ENVIRONMENT_KEYS = {"python", "stridedview", "numpy", "cuda-bindings", "cuda driver", "gpus"}
ROW_KEYS = {"producer", "device", "view", "view_us", "error", "cells"}
CELL_KEYS = {"consumer", "ok", "reason"}

#: Library name in the report -> module whose presence makes it installed.
MODULES = {
    "numpy": "numpy",
    "torch": "torch",
    "jax": "jax",
    "array-api-strict": "array_api_strict",
    "cupy": "cupy",
    "numba-cuda": "numba.cuda",
}

#: jax shares a host buffer only when it is aligned to this many bytes.
JAX_ALIGNMENT = 64

#: The report must finish in under 10 s; the assertion leaves room for CI noise.
TIME_LIMIT = 20.0


def _installed(module):
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


INSTALLED = [name for name, module in MODULES.items() if _installed(module.split(".")[0]) and _installed(module)]


def _run(*args):
    """Run ``python -m stridedview *args``; return (completed process, seconds)."""
    start = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "stridedview", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return completed, time.perf_counter() - start


@pytest.fixture(scope="module")
def text_run():
    """One run of ``python -m stridedview`` (with timings), timed."""
    return _run()


@pytest.fixture(scope="module")
def report():
    """build_report(timing=False) in this process."""
    return _report.build_report(timing=False)


def _ptr_of(view_repr):
    """The ptr=0x... of a view repr, as an int."""
    found = re.search(r"ptr=(0x[0-9a-f]+)", view_repr)
    assert found, view_repr
    return int(found.group(1), 16)


def _explained(row, cell):
    """Whether a failed CPU cell is the known jax copy of an unaligned buffer."""
    return (
        cell["consumer"] == "jax"
        and cell["reason"].startswith("copied")
        and _ptr_of(row["view"]) % JAX_ALIGNMENT != 0
    )


# --- the command line ------------------------------------------------------------------

def test_command_prints_environment_and_matrix(text_run):
    """`python -m stridedview` exits 0 and prints the environment lines and a matrix with numpy's row."""
    completed, _ = text_run
    assert completed.returncode == 0, completed.stderr
    out = completed.stdout
    for key in ENVIRONMENT_KEYS:
        assert re.search(rf"^\s+{re.escape(key)}\s+\S", out, re.MULTILINE), key
    assert re.search(r"^\s+libraries\s+numpy \S+", out, re.MULTILINE)
    header = re.search(r"^\s+producer\s+view µs\s+numpy\b.*$", out, re.MULTILINE)
    assert header, out
    numpy_row = re.search(r"^\s+numpy \(cpu\)\s+\d+\.\d+\s+ok\b", out, re.MULTILINE)
    assert numpy_row, out  # a timing, then ok in the numpy column


def test_command_finishes_quickly(text_run):
    """The report (timings included) finishes in under 10 s; asserted < 20 s for CI noise, the time printed."""
    completed, seconds = text_run
    print(f"python -m stridedview took {seconds:.2f} s")
    assert completed.returncode == 0, completed.stderr
    assert seconds < TIME_LIMIT


def test_command_json():
    """`--json` prints JSON with the documented keys, numpy -> numpy ok and a timing per viewed row."""
    completed, seconds = _run("--json")
    print(f"python -m stridedview --json took {seconds:.2f} s")
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    assert set(data) == {"environment", "libraries", "rows"}
    assert set(data["environment"]) == ENVIRONMENT_KEYS
    assert "numpy" in data["libraries"]
    numpy_cpu = [row for row in data["rows"] if (row["producer"], row["device"]) == ("numpy", "cpu")]
    assert len(numpy_cpu) == 1
    row = numpy_cpu[0]
    assert set(row) == ROW_KEYS
    assert row["error"] == ""
    assert isinstance(row["view_us"], float) and row["view_us"] > 0
    cells = {cell["consumer"]: cell for cell in row["cells"]}
    assert cells["numpy"] == {"consumer": "numpy", "ok": True, "reason": ""}


def test_main_no_timing(capsys):
    """main(['--json', '--no-timing']) returns 0 and reports no timings."""
    assert _report.main(["--json", "--no-timing"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rows"]
    assert all(row["view_us"] is None for row in data["rows"])


def test_main_help():
    """`--help` describes the command and exits 0."""
    completed, _ = _run("--help")
    assert completed.returncode == 0
    assert "--json" in completed.stdout and "--no-timing" in completed.stdout


# --- build_report in this process ---------------------------------------------------------

def test_report_structure(report):
    """The report has the documented keys, every field typed, and the environment of this process."""
    assert set(report) == {"environment", "libraries", "rows"}
    environment = report["environment"]
    assert set(environment) == ENVIRONMENT_KEYS
    assert environment["python"] == sys.version.split()[0]
    assert isinstance(environment["gpus"], int) and environment["gpus"] >= 0
    import numpy

    assert environment["numpy"] == numpy.__version__
    for row in report["rows"]:
        assert set(row) == ROW_KEYS
        assert row["view_us"] is None  # timing=False
        assert isinstance(row["error"], str)
        for cell in row["cells"]:
            assert set(cell) == CELL_KEYS
            assert isinstance(cell["ok"], bool)
            assert cell["ok"] == (cell["reason"] == "")
    json.dumps(report)  # plain data


def test_report_lists_every_installed_library(report):
    """Every installed known library has a version and a CPU row (GPU-only libraries excepted) with a cell per consumer."""
    assert list(report["libraries"]) == INSTALLED
    cpu_rows = {row["producer"] for row in report["rows"] if row["device"] == "cpu"}
    assert cpu_rows == {name for name in INSTALLED if name not in ("cupy", "numba-cuda")}
    for row in report["rows"]:
        assert row["error"] == "", row
        assert [cell["consumer"] for cell in row["cells"]] == INSTALLED
        assert row["view"].startswith("StridedMemoryView(ptr=0x")


def test_report_cpu_cells_ok_or_explained(report):
    """Every CPU cell is ok except a jax copy of an unaligned buffer, which says 'copied'."""
    unexplained = [
        (row["producer"], cell["consumer"], cell["reason"])
        for row in report["rows"]
        if row["device"] == "cpu"
        for cell in row["cells"]
        if not cell["ok"] and not _explained(row, cell)
    ]
    assert unexplained == []


@pytest.mark.interop
@pytest.mark.parametrize("name", ["numpy", "torch"])
def test_report_numpy_and_torch_cells_ok(report, name):
    """numpy and torch share memory with every producer on the CPU: their cells are all ok, as rows and as columns."""
    if name not in INSTALLED:
        pytest.importorskip(MODULES[name])
    for row in report["rows"]:
        if row["device"] != "cpu":
            continue
        for cell in row["cells"]:
            if name in (row["producer"], cell["consumer"]) and cell["consumer"] != "jax":
                assert cell["ok"], (row["producer"], cell)
            if row["producer"] == name and cell["consumer"] == "jax" and name == "torch":
                assert cell["ok"], cell  # torch's allocations are 64-byte aligned


def test_format_report_matrix(report):
    """format_report shows each environment line, a header with every consumer and a row per producer."""
    text = _report.format_report(report)
    for key, value in report["environment"].items():
        assert re.search(rf"^\s+{re.escape(key)}\s+{re.escape(str(value))}$", text, re.MULTILINE), key
    header = next(line for line in text.splitlines() if re.match(r"\s+producer\s+view", line))
    for consumer in INSTALLED:
        assert consumer in header
    for row in report["rows"]:
        assert re.search(rf"^\s+{re.escape(row['producer'])} \({row['device']}\)\s", text, re.MULTILINE)
    failures = sum(not cell["ok"] for row in report["rows"] for cell in row["cells"])
    assert text.count("FAIL [") == failures
    if failures:
        assert "failures:" in text


def test_report_with_numpy_alone(monkeypatch):
    """With only numpy known (as on a machine with numpy alone), the report still has numpy's row, ok."""
    monkeypatch.setattr(_report, "KNOWN_LIBRARIES", (_report._numpy_library,))
    report = _report.build_report(timing=True)
    assert report["libraries"] == {"numpy": report["environment"]["numpy"]}
    assert len(report["rows"]) == 1
    row = report["rows"][0]
    assert (row["producer"], row["device"], row["error"]) == ("numpy", "cpu", "")
    assert isinstance(row["view_us"], float) and row["view_us"] > 0
    assert row["cells"] == [{"consumer": "numpy", "ok": True, "reason": ""}]
    text = _report.format_report(report)
    assert re.search(r"^\s+numpy \(cpu\)\s+\d+\.\d+\s+ok\s*$", text, re.MULTILINE), text


def test_report_row_for_a_failing_producer(monkeypatch):
    """A library whose array cannot be viewed gets a row with the error, not a crash."""

    def broken():
        library = _report._numpy_library()
        library.name = "broken"
        library.make = lambda device: [[1.0]]
        return library

    monkeypatch.setattr(_report, "KNOWN_LIBRARIES", (_report._numpy_library, broken))
    report = _report.build_report(timing=False)
    rows = {row["producer"]: row for row in report["rows"]}
    assert rows["broken"]["error"].startswith("BufferError: stridedview: 'list' object supports none of")
    assert rows["broken"]["cells"] == []
    assert rows["numpy"]["error"] == ""
    text = _report.format_report(report)
    assert "view failed: BufferError" in text
