"""Every Python block of README.md and docs/*.md runs as written.

A block is a fence whose info string is exactly ``python``.  Each runs on its own, in a fresh
interpreter, from a temporary directory (so that the installed package is imported, as a reader's
paste would), and must exit 0.  A block whose first line is the comment ``# Needs a CUDA GPU.``
is marked ``gpu`` and ``real_gpu`` (such blocks show CuPy and torch with CUDA, which need the CUDA
runtime): it is skipped, with the GPU skip reason, on a machine without one or on the simulated
device, and runs on a real GPU (docs/contributing.md says so to authors).
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GPU_MARK = "# Needs a CUDA GPU."

#: The number of blocks when this test was written; more may come, fewer means the
#: extractor stopped seeing some (or blocks were removed: then lower it on purpose).
AT_LEAST = 8

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    code: str

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT).as_posix()}:{self.line}"

    @property
    def needs_gpu(self) -> bool:
        return self.code.lstrip().startswith(GPU_MARK)


def python_blocks(text: str, path: Path) -> list[Block]:
    """The ``python`` fenced blocks of a Markdown text, in order."""
    blocks = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        fence, info = match["fence"], match["info"].strip()
        body = []
        j = i + 1
        while j < len(lines):
            closing = _FENCE.match(lines[j])
            if closing and closing["fence"][0] == fence[0] and len(closing["fence"]) >= len(fence) \
                    and not closing["info"].strip():
                break
            body.append(lines[j])
            j += 1
        if info == "python":
            blocks.append(Block(path, i + 1, "\n".join(body) + "\n"))
        i = j + 1
    return blocks


def imported_modules(code: str) -> list[str]:
    """The top-level modules a block imports at its outermost level (``import x``, ``from x import``)."""
    names = re.findall(r"^(?:import|from)\s+([A-Za-z_][A-Za-z0-9_]*)", code, re.M)
    return list(dict.fromkeys(names))


def documentation_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def all_blocks() -> list[Block]:
    return [b for path in documentation_files() for b in python_blocks(path.read_text("utf-8"), path)]


BLOCKS = all_blocks()


def test_extractor_reads_fences_of_every_kind(tmp_path):
    """The extractor takes python fences of any length, skips other languages and nested fences."""
    text = (
        "```python\nA = 1\n```\n"
        "```bash\nnot python\n```\n"
        "````python\nB = 2\n```\nstill B\n````\n"
        "```{literalinclude} x.py\n```\n"
        "```python\n# Needs a CUDA GPU.\nC = 3\n```\n"
    )
    blocks = python_blocks(text, tmp_path / "x.md")
    assert [b.code for b in blocks] == ["A = 1\n", "B = 2\n```\nstill B\n", "# Needs a CUDA GPU.\nC = 3\n"]
    assert [b.line for b in blocks] == [1, 7, 14]
    assert [b.needs_gpu for b in blocks] == [False, False, True]


def test_documentation_has_the_blocks():
    """README.md and docs/ hold at least the Python blocks counted when this test was written."""
    print(f"{len(BLOCKS)} python blocks, {sum(b.needs_gpu for b in BLOCKS)} of them need a GPU")
    assert len(BLOCKS) >= AT_LEAST, [b.id for b in BLOCKS]


def block_marks(block: Block) -> list:
    """``gpu`` and ``real_gpu`` for a block that needs a GPU; ``torch`` or ``jax`` for one that
    imports them (left out of a quick run)."""
    marks = [pytest.mark.gpu, pytest.mark.real_gpu] if block.needs_gpu else []
    return marks + [getattr(pytest.mark, m) for m in ("torch", "jax") if m in imported_modules(block.code)]


@pytest.mark.parametrize("block", [pytest.param(b, id=b.id, marks=block_marks(b)) for b in BLOCKS])
def test_block_runs(block, tmp_path):
    """The block, pasted into a fresh interpreter outside the source tree, runs without error.

    A block importing a producer that is not installed here is skipped as importorskip
    would be (CI installs every producer; its interpreter matrix allows named ones missing).
    """
    for module in imported_modules(block.code):
        pytest.importorskip(module)
    result = subprocess.run(
        [sys.executable, "-c", block.code], cwd=tmp_path, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, f"{block.id} failed:\n{block.code}\n{result.stderr}"
