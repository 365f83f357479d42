"""The calibration store file: its schema, the checked loader, and the atomic writer.

The store (committed as ``pldr_ref/harness/policy/calibration.json``, written by ``python -m
pldr_ref.harness.policy.calibration --write``; statistics computed in :mod:`pldr_ref.harness.policy.ensemble`) is one
JSON object::

    {
      "version": 1,                    # STORE_VERSION; absent in files written before versioning (read as 1)
      "fingerprint": "<16 hex>",       # ensemble.fingerprint(): a store of another ensemble / revision is ignored
      "cases": {
        "<64 hex case digest>": {
          "<dtype>": {                 # float32, bfloat16, float16 (DTYPES)
            "<key>": ENTRY             # an output name or "stage:layer:leaf"
          }
        }
      }
    }

    ENTRY = null                       # the statistic is not finite
          | "<word>"                   # a marker such as "absent" (the output does not exist in that dtype)
          | [NUMBER, ...]              # the statistics: finite, non-negative (today max_abs, rms_rel, |offset|,
                                       # |gain|, n); nested lists of such numbers are accepted (per-group values)
          | {"<label>": ENTRY, ...}    # named sub-entries (e.g. statistics per choice group)

:func:`check_document` checks exactly this structure; a new kind of entry is one more branch of
:func:`entry_problem`.  :func:`load_store_cases` reads a file and raises :class:`CalibrationStoreError` naming the
file and the first problem -- a merge-conflict marker, a NaN statistic, a wrong type -- instead of turning every
case into an error that never names it, or letting a NaN allowance fail a correct backend (issue 29, cause 14).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

#: Version of the store's schema, written as "version".
STORE_VERSION = 1
#: Dtypes a store holds statistics of.
DTYPES = ("float32", "bfloat16", "float16")
#: A case digest: 64 lowercase hex digits (SHA-256).
_DIGEST = re.compile(r"[0-9a-f]{64}")
#: A marker entry: a short word.
_MARKER = re.compile(r"[a-z_]{1,32}")
#: Problems listed in one error before "...".
MAX_LISTED = 3


class CalibrationStoreError(ValueError):
    """A calibration store that cannot be used; the message names the file and what is wrong."""


def entry_problem(value: Any) -> str | None:
    """What is wrong with one ENTRY (see the module docstring), or None."""
    if value is None:
        return None
    if isinstance(value, str):
        return None if _MARKER.fullmatch(value) else f"unknown marker {value[:40]!r}"
    if isinstance(value, list):
        if not value:
            return "an empty list"
        for x in value:
            if isinstance(x, list):
                inner = entry_problem(x)
                if inner:
                    return inner
            elif isinstance(x, bool) or not isinstance(x, (int, float)):
                return f"{type(x).__name__} {str(x)[:40]!r} is not a number"
            elif not math.isfinite(x) or x < 0:
                return f"{x!r} is not a finite non-negative number"
        return None
    if isinstance(value, dict):
        if not value:
            return "an empty object"
        for label, sub in value.items():
            inner = entry_problem(sub)
            if inner:
                return f"{label}: {inner}"
        return None
    return f"a {type(value).__name__}, expected null, a marker word, a list of numbers or an object of entries"


def check_document(doc: Any) -> list[str]:
    """Every structural problem of a parsed store (empty: usable)."""
    if not isinstance(doc, dict):
        return [f"the top level is a {type(doc).__name__}, expected an object"]
    problems = []
    version = doc.get("version", STORE_VERSION)
    if version != STORE_VERSION:
        problems.append(f"version {version!r}: this pldr-ref reads version {STORE_VERSION} (rewrite it with "
                        "`python -m pldr_ref.harness.policy.calibration --write`)")
    extra = sorted(set(doc) - {"version", "fingerprint", "cases"})
    if extra:
        problems.append(f"unknown key(s) {extra}")
    if not isinstance(doc.get("fingerprint"), str):
        problems.append("\"fingerprint\" is missing or not a string")
    cases = doc.get("cases")
    if not isinstance(cases, dict):
        return [*problems, "\"cases\" is missing or not an object"]
    for digest, by_dtype in cases.items():
        if not _DIGEST.fullmatch(digest):
            problems.append(f"case key {digest[:70]!r} is not a 64-hex-digit digest")
        elif not isinstance(by_dtype, dict):
            problems.append(f"case {digest[:12]}: a {type(by_dtype).__name__}, expected an object of dtypes")
        else:
            for dtype, entries in by_dtype.items():
                where = f"case {digest[:12]} {dtype}"
                if dtype not in DTYPES:
                    problems.append(f"{where}: unknown dtype (known: {', '.join(DTYPES)})")
                elif not isinstance(entries, dict):
                    problems.append(f"{where}: a {type(entries).__name__}, expected an object of entries")
                else:
                    problems += [f"{where} {key}: {why}" for key, value in entries.items()
                                 for why in [entry_problem(value)] if why]
        if len(problems) > MAX_LISTED:
            break
    return problems


def _reject_constant(name: str) -> float:
    """json.loads hook: NaN / Infinity literals are refused (the store holds finite numbers only)."""
    raise ValueError(f"the literal {name} (statistics must be finite numbers)")


def read_document(path: str | Path) -> dict[str, Any]:
    """The checked store document of ``path``; :class:`CalibrationStoreError` naming the file otherwise."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise CalibrationStoreError(f"calibration store {p}: cannot be read ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise CalibrationStoreError(f"calibration store {p}: not UTF-8 text ({exc.reason} at byte {exc.start})") \
            from None
    if re.search(r"^(<<<<<<<|>>>>>>>|=======)( |$)", text, re.MULTILINE):
        raise CalibrationStoreError(f"calibration store {p}: holds merge-conflict markers (<<<<<<< / ======= / "
                                    ">>>>>>>); resolve the conflict or rewrite it with `python -m "
                                    "pldr_ref.harness.policy.calibration --write`")
    try:
        doc = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise CalibrationStoreError(f"calibration store {p}: nested too deeply") from None
    except ValueError as exc:
        raise CalibrationStoreError(f"calibration store {p}: not valid JSON ({exc})") from None
    problems = check_document(doc)
    if problems:
        listed = "; ".join(problems[:MAX_LISTED]) + (" ..." if len(problems) > MAX_LISTED else "")
        raise CalibrationStoreError(f"calibration store {p}: {listed}")
    return doc


def load_store_cases(path: str | Path, fingerprint: str) -> dict[str, Any]:
    """The ``cases`` of the store at ``path`` when it exists and was written for ``fingerprint``; {} when it does
    not exist or belongs to another ensemble (its statistics are then recomputed); a malformed file is a
    :class:`CalibrationStoreError` naming it."""
    p = Path(path)
    if not p.exists():
        return {}
    doc = read_document(p)
    return doc["cases"] if doc["fingerprint"] == fingerprint else {}


def dumps_store(fingerprint: str, cases: dict[str, Any]) -> str:
    """The store's canonical text (sorted keys, compact, trailing newline), checked before it is written."""
    doc = {"version": STORE_VERSION, "fingerprint": fingerprint, "cases": cases}
    problems = check_document(doc)
    if problems:
        raise CalibrationStoreError(f"refusing to write a malformed calibration store: {'; '.join(problems[:3])}")
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False) + "\n"

