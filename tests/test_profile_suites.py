"""Issue 30 items 2 and 4: suites generated on demand for a profile, switch values or a config, cached by content;
bad input; every differing switch named.

The cache tests use two cheap templates and no calibration, so each build takes well under a second.
"""

from __future__ import annotations

import json
import shutil
import sys
import threading
import types
from pathlib import Path

import pytest

from pldr_ref.config import EMULATIONS, PLDRConfig
from pldr_ref.fixtures.build import verify
from pldr_ref.fixtures.profile_suite import (
    KEY_FILE,
    SUITE_FOLDER,
    SuiteCacheError,
    code_digest,
    ensure_suite,
    entry_problem,
    key_digest,
    suite_key,
)
from pldr_ref.fixtures.templates import Target, committed_templates, parse_switches, profile_target
from pldr_ref.harness import protocol

ROOT = Path(__file__).resolve().parents[1]
#: A template that builds in a fraction of a second (a tiny forward of 4 tokens).
CHEAP = ("model/tiny_identity_g_short",)


def cheap_templates():
    return [t for t in committed_templates() if t.name in CHEAP]


def build(root: Path, target: Target, **kw) -> Path:
    return ensure_suite(target, templates=cheap_templates(), root=root, progress=kw.pop("progress", None), **kw)


def test_a_profile_suite_is_built_once_then_read_from_the_cache(tmp_path):
    target = profile_target("pt-v510-float32")
    entry = build(tmp_path, target)
    assert entry.parent == tmp_path and entry.name == key_digest(suite_key(cheap_templates(), target, None))
    assert verify(entry / SUITE_FOLDER, progress=None) == []
    case = json.loads((entry / SUITE_FOLDER / "model/tiny_identity_g_short/case.json").read_text())
    assert case["config"]["mask_add_dtype"] == "float32" and case["config"]["score_scale"] == "float32"
    assert case["tier"] == "float64"
    stamp = (entry / KEY_FILE).stat().st_mtime_ns
    assert build(tmp_path, target) == entry and (entry / KEY_FILE).stat().st_mtime_ns == stamp  # not rebuilt
    # another target is another address
    assert build(tmp_path, profile_target("tf-v500")) != entry


def test_the_address_covers_templates_target_version_and_code():
    t = cheap_templates()
    base = suite_key(t, profile_target("hf-sdpa"), None)
    assert key_digest(base) == key_digest(suite_key(t, profile_target("hf-sdpa"), None))
    layer = [x for x in committed_templates() if x.name == "layer/tiny_identity_g"]
    others = [suite_key(layer, profile_target("hf-sdpa"), None), suite_key(t, profile_target("hf-sdpa"), 32),
              suite_key(t, profile_target("hf-eager"), None),
              suite_key(t, Target(switches={"score_scale": "float32"}), None), {**base, "pldr_ref": "0.0.0"},
              {**base, "code": "0" * 64}]
    assert len({key_digest(k) for k in [base, *others]}) == 1 + len(others)
    assert len(code_digest()) == 64


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """One built entry (tf-v500) that the damage tests copy."""
    return build(tmp_path_factory.mktemp("pristine"), profile_target("tf-v500"))


DAMAGES = {"tampered": "sha256 mismatch", "other_version": "built by pldr_ref 0.0.1", "corrupted_key": "unreadable",
           "extra_file": "extra file", "deleted_file": "missing", "calibration": "calibration.json is not the one"}


def damage(entry: Path, what: str) -> None:
    suite = entry / SUITE_FOLDER
    outputs = suite / "model/tiny_identity_g_short/outputs.safetensors"
    if what == "tampered":
        data = bytearray(outputs.read_bytes())
        data[-1] ^= 1
        outputs.write_bytes(bytes(data))
    elif what == "other_version":
        record = json.loads((entry / KEY_FILE).read_text())
        record["key"]["pldr_ref"] = "0.0.1"
        (entry / KEY_FILE).write_text(json.dumps(record))
    elif what == "corrupted_key":
        (entry / KEY_FILE).write_text("{not json")
    elif what == "extra_file":
        (suite / "model/tiny_identity_g_short/evil.py").write_text("x")
    elif what == "deleted_file":
        outputs.unlink()
    else:
        record = json.loads((entry / KEY_FILE).read_text())
        record["calibration_sha256"] = "0" * 64
        (entry / KEY_FILE).write_text(json.dumps(record))


@pytest.mark.parametrize("what", sorted(DAMAGES))
def test_a_damaged_cache_entry_is_detected(pristine, tmp_path, what):
    key = suite_key(cheap_templates(), profile_target("tf-v500"), None)
    entry = tmp_path / pristine.name
    shutil.copytree(pristine, entry)
    assert entry_problem(entry, key) is None  # negative control: the copy is usable
    damage(entry, what)
    assert DAMAGES[what] in entry_problem(entry, key)


def test_a_damaged_cache_entry_is_rebuilt_not_trusted(pristine, tmp_path, capsys):
    key = suite_key(cheap_templates(), profile_target("tf-v500"), None)
    entry = tmp_path / pristine.name
    shutil.copytree(pristine, entry)
    damage(entry, "tampered")
    again = build(tmp_path, profile_target("tf-v500"), progress=sys.stderr)
    assert again == entry and entry_problem(entry, key) is None
    err = capsys.readouterr().err
    assert "not used" in err and "sha256 mismatch" in err and "rebuilding" in err
    assert verify(entry / SUITE_FOLDER, progress=None) == []


def test_golden_build_writes_the_profile_suite_for_other_languages(tmp_path):
    from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR, FixtureError
    from pldr_ref.fixtures.profile_suite import build_to

    out = tmp_path / "suite"
    assert build_to(out, profile_target("hf-eager"), templates=cheap_templates(), progress=None) == {}
    assert verify(out, progress=None) == []
    assert json.loads((out / "MANIFEST.json").read_text())["suite"] == "generated profile hf-eager"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["suite"]  # no staging folder left
    other = tmp_path / "notes"
    other.mkdir()
    (other / "mine.txt").write_text("x")
    with pytest.raises(FixtureError, match="not a golden suite"):
        build_to(other, profile_target("hf-eager"), templates=cheap_templates(), progress=None)
    with pytest.raises(FixtureError, match="committed golden suite"):
        build_to(DEFAULT_GOLDEN_DIR, profile_target("hf-eager"), templates=cheap_templates(), progress=None)


def test_an_unwritable_cache_folder_is_refused_with_what_to_do(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(SuiteCacheError, match=r"not writable.*PLDR_REF_CACHE"):
        build(blocker / "cache", profile_target("hf-sdpa"))


def test_two_concurrent_builders_build_once_and_never_expose_a_half_suite(tmp_path):
    """Two threads ask for the same suite at once: the lock makes one build and the other wait; both get the same
    complete entry; no staging folder is left.  The calibration hook counts builds and checks, while the first
    build is still running, that no entry folder is visible yet."""
    target = profile_target("hf-eager")
    builds = []
    seen_during_build = []

    def calibrate(staging: Path):
        builds.append(staging)
        seen_during_build.append(sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")
                                        and not p.name.endswith(".lock")))
        return None

    results = []

    def worker():
        results.append(build(tmp_path, target, calibrate=calibrate))

    threads = [threading.Thread(target=worker) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert len(results) == 2 and results[0] == results[1]
    assert len(builds) == 1 and seen_during_build == [[]]
    assert entry_problem(results[0], suite_key(cheap_templates(), target, None)) is None
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".building")]


def test_a_config_suite_follows_the_config():
    cfg = PLDRConfig.preset("small").replace(vocab_size=300)
    from pldr_ref.fixtures.profile_suite import instances

    specs, left_out = instances(cheap_templates(), Target(config=cfg), 64)
    assert left_out == {t: msg for t, msg in left_out.items() if "g_mode identity" in msg}  # identity G: not small's
    specs, left_out = instances([t for t in committed_templates() if t.name == "model/tiny_padded_exact"],
                                Target(config=cfg), 64)
    (spec,) = specs
    ids = spec.inputs()["token_ids"]
    assert spec.config == cfg and ids.max() < 300 and ids.max() >= 64  # redrawn over the config's vocabulary
    assert (ids[1, -2:] == cfg.pad_id).all()  # the template's right padding kept


def test_unknown_switch_names_and_values_are_refused_naming_the_valid_ones():
    assert parse_switches(["mask_mode=additive"]) == {"mask_mode": "additive"}
    with pytest.raises(ValueError, match=r"mask_mode=.bogus. is not one of ideal, additive, finfo_min"):
        parse_switches(["mask_mode=bogus"])
    with pytest.raises(ValueError, match="unknown switch 'mask_mod'; switches: rope_layout"):
        parse_switches(["mask_mod=additive"])
    with pytest.raises(ValueError, match="not SWITCH=VALUE"):
        parse_switches(["mask_mode"])
    with pytest.raises(ValueError, match="unknown emulation profile"):
        profile_target("pt-v999")


def _cli(capsys, monkeypatch, cache: Path, *args: str) -> tuple[int, str]:
    from pldr_ref.cli import main

    monkeypatch.setenv("PLDR_REF_CACHE", str(cache))
    code = main(list(args))
    return code, capsys.readouterr().err


def test_cli_bad_profile_or_switch_is_one_line_and_exit_2(tmp_path, capsys, monkeypatch):
    backend = "pldr_ref.backends.numpy32:Numpy32Backend"
    code, err = _cli(capsys, monkeypatch, tmp_path, "validate", "--backend", backend, "--profile", "pt-v999", "--quiet")
    assert code == 2 and err.count("\n") == 1, err
    assert "unknown profile 'pt-v999'; profiles: " + ", ".join(EMULATIONS) in err
    code, err = _cli(capsys, monkeypatch, tmp_path, "validate", "--backend", backend, "--switch", "score_scale=half")
    assert code == 2 and err.count("\n") == 1 and "score_scale='half' is not one of exact, float32, reciprocal" in err
    code, err = _cli(capsys, monkeypatch, tmp_path, "validate", "--backend", backend, "--profile", "tf-v500",
                     "--switch", "score_scale=exact")
    assert code == 2 and "exclude each other" in err
    code, err = _cli(capsys, monkeypatch, tmp_path, "validate", "--backend", backend, "--own-config")
    assert code == 2 and "--own-config needs a backend with a config" in err
    code, err = _cli(capsys, monkeypatch, tmp_path, "golden", "build", "--profile", "nope", "--out",
                     str(tmp_path / "x"))
    assert code == 2 and err.count("\n") == 1 and "profiles: pt-v510-float32" in err
    bad = tmp_path / "bad.json"
    bad.write_text('{"num_layers": "two"}')
    code, err = _cli(capsys, monkeypatch, tmp_path, "golden", "build", "--config", str(bad), "--out",
                     str(tmp_path / "x"))
    assert code == 2 and err.count("\n") == 1 and "num_layers" in err
    assert not (tmp_path / "x").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.json"]  # nothing built, nothing cached


def test_unsupported_names_every_differing_switch():
    caps = protocol.Capabilities(dtypes=("float32",), kinds=("forward",),
                                 switches={k: (v,) for k, v in EMULATIONS["pt-v510-float32"].items()
                                           if k in protocol.SWITCHES})
    backend = types.SimpleNamespace(capabilities=lambda: caps)
    hf = PLDRConfig.preset("tiny").emulate("hf-sdpa")
    case = types.SimpleNamespace(kind="forward", config=hf, inputs={}, args={})
    reason = protocol.unsupported_reason(backend, case, "float32")
    differing = [k for k, v in EMULATIONS["pt-v510-float32"].items()
                 if k in protocol.SWITCHES and getattr(hf, k) != v]
    assert len(differing) >= 5
    for k in differing:
        assert f"{k}={getattr(hf, k)!r} not supported (declared: {EMULATIONS['pt-v510-float32'][k]})" in reason
    assert reason.count("not supported") == len(differing)
    # negative control: the profile's own config is supported
    own = types.SimpleNamespace(kind="forward", config=PLDRConfig.preset("tiny").emulate("pt-v510-float32"),
                                inputs={}, args={})
    assert protocol.unsupported_reason(backend, own, "float32") is None


def test_calibration_runs_without_the_per_case_limit_and_never_leaves_a_silent_gap(monkeypatch, tmp_path):
    """calibrate_entry validates the golden outputs with no per-case time limit (a v510-110m case cut at the
    default 600 s had no statistics), and a case whose validation still errs is an error naming it, not a gap."""
    import types

    from pldr_ref.harness import profile_suites, suite_loading
    from pldr_ref.harness import validate as validate_module
    from pldr_ref.harness.policy import ensemble

    seen: list = []

    def fake_validate(backend, cases, dtypes, *, isolate=True, timeout=600.0, **_):
        seen.append(timeout)
        return [types.SimpleNamespace(status=status, dtype=dtypes[0], reason="boom") for _ in cases]

    monkeypatch.setattr(suite_loading, "load_suite", lambda *a, **k: [types.SimpleNamespace(name="model/x")])
    monkeypatch.setattr(validate_module, "validate", fake_validate)
    monkeypatch.setattr(ensemble, "case_digest", lambda case: "not-in-the-store")
    monkeypatch.setattr(ensemble, "_STORE", {})  # the committed store is not read
    status = "pass"
    assert profile_suites.calibrate_entry(tmp_path, ("float16",))["dtypes"] == ["float16"]
    assert seen == [None]
    status = "error"  # negative control: an erring case raises
    with pytest.raises(RuntimeError, match="model/x in float16 failed: boom"):
        profile_suites.calibrate_entry(tmp_path, ("float16",))
