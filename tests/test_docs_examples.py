"""Every ```python block in README.md and docs/*.md runs as a user would run it.

A page's blocks run in order in one fresh namespace, in a fresh Python process whose working
directory is a temporary folder, so files they write stay out of the repository and a switch
one page sets (``flow.backends``) cannot reach another page or this test process. A block may
opt out only with a marker line that gives its reason::

    # docs-test: skip (needs a CUDA GPU)

Skips are for blocks that need hardware or several processes this machine may not have; a
marker without a reason fails the test, and so does a marker that names another reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")
HEADING = re.compile(r"^#+ (?P<title>.+)$", re.MULTILINE)
FENCE = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*$")
MARKER = re.compile(r"#\s*docs-test:\s*(?P<what>\S+)(?P<rest>.*)$")
REASON = re.compile(r"^\s*\((?P<reason>[^)]*\S[^)]*)\)\s*$")
#: the only reasons a block may be left out for: hardware or processes a test machine lacks
ALLOWED_REASONS = ("needs a CUDA GPU", "needs several processes")

RUNNER = r"""
import json, sys, traceback
page, blocks = sys.argv[1], json.loads(sys.stdin.read())
namespace = {"__name__": "__main__"}
for line, source in blocks:
    try:
        exec(compile("\n" * (line - 1) + source, page, "exec"), namespace)  # the page's line numbers
    except BaseException:
        print(f"\n{page}: the block starting at line {line} failed:\n", file=sys.stderr)
        traceback.print_exc()
        sys.exit(1)
"""


def python_blocks(text: str) -> list[tuple[int, str]]:
    """The ```python blocks of a markdown page as ``(first line number, dedented source)``."""
    lines = text.splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if fence:
            end = i + 1
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                raise AssertionError(f"line {i + 1}: a ```python block is never closed")
            blocks.append((i + 2, textwrap.dedent("\n".join(lines[i + 1:end]))))
            i = end
        i += 1
    return blocks


def skip_reason(source: str) -> str | None:
    """The reason a block's ``# docs-test: skip (...)`` marker gives; None without a marker."""
    for line in source.splitlines():
        marker = MARKER.search(line)
        if marker is None:
            continue
        if marker["what"] != "skip":
            raise AssertionError(f"unknown docs-test marker {line.strip()!r} (only 'skip (reason)')")
        reason = REASON.match(marker["rest"])
        if reason is None:
            raise AssertionError(f"{line.strip()!r}: a skip marker needs a reason in parentheses")
        if reason["reason"].strip() not in ALLOWED_REASONS:
            raise AssertionError(f"{line.strip()!r}: blocks are skipped only when they "
                                 f"{' or '.join(ALLOWED_REASONS)}")
        return reason["reason"].strip()
    return None


def test_blocks_are_found_and_markers_are_checked():
    page = "text\n```python\nx = 1\n```\n  ```python\n  # docs-test: skip (needs a CUDA GPU)\n  y\n  ```\n"
    assert python_blocks(page) == [(3, "x = 1"), (6, "# docs-test: skip (needs a CUDA GPU)\ny")]
    assert skip_reason("x = 1") is None
    assert skip_reason("# docs-test: skip (needs several processes)\nx") == "needs several processes"
    for wrong in ("# docs-test: skip", "# docs-test: skip ()", "# docs-test: skip (slow)",
                  "# docs-test: continue"):
        with pytest.raises(AssertionError):
            skip_reason(wrong + "\nx = 1")


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_page_examples_run(page, tmp_path, monkeypatch):
    blocks = python_blocks(page.read_text())
    runnable = [(line, source) for line, source in blocks if skip_reason(source) is None]
    if not runnable:
        pytest.skip(f"{page.name} has no runnable python block")
    monkeypatch.chdir(tmp_path)
    name = page.relative_to(ROOT).as_posix()
    done = run_blocks(name, runnable, tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]


def test_a_failing_block_is_named_and_stops_the_page(tmp_path):
    page = "```python\nvalue = 2\n```\ntext\n```python\nopen('made.txt', 'w').write('x')\nvalue / 0\n```\n"
    page += "```python\nopen('never.txt', 'w')\n```\n"
    done = run_blocks("page.md", python_blocks(page), tmp_path)
    assert done.returncode == 1
    assert "page.md: the block starting at line 6 failed" in done.stderr
    assert 'File "page.md", line 7' in done.stderr and "ZeroDivisionError" in done.stderr
    assert (tmp_path / "made.txt").is_file() and not (tmp_path / "never.txt").exists()


def test_links_between_pages_resolve():
    """Every relative link of README.md and docs/ names a file that exists and, where it names
    a section (``page.md#anchor``), a heading of that page, as GitHub makes anchors."""
    broken = []
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            linked = (page.parent / path).resolve() if path else page
            if not linked.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
                broken.append(f"{page.name}: {target} (no such section)")
    assert not broken, "\n".join(broken)


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"^[ \t]*```.*?^[ \t]*```", "", page.read_text(), flags=re.MULTILINE | re.DOTALL)
    titles = HEADING.findall(text)  # headings outside code blocks
    return {re.sub(r"[^\w\- ]", "", title.strip().lower()).replace(" ", "-") for title in titles}


def run_blocks(name: str, blocks: list[tuple[int, str]], folder: Path) -> subprocess.CompletedProcess:
    """Run a page's blocks in order, in one namespace, in a fresh Python process in ``folder``."""
    return subprocess.run([sys.executable, "-c", RUNNER, name], input=json.dumps(blocks),
                          capture_output=True, text=True, timeout=600, cwd=folder,
                          env=_environment(folder))


def _environment(tmp_path: Path) -> dict[str, str]:
    """The test's environment, with caches (the engine choice) kept in the temporary folder."""
    return {**os.environ, "FLOWSERVE_CACHE_DIR": str(tmp_path / "cache"),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
