"""The Markdown of README.md and docs/*.md renders as written: no dunder name outside code.

In Markdown, ``__dlpack__`` outside backticks is the word "dlpack" in bold, so a quoted message
naming a protocol method silently loses it on the page (the site builds without a warning).
Every such name must sit in a code span or a code block.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
# __name__ not preceded by a word character or a backslash (an escaped underscore).
_DUNDER = re.compile(r"(?<![\w\\])__\w+?__(?!\w)")


def unformatted_dunders(text: str) -> list[tuple[int, str]]:
    """(line number, name) of each ``__name__`` outside code spans and fenced blocks."""
    found, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        match = _FENCE.match(line)
        if fence is not None:
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence):
                fence = None
            continue
        if match:
            fence = match.group(1)
            continue
        prose = _CODE_SPAN.sub("", line)
        found += [(number, name) for name in _DUNDER.findall(prose)]
    return found


def test_the_check_finds_what_markdown_would_make_bold():
    """A dunder in prose, a table cell or a quoted message is found; one in a code span, a
    fenced block, or with escaped underscores is not."""
    text = (
        'a quoted message ("has no __dlpack__ method")\n'
        "| BufferError | `x` | __cuda_array_interface__ is missing |\n"
        "`__dlpack__` and ``a `__dlpack_device__` b``\n"
        "```python\nx.__dlpack__()\n```\n"
        "~~~\n__init__\n~~~\n"
        "\\_\\_dlpack\\_\\_ and snake_case_name and a__b__c\n"
    )
    assert unformatted_dunders(text) == [(1, "__dlpack__"), (2, "__cuda_array_interface__")]


def test_docs_write_every_dunder_in_code():
    """No README.md or docs/*.md line has a ``__name__`` outside backticks (it would render bold)."""
    found = [
        f"{path.relative_to(ROOT)}:{number}: {name}"
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
        for number, name in unformatted_dunders(path.read_text("utf-8"))
    ]
    assert found == []
