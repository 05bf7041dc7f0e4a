"""The documentation can be followed: the API reference is current, every link resolves, nothing points outside.

- docs/api.md is exactly what ``tools/write_api_docs.py`` writes from today's docstrings;
- every relative link (and image) in README.md and docs/ names a file of the repository, and its ``#anchor`` a
  heading of that file;
- no page names a file outside the repository or a design note / issue number a reader of the repository cannot
  look up.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from helpers import REPO

PAGES = sorted([REPO / "README.md", *(REPO / "docs").rglob("*.md")])

sys.path.insert(0, str(REPO / "tools"))  # the documentation tools are scripts, not a package
import write_api_docs  # noqa: E402
from docstring_markdown import heading_anchors, heading_slug  # noqa: E402


def _prose(text: str) -> str:
    """The text without fenced code blocks (whose brackets are code, not links)."""
    return re.sub(r"^\s*```.*?^\s*```", "", text, flags=re.DOTALL | re.MULTILINE)


def _links(text: str) -> list[str]:
    """Targets of Markdown links and images, outside code blocks and code spans."""
    prose = re.sub(r"`[^`\n]*`", "", _prose(text))
    return re.findall(r"!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", prose)


def _name(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def test_api_reference_is_current():
    expected = write_api_docs.render()
    current = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    assert current == expected, "docs/api.md is stale: run python tools/write_api_docs.py"


def test_api_reference_names_every_public_name():
    import trl_adaptive

    text = (REPO / "docs" / "api.md").read_text(encoding="utf-8")
    titles = set(re.findall(r"^### `([^`]+)`", text, flags=re.MULTILINE))
    assert set(trl_adaptive.__all__) <= titles, sorted(set(trl_adaptive.__all__) - titles)
    assert {"sim.simulate", "report.load_run", "report.write_report"} <= titles


def test_the_slug_is_githubs():
    slug = heading_slug
    assert slug("The posterior: one Beta, with forgetting") == "the-posterior-one-beta-with-forgetting"
    assert slug("DAPO dynamic sampling (`dynamic_sampling=True`)") == "dapo-dynamic-sampling-dynamic_samplingtrue"
    assert slug("`KnapsackAllocator.allocate`") == "knapsackallocatorallocate"
    assert slug("What it showed ([summary](demo/summary.md))") == "what-it-showed-summary"
    assert heading_anchors("# A\n## A\n```\n# not a heading\n```\n") == {"a", "a-1"}


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_relative_links_resolve(page: Path):
    broken = []
    for target in _links(page.read_text(encoding="utf-8")):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
            continue
        path_part, _, anchor = target.partition("#")
        file = (page.parent / path_part).resolve() if path_part else page
        if not file.is_relative_to(REPO):
            broken.append(f"{target}: outside the repository")
        elif not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and file.suffix == ".md":
            if anchor not in heading_anchors(file.read_text(encoding="utf-8")):
                broken.append(f"{target}: no heading #{anchor} in {_name(file)}")
    assert not broken, f"{_name(page)}: " + "; ".join(broken)


# Things a reader of the repository cannot follow: files of the machine it was written on, notes kept outside it,
# and numbered issues or design sections.
OUTSIDE = [
    (r"\.\./shared\b|(?<![\w.])/work/|(?<![\w.])/home/", "a path outside the repository"),
    (r"\bDESIGN\s*(?:section\s*)?\d", "a design-note section"),
    (r"\b[Ii]ssues?\s*#?\d+", "an issue number"),
    (r"\b[Ss]top\s+\d+\b", "a work-plan stop"),
]


@pytest.mark.parametrize("page", PAGES, ids=_name)
def test_no_reference_outside_the_repository(page: Path):
    found = []
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        for pattern, what in OUTSIDE:
            if match := re.search(pattern, line):
                found.append(f"line {number}: {match.group(0)!r} ({what})")
    assert not found, f"{_name(page)}: " + "; ".join(found)


def test_the_checks_catch_what_they_should():
    text = "See [x](missing.md) and ![i](../../outside.png), `[not](a-link.md)`.\n```\n[nor](this.md)\n```\n"
    assert _links(text) == ["missing.md", "../../outside.png"]
    assert re.search(OUTSIDE[1][0], "as DESIGN 2.2 says") and re.search(OUTSIDE[2][0], "issue 18")
    assert not re.search(OUTSIDE[2][0], "an issue with 3 prompts")
