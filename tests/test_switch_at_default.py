"""A switch added at its default leaves the committed ``golden/`` and calibration store byte-identical (issue 32, item
3): ``case.json`` and the calibration digest hold a switch only at a non-default value (``PLDRConfig.to_dict``,
:func:`pldr_ref.harness.policy.ensemble.config_text`).

The probe runs in a fresh process with one extra switch added the way ``docs/adding_a_switch.md`` says -- a record
appended to ``SWITCHES`` in ``pldr_ref/switches.py`` and a field line in ``PLDRConfig`` -- by loading those two
modules from their source text with the two additions.  For a sample of committed cases it rebuilds ``case.json``
with the builder (:func:`pldr_ref.fixtures.build.compute_case`) and computes the calibration digest of the committed
case; both must equal the committed bytes, the ``MANIFEST.json`` hash and a key of ``calibration.json``.  The
negative control sets the extra switch to its other value on the same cases: every ``case.json`` and digest changes.
The whole suite is checked by the slow test (``python -m pytest -m slow tests/test_switch_at_default.py``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Committed cases the fast probe checks -> how it writes their case.json: "build" (the builder's whole file; exact-tier
#: cases, whose outputs and tolerances are bitwise portable) or "serialize" (the committed file with its config
#: written again: float64 cases, whose measured tolerances are not bitwise portable across BLAS builds).  They set
#: non-default model, quirk and emulation switches; the op case has no config.
SAMPLE = {"op/residual_unit": "build", "op/lm_head": "build", "op/apply_mask_ideal": "build",
          "layer/tiny_left_pad_additive": "serialize", "model/switch_masked_row_nan": "serialize",
          "model/long_positions_small_v510_switches": "serialize",
          "model/rows_s96_half_rope_additive_mask": "serialize"}

#: The extra switch: appended to the switch table, implemented by the float64 reference only.
EXTRA_RECORD = '''
    _switch("trial_extra_switch", "off", "emulation", "a switch added by tests/test_switch_at_default.py", {
        "off": "the behaviour of today",
        "on": "another behaviour",
    }, every=("float64",)),
'''
#: Where the record and the field line go (the end of ``SWITCHES``; after the last field of ``PLDRConfig``).
TABLE_END = "\n)\n\n#: Switch name -> record."
FIELDS_END = "\n\n    # ------------------------------------------------------------------ derived"
EXTRA_FIELD = '\n    trial_extra_switch: str = switch("trial_extra_switch").default'

_PROBE = r"""
import dataclasses, hashlib, importlib.abc, importlib.machinery, json, sys
from pathlib import Path

mode, table_end, fields_end, record, field = sys.argv[1:6]
names = json.loads(sys.argv[6])
#: module -> (anchor, text inserted before it): the two edits of docs/adding_a_switch.md, steps 1 and 2
EDITS = {"pldr_ref.switches": (table_end, "\n" + record.strip("\n")), "pldr_ref.config": (fields_end, field)}


class EditedSource(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname):
        anchor, text = EDITS[fullname]
        source = Path(self.path).read_text(encoding="utf-8")
        assert source.count(anchor) == 1, f"{self.path}: the probe's anchor moved"
        return compile(source.replace(anchor, text + anchor), self.path, "exec", dont_inherit=True)


class Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name not in EDITS:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        spec.loader = EditedSource(name, spec.origin)
        return spec


if mode != "plain":
    sys.meta_path.insert(0, Finder())

from pldr_ref.config import PLDRConfig
from pldr_ref.fixtures.build import compute_case
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, load_case
from pldr_ref.fixtures.format import canonical_json
from pldr_ref.fixtures.suite import build_suite
from pldr_ref.harness.policy.ensemble import case_digest

assert ("trial_extra_switch" in {f.name for f in dataclasses.fields(PLDRConfig)}) == (mode != "plain")
specs = {s.name: s for s in build_suite("default")} if any(how == "build" for how in names.values()) else {}


def sha(data):
    return hashlib.sha256(data).hexdigest()


out = {}
for name, how in names.items():
    case = load_case(DEFAULT_GOLDEN_DIR / name)
    got = {}
    for value in ("default", "on"):
        config = case.config
        if value == "on":
            if config is None:
                continue
            config = config.replace(trial_extra_switch="on")
        if how == "build":  # the builder's whole case.json (exact-tier cases: bitwise portable)
            text = compute_case(dataclasses.replace(specs[name], config=config))[0]["case.json"]
        else:  # the committed case.json with its config written again (machine independent)
            text = canonical_json({**case.meta, "config": None if config is None else config.to_dict()})
        got[value] = {"case.json": sha(text), "digest": case_digest(dataclasses.replace(case, config=config))}
    out[name] = got
print(json.dumps(out))
"""


def _probe(names: dict[str, str]) -> dict:
    """{case: {"default" / "on": {"case.json": sha256, "digest": calibration digest}}} from a fresh process in which
    the extra switch exists (at its default; "on": set to its other value)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    res = subprocess.run([sys.executable, "-c", _PROBE, "extra", TABLE_END, FIELDS_END, EXTRA_RECORD, EXTRA_FIELD,
                          json.dumps(names)], capture_output=True, text=True, cwd=ROOT, env=env, timeout=900)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def _committed() -> tuple[dict, set[str]]:
    """(case -> the MANIFEST's case.json hash, the case digests of calibration.json)."""
    from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR
    from pldr_ref.harness.policy.ensemble import CACHE_FILE

    manifest = json.loads((DEFAULT_GOLDEN_DIR / "MANIFEST.json").read_text(encoding="utf-8"))
    store = json.loads(CACHE_FILE.read_text(encoding="utf-8"))
    return {n: c["files"]["case.json"] for n, c in manifest["cases"].items()}, set(store["cases"])


def _check(got: dict, hashes: dict, store: set[str]) -> None:
    for name, g in got.items():
        assert g["default"]["case.json"] == hashes[name], name  # case.json bytes = the MANIFEST's hash
        if "on" in g:  # negative control: the switch at its other value changes case.json and the digest
            assert g["on"]["case.json"] != hashes[name] and g["on"]["digest"] != g["default"]["digest"], name
            assert g["on"]["digest"] not in store, name


def test_a_config_is_stored_and_hashed_with_its_non_default_switches_only() -> None:
    from pldr_ref.config import PLDRConfig
    from pldr_ref.harness.policy.ensemble import config_text
    from pldr_ref.switches import names

    tiny = PLDRConfig.preset("tiny")
    assert not set(tiny.to_dict()) & set(names()) and {"d_k", "pad_id", "rope_base"} <= set(tiny.to_dict())
    half = tiny.replace(rope_layout="half", masked_row="zeros")
    assert half.non_default_switches() == {"rope_layout": "half", "masked_row": "zeros"}
    assert {k: v for k, v in half.to_dict().items() if k in names()} == half.non_default_switches()
    assert PLDRConfig.from_dict(half.to_dict()) == half and PLDRConfig.from_dict(tiny.to_dict()) == tiny
    # negative control: a non-default value is stored and hashed, a default one is not
    assert config_text(half) != config_text(tiny) == config_text(tiny.replace(rope_layout="interleaved"))


def test_a_switch_added_at_its_default_leaves_golden_and_calibration_as_they_are() -> None:
    hashes, store = _committed()
    got = _probe(SAMPLE)
    _check(got, hashes, store)
    assert all(got[n]["default"]["digest"] in store for n in SAMPLE)  # the calibration keys stay
    assert {n for n, g in got.items() if "on" not in g} == {"op/apply_mask_ideal"}  # the control ran on the rest


@pytest.mark.slow
def test_every_committed_case_is_unchanged_by_a_switch_at_its_default() -> None:
    """The whole committed suite (case.json written again with the extra switch; the exact-tier op cases rebuilt),
    and every digest of the calibration store found again."""
    hashes, store = _committed()
    names = {n: "build" if n.startswith("op/") else "serialize" for n in sorted(hashes)}
    got = _probe(names)
    _check(got, hashes, store)
    assert store <= {g["default"]["digest"] for g in got.values()}
