"""Issue 30 item 1: the committed suite is the case templates instantiated at today's configs and switch values.

Default run: every template's own instance has the committed case's spec (name, kind, tier, description, tags,
config, args, parameter record) and byte-identical inputs and parameters (sha256 against ``golden/MANIFEST.json``),
and instantiating a template at its own switch values through the switch path gives the committed config.
Slow run (``python -m pytest -m slow``): every instance computed, every file's sha256 against the manifest (float64
outputs, which are not bitwise portable across BLAS builds, within their stored tolerance where the bytes differ).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, compare_output, load_case
from pldr_ref.fixtures.format import encode_safetensors, sha256_bytes, sha256_file, storage_array
from pldr_ref.fixtures.templates import (
    CaseTemplate,
    Target,
    committed_templates,
    generated_templates,
    instantiate,
)

GOLDEN = DEFAULT_GOLDEN_DIR
MANIFEST = json.loads((GOLDEN / "MANIFEST.json").read_text(encoding="utf-8"))
#: case.json keys that the spec determines (the others are computed or measured).
SPEC_KEYS = ("name", "group", "kind", "tier", "description", "tags", "config", "args")


def spec_mismatches(template: CaseTemplate, params_bytes: bool = False) -> list[str]:
    """Where the template's own instance differs from the committed case: spec fields of case.json, the parameter
    record (generator seed and scales: the parameters are a function of them and the config, regenerated and
    compared by ``golden verify``), the sha256 of inputs.safetensors and, with ``params_bytes``, of
    params.safetensors where the parameters are stored in full."""
    from pldr_ref.fixtures.build import spec_params

    spec = instantiate(template)
    assert not isinstance(spec, str)
    name = spec.name
    entry = MANIFEST["cases"].get(name)
    if entry is None:
        return [f"{name}: not in MANIFEST.json"]
    meta = json.loads((GOLDEN / name / "case.json").read_text(encoding="utf-8"))
    mine = {"name": spec.name, "group": spec.group, "kind": spec.kind, "tier": spec.tier,
            "description": spec.description, "tags": list(spec.tags),
            "config": spec.config.to_dict() if spec.config is not None else None, "args": dict(spec.args)}
    out = [f"{name}: case.json {k} differs" for k in SPEC_KEYS if json.loads(json.dumps(mine[k])) != meta[k]]
    inputs = {k: storage_array(v)[0] for k, v in spec.inputs().items()}
    if sha256_bytes(encode_safetensors(inputs)) != entry["files"]["inputs.safetensors"]:
        out.append(f"{name}: inputs.safetensors sha256 differs")
    pinfo = meta.get("params")
    if pinfo is not None:
        if (pinfo["seed"], pinfo.get("scales", {})) != (spec.params_seed, dict(spec.param_scales)):
            out.append(f"{name}: parameter seed or scales differ")
        if params_bytes and pinfo["stored"] == "all":
            params, _ = spec_params(spec)
            if sha256_bytes(encode_safetensors(dict(params.items()))) != entry["files"]["params.safetensors"]:
                out.append(f"{name}: params.safetensors sha256 differs")
    return out


def test_every_committed_case_is_a_template_instance_with_its_bytes():
    templates = committed_templates()
    assert sorted(t.name for t in templates) == sorted(MANIFEST["cases"])
    problems = [p for t in templates for p in spec_mismatches(t)]
    assert problems == []


def test_the_instance_check_catches_a_changed_template():
    """Negative control: a switch value, an input stream and a parameter seed changed are each reported."""
    by_name = {t.name: t for t in committed_templates()}
    t = by_name["model/tiny_padded_exact"]
    moved_switch = CaseTemplate(dataclasses.replace(t.spec, config=t.spec.config.replace(mask_mode="additive")))
    assert any("config differs" in p for p in spec_mismatches(moved_switch))
    spec = t.spec
    moved_input = CaseTemplate(dataclasses.replace(spec, inputs=lambda: {k: v + (k == "token_ids")
                                                                         for k, v in spec.inputs().items()}))
    assert spec_mismatches(moved_input) == ["model/tiny_padded_exact: inputs.safetensors sha256 differs"]
    moved_seed = CaseTemplate(dataclasses.replace(spec, params_seed=spec.params_seed + 1))
    assert spec_mismatches(moved_seed) == ["model/tiny_padded_exact: parameter seed or scales differ"]
    assert "model/tiny_padded_exact: params.safetensors sha256 differs" in spec_mismatches(moved_seed, True)
    assert spec_mismatches(t) == []


def test_a_template_at_its_own_switch_values_is_its_committed_config():
    for t in committed_templates():
        if t.spec.config is None:
            continue
        got = instantiate(t, Target(switches=t.switch_values))
        assert not isinstance(got, str), (t.name, got)
        assert got.config == t.spec.config, t.name
        assert got.tier == "float64" and not got.committed and "engine" not in got.args


def test_generated_templates_are_not_committed_and_reach_max_seq_len():
    from pldr_ref.config import PLDRConfig

    names = {t.name for t in generated_templates()}
    assert not names & set(MANIFEST["cases"])
    cfg = PLDRConfig.preset("v510-110m")
    for t in generated_templates():
        spec = instantiate(t, Target(config=cfg))
        assert not isinstance(spec, str)
        s = spec.inputs()["token_ids"].shape[1]
        assert spec.args["start_pos"] + s == cfg.max_seq_len and spec.config == cfg


def test_a_config_above_the_baseline_limit_runs_each_forward_instance_on_one_row():
    """Issue 30: at v510-110m every forward instance is one batch row (each row costs the calibration a metric-learner
    pass of its own): the row with the most masked positions, so a padded template still tests its padding; a
    long-position template its first row, real tokens up to max_seq_len; at least 10 cases of up to 64 positions."""
    import numpy as np

    from pldr_ref.config import PLDRConfig
    from pldr_ref.fixtures.profile_suite import instances, select_templates
    from pldr_ref.fixtures.suite_base import TINY
    from pldr_ref.fixtures.templates import masked_positions, one_row_choice

    big = PLDRConfig.preset("v510-110m")
    specs, _ = instances(select_templates(None, ("forward",)), Target(config=big), 64)
    small, _ = instances(select_templates(None, ("forward",)), Target(config=TINY.replace(vocab_size=48)), 64)
    small = {s.name: s for s in small}
    assert len(specs) >= 10
    for spec in specs:
        inputs = spec.inputs()
        ids = inputs["token_ids"]
        assert ids.shape[0] == 1 and ids.shape[1] <= 64, spec.name
        assert all(v.shape[0] == 1 for k, v in inputs.items() if k in ("attention_mask", "position_ids"))
        if "long-position" in spec.tags:
            assert not (ids == big.pad_id).any() and spec.args["start_pos"] + ids.shape[1] == big.max_seq_len
        else:  # no fully masked query row (left padding) in the row kept: it leaves something to judge
            assert not masked_positions(inputs, big.pad_id)[0, 0], spec.name
        if spec.name in small and "long-position" not in spec.tags:  # the template's row of that choice
            full = small[spec.name].inputs()
            row = one_row_choice(full, TINY.pad_id)
            assert masked_positions(inputs, big.pad_id).sum() == masked_positions(full, TINY.pad_id)[row].sum()
    by_name = {s.name: s.inputs() for s in specs}
    assert (by_name["model/tiny_padded_exact"]["token_ids"] == big.pad_id).any()  # right padding kept
    assert (by_name["model/small_hf_attention_mask"]["attention_mask"] == 0).any()
    # the choice: most masked positions among rows whose first position is unmasked; a left-padded row is not chosen
    assert one_row_choice({"token_ids": np.array([[5, 5, 5, 0], [0, 0, 5, 5], [5, 5, 0, 0]])}, 0) == 2
    assert one_row_choice({"token_ids": np.array([[0, 5], [0, 0]])}, 0) == 1  # every row left-padded: the most
    # negative control: a config below the limit keeps every template's batch
    assert small["model/tiny_padded_exact"].inputs()["token_ids"].shape[0] == 2
    assert small["model/long_positions_s64"].inputs()["token_ids"].shape[0] == 2


@pytest.mark.slow
def test_building_every_template_reproduces_the_manifest(tmp_path: Path):
    """Every committed template computed; every file's sha256 equals MANIFEST.json's, except float64-tier outputs and
    the measured parts of case.json (tolerances, baselines) on another BLAS, which must agree within tolerance."""
    from pldr_ref.fixtures.profile_suite import write_suite

    specs = [instantiate(t) for t in committed_templates()]
    assert write_suite(specs, tmp_path / "s", "default") == {}
    identical = differing = 0
    problems = []
    for name, entry in MANIFEST["cases"].items():
        for fname, digest in entry["files"].items():
            if sha256_file(tmp_path / "s" / name / fname) == digest:
                identical += 1
                continue
            differing += 1
            old = load_case(GOLDEN / name)
            if fname in ("inputs.safetensors", "params.safetensors") or (old.tier == "exact" and fname != "case.json"):
                problems.append(f"{name}/{fname}: sha256 differs")
            elif fname == "outputs.safetensors":
                new = load_case(tmp_path / "s" / name, verify_hashes=False)
                for out, want in old.outputs.items():
                    msg = compare_output(out, new.outputs[out], want, *old.output_tolerance(out))
                    if msg:
                        problems.append(f"{name}: {msg}")
    assert problems == [], problems[:10]
    assert identical > 0
