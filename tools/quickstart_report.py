"""Write this machine's ``python -m stridedview`` report into docs/quickstart.md.

The sample report in docs/quickstart.md is a real run, not typed by hand: run this
script (from the clone's root, with the package and every CPU producer installed, on
a machine without a GPU, as CI's test environment is) after changing the report, and
commit the page.  tests/test_report.py compares the sample with a real run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

PAGE = Path(__file__).resolve().parent.parent / "docs" / "quickstart.md"
#: The sample is the ```text block of the page that starts with this line.
FIRST_LINE = "stridedview interop report"


def main() -> int:
    completed = subprocess.run(
        [sys.executable, "-m", "stridedview"], capture_output=True, text=True, cwd=PAGE.parent.parent,
    )
    if completed.returncode != 0:
        sys.stderr.write(completed.stdout + completed.stderr)
        return completed.returncode
    text = PAGE.read_text()
    pattern = re.compile(r"(```text\n)" + re.escape(FIRST_LINE) + r"\n.*?(```)", re.DOTALL)
    if len(pattern.findall(text)) != 1:
        sys.exit(f"{PAGE}: expected one ```text block starting with {FIRST_LINE!r}")
    PAGE.write_text(pattern.sub(lambda m: m.group(1) + completed.stdout + m.group(2), text))
    print(f"wrote the report of this machine into {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
