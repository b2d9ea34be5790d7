"""The documentation stays inside the repository: no file points at notes a user of the
repository does not have, and every relative link of the READMEs and docs/ resolves."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"
# Citations of the authors' working notes, which are not in the repository: the paper
# and notes in a sibling `shared` folder, its absolute path, its design notes and facts
# files (the repository's own pages are docs/*.md; papers are cited by title and venue).
OUTSIDE = re.compile(
    # ([k] and [d]: this pattern does not match itself when the tree is searched for them)
    r"\.\./share[d]/(?:seeds|facts)|/wor[k]/|DESIGN\.md|facts/(?:bfruntime|tofino|emulation)\.md"
    r"|tofino facts|facts: tofino"
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(
            ["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        pytest.skip("git is needed to list the repository's files")
    return [REPO / name for name in out.split("\0") if name]


def markdown_files() -> list[Path]:
    return [p for p in tracked_files() if p.suffix == ".md" and p.exists()]


def test_no_file_points_outside_the_repository():
    this = Path(__file__).resolve()
    found = []
    for path in tracked_files():
        if path == this or not path.is_file():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                found.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not found, "pointers outside the repository (use docs/*.md):\n" + "\n".join(found)


def test_every_docs_page_a_file_cites_exists():
    cited = re.compile(r"\bdocs/([A-Za-z0-9_.-]+\.md)")
    missing = []
    for path in tracked_files():
        if not path.is_file() or path.suffix in (".pyc", ".png"):
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            for page in cited.findall(line):
                if not (DOCS / page).exists():
                    missing.append(f"{path.relative_to(REPO)}:{n}: docs/{page}")
    assert not missing, "citations of docs pages that do not exist:\n" + "\n".join(missing)


def test_relative_links_of_the_markdown_files_resolve():
    broken = []
    for md in markdown_files():
        for target in LINK.findall(md.read_text()):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
                continue  # a URL, or an anchor in the same page
            path = target.split("#", 1)[0]
            if not (md.parent / path).exists():
                broken.append(f"{md.relative_to(REPO)}: {target}")
    assert not broken, "links to files that do not exist:\n" + "\n".join(broken)


def test_the_docs_index_lists_every_page():
    index = (DOCS / "README.md").read_text()
    linked = set(LINK.findall(index))
    pages = {p.name for p in DOCS.glob("*.md") if p.name != "README.md"}
    assert pages <= linked, f"docs/README.md does not list {sorted(pages - linked)}"
