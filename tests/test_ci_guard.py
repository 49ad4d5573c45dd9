"""tests/conftest.py run in pytester (the STRIDEDVIEW_REQUIRE_INTEROP=1 guard, the gpu skip, the quick
run and the rest), and .ci/run checked against README.md and run, its stages stubbed, by name and whole."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py").read_text()

PYPROJECT = """
[tool.pytest.ini_options]
markers = [
    "gpu: needs a CUDA GPU and driver; skipped cleanly without one",
    "real_gpu: needs a real GPU; skipped on the simulated device",
    "simgpu: needs the simulated device; skipped on a real GPU",
    "interop: uses a real third-party array producer (must not be skipped in CI)",
    "torch: needs torch",
    "jax: needs jax",
    "numba: needs numba-cuda",
    "slow: long-running",
]
"""

IMPORTORSKIP_MODULE = """
import pytest

pytest.importorskip("stridedview_no_such_module_anywhere")


def test_never_runs():
    pass
"""

PASSING_MODULE = """
def test_passes():
    pass
"""

GPU_SKIP_MODULE = """
import pytest


@pytest.mark.gpu
def test_gpu_skipped_inside():
    pytest.skip("no cupy here")


@pytest.mark.gpu
def test_gpu_maybe_skipped_by_conftest():
    pass
"""

PLAIN_SKIP_MODULE = """
import pytest


@pytest.mark.interop
def test_skipped_inside():
    pytest.importorskip("stridedview_no_such_module_anywhere")


@pytest.mark.xfail(reason="expected", strict=True)
def test_xfails():
    raise AssertionError
"""


def conftest_with_gpu(present: bool) -> str:
    """The real conftest with its GPU probe answering ``present``, whatever the machine."""
    return CONFTEST + f"\n\ndef has_cuda_gpu():\n    return {present}\n"


@pytest.fixture
def project(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester directory holding a copy of the real conftest and the marker declarations."""
    # Third-party plugins (hypothesis, jax's, ...) only slow the child runs down.
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    pytester.makeconftest(CONFTEST)
    pytester.makepyprojecttoml(PYPROJECT)
    return pytester


def test_importorskip_module_fails_the_run_under_the_variable(project, monkeypatch):
    """A module skipped at collection by importorskip fails the run when the variable is 1."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    project.makepyfile(test_optional=IMPORTORSKIP_MODULE, test_fine=PASSING_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*STRIDEDVIEW_REQUIRE_INTEROP=1: skips not allowed*",
            "SKIPPED test_optional.py: *stridedview_no_such_module_anywhere*",
        ]
    )


def test_importorskip_only_module_fails_the_run_under_the_variable(project, monkeypatch):
    """A run that collects nothing because its only module was skipped also fails under the variable."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    project.makepyfile(test_optional=IMPORTORSKIP_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def test_importorskip_module_passes_without_the_variable(project, monkeypatch):
    """Without the variable the same importorskip-skipped module leaves the run green."""
    monkeypatch.delenv("STRIDEDVIEW_REQUIRE_INTEROP", raising=False)
    project.makepyfile(test_optional=IMPORTORSKIP_MODULE, test_fine=PASSING_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*skips not allowed*")


def test_variable_other_than_1_does_not_arm_the_guard(project, monkeypatch):
    """Only the exact value 1 arms the guard."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "0")
    project.makepyfile(test_optional=IMPORTORSKIP_MODULE, test_fine=PASSING_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK


def test_skip_inside_a_test_fails_the_run_under_the_variable(project, monkeypatch):
    """A skip raised inside a test not marked gpu fails the run; an xfail does not count as a skip."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    project.makepyfile(test_plain=PLAIN_SKIP_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1, xfailed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["SKIPPED test_plain.py::test_skipped_inside: *"])
    result.stdout.no_fnmatch_line("SKIPPED test_plain.py::test_xfails*")


@pytest.mark.slow
def test_gpu_marked_skip_for_a_missing_library_fails_the_run(project, monkeypatch):
    """Under the variable a gpu-marked test skipped for another reason than missing hardware fails the run (GPU or not)."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    # As on a machine with a GPU, so that the test body runs and skips itself.
    project.makeconftest(conftest_with_gpu(True))
    project.makepyfile(test_gpu=GPU_SKIP_MODULE, test_fine=PASSING_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["SKIPPED test_gpu.py::test_gpu_skipped_inside: no cupy here"])


def test_gpu_marked_skip_for_missing_hardware_does_not_fail_the_run(project, monkeypatch):
    """Skips for missing hardware (no GPU and driver, or one GPU where two are needed) are allowed under the variable."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    project.makepyfile(
        test_gpu=(
            "import pytest\n"
            "from conftest import GPU_SKIP_REASON, TWO_GPUS_SKIP_REASON\n"
            "@pytest.mark.gpu\n"
            "def test_one():\n"
            "    pytest.skip(GPU_SKIP_REASON)\n"
            "@pytest.mark.gpu\n"
            "def test_two():\n"
            "    pytest.skip(TWO_GPUS_SKIP_REASON)\n"
        ),
        test_fine=PASSING_MODULE,
    )
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=2)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.no_fnmatch_line("*skips not allowed*")


GPU_IMPORT_MODULE = """
import pytest
from conftest import gpu_import


@pytest.mark.gpu
def test_needs_a_missing_library():
    gpu_import("stridedview_no_such_gpu_library")
"""


def test_gpu_import_fails_on_a_gpu_machine_when_the_library_is_missing(project, monkeypatch):
    """With a GPU present, gpu_import of a missing library fails the test (naming the gpu extra) even without the variable."""
    monkeypatch.delenv("STRIDEDVIEW_REQUIRE_INTEROP", raising=False)
    project.makeconftest(conftest_with_gpu(True))
    project.makepyfile(test_gpu=GPU_IMPORT_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*has a CUDA GPU but stridedview_no_such_gpu_library cannot be imported*"])
    result.stdout.fnmatch_lines(["*.[[]test,gpu[]]*"])


def test_gpu_import_skips_without_a_gpu(project, monkeypatch):
    """Without a GPU, gpu_import skips with the hardware reason, which the variable allows."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    project.makeconftest(conftest_with_gpu(False))
    project.makepyfile(test_gpu=GPU_IMPORT_MODULE.replace("@pytest.mark.gpu\n", ""))
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*needs a CUDA GPU and driver*"])


@pytest.mark.slow
def test_gpu_module_skipped_with_the_gpu_reason_does_not_fail_the_run(project, monkeypatch):
    """A module that skips itself at collection with the gpu reason is exempt from the guard."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    project.makepyfile(
        test_gpu_module=(
            "import pytest\n"
            "pytest.skip('needs a CUDA GPU and driver', allow_module_level=True)\n"
        ),
        test_fine=PASSING_MODULE,
    )
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.slow
def test_gpu_marker_skips_with_the_documented_reason_without_a_driver(project, monkeypatch):
    """With no usable CUDA driver a gpu-marked test is skipped with the reason 'needs a CUDA GPU and driver'."""
    monkeypatch.delenv("STRIDEDVIEW_REQUIRE_INTEROP", raising=False)
    # Make the driver probe fail whatever the machine: patch ctypes.CDLL in the child.
    project.makepyfile(
        test_gpu=(
            "import pytest\n"
            "@pytest.mark.gpu\n"
            "def test_needs_gpu():\n"
            "    pass\n"
        )
    )
    project.makeconftest(
        CONFTEST
        + "\n\nimport ctypes as _ctypes\n\n"
        "def _no_driver(*args, **kwargs):\n"
        "    raise OSError('no driver in this test')\n\n"
        "_ctypes.CDLL = _no_driver\n"
    )
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs a CUDA GPU and driver*"])


@pytest.mark.slow
def test_gpu_probe_does_not_import_cuda_bindings(project, monkeypatch):
    """Collecting and setting up gpu-marked tests never imports cuda.bindings (the probe uses ctypes)."""
    monkeypatch.delenv("STRIDEDVIEW_REQUIRE_INTEROP", raising=False)
    project.makepyfile(
        test_a_gpu=(
            "import pytest\n"
            "@pytest.mark.gpu\n"
            "def test_needs_gpu():\n"
            "    pass\n"
        ),
        test_b_modules=(
            "import sys\n"
            "def test_no_cuda_bindings():\n"
            "    assert not [m for m in sys.modules if m.startswith('cuda.bindings')]\n"
        ),
    )
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.parseoutcomes().get("failed", 0) == 0
    assert result.ret == pytest.ExitCode.OK


HARDWARE_SKIPS_MODULE = """
import pytest
from conftest import GPU_SKIP_REASON, REAL_GPU_SKIP_REASON, SIMULATOR_SKIP_REASON, TWO_GPUS_SKIP_REASON


@pytest.mark.parametrize("reason", [GPU_SKIP_REASON, TWO_GPUS_SKIP_REASON, SIMULATOR_SKIP_REASON, REAL_GPU_SKIP_REASON])
def test_skipped(reason):
    pytest.skip(reason)
"""


@pytest.mark.slow
@pytest.mark.parametrize("device", [None, "simulated"])
def test_on_the_simulated_device_only_the_real_gpu_skip_is_allowed(project, monkeypatch, device):
    """Under STRIDEDVIEW_REQUIRE_DEVICE=simulated every hardware skip fails the run but the
    real-GPU one; without it all four are allowed."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    if device is None:
        monkeypatch.delenv("STRIDEDVIEW_REQUIRE_DEVICE", raising=False)
    else:
        monkeypatch.setenv("STRIDEDVIEW_REQUIRE_DEVICE", device)
    project.makepyfile(test_hardware=HARDWARE_SKIPS_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(skipped=4)
    if device is None:
        assert result.ret == pytest.ExitCode.OK
        return
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*3 test(s) or module(s) not marked gpu were skipped*"])
    result.stdout.no_fnmatch_line("SKIPPED *needs a real CUDA GPU*")


GPU_MARKERS_MODULE = """
import pytest


@pytest.mark.gpu
def test_gpu():
    pass


@pytest.mark.gpu
@pytest.mark.real_gpu
def test_real_gpu():
    pass


@pytest.mark.gpu
@pytest.mark.simgpu
def test_simulated():
    pass
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "gpu, simulated, outcome",
    [(False, False, "sss"), (True, False, "..s"), (True, True, ".s.")],
    ids=["no-driver", "real-gpu", "simulated-device"],
)
def test_gpu_markers_on_each_kind_of_machine(project, monkeypatch, gpu, simulated, outcome):
    """gpu tests run on any device; real_gpu ones skip on the simulated device, simgpu ones on a
    real GPU; without a driver all skip with the gpu reason."""
    monkeypatch.delenv("STRIDEDVIEW_REQUIRE_INTEROP", raising=False)
    project.makeconftest(
        CONFTEST + f"\n\ndef has_cuda_gpu():\n    return {gpu}\n\n\ndef simulated_gpu():\n    return {simulated}\n"
    )
    project.makepyfile(test_markers=GPU_MARKERS_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "-rs")
    result.assert_outcomes(passed=outcome.count("."), skipped=outcome.count("s"))
    if not gpu:
        result.stdout.fnmatch_lines(["*3*needs a CUDA GPU and driver*"])
    elif simulated:
        result.stdout.fnmatch_lines(["*needs a real CUDA GPU*"])
    else:
        result.stdout.fnmatch_lines(["*needs the simulated device's test hooks*"])


NO_COMPILER_MODULE = (
    "import pytest\n"
    "from conftest import NO_COMPILER_SKIP_REASON\n"
    "pytest.skip(NO_COMPILER_SKIP_REASON, allow_module_level=True)\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("variable, fails", [("1", False), (None, True), ("0", True)])
def test_no_compiler_skip_is_allowed_only_where_ci_says(project, monkeypatch, variable, fails):
    """The no-compiler skip passes under STRIDEDVIEW_REQUIRE_INTEROP=1 only with STRIDEDVIEW_NO_COMPILER=1."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    if variable is None:
        monkeypatch.delenv("STRIDEDVIEW_NO_COMPILER", raising=False)
    else:
        monkeypatch.setenv("STRIDEDVIEW_NO_COMPILER", variable)
    project.makepyfile(test_capi_like=NO_COMPILER_MODULE, test_fine=PASSING_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    expected = pytest.ExitCode.TESTS_FAILED if fails else pytest.ExitCode.OK
    assert result.ret == expected


# --- the quick run and the rest -----------------------------------------------------

SPLIT_MODULE = """
import pytest


def test_plain():
    pass


@pytest.mark.slow
def test_long():
    pass


@pytest.mark.torch
def test_needs_torch():
    pass


@pytest.mark.parametrize("library", ["numpy", pytest.param("jax", marks=pytest.mark.jax)])
def test_each(library):
    pass
"""

TORCH_ONLY_MODULE = """
import pytest

raise ImportError("a test_torch_*.py module imported in a quick run")
"""


def split_project(project: pytest.Pytester) -> pytest.Pytester:
    """A project laid out as this one: tests/ with the split module and a torch-only module."""
    project.makepyprojecttoml(PYPROJECT.replace("markers = [", 'testpaths = ["tests"]\nmarkers = ['))
    tests = project.mkdir("tests")
    (tests / "test_split.py").write_text(SPLIT_MODULE)
    (tests / "test_torch_only.py").write_text(TORCH_ONLY_MODULE)
    return project


def test_a_bare_run_leaves_out_the_marked_tests_and_says_how_to_run_them(project, monkeypatch):
    """A bare run runs only the unmarked tests, collects no test_torch_*.py module, and ends
    with how many it left out and the one command that runs them."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    split_project(project)
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "-v")
    result.assert_outcomes(passed=2, deselected=3)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([
        "*test_split.py::test_plain PASSED*",
        "*test_split.py::test_each?numpy? PASSED*",
        "*= not run: a quick run leaves these out =*",
        "1 test needs torch; 1 test needs jax; 1 test needs time (subprocesses,*",
        '    pip install -e ".[test,full]" && python -m pytest --rest',
    ])
    summary = " ".join(result.stdout.str().split("not run: a quick run leaves these out")[1].split())
    assert "every test of test_torch_only.py (they need torch: not collected)" in summary
    result.stdout.no_fnmatch_line("*test_needs_torch PASSED*")


def test_rest_runs_exactly_what_a_bare_run_leaves_out(project):
    """--rest runs the marked tests and the torch-only module, and none of the others."""
    split_project(project)
    (project.path / "tests" / "test_torch_only.py").write_text(
        "import pytest\npytestmark = pytest.mark.torch\ndef test_torch_only():\n    pass\n"
    )
    result = project.runpytest_subprocess("-p", "no:cacheprovider", "-v", "--rest")
    result.assert_outcomes(passed=4, deselected=2)
    result.stdout.fnmatch_lines([
        "*test_split.py::test_long PASSED*",
        "*test_split.py::test_needs_torch PASSED*",
        "*test_split.py::test_each?jax? PASSED*",
        "*test_torch_only.py::test_torch_only PASSED*",
    ])
    result.stdout.no_fnmatch_line("*test_plain PASSED*")
    result.stdout.no_fnmatch_line("*not run: a quick run*")


@pytest.mark.parametrize("arguments", [["--all"], ["tests"], ["-m", "slow or not slow"], ["-k", "test"]])
def test_all_paths_markers_and_keywords_run_what_they_select(project, arguments):
    """--all, a path, -m and -k are not a quick run: every test they select runs."""
    split_project(project)
    (project.path / "tests" / "test_torch_only.py").write_text(PASSING_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider", *arguments)
    result.assert_outcomes(passed=6)
    result.stdout.no_fnmatch_line("*not run: a quick run*")


def test_every_torch_only_module_is_marked_torch_whole():
    """Each tests/test_torch_*.py (not collected by a quick run) carries the torch marker, so that
    --rest, which selects by marker, runs it."""
    from conftest import TORCH_MODULES

    modules = sorted((ROOT / "tests").glob(TORCH_MODULES))
    assert modules
    for module in modules:
        tree = ast.parse(module.read_text())
        marks = [
            node.value for node in tree.body
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "pytestmark" for t in node.targets)
        ]
        assert marks and "pytest.mark.torch" in ast.unparse(marks[0]), module.name


# --- .ci/run starts with the README's Quick start, verbatim ---------------------------

ROOT = Path(__file__).resolve().parent.parent


def readme_quick_start_commands() -> list[str]:
    """The commands of README.md's Quick start code block, each without its trailing comment."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]


def ci_lines() -> list[str]:
    """The non-blank, non-comment lines of .ci/run, stripped."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.strip().startswith("#")]


def test_readme_quick_start_is_the_two_commands():
    """README.md's Quick start is exactly the install-and-report and the install-and-test commands."""
    assert readme_quick_start_commands() == [
        "pip install . && python -m stridedview",
        'pip install -e ".[test]" && python -m pytest',
    ]


def test_ci_runs_the_readme_commands_first_verbatim_each_in_a_fresh_venv():
    """.ci/run's first two installs are the README's commands, verbatim, each after a fresh venv, run from the root."""
    commands = readme_quick_start_commands()
    lines = ci_lines()
    installs = [i for i, line in enumerate(lines) if "pip install" in line or "python -m pip" in line]
    first, second = installs[:2]
    assert [lines[first], lines[second]] == commands
    # A fresh venv before each (the first one made after the function that makes them).
    assert [line for line in lines[:first] if line.startswith("fresh_venv ")] == ["fresh_venv quick-start"]
    assert [line for line in lines[first + 1:second] if line.startswith("fresh_venv ")] == ["fresh_venv develop"]
    definition = lines[lines.index("fresh_venv() {  # a new virtual environment, activated: `pip` and `python` are its own"):first]
    assert any(line.startswith('python -m venv "$work/$1"') for line in definition)
    assert any(line.startswith('source "$work/$1/bin/activate"') for line in definition)
    # From the clone's root: the only cd before them is the one to the root.
    assert [line for line in lines[:second] if line.startswith("cd ")] == ['cd "$(dirname "$0")/.."']
    assert "export STRIDEDVIEW_REQUIRE_INTEROP=1" in lines[:first]


INSTALLED_BUT_BROKEN_MODULE = """
import pytest

pytest.importorskip("brokenpkg.extension")


def test_never_runs():
    pass
"""


@pytest.mark.slow
def test_allowed_missing_module_passes_the_run(project, monkeypatch):
    """STRIDEDVIEW_ALLOW_MISSING names a module that is not installed: its importorskip is allowed."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    monkeypatch.setenv("STRIDEDVIEW_ALLOW_MISSING", "torch_not_here, stridedview_no_such_module_anywhere")
    project.makepyfile(test_optional=IMPORTORSKIP_MODULE, test_fine=PASSING_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.OK


@pytest.mark.slow
def test_allowance_for_another_module_still_fails_the_run(project, monkeypatch):
    """An allowance covers the modules it names (and their submodules), no other."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    monkeypatch.setenv("STRIDEDVIEW_ALLOW_MISSING", "stridedview_no_such")
    project.makepyfile(test_optional=IMPORTORSKIP_MODULE, test_fine=PASSING_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["SKIPPED test_optional.py: *stridedview_no_such_module_anywhere*"])


@pytest.mark.slow
def test_allowance_does_not_cover_an_installed_package_missing_a_part(project, monkeypatch):
    """An installed package whose submodule is missing is a broken install, not a missing one."""
    monkeypatch.setenv("STRIDEDVIEW_REQUIRE_INTEROP", "1")
    monkeypatch.setenv("STRIDEDVIEW_ALLOW_MISSING", "brokenpkg")
    project.mkpydir("brokenpkg")
    project.makepyfile(test_optional=INSTALLED_BUT_BROKEN_MODULE, test_fine=PASSING_MODULE)
    result = project.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, skipped=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED


def readme_rest_command() -> str:
    """The command of README.md's "All the tests" code block, without its trailing comment."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## All the tests\n", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    (line,) = [line.split("  #", 1)[0].strip() for line in block.splitlines() if line.strip()]
    return line


def test_readme_gives_the_rest_command_the_quick_run_prints():
    """README.md's "All the tests" command is the one a quick run prints at its end."""
    from conftest import REST_COMMAND

    assert readme_rest_command() == REST_COMMAND


def shell_function(name: str) -> list[str]:
    """The body of the shell function ``name`` of .ci/run: its non-blank, non-comment lines, stripped."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    (start,) = [i for i, line in enumerate(lines) if line.startswith(f"{name}() {{")]
    if lines[start].rstrip().endswith("}"):  # one line: name() { body; }
        return [lines[start].split("{", 1)[1].rsplit("}", 1)[0].strip().rstrip(";")]
    end = lines.index("}", start)
    return [line.strip() for line in lines[start + 1:end] if line.strip() and not line.strip().startswith("#")]


DEVELOP_STAGES = ("rest", "simgpu", "types", "docs")


def test_ci_runs_the_rest_once_in_the_readme_test_environment():
    """.ci/run runs `python -m pytest --rest` once, in the stage `rest`, in the README test command's
    environment, having installed the full extra there; no run in that environment is a bare
    (quick) one but the README's; the -O run (an interpreter of the matrix) takes --all."""
    lines = ci_lines()
    rest = [i for i, line in enumerate(lines) if line == "python -m pytest --rest"]
    assert len(rest) == 1
    body = shell_function("stage_rest")
    assert body[:2] == ["enter_develop", "install_full"] and "python -m pytest --rest" in body
    # enter_develop activates the environment README command 2 made (fresh_venv develop), or,
    # where a stage runs by name without it, makes it as that command does.
    assert "fresh_venv develop" in shell_function("stage_readme_tests")
    develop = shell_function("enter_develop")
    assert 'source "$work/develop/bin/activate"' in develop
    assert any(line.endswith('install -q -e ".[test]"') for line in develop)
    full = shell_function("install_full")
    assert any("extra_requirements full" in line for line in full)
    assert any(line.endswith('pip install -q "${full_requirements[@]}"') for line in full)
    assert any('["project"]["optional-dependencies"]' in line for line in shell_function("extra_requirements"))
    for stage in DEVELOP_STAGES:
        body = shell_function(f"stage_{stage}")
        # The stages after rest need its full extra: run by name, they install it first.
        assert body[0] == ("enter_develop" if stage == "rest" else "enter_develop full"), stage
        bare = [line for line in body if re.fullmatch(r"python (-O )?-m pytest( -q| -p no:cacheprovider)*", line)]
        assert bare == [], stage
    assert '[ "$minor" = 3.13 ] && python_flags=(-O)' in lines
    assert any('"${python_flags[@]}" -m pytest --all -q' in line for line in lines)


# --- .ci/run's stages, each runnable by name ------------------------------------------


def ci_stages() -> list[str]:
    """The stage names `.ci/run --list` prints, in order."""
    import subprocess

    listing = subprocess.run(
        ["bash", str(ROOT / ".ci" / "run"), "--list"], capture_output=True, text=True, check=True
    ).stdout
    return [line.split()[0] for line in listing.splitlines()]


def stubbed_ci(tmp_path: Path, failing: str = "") -> Path:
    """A copy of .ci/run (with pyproject.toml beside it, as in the clone) whose stage functions are
    replaced by ones that record their name and directory in order; the stage ``failing`` runs
    `false` and then records, which errexit must stop."""
    text = (ROOT / ".ci" / "run").read_text()
    dispatch = 'if [ "${1:-}" = --in-stage ]; then'
    assert text.count(dispatch) == 1
    stubs = "".join(
        f"stage_{name.replace('-', '_')}() {{ {'false; ' if name == failing else ''}"
        f'echo {name} >> "$STUBS_LOG"; echo "ran {name}"; }}\n'
        for name in ci_stages()
    )
    (tmp_path / ".ci").mkdir()
    (tmp_path / ".ci" / "run").write_text(text.replace(dispatch, stubs + dispatch))
    (tmp_path / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    return tmp_path / ".ci" / "run"


def run_stubbed(script: Path, *arguments: str):
    import os
    import subprocess

    log = script.parent.parent / "stubs.log"
    log.unlink(missing_ok=True)
    env = {k: v for k, v in os.environ.items() if k != "STRIDEDVIEW_CI_WORK"}
    result = subprocess.run(
        ["bash", str(script), *arguments], capture_output=True, text=True, env={**env, "STUBS_LOG": str(log)},
        timeout=120,
    )
    ran = log.read_text().split() if log.exists() else []
    return result, ran


def test_every_stage_listed_is_a_function_and_in_the_full_run_once():
    """Each stage of `.ci/run --list` has its function; a full run runs the README's two first and
    every other stage in exactly one of its jobs."""
    text = (ROOT / ".ci" / "run").read_text()
    stages = ci_stages()
    assert stages[:2] == ["quick-start", "readme-tests"]
    assert len(set(stages)) == len(stages)
    for name in stages:
        assert re.search(rf"^stage_{re.escape(name.replace('-', '_'))}\(\) {{", text, re.M), name
    jobs = text.split("\njobs=(\n", 1)[1].split("\n)\n", 1)[0]
    in_jobs = [name for line in jobs.splitlines() for name in line.strip().strip('"').split()]
    assert sorted(in_jobs) == sorted(stages[2:])


@pytest.mark.slow
def test_each_stage_runs_by_name_and_a_full_run_runs_each_once(tmp_path):
    """`.ci/run NAME` runs that stage alone and prints its time; a full run runs
    the README's stages first, then every other once, and prints each stage's time and the total."""
    script = stubbed_ci(tmp_path)
    stages = ci_stages()
    for name in stages:
        result, ran = run_stubbed(script, name)
        assert result.returncode == 0, result.stdout + result.stderr
        assert ran == [name]
        assert re.search(rf"^-- stage {re.escape(name)} passed in \d+ s \(\d+ s of CPU\)$", result.stdout, re.M)
    result, ran = run_stubbed(script)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ran[:2] == ["quick-start", "readme-tests"]
    assert sorted(ran) == sorted(stages)
    summary = result.stdout.split("== stage times", 1)[1]
    for name in stages:
        assert re.search(rf"^  {re.escape(name)} +\d+ s  passed +\d+ s of CPU$", summary, re.M), name
    assert re.search(r"^== total: \d+ s ", summary, re.M)


@pytest.mark.slow
def test_a_failing_stage_fails_the_run_and_stops_there(tmp_path):
    """A command that fails inside a stage ends that stage (errexit holds inside it) and fails the
    run; every other stage still runs, those of its own job too; an unknown stage name is
    refused with the list."""
    script = stubbed_ci(tmp_path, failing="rest")
    result, ran = run_stubbed(script)
    assert result.returncode == 1
    assert "rest" not in ran and sorted(ran) == sorted(set(ci_stages()) - {"rest"})
    assert re.search(r"^  rest +\d+ s  FAILED +\d+ s of CPU$", result.stdout, re.M)
    result, ran = run_stubbed(script, "rest", "py3.12")
    assert result.returncode == 1 and ran == []
    result, _ = run_stubbed(script, "no-such-stage")
    assert result.returncode == 2
    assert "no stage no-such-stage" in result.stdout and "py3.13t" in result.stdout
