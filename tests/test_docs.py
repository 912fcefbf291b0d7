"""The README and docs/ hold together: every relative link (and image) points at a file that exists, and a
``#fragment`` at a heading of that page; the README stays a newcomer's page with the Space's front matter."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)


def prose(text: str) -> str:
    """The page without its code: fenced blocks and inline code hold no links."""
    return INLINE_CODE.sub("", FENCE.sub("", text))


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[*_`]|\[([^\]]*)\]\([^)]*\)", r"\1", heading).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    return {slug(h) for h in HEADING.findall(FENCE.sub("", page.read_text(encoding="utf-8")))}


def broken_links(page: Path) -> list[str]:
    """Each relative link of ``page`` that does not resolve, with why."""
    bad = []
    for target in LINK.findall(prose(page.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):   # https:, mailto: ...: not ours to check
            continue
        path, _, fragment = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            bad.append(f"{target}: no heading #{fragment} in {dest.name}")
    return bad


def relative_links(page: Path) -> list[str]:
    return [t for t in LINK.findall(prose(page.read_text(encoding="utf-8"))) if not re.match(r"^[a-z][a-z0-9+.-]*:", t, re.I)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert not broken_links(page), broken_links(page)


def test_the_pages_link_to_each_other():
    """The README reaches every docs page, and the checker sees the links (images included)."""
    readme = relative_links(ROOT / "README.md")
    assert {p.name for p in PAGES[1:]} <= {Path(t.partition("#")[0]).name for t in readme}
    assert "assets/screenshot.png" in readme
    assert all(relative_links(p) for p in PAGES[1:])     # each docs page links back at least


def test_the_checker_catches_a_broken_file_and_a_broken_anchor(tmp_path):
    (tmp_path / "other.md").write_text("# A heading, with punctuation!\n\n```\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text("[ok](other.md#a-heading-with-punctuation) [web](https://example.org/x) `[code](nowhere.md)`\n"
                    "[gone](missing.md) [bad anchor](other.md#not-a-heading) ![img](pic.png)\n"
                    "```\n[fenced](also-nowhere.md)\n```\n")
    assert broken_links(page) == ["missing.md: no such file", "other.md#not-a-heading: no heading #not-a-heading "
                                  "in other.md", "pic.png: no such file"]


def test_readme_is_a_newcomers_page_with_the_spaces_front_matter():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    front = text.split("---\n")[1]                    # Hugging Face Spaces reads the front matter
    assert text.startswith("---\n") and "sdk: gradio" in front and "app_file: app.py" in front
    assert "bash scripts/setup.sh && python app.py" in text and "bash .ci/run" in text
