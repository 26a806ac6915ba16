"""The README and docs/ stand alone: every relative link resolves inside the repository, the README stays a
front page, and no page sends a reader outside the repository (to the shared planning notes)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_MAX_LINES = 170
OUTSIDE_POINTERS = ("../shared", "/work/shared")

# [text](target) and ![alt](target), the text allowing one level of nested brackets; an optional title
# ("..." or '...') after the target; <target> for targets with spaces.
_INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*(<[^>]*>|[^)\s]+)(?:\s+(?:\"[^\"]*\"|'[^']*'))?\s*\)"
)
# [label]: target (reference-style definitions).
_REFERENCE_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
_FENCE = re.compile(r"^\s{0,3}(```|~~~)")


def doc_pages() -> list[Path]:
    """README.md and every markdown page under docs/."""
    return [README, *sorted((ROOT / "docs").rglob("*.md"))]


def link_targets(text: str) -> list[tuple[int, str]]:
    """(line number, target) of every markdown link and image outside code blocks and code spans."""
    out: list[tuple[int, str]] = []
    in_fence = False
    for number, line in enumerate(text.splitlines(), start=1):
        if _FENCE.match(line):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        prose = _CODE_SPAN.sub("code", line)
        targets = [m.group(1) for m in _INLINE_LINK.finditer(prose)]
        ref = _REFERENCE_DEF.match(prose)
        if ref:
            targets.append(ref.group(1))
        out += [(number, t[1:-1] if t.startswith("<") else t) for t in targets]
    return out


def broken_links(page: Path, *, root: Path = ROOT) -> list[str]:
    """Why each relative link of ``page`` does not lead to a file or folder inside ``root`` (empty: all do).

    Web and mail links are skipped; ``#anchor`` and ``?query`` parts are dropped before resolving.
    """
    problems: list[str] = []
    for number, target in link_targets(page.read_text(encoding="utf-8")):
        where = f"{page.relative_to(root)}:{number}: ({target})"
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            if not target.lower().startswith(("http://", "https://", "mailto:")):
                problems.append(f"{where} uses a scheme other than http(s)/mailto")
            continue
        path_part = target.split("#", 1)[0].split("?", 1)[0]
        if not path_part:
            continue  # a link to an anchor of the same page
        if path_part.startswith("/"):
            problems.append(f"{where} is an absolute path; link relative to the page")
            continue
        resolved = (page.parent / path_part).resolve()
        if not resolved.is_relative_to(root.resolve()):
            problems.append(f"{where} leaves the repository")
        elif not resolved.exists():
            problems.append(f"{where} does not exist")
    return problems


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve_inside_the_repository(page: Path) -> None:
    assert broken_links(page) == []


@pytest.mark.parametrize("page", doc_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_page_points_outside_the_repository(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    found = [
        f"{page.relative_to(ROOT)}:{n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), start=1)
        if any(p in line for p in OUTSIDE_POINTERS)
    ]
    assert found == [], "the repository must stand alone: describe it in docs/ instead"


def test_readme_is_a_front_page() -> None:
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move detail to a docs/ page"
    )


def test_checker_catches_broken_escaping_and_absolute_links(tmp_path: Path) -> None:
    # A small repository: one page, one real file, and links of every kind the checker judges.
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "real.md").write_text("# real\n", encoding="utf-8")
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "[ok](real.md#a-heading) ![img](missing.png) [up](../../outside.md) [abs](/etc/passwd)\n"
        "[web](https://example.org/x) [self](#here) [`code` text](real.md 'a title')\n"
        "`[not a link](nowhere.md)`\n"
        "```\n[in a fence](nowhere.md)\n```\n"
        "[ref]: gone.md\n",
        encoding="utf-8",
    )
    problems = broken_links(page, root=tmp_path)
    assert [p.split(": ", 1)[1] for p in problems] == [
        "(missing.png) does not exist",
        "(../../outside.md) leaves the repository",
        "(/etc/passwd) is an absolute path; link relative to the page",
        "(gone.md) does not exist",
    ]
