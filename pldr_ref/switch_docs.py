"""The documentation generated from the switch table: ``python -m pldr_ref.switch_docs --write`` (``--check``).

Each doc of :data:`DOCS` holds one section between :data:`BEGIN` and :data:`END` that is
:func:`pldr_ref.switches.markdown` (every switch, value, meaning, default and the engines that implement it).  A new
switch or value regenerates these sections with the command; nobody edits them by hand
(``tests/test_switch_table.py::test_generated_switch_docs_are_fresh`` checks every one).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pldr_ref.switches import markdown

#: Repository root (the docs live there, next to the package).
ROOT = Path(__file__).resolve().parents[1]
#: The docs that embed the generated table, relative to :data:`ROOT`.
DOCS = ("docs/equations.md", "docs/adding_a_switch.md")
BEGIN, END = "<!-- switch-table:begin -->\n", "<!-- switch-table:end -->"


def render(text: str, where: str = "doc") -> str:
    """``text`` with its generated section replaced by the current table (``ValueError`` naming ``where`` when
    the markers are missing or out of order)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"{where}: no {BEGIN.strip()} ... {END} section")
    return text[:start + len(BEGIN)] + markdown() + text[end:]


def stale(root: Path = ROOT) -> list[str]:
    """The docs of :data:`DOCS` under ``root`` whose generated section is not the current table."""
    out = []
    for rel in DOCS:
        text = (root / rel).read_text(encoding="utf-8")
        if render(text, rel) != text:
            out.append(rel)
    return out


def write(root: Path = ROOT) -> list[str]:
    """Regenerate every section under ``root``; returns the docs that changed."""
    changed = stale(root)
    for rel in changed:
        path = root / rel
        path.write_text(render(path.read_text(encoding="utf-8"), rel), encoding="utf-8")
    return changed


def main(argv: list[str] | None = None) -> int:
    """``--write``: regenerate the sections; ``--check``: exit 1 naming the stale docs."""
    p = argparse.ArgumentParser(prog="python -m pldr_ref.switch_docs", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--write", action="store_true", help="regenerate the sections")
    p.add_argument("--check", action="store_true", help="exit 1 if a section is stale")
    p.add_argument("--root", default=str(ROOT), help="repository root (default: the one holding this package)")
    args = p.parse_args(argv)
    root = Path(args.root)
    if args.write:
        changed = write(root)
        print("regenerated: " + (", ".join(changed) if changed else "nothing (all fresh)"))
        return 0
    bad = stale(root)
    if bad:
        print("stale (run python -m pldr_ref.switch_docs --write): " + ", ".join(bad), file=sys.stderr)
        return 1
    print("all generated switch sections are fresh")
    return 0


if __name__ == "__main__":
    sys.exit(main())
