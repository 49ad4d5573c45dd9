"""``python -m stridedview``: the interop report (stridedview/_report.py).

``build_report(timing=True)`` gives "environment", "libraries", "not_installed",
"not_checked", "notes", "rows" (producer, device, view, view_us, error, cells
of consumer/verdict/reason) and "dtypes" (the element-type table: producer, type, dlpack,
dtype, error, cells); ``format_report`` renders both; ``main`` takes
``--json`` and ``--no-timing`` and returns 1 when a view or a hand-over fails.

Verdicts: "ok" (same memory and values), "writable" (the same, but the consumer's array
is writable over a read-only view: not plain ok, not a failure), "copies" (a consumer made
a copy with the same values: not a failure), "read-only", "n/a" (the consumer takes no memory of the
producer's kind: numba-cuda and CuPy take device memory only) and "fail".  jax copies host buffers that are not
64-byte aligned (docs/quickstart.md), so the report builds its host arrays aligned: on
the CPU every cell is "ok" whatever the allocator does, and an unaligned buffer
shows as "copies", never as a failure.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from stridedview import _report

ROOT = Path(__file__).resolve().parent.parent
REPORT_KEYS = {"environment", "libraries", "not_installed", "not_checked", "notes", "rows", "dtypes"}
ENVIRONMENT_KEYS = {
    "python", "stridedview", "numpy", "cuda-bindings", "cuda driver", "gpus",
    "build", "fast paths", "torch reader",
}
ROW_KEYS = {"producer", "device", "view", "view_us", "error", "cells"}
CELL_KEYS = {"consumer", "verdict", "reason"}

#: Library name in the report -> module whose presence makes it installed.
MODULES = {
    "numpy": "numpy",
    "torch": "torch",
    "jax": "jax",
    "array-api-strict": "array_api_strict",
    "cupy": "cupy",
    "numba-cuda": "numba.cuda",
    "cuda-core": "cuda.core",
}

#: The consumers that take device memory only: "n/a" for every host producer.
DEVICE_ONLY = ("cupy", "numba-cuda")

#: jax shares a host buffer only when it is aligned to this many bytes.
JAX_ALIGNMENT = 64

#: The report must finish in under 10 s; the assertion leaves room for CI noise.
TIME_LIMIT = 20.0

#: The widest line the text report (and its sample in the docs) may have.
MAX_WIDTH = 79


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


def _verdicts(report):
    """{(producer, device, consumer): verdict} of a report."""
    return {
        (row["producer"], row["device"], cell["consumer"]): cell["verdict"]
        for row in report["rows"]
        for cell in row["cells"]
    }


def _only(monkeypatch, *factories):
    """Make the report know only the libraries ``factories`` build."""
    monkeypatch.setattr(_report, "KNOWN_LIBRARIES", factories)


def _renamed(factory, name, **changes):
    """A library factory like ``factory`` but named ``name`` and with ``changes`` applied."""

    def make():
        library = factory()
        library.name = name
        for key, value in changes.items():
            setattr(library, key, value)
        return library

    return make


# --- the command line ------------------------------------------------------------------

@pytest.mark.slow
def test_command_prints_environment_and_matrix(text_run):
    """`python -m stridedview` exits 0 and prints the environment lines and a matrix with numpy's row."""
    completed, _ = text_run
    assert completed.returncode == 0, completed.stdout + completed.stderr
    out = completed.stdout
    environment = _report.environment()
    for key in ENVIRONMENT_KEYS:
        shown = re.search(rf"^\s+{re.escape(key)}\s+\S", out, re.MULTILINE)
        # The build lines show only where the build is not the usual one (or with --build).
        assert bool(shown) == _report._shown(key, environment[key], build=False), key
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


def test_command_lines_have_no_trailing_spaces_and_fit(text_run):
    """No line of the printed report ends in whitespace or is wider than 79 characters."""
    completed, _ = text_run
    lines = completed.stdout.splitlines()
    assert [line for line in lines if line != line.rstrip()] == []
    assert [line for line in lines if len(line) > MAX_WIDTH] == []


@pytest.mark.slow
def test_command_json():
    """`--json` prints JSON with the documented keys, numpy -> numpy ok and a timing per viewed row."""
    completed, seconds = _run("--json")
    print(f"python -m stridedview --json took {seconds:.2f} s")
    assert completed.returncode == 0, completed.stderr
    data = json.loads(completed.stdout)
    assert set(data) == REPORT_KEYS
    assert set(data["environment"]) == ENVIRONMENT_KEYS
    assert "numpy" in data["libraries"]
    numpy_cpu = [row for row in data["rows"] if (row["producer"], row["device"]) == ("numpy", "cpu")]
    assert len(numpy_cpu) == 1
    row = numpy_cpu[0]
    assert set(row) == ROW_KEYS
    assert row["error"] == ""
    assert isinstance(row["view_us"], float) and row["view_us"] > 0
    cells = {cell["consumer"]: cell for cell in row["cells"]}
    assert cells["numpy"] == {"consumer": "numpy", "verdict": "ok", "reason": ""}


@pytest.mark.slow
def test_verdicts_are_the_same_in_every_mode(text_run):
    """The text run, --json, --no-timing and an in-process report give the same verdicts."""
    completed, _ = _run("--json", "--no-timing")
    assert completed.returncode == 0, completed.stderr
    from_json = _verdicts(json.loads(completed.stdout))
    in_process = _verdicts(_report.build_report(timing=False))
    assert from_json == in_process
    table: dict = {}  # a row's marks from every table it is in (a wide one is split)
    for match in re.finditer(r"^  (\S+ \(\w+\))\s+[\d.]+\s+(.*)$", text_run[0].stdout, re.MULTILINE):
        table.setdefault(match.group(1), []).extend(match.group(2).split())
    for (producer, device, _consumer), verdict in in_process.items():
        if verdict == "ok":
            assert "ok" in table[f"{producer} ({device})"]


def test_main_no_timing(capsys):
    """main(['--json', '--no-timing']) returns 0 here and reports no timings."""
    assert _report.main(["--json", "--no-timing"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["rows"]
    assert all(row["view_us"] is None for row in data["rows"])


def test_the_text_report_without_timings_has_no_timing_column(capsys):
    """main(['--no-timing']) prints the matrix without the "view µs" column (and without
    the line saying what it measures); with timings it is there."""
    assert _report.main(["--no-timing"]) == 0
    text = capsys.readouterr().out
    assert "view µs" not in text and "producer -> consumer through a view:" in text
    timed = _report.format_report(_report.build_report(timing=True))
    assert "view µs" in timed


def test_main_help():
    """`--help` describes the command and its exit status, and exits 0."""
    completed, _ = _run("--help")
    assert completed.returncode == 0
    assert "--json" in completed.stdout and "--no-timing" in completed.stdout
    assert "Exits with 1" in completed.stdout


def test_main_version():
    """`--version` prints the installed version and exits 0."""
    import stridedview

    completed, _ = _run("--version")
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == f"stridedview {stridedview.__version__}"


@pytest.mark.slow
def test_json_without_timing_is_the_same_on_every_run():
    """Two runs of `--json --no-timing` print the same bytes (no addresses, no timings)."""
    first, _ = _run("--json", "--no-timing")
    second, _ = _run("--json", "--no-timing")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    assert "0x" not in first.stdout


@pytest.mark.slow
def test_piped_into_a_reader_that_stops_early():
    """A closed pipe on stdout (`python -m stridedview | head -1`) ends quietly, with the report's status."""
    process = subprocess.Popen(
        [sys.executable, "-m", "stridedview", "--no-timing"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=os.path.dirname(sys.prefix),
    )
    process.stdout.close()  # the reader is gone before the report is written
    stderr = process.stderr.read().decode()
    process.wait(timeout=120)
    process.stderr.close()
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr
    assert process.returncode == 0


def test_text_explains_view_us_and_the_build(text_run):
    """The text says what "view µs" measures and which torch reader is in use."""
    out = text_run[0].stdout
    assert "view µs = the median time, in microseconds, to make a view" in out
    assert re.search(r"^  torch reader\s+\S", out, re.MULTILINE), out


def test_build_lines_show_with_build_or_where_the_build_is_unusual(report):
    """The build and fast paths lines are for maintainers: the text shows them with --build,
    and otherwise only where the build is not the usual one (no C++ guard, no fast paths),
    which a user needs to know; the JSON has them always."""
    usual = dict(report, environment=dict(
        report["environment"], build="with the C++ exception guard",
        **{"fast paths": "yes (their state per process)"},
    ))
    plain, full = _report.format_report(usual), _report.format_report(usual, build=True)
    for key in ("build", "fast paths"):
        pattern = rf"^  {re.escape(key)}\s+\S"
        assert not re.search(pattern, plain, re.MULTILINE), plain
        assert re.search(pattern, full, re.MULTILINE), full
    unusual = dict(report, environment=dict(
        report["environment"], build=_report.WITHOUT_CXX_GUARD,
        **{"fast paths": "no (built with -DSV_NO_GIL_FAST_PATHS: every view takes the general path)"},
    ))
    text = _report.format_report(unusual)
    assert re.search(r"^  build\s+built without the C\+\+ exception guard", text, re.MULTILINE), text
    assert re.search(r"^  fast paths\s+no \(built with", text, re.MULTILINE), text
    assert {"build", "fast paths"} <= set(report["environment"])


def test_build_option_prints_the_build_lines(monkeypatch, capsys):
    """`python -m stridedview --build` prints the build and fast paths lines (the command line's
    main, in process, with numpy alone)."""
    _only(monkeypatch, _report._numpy_library)
    assert _report.main(["--build", "--no-timing"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"^  build\s+(with the C\+\+ exception guard|built without)", out, re.M), out
    assert re.search(r"^  fast paths\s+(yes|no)", out, re.M), out


def test_cuda_core_is_a_consumer_of_host_views(monkeypatch):
    """cuda-core (the test extra's) is a consumer column: numpy's host view handed to cuda.core's
    StridedMemoryView shares the memory and values ("ok"); without a device it has no row."""
    pytest.importorskip("cuda.core")
    _only(monkeypatch, _report._numpy_library, _report._cuda_core_library)
    report = _report.build_report(timing=False)
    verdicts = _verdicts(report)
    assert verdicts[("numpy", "cpu", "cuda-core")] == "ok"
    if report["environment"]["gpus"] == 0:
        assert [row["producer"] for row in report["rows"]] == ["numpy"]
        assert "cuda-core" not in report["not_installed"]
    assert "cuda-core" in _report.format_report(report)


@pytest.mark.gpu
@pytest.mark.numba
def test_device_rows_bridge_cai_to_dlpack_through_cuda_core(monkeypatch):
    """On a device (the simulated one in CI), numba-cuda's device row, a CUDA Array Interface
    producer, hands its view to cuda-core through DLPack ("ok": same memory, same values), and
    cuda-core has a device row of its own that numba-cuda consumes."""
    pytest.importorskip("cuda.core")
    pytest.importorskip("numba.cuda")
    _only(monkeypatch, _report._numba_library, _report._cuda_core_library)
    report = _report.build_report(timing=False)
    verdicts = _verdicts(report)
    assert verdicts[("numba-cuda", "cuda", "cuda-core")] == "ok"
    assert verdicts[("cuda-core", "cuda", "cuda-core")] == "ok"
    assert verdicts[("cuda-core", "cuda", "numba-cuda")] == "ok"
    assert not _report.failed(report)


def test_build_facts_match_the_module(report):
    """The build and torch reader the report names are those of stridedview._view after the torch row."""
    from stridedview import _view

    environment = report["environment"]
    assert (environment["build"] == "with the C++ exception guard") == _view._built_with_cxx_guard
    assert environment["fast paths"].startswith("yes" if _view.fast_paths else "no")
    if _view.fast_paths:
        assert _view.fast_paths_state in environment["fast paths"]
    if "torch" in report["libraries"]:
        assert environment["torch reader"] == _view._torch_layout_reader()
        assert environment["torch reader"] in ("stable abi", "direct", "exchange api", "capsule")


def test_no_driver_is_said_as_a_fact(monkeypatch):
    """Without a CUDA driver the environment says so as a fact, with what it means for host and device memory."""
    from stridedview import CUDAError, _driver

    def no_driver():
        raise CUDAError("the CUDA driver could not be used for cuInit (libcuda.so.1)", "CUDA_ERROR_NO_DRIVER")

    monkeypatch.setattr(_driver, "device_count", no_driver)
    driver = _report.environment()["cuda driver"]
    assert driver.startswith("no CUDA driver on this machine: host memory is viewed as usual")
    assert "device memory" in driver and "not usable" not in driver


# --- build_report in this process ---------------------------------------------------------

def test_report_structure(report):
    """The report has the documented keys, every field typed, and the environment of this process."""
    assert set(report) == REPORT_KEYS
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
            assert cell["verdict"] in ("ok", "writable", "copies", "read-only", "n/a", "fail")
            assert (cell["verdict"] == "ok") == (cell["reason"] == "")
    json.dumps(report)  # plain data


def test_report_lists_every_installed_library(report):
    """Every installed known library has a version and a CPU row (GPU-only libraries excepted) with a cell per consumer."""
    assert list(report["libraries"]) == INSTALLED
    cpu_rows = {row["producer"] for row in report["rows"] if row["device"] == "cpu"}
    assert cpu_rows == {name for name in INSTALLED if name not in ("cupy", "numba-cuda", "cuda-core")}
    for row in report["rows"]:
        assert row["error"] == "", row
        assert [cell["consumer"] for cell in row["cells"]] == INSTALLED
        assert row["view"].startswith("StridedMemoryView(shape=(2, 3), strides=(3, 1), dtype=float32")
        assert "ptr=" not in row["view"]  # no address: runs compare equal


def test_report_names_the_known_libraries_not_installed(report):
    """"not_installed" lists exactly the known libraries missing here, and the text says so."""
    missing = [name for name in MODULES if name not in INSTALLED]
    assert report["not_installed"] == missing
    text = _report.format_report(report)
    if missing:
        assert re.search(r"^  not installed\s+" + re.escape(missing[0]), text, re.MULTILINE), text


def test_report_cpu_cells_all_ok(report):
    """Every CPU hand-over shares memory and values: no cell is a copy or a failure, jax's column
    included, but for jax -> jax where jax asks for a legacy capsule (jax 0.10): a jax view is
    read-only, and a legacy capsule cannot say so, so it is refused as read-only; and for
    jax -> torch, "writable": torch ignores the read-only flag."""
    not_ok = {
        key: verdict for key, verdict in _verdicts(report).items() if key[1] == "cpu" and verdict != "ok"
    }
    cpu_producers = {row["producer"] for row in report["rows"] if row["device"] == "cpu"}
    expected = {
        (producer, "cpu", consumer): "n/a"
        for producer in cpu_producers
        for consumer in DEVICE_ONLY
        if consumer in INSTALLED
    }
    if "jax" in INSTALLED:
        from jax_dlpack import jax_asks_for_versioned

        if not jax_asks_for_versioned():
            expected[("jax", "cpu", "jax")] = "read-only"
        if "torch" in INSTALLED:
            # torch takes the read-only jax view as a writable tensor.
            expected[("jax", "cpu", "torch")] = "writable"
    assert not_ok == expected


def test_report_host_buffers_are_aligned(report):
    """The host arrays the report builds start on a 64-byte boundary (jax shares only those)."""
    from stridedview import StridedMemoryView

    libraries = {factory().name: factory() for factory in _report.KNOWN_LIBRARIES}
    for row in report["rows"]:
        if row["device"] == "cpu":
            view = StridedMemoryView(libraries[row["producer"]].make("cpu"))
            assert view.ptr % JAX_ALIGNMENT == 0, row


def test_aligned_host_array_holds_the_values():
    """_aligned_host_array gives VALUES as float32 at a 64-byte-aligned address, many times over."""
    arrays = [_report._aligned_host_array() for _ in range(50)]  # kept alive: distinct addresses
    for array in arrays:
        assert array.ctypes.data % JAX_ALIGNMENT == 0
        assert array.dtype == "float32" and array.tolist() == _report.VALUES


@pytest.mark.jax
@pytest.mark.interop
def test_unaligned_buffer_to_jax_is_copies_not_a_failure(monkeypatch, capsys):
    """An unaligned numpy buffer handed to jax shows as 'copies' (with both addresses), and main still exits 0."""
    pytest.importorskip("jax")
    import numpy

    def unaligned(device):
        raw = _report._aligned_host_array()
        base = numpy.zeros(raw.size + 32, dtype=numpy.float32)
        start = (-base.ctypes.data % JAX_ALIGNMENT) // 4 + 4  # 16 bytes past a 64-byte boundary
        array = base[start:start + raw.size].reshape(raw.shape)
        array[...] = raw
        return array

    _only(monkeypatch, _renamed(_report._numpy_library, "numpy", make=unaligned), _report._jax_library)
    report = _report.build_report(timing=False)
    cells = {cell["consumer"]: cell for cell in report["rows"][0]["cells"]}
    assert cells["numpy"]["verdict"] == "ok"
    assert cells["jax"]["verdict"] == "copies"
    assert cells["jax"]["reason"] == "the consumer's array is a copy at another address"
    assert not _report.failed(report)
    assert re.search(r"^  numpy \(cpu\)\s+ok\s+copies \[1\]$", _report.format_report(report), re.MULTILINE)
    assert _report.main(["--no-timing"]) == 0
    capsys.readouterr()


def test_failing_cell_makes_main_exit_1(monkeypatch, capsys):
    """A consumer that raises is a FAIL cell with its reason, and main returns 1."""

    def refuse(view):
        raise RuntimeError("this consumer refuses every view")

    _only(monkeypatch, _report._numpy_library, _renamed(_report._numpy_library, "refuser", consume=refuse))
    report = _report.build_report(timing=False)
    verdicts = _verdicts(report)
    assert verdicts[("numpy", "cpu", "refuser")] == "fail"
    assert verdicts[("numpy", "cpu", "numpy")] == "ok"
    assert _report.failed(report)
    text = _report.format_report(report)
    assert "FAIL [1]" in text
    assert "[1] numpy (cpu) -> refuser: RuntimeError: this consumer refuses every view" in text
    assert _report.main(["--no-timing"]) == 1
    assert "FAIL [" in capsys.readouterr().out


def _read_only_host_array(device):
    array = _report._aligned_host_array()
    array.flags.writeable = False
    return array


def test_consumer_dropping_read_only_is_writable_not_ok(monkeypatch, capsys):
    """A read-only view whose consumer hands back a writable array over the same memory is
    "writable" with its reason, not "ok" (and not a failure); numpy, which keeps the flag, is "ok"."""
    _only(
        monkeypatch,
        _renamed(_report._numpy_library, "numpy", make=_read_only_host_array),
        _renamed(_report._numpy_library, "dropper", writable=lambda array: True),
    )
    report = _report.build_report(timing=False)
    cells = {cell["consumer"]: cell for cell in report["rows"][0]["cells"]}
    assert cells["numpy"] == {"consumer": "numpy", "verdict": "ok", "reason": ""}
    assert cells["dropper"]["verdict"] == "writable"
    assert "dropper ignores DLPack's READ_ONLY flag" in cells["dropper"]["reason"]
    assert not _report.failed(report)
    text = _report.format_report(report)
    assert re.search(r"^  numpy \(cpu\)\s+ok\s+rw! \[1\]$", text, re.MULTILINE), text
    assert "rw!    = same memory and values, but writable" in text
    assert _report.main(["--no-timing"]) == 0
    capsys.readouterr()


def test_writable_view_to_a_writable_consumer_is_ok(monkeypatch):
    """Only a read-only view makes a writable consumer array worth saying: a writable one is "ok"."""
    _only(
        monkeypatch,
        _report._numpy_library,
        _renamed(_report._numpy_library, "dropper", writable=lambda array: True),
    )
    verdicts = _verdicts(_report.build_report(timing=False))
    assert verdicts[("numpy", "cpu", "dropper")] == "ok"


@pytest.mark.torch
@pytest.mark.jax
@pytest.mark.interop
def test_jax_to_torch_is_writable():
    """torch takes a view of an immutable jax array as a writable tensor over the same memory:
    the report says "writable", and the tensor indeed writes into the jax array."""
    jnp = pytest.importorskip("jax.numpy")
    torch = pytest.importorskip("torch")
    from stridedview import StridedMemoryView

    cells = {
        cell["consumer"]: cell["verdict"]
        for row in _report.build_report(timing=False)["rows"] if row["producer"] == "jax"
        for cell in row["cells"]
    }
    assert cells["torch"] == "writable"
    array = jnp.arange(4.0, dtype=jnp.float32)
    view = StridedMemoryView(array)
    assert view.readonly
    tensor = torch.from_dlpack(view)
    tensor[0] = 99  # what the verdict warns about
    assert float(array[0]) == 99.0


def test_long_reasons_are_kept_whole(monkeypatch, capsys):
    """A consumer's long error message is kept whole in the JSON and in the text footnote."""
    message = "this consumer refuses the view " + "for a reason that takes many words " * 4 + "END"

    def refuse(view):
        raise BufferError(message)

    _only(monkeypatch, _report._numpy_library, _renamed(_report._numpy_library, "refuser", consume=refuse))
    report = _report.build_report(timing=False)
    cells = {cell["consumer"]: cell for cell in report["rows"][0]["cells"]}
    assert cells["refuser"]["reason"] == f"BufferError: {message}"
    assert _report.main(["--json", "--no-timing"]) == 1
    assert json.loads(capsys.readouterr().out)["rows"][0]["cells"][1]["reason"].endswith("END")
    text = " ".join(_report.format_report(report).split())
    assert f"refuser: BufferError: {message}" in text


def test_wrong_values_are_a_failure(monkeypatch):
    """A consumer that sees other values is a FAIL, even at the same address."""
    import numpy

    def wrong_values(array):
        return (numpy.asarray(array) + 1).tolist()

    _only(monkeypatch, _report._numpy_library, _renamed(_report._numpy_library, "liar", to_list=wrong_values))
    verdicts = _verdicts(_report.build_report(timing=False))
    assert verdicts[("numpy", "cpu", "liar")] == "fail"


def test_report_says_what_was_not_checked_without_a_gpu(monkeypatch):
    """With no GPU the report says that device rows, the CUDA Array Interface path and stream ordering were not exercised."""
    real = _report.environment
    monkeypatch.setattr(_report, "environment", lambda: {**real(), "gpus": 0})
    _only(monkeypatch, _report._numpy_library)
    report = _report.build_report(timing=False)
    (statement,) = report["not_checked"]
    for words in ("no CUDA GPU and driver", "device (cuda) row", "CUDA Array Interface", "stream",
                  "record_stream", "tests/simgpu/run.sh tests -m gpu", "pip install stridedview-simgpu",
                  "pytest --simgpu"):
        assert words in statement
    text = _report.format_report(report)
    assert "not checked here:" in text and "no CUDA GPU and driver" in text


def test_report_says_what_was_not_checked_with_a_gpu(monkeypatch):
    """With a GPU but no numba-cuda the report says the CUDA Array Interface path and cross-stream ordering were not checked."""
    real = _report.environment
    monkeypatch.setattr(_report, "environment", lambda: {**real(), "gpus": 1})
    _only(monkeypatch, _report._numpy_library)
    checked = " ".join(_report.build_report(timing=False)["not_checked"])
    assert "numba-cuda" in checked and "CUDA Array Interface" in checked
    assert "stream ordering across two streams" in checked
    assert "record_stream" in checked and "tests/simgpu/run.sh tests -m gpu" in checked


@pytest.mark.interop
@pytest.mark.torch
def test_report_warns_about_torch_and_negative_strides(report):
    """With torch installed the report warns that torch.from_dlpack cannot take a negative-stride
    view, and says which torch aborts and which raises."""
    pytest.importorskip("torch")
    assert report["notes"] == [_report.TORCH_NEGATIVE_STRIDES]
    text = " ".join(_report.format_report(report).split())
    assert "torch.from_dlpack cannot take a view with a negative stride" in text
    assert "torch 2.13 aborts the whole process" in text
    assert "torch 2.14 raises RuntimeError" in text


def test_no_torch_no_torch_note(monkeypatch):
    """Without torch among the libraries the report makes no torch note."""
    _only(monkeypatch, _report._numpy_library)
    assert _report.build_report(timing=False)["notes"] == []


def test_format_report_matrix(report):
    """format_report shows each environment line, a header with every consumer and a row per producer."""
    text = _report.format_report(report, build=True)
    flowing = " ".join(text.split())  # long values are wrapped onto indented lines
    for key, value in report["environment"].items():
        assert re.search(rf"^\s+{re.escape(key)}\s+\S", text, re.MULTILINE), key
        assert f" {key} {' '.join(str(value).split())} " in flowing, key
    headers = " ".join(line for line in text.splitlines() if re.match(r"\s+producer\s", line))
    for consumer in INSTALLED:
        assert consumer in headers.split()
    for row in report["rows"]:
        assert re.search(rf"^\s+{re.escape(row['producer'])} \({row['device']}\)\s", text, re.MULTILINE)
    failures = sum(cell["verdict"] == "fail" for row in report["rows"] for cell in row["cells"])
    assert text.count("FAIL [") == failures


def test_format_report_rows_have_no_trailing_spaces(monkeypatch):
    """Table rows with an empty last cell, as a failed view leaves, end without spaces."""

    def broken():
        library = _report._numpy_library()
        library.name = "broken"
        library.make = lambda device: [[1.0]]
        return library

    _only(monkeypatch, broken, _report._numpy_library)
    text = _report.format_report(_report.build_report(timing=False))
    assert [line for line in text.splitlines() if line != line.rstrip()] == []


def test_report_with_numpy_alone(monkeypatch):
    """With only numpy known (as on a machine with numpy alone), the report still has numpy's row, ok."""
    _only(monkeypatch, _report._numpy_library)
    report = _report.build_report(timing=True)
    assert report["libraries"] == {"numpy": report["environment"]["numpy"]}
    assert len(report["rows"]) == 1
    row = report["rows"][0]
    assert (row["producer"], row["device"], row["error"]) == ("numpy", "cpu", "")
    assert isinstance(row["view_us"], float) and row["view_us"] > 0
    assert row["cells"] == [{"consumer": "numpy", "verdict": "ok", "reason": ""}]
    text = _report.format_report(report)
    assert re.search(r"^\s+numpy \(cpu\)\s+\d+\.\d+\s+ok$", text, re.MULTILINE), text


def test_report_row_for_a_failing_producer(monkeypatch, capsys):
    """A library whose array cannot be viewed gets a row with the error, not a crash, and main returns 1."""

    def broken():
        library = _report._numpy_library()
        library.name = "broken"
        library.make = lambda device: [[1.0]]
        return library

    _only(monkeypatch, _report._numpy_library, broken)
    report = _report.build_report(timing=False)
    rows = {row["producer"]: row for row in report["rows"]}
    assert rows["broken"]["error"].startswith("BufferError: stridedview: 'list' object supports none of")
    assert rows["broken"]["cells"] == []
    assert rows["numpy"]["error"] == ""
    text = _report.format_report(report)
    assert "view FAILED [1]" in text
    assert "[1] broken (cpu): view failed: BufferError" in text
    assert _report.main(["--no-timing"]) == 1
    capsys.readouterr()


def _device_only(factory, name):
    """A consumer like ``factory``'s that takes device memory only (as numba-cuda and CuPy)."""
    def refuse(view):
        raise AssertionError("a device-only consumer was handed host memory")

    return _renamed(factory, name, devices=lambda: [], takes=lambda: ["cuda"], consume=refuse)


def test_device_only_consumer_is_not_applicable_to_host_rows(monkeypatch, capsys):
    """A consumer that takes only device memory is never handed a host view: its cells in host
    rows are "n/a" (with the reason), not failures; the text shows "n/a" with no footnote and
    main exits 0."""
    _only(monkeypatch, _report._numpy_library, _device_only(_report._numpy_library, "device-only"))
    report = _report.build_report(timing=False)
    (row,) = report["rows"]
    cells = {cell["consumer"]: cell for cell in row["cells"]}
    assert cells["numpy"]["verdict"] == "ok"
    assert cells["device-only"] == {
        "consumer": "device-only", "verdict": "n/a", "reason": "device-only takes no host memory here",
    }
    assert not _report.failed(report)
    text = _report.format_report(report)
    assert re.search(r"^  numpy \(cpu\)\s+ok\s+n/a$", text, re.MULTILINE), text
    assert "n/a    = not tried: the consumer takes no memory of this kind" in text
    assert "[1]" not in text.partition("element types")[0]  # (numpy refuses bfloat16 there)
    assert _report.main(["--no-timing"]) == 0
    capsys.readouterr()


@pytest.mark.interop
@pytest.mark.numba
def test_numba_cuda_is_not_applicable_to_host_rows(report):
    """With numba-cuda installed (a device-only CUDA Array Interface consumer), every host row's
    numba-cuda cell is "n/a", never a failure."""
    pytest.importorskip("numba.cuda")
    cells = [
        cell for row in report["rows"] if row["device"] == "cpu"
        for cell in row["cells"] if cell["consumer"] == "numba-cuda"
    ]
    assert cells and {cell["verdict"] for cell in cells} == {"n/a"}
    assert not _report.failed(report)


def test_wide_table_is_split_with_the_producer_column_repeated(monkeypatch):
    """Consumers whose columns would pass 79 characters go to a second table that repeats the
    producer and timing columns; a footnote keeps one number across tables."""
    names = [f"consumer-number-{i}" for i in range(5)]

    def refuse(view):
        raise RuntimeError("no")

    factories = [_report._numpy_library] + [
        _renamed(_report._numpy_library, name, **({"consume": refuse} if i == 4 else {}))
        for i, name in enumerate(names)
    ]
    _only(monkeypatch, *factories)
    text = _report.format_report(_report.build_report(timing=False))
    lines = text.splitlines()
    assert [line for line in lines if len(line) > MAX_WIDTH] == []
    headers = [line for line in lines if line.startswith("  producer ")]
    assert len(headers) >= 2
    for name in ["numpy", *names]:
        assert sum(name in header.split() for header in headers) == 1, name
    assert len([line for line in lines if line.startswith("  numpy (cpu)")]) == len(headers)
    assert text.count("FAIL [1]") == 1 and "[1] numpy (cpu) -> consumer-number-4: RuntimeError: no" in text


def test_simulated_device_is_said(monkeypatch):
    """On the simulated device (tests/simgpu) the environment names it, and "not checked" says
    what a simulated device leaves to a real GPU."""
    from stridedview import _driver

    monkeypatch.setattr(_driver, "device_count", lambda: 2)
    monkeypatch.setattr(_report, "_simulated", lambda: True)
    _only(monkeypatch, _report._numpy_library)
    report = _report.build_report(timing=False)
    assert report["environment"]["cuda driver"] == "the simulated device of tests/simgpu (no GPU), 2 device(s)"
    assert _report.SIMULATED in report["not_checked"]
    assert "no kernel runs" in " ".join(_report.format_report(report).split())


def test_simulated_is_false_on_this_driver_or_none():
    """_simulated() tells the simulator from any other libcuda (or none) by its exported symbol."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        lib = None
    assert _report._simulated() is (lib is not None and hasattr(lib, "simgpu_is_simulator"))


# --- the sample in the docs ------------------------------------------------------------

def _quickstart_sample():
    """The text block of docs/quickstart.md that shows the report."""
    text = (ROOT / "docs" / "quickstart.md").read_text()
    blocks = re.findall(r"```text\n(.*?)```", text, re.DOTALL)
    return next(block for block in blocks if block.startswith("stridedview interop report"))


def test_quickstart_sample_fits_the_page():
    """The docs' sample report has no line over 79 characters nor trailing spaces."""
    sample = _quickstart_sample().splitlines()
    assert [line for line in sample if len(line) > MAX_WIDTH] == []
    assert [line for line in sample if line != line.rstrip()] == []


#: Environment lines whose values differ from machine to machine (versions).
VERSION_KEYS = ("python", "stridedview", "numpy", "cuda-bindings", "libraries")
_TIMING = re.compile(r"(?<= )\d+\.\d{3}(?= )")


def _comparable(text: str) -> list[str]:
    """A report's lines with versions and timings blanked: what two runs on machines with the
    same libraries and no GPU must share."""
    lines = []
    for line in text.splitlines():
        key = line[2:17].strip()
        if line.startswith("  ") and key in VERSION_KEYS:
            line = f"  {key:<14} (version)"
        elif line.startswith(" " * 17) and lines and lines[-1].endswith("(version)"):
            continue  # a wrapped line of versions
        lines.append(_TIMING.sub(lambda m: " " * len(m.group()), line))
    return lines


@pytest.mark.torch
@pytest.mark.jax
@pytest.mark.numba
@pytest.mark.interop
def test_quickstart_sample_is_this_machines_report():
    """The sample in docs/quickstart.md is what the report prints here, but for versions and
    timings, where the sample's libraries are installed (as in CI's test environment): a stale
    sample fails (tools/quickstart_report.py writes a new one)."""
    for module in ("torch", "jax", "array_api_strict", "numba.cuda"):
        pytest.importorskip(module)
    sample = _quickstart_sample()
    report = _report.build_report(timing=True)
    if report["environment"]["gpus"] or report["not_installed"] != ["cupy"]:
        pytest.skip("the sample is of a machine without a GPU and without CuPy")
    from stridedview import _view

    if not _view._built_with_cxx_guard:
        # The sample is of the usual build; CI's build without a C++ compiler differs in its
        # build line alone (which test_build_facts_match_the_module checks there).
        report["environment"]["build"] = "with the C++ exception guard"
    if _view.fast_paths_state != "process":
        # The sample is of a GIL build with the fast paths; a build without them (or a
        # free-threaded one) differs in that line alone, which test_build_facts_match_the_module
        # checks there.
        report["environment"]["fast paths"] = "yes (their state per process)"
    expected = _comparable(sample)
    assert _comparable(_report.format_report(report) + "\n") == expected


def test_comparable_blanks_only_versions_and_timings():
    """The comparison of the sample with a run ignores versions and timings, and nothing else."""
    report = (
        "stridedview interop report\n\n  python         3.11.7\n  libraries      numpy 2.4.6,\n"
        "                 torch 2.13.0\n  torch reader   stable abi\n\n"
        "  producer     view µs  numpy\n  numpy (cpu)    0.233  ok\n"
    )
    other = report.replace("3.11.7", "3.12.1").replace("0.233", "9.999").replace("2.13.0", "2.14.1")
    assert _comparable(report) == _comparable(other)
    assert _comparable(report) != _comparable(report.replace("stable abi", "direct"))
    assert _comparable(report) != _comparable(report.replace("  ok", "  rw!"))


# --- the element-type table ------------------------------------------------------------------

#: (producer, type) -> the DLPack type its view must have.
DTYPE_ROWS = {
    ("numpy", "bfloat16"): [4, 16, 1], ("numpy", "complex32"): [5, 32, 1],
    ("numpy", "bcomplex32"): [18, 32, 1], ("numpy", "int4"): [0, 4, 1],
    ("numpy", "float4_e2m1fn"): [17, 4, 1],
    ("torch", "float8_e4m3fn"): [10, 8, 1], ("torch", "complex32"): [5, 32, 1],
    ("torch", "float4_e2m1fn_x2"): [17, 4, 2],
    ("jax", "bfloat16"): [4, 16, 1], ("jax", "float4_e2m1fn"): [17, 4, 1],
    ("bytes", "float4, packed"): [17, 4, 1],
}


@pytest.mark.torch
@pytest.mark.jax
def test_element_type_table():
    """Every producer's element types are viewed with their exact DLPack type; the verdicts
    are what the consumers do (torch takes its fp4 pairs back, numpy takes none of these, a
    padded type asked for as a legacy capsule is refused on purpose), and none fails."""
    for module in ("torch", "jax", "ml_dtypes"):
        pytest.importorskip(module)
    rows = _report.build_dtype_matrix(["numpy", "torch", "jax"])
    by_key = {(row["producer"], row["type"]): row for row in rows}
    ml_dtypes = pytest.importorskip("ml_dtypes")
    for key, dl_type in DTYPE_ROWS.items():
        if key[0] == "numpy" and not hasattr(ml_dtypes, key[1]):  # ml_dtypes before 0.6
            assert key not in by_key  # no array of it can be made: no row, not a failure
            continue
        assert by_key[key]["dlpack"] == dl_type and not by_key[key]["error"], by_key[key]
    verdicts = {key: {c["consumer"]: c["verdict"] for c in row["cells"]} for key, row in by_key.items()}
    assert verdicts[("torch", "float4_e2m1fn_x2")] == {"numpy": "refuses", "torch": "ok", "jax": "refuses"}
    assert verdicts[("numpy", "bfloat16")] == {"numpy": "refuses", "torch": "ok", "jax": "ok"}
    assert verdicts[("numpy", "int4")]["jax"] == "legacy"  # jax asks for a legacy capsule
    assert verdicts[("jax", "bfloat16")]["jax"] == "legacy"  # read-only: legacy refused
    assert all(cell["verdict"] != "fail" for row in rows for cell in row["cells"])
    text = _report._format_dtypes(rows)
    assert "element types, host memory" in text[1]
    assert all(len(line) <= MAX_WIDTH for line in text)


def test_element_type_table_asks_tvm_ffi_only_when_told():
    """tvm-ffi (whose import takes seconds) is asked with --tvm-ffi only: it takes the packed
    views no other library takes."""
    pytest.importorskip("tvm_ffi")
    plain = _report.build_dtype_matrix(["numpy"])
    assert all(cell["consumer"] != "tvm-ffi" for row in plain for cell in row["cells"])
    rows = _report.build_dtype_matrix(["numpy"], extra_consumers=True)
    packed = next(row for row in rows if row["type"] == "float4, packed")
    assert {c["consumer"]: c["verdict"] for c in packed["cells"]} == {"numpy": "refuses", "tvm-ffi": "ok"}
