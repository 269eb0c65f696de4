"""Every ```python block of README.md and docs/*.md runs.

A page's blocks run in order in one namespace (later blocks use earlier names), in a
temporary working directory of the page's own, so examples may write files. A block whose
preceding line is ``<!-- skip: why -->`` cannot run here (a Kubernetes or Ray cluster, other
hosts, a notebook kernel) and is reported as skipped with that reason. Test ids are the page
and the block's number on it, from 1: ``README.md-1``, ``clusters.md-2``.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")
_SKIP = re.compile(r"^\s*<!--\s*skip:\s*(?P<reason>.+?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: str
    number: int  # on its page, from 1
    line: int  # of the block's first line of code in the page
    code: str
    skip: str | None

    @property
    def id(self) -> str:
        return f"{self.page}-{self.number}"


def blocks_of(path: Path) -> list[Block]:
    """The page's ```python blocks, in order, dedented as far as their fence is indented
    (a fence inside a list item)."""
    lines = path.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), len(lines))
        if fence["lang"] == "python":
            skip = _SKIP.match(lines[i - 1]) if i > 0 else None
            code = textwrap.dedent("\n".join(lines[i + 1 : end]))
            found.append(
                Block(path.name, len(found) + 1, i + 2, code, skip["reason"] if skip else None)
            )
        i = end + 1
    return found


BLOCKS = [block for page in PAGES for block in blocks_of(page)]


@dataclass
class _Page:
    """What a page's blocks share: their namespace and working directory, and how far they
    got."""

    cwd: Path
    namespace: dict[str, Any] = field(default_factory=lambda: {"__name__": "__docs__"})
    ran: int = 0  # blocks run (or skipped) so far
    failed: str | None = None


@pytest.fixture(scope="module")
def pages() -> Iterator[dict[str, _Page]]:
    made: dict[str, _Page] = {}
    yield made
    for page in made.values():
        page.namespace.clear()  # drops frames and contexts before the next module's tests


def _run(block: Block, page: _Page) -> None:
    # Blank lines first, so that tracebacks give the page's own line numbers.
    source = "\n" * (block.line - 1) + block.code
    cwd = os.getcwd()
    os.chdir(page.cwd)
    try:
        exec(compile(source, str(ROOT / _path_of(block.page)), "exec"), page.namespace)
    finally:
        os.chdir(cwd)


def _path_of(page: str) -> str:
    return page if page == "README.md" else f"docs/{page}"


@pytest.mark.parametrize("block", BLOCKS, ids=[b.id for b in BLOCKS])
def test_doc_block_runs(
    block: Block, pages: dict[str, _Page], tmp_path_factory: pytest.TempPathFactory
) -> None:
    if block.page not in pages:
        pages[block.page] = _Page(tmp_path_factory.mktemp(block.page.replace(".", "_")))
    page = pages[block.page]
    # Run alone (pytest -k), a block first needs the blocks before it on its page.
    earlier = [b for b in BLOCKS if b.page == block.page and page.ran < b.number < block.number]
    for b in earlier:
        if page.failed is None and b.skip is None:
            try:
                _run(b, page)
            except Exception:
                page.failed = b.id
                raise
        page.ran = b.number
    if page.failed is not None:
        pytest.skip(f"{block.id} needs {page.failed}, which failed")
    page.ran = block.number
    if block.skip is not None:
        pytest.skip(f"{block.id}: {block.skip}")
    try:
        _run(block, page)
    except Exception:
        page.failed = block.id
        raise


def test_every_page_is_found() -> None:
    names = {b.page for b in BLOCKS}
    assert "README.md" in names and len(names) > 5, names
    assert all(b.code.strip() for b in BLOCKS), "an empty ```python block"
