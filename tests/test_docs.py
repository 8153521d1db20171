"""The documentation against the code: generated reference pages current, the README short
enough to start from, and every relative link pointing at something that exists."""
from __future__ import annotations

import re
from pathlib import Path

from cli import docs

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def _pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_reference_pages_are_current():
    stale = [str(p.relative_to(ROOT)) for p in docs.stale()]
    assert not stale, f"out of date (run ./run.py docs): {stale}"


def test_reference_pages_list_what_the_code_declares():
    from hosts.variants import VARIANTS
    from hosts.workloads import registry
    from links.profiles import load_profiles
    text = {p.name: p.read_text() for p in docs.REFERENCE.glob("*.md")}
    assert all(f"`{name}`" in text["profiles.md"] for name in load_profiles())
    assert all(f"## `{name}`" in text["variants.md"] for name in VARIANTS)
    assert all(f"## `{name}`" in text["workloads.md"] for name in registry())


def test_readme_is_a_short_start():
    assert (ROOT / "README.md").stat().st_size <= 15_000


def test_relative_links_resolve():
    broken = []
    for page in _pages():
        for target, _ in LINK.findall(page.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} → {target}")
    assert not broken, broken


def test_no_reference_to_a_design_document_that_is_not_there():
    """Code comments cite the design page by its path."""
    cited = []
    for path in [*ROOT.glob("*/**/*.py"), ROOT / "pyproject.toml"]:
        if ".venv" in path.parts or "target" in path.parts:
            continue
        if path.name != "test_docs.py" and "DESIGN" + ".md" in path.read_text(errors="replace"):
            cited.append(str(path.relative_to(ROOT)))
    assert not cited, f"cite docs/design.md instead: {cited}"
