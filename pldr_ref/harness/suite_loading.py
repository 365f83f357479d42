"""Which golden suite a command reads: ``--suite-dir`` to a folder, and the hash-checked loading of its cases.

Shared by ``pldr-ref validate`` (:mod:`pldr_ref.harness.cli`), ``pldr-ref export-onnx --case``
(:mod:`pldr_ref.export.cli`) and the harness's own generators (calibration store, battery, figures, verdict
power); it sits below all of them so none imports a command-line module.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

#: Suite name meaning "the committed golden/ folder".
DEFAULT_SUITE = "default"


def suite_root(name: str) -> Path:
    """The golden folder of ``--suite-dir`` ("default" = the committed golden/)."""
    if name == DEFAULT_SUITE:
        from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR

        return Path(DEFAULT_GOLDEN_DIR)
    return Path(name)


def load_suite_checked(root: Path, groups: list[str] | None, pattern: str | None) -> tuple[list[Any], list[str]]:
    """(cases, problems): every selected case of the suite under ``root`` that loads (hash-checked against
    MANIFEST.json), and what is wrong with the suite: no manifest, selected cases listed there but missing
    on disk, case folders not listed, files that do not match their hash, unknown case kinds.  Raises
    ``ValueError`` (a usage error) when the folder does not exist or nothing is selected."""
    from pldr_ref.fixtures.case import MANIFEST_NAME, FixtureError, case_dirs, load_case
    from pldr_ref.fixtures.runners import RUNNERS

    if not root.is_dir():
        raise ValueError(f"golden suite folder {root} does not exist (build it with `pldr-ref golden build --out DIR`)")
    try:
        rx = re.compile(pattern) if pattern else None
    except re.error as exc:
        raise ValueError(f"-k {pattern!r} is not a regular expression ({exc})") from None

    def selected(name: str) -> bool:
        return (groups is None or name.split("/", 1)[0] in groups) and (rx is None or bool(rx.search(name)))

    problems: list[str] = []
    manifest_path = root / MANIFEST_NAME
    listed: set[str] | None = None
    if not manifest_path.is_file():
        problems.append(f"{manifest_path} is missing: the suite's integrity (which cases, which bytes) cannot be "
                        "checked")
    else:
        try:
            listed = set(json.loads(manifest_path.read_text(encoding="utf-8")).get("cases", {}))
        except (json.JSONDecodeError, UnicodeDecodeError, AttributeError) as exc:
            problems.append(f"{manifest_path} is not a valid manifest ({exc})")
    cases = []
    on_disk = set()
    manifests: dict[Path, dict[str, Any]] = {}  # MANIFEST.json read and checked once for every selected case
    for d in case_dirs(root):  # filter on the folder name first: loading a case reads and hashes its tensors
        name = f"{d.parent.name}/{d.name}"
        on_disk.add(name)
        if not selected(name):
            continue
        try:
            case = load_case(d, manifests=manifests)
        except (FixtureError, ValueError, KeyError, OSError) as exc:
            problems.append(f"case {name} cannot be used: {exc}")
            continue
        if case.kind not in RUNNERS:
            problems.append(f"case {name} has unknown kind {case.kind!r} (known: {', '.join(sorted(RUNNERS))})")
            continue
        cases.append(case)
    if listed is not None:
        gone = sorted(n for n in listed - on_disk if selected(n))
        if gone:
            problems.append(f"{len(gone)} case(s) listed in {MANIFEST_NAME} are missing on disk: "
                            + ", ".join(gone[:5]) + (" ..." if len(gone) > 5 else ""))
    if not cases and not problems:
        raise ValueError(f"no cases selected under {root}")
    return cases, problems


def load_suite(root: Path, groups: list[str] | None, pattern: str | None) -> list[Any]:
    """The selected cases (see :func:`load_suite_checked`); raises ``ValueError`` on any suite problem."""
    cases, problems = load_suite_checked(root, groups, pattern)
    if problems:
        raise ValueError("; ".join(problems))
    return cases
