"""Type-check ``uses_stridedview.py`` with mypy against the stridedview that ``python`` imports.

Run it with the interpreter of the environment to check (CI: the one holding the
editable install the docs recommend): ``python tests/typing_check/check.py``.
The sample is copied to a temporary directory and checked there with no
configuration file, so that mypy finds stridedview only through that
environment's site-packages, as a user's project would; ``MYPYPATH`` is
cleared.  Fails (exit 1) on any mypy error (``import-not-found`` above all), on
a ``reveal_type`` whose type differs from the one its line names, and on a
revealed ``Any`` where a field's type was expected.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

SAMPLE = Path(__file__).with_name("uses_stridedview.py")
REVEALED = re.compile(r'^[^:]+:(\d+): note: Revealed type is "(.*)"$')


def expected_types(source: str) -> dict[int, str]:
    """{line number: the type named in the comment} of each reveal_type line of ``source``."""
    expected = {}
    for number, line in enumerate(source.splitlines(), start=1):
        if line.startswith("reveal_type("):
            expected[number] = line.rsplit("#", 1)[1].strip()
    return expected


def normalise(type_text: str) -> str:
    """A revealed type without the ``builtins.`` prefixes (mypy versions differ there)."""
    return type_text.replace("builtins.", "")


def problems(mypy_output: str, source: str) -> list[str]:
    """What is wrong in mypy's output for ``source``: errors, wrong or Any types, missing reveals."""
    found = []
    expected = expected_types(source)
    revealed = {}
    for line in mypy_output.splitlines():
        match = REVEALED.match(line)
        if match:
            revealed[int(match.group(1))] = match.group(2)
        elif ": error:" in line:
            found.append(line)
    for number, want in expected.items():
        got = revealed.get(number)
        if got is None:
            found.append(f"line {number}: no type revealed (expected {want})")
        elif normalise(got) == "Any" or normalise(got) != normalise(want):
            found.append(f"line {number}: revealed {got}, expected {want}")
    return found


def run_mypy(sample: Path) -> str:
    """mypy's output for ``sample``, checked alone in a temporary directory."""
    with tempfile.TemporaryDirectory() as work:
        target = Path(work) / sample.name
        shutil.copyfile(sample, target)
        env = {key: value for key, value in os.environ.items() if key not in ("MYPYPATH", "PYTHONPATH")}
        completed = subprocess.run(
            [sys.executable, "-m", "mypy", "--no-incremental", "--config-file", os.devnull,
             "--python-executable", sys.executable, "--show-error-codes", target.name],
            cwd=work, env=env, capture_output=True, text=True,
        )
    return completed.stdout + completed.stderr


def main() -> int:
    output = run_mypy(SAMPLE)
    found = problems(output, SAMPLE.read_text())
    if found:
        print(output)
        print("typing check failed:")
        print("\n".join(f"  {problem}" for problem in found))
        return 1
    print(f"typing check: {len(expected_types(SAMPLE.read_text()))} revealed types as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main())
