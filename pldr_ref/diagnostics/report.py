"""Report writing for ``pldr-ref diagnose``: strict JSON with a ``schema_version`` and a markdown summary.

JSON: NaN and +-inf (legal results: an undefined ratio, an unbounded proxy) are written as ``null`` and the
strings ``"inf"`` / ``"-inf"`` so that every standard JSON parser reads the file.  Markdown: one heading per
section, its scalar numbers as a table; long per-instance lists stay in the JSON.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

#: Version of the JSON layout; bump when a key is renamed or removed.
SCHEMA_VERSION = 1
#: Lists longer than this are left out of the markdown tables (they stay in the JSON).
MARKDOWN_MAX_LIST = 8
#: Significant digits of numbers in the markdown report.
MARKDOWN_DIGITS = 6


def to_json_value(x: Any) -> Any:
    """``x`` with NumPy scalars/arrays made plain, NaN -> None and +-inf -> "inf"/"-inf" (recursively)."""
    if isinstance(x, dict):
        return {str(k): to_json_value(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [to_json_value(v) for v in x]
    if isinstance(x, np.ndarray):
        return to_json_value(x.tolist())
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    if isinstance(x, (int, np.integer)):
        return int(x)
    if isinstance(x, (float, np.floating)):
        f = float(x)
        if math.isnan(f):
            return None
        if math.isinf(f):
            return "inf" if f > 0 else "-inf"
        return f
    return x


def document(kind: str, data: dict) -> dict:
    """The JSON document of one diagnose run: schema_version, kind (twirl / g-lm / model) and the data."""
    return {"schema_version": SCHEMA_VERSION, "kind": kind, **to_json_value(data)}


def write_json(doc: dict, path: str | os.PathLike[str]) -> Path:
    """Write ``doc`` as strict, indented JSON (parents created); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    from pldr_ref.output_paths import atomic_write_text

    atomic_write_text(p, json.dumps(doc, indent=1, allow_nan=False) + "\n")
    return p


def fmt(x: Any) -> str:
    """A markdown cell: floats to MARKDOWN_DIGITS significant digits, lists inline, None as n/a."""
    if x is None:
        return "n/a"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{MARKDOWN_DIGITS}g}"
    if isinstance(x, list):
        return "[" + ", ".join(fmt(v) for v in x) + "]"
    return str(x)


def flatten_rows(data: Any, prefix: str = "") -> list[tuple[str, str]]:
    """(dotted key, cell) for every scalar or short list inside ``data``."""
    out: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for k, v in data.items():
            out += flatten_rows(v, f"{prefix}.{k}" if prefix else str(k))
    elif isinstance(data, list):
        flat = all(not isinstance(v, (list, dict)) for v in data)
        if flat and len(data) <= MARKDOWN_MAX_LIST:
            out.append((prefix, fmt(data)))
    else:
        out.append((prefix, fmt(data)))
    return out


def table(data: dict) -> str:
    """A two-column markdown table (quantity, value) of ``data``'s scalars and short lists."""
    lines = ["| quantity | value |", "|---|---|"]
    lines += [f"| `{k}` | {v} |" for k, v in flatten_rows(data)]
    return "\n".join(lines)


def markdown(doc: dict, title: str | None = None) -> str:
    """Markdown report of a diagnose document (see module doc)."""
    kind = doc.get("kind", "?")
    lines = [f"# {title or 'pldr-ref diagnose ' + kind}", "", f"schema_version {doc.get('schema_version')}", ""]
    if kind == "model":
        head = {k: doc[k] for k in ("model", "prompts", "options", "timings_s") if k in doc}
        lines += [table(head), ""]
        for name, sec in doc.get("sections", {}).items():
            lines += [f"## {name}", "", table(sec) if isinstance(sec, dict) else fmt(sec), ""]
    else:
        lines += [table({k: v for k, v in doc.items() if k not in ("schema_version", "kind")}), ""]
    return "\n".join(lines)


def write_markdown(doc: dict, path: str | os.PathLike[str], title: str | None = None) -> Path:
    """Write :func:`markdown` of ``doc`` to ``path`` (parents created); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    from pldr_ref.output_paths import atomic_write_text

    atomic_write_text(p, markdown(doc, title))
    return p
