"""``docs/adding_a_stage.md`` stays true: every file and name it cites exists, every registry stage has a body
that ``decoder_layer`` (or the depth loop) calls and whose run gives the declared outputs, and the harness's stage
reference re-plumbs no stage by name."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import numpy as np
from core_support import model_params, small_config, token_ids

from pldr_ref import layer, model
from pldr_ref.harness.policy import stage_reference
from pldr_ref.registry import ALL_STAGES, BODY_ROLES, FORWARD_STAGES, Stage

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "adding_a_stage.md"


def _walkthrough() -> str:
    """The doc up to its measured counts (those name files of the trial branch)."""
    return DOC.read_text(encoding="utf-8").split("## Measured")[0]


def test_every_cited_file_exists() -> None:
    paths = set(re.findall(r"`((?:pldr_ref|tests|docs)/[A-Za-z0-9_/.-]+)`", _walkthrough()))
    assert len(paths) >= 8
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"docs/adding_a_stage.md cites missing files {missing}"


def _resolve(dotted: str) -> object:
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            obj = getattr(obj, attr)
        return obj
    raise ImportError(dotted)


def test_every_cited_name_resolves() -> None:
    names = set(re.findall(r"`(pldr_ref(?:\.[A-Za-z_][A-Za-z0-9_]*)+)`", _walkthrough()))
    assert "pldr_ref.layer.decoder_layer" in names and "pldr_ref.model.depth_pass" in names
    for name in sorted(names):
        _resolve(name)  # raises on a stale name
    for attr in ("body", "run", "enabled_by", "inputs", "outputs", "function"):
        assert hasattr(Stage, attr) or attr in Stage.__dataclass_fields__, attr


def _called_names(fn) -> set[str]:
    tree = ast.parse(inspect.getsource(fn).lstrip())
    return {n.func.attr if isinstance(n.func, ast.Attribute) else n.func.id for n in ast.walk(tree)
            if isinstance(n, ast.Call) and isinstance(n.func, (ast.Attribute, ast.Name))}


def test_the_layer_and_the_depth_loop_call_every_stage_body() -> None:
    """One body per stage, called by the composition itself: a stage whose layer code was written inline (so the
    isolated stage could drift from the layer) fails here."""
    in_layer = _called_names(layer.decoder_layer)
    in_loop = _called_names(model.depth_pass) | _called_names(model.forward)
    for st in ALL_STAGES:
        assert st.body is not None, st.name
        where = in_layer if st.per_layer else in_loop
        if st.name == "sequence_mask":
            continue  # the structure stage: each caller builds positions and mask before the loop
        assert st.body.__name__ in where, f"stage {st.name!r}: its body {st.body.__name__} is not called"
    assert model.positions_and_mask.__name__ in _called_names(model.forward)


def test_every_body_follows_the_naming_rule_and_gives_its_outputs() -> None:
    fields = {f: values[0] for s in ALL_STAGES for f, values in s.enabled_by}
    config = small_config(**fields)
    params = model_params(config)
    ids = token_ids(config, 2, 5)
    out = model.forward(params, ids)
    positions, mask = model.sequence_mask(config, ids)
    vals = {"token_ids": ids, "positions": positions, "mask": mask, "embed": out.embed, "hidden": out.x0,
            **dict(out.layers[0].items())}
    for st in ALL_STAGES:
        params_of_body = inspect.signature(st.body).parameters
        required = [n for n, p in params_of_body.items() if p.default is inspect.Parameter.empty
                    and n not in BODY_ROLES]
        assert set(required) <= set(st.inputs) | {"positions"}, (st.name, required)
        got = st.run(params, 0 if st.per_layer else None, config, vals)
        assert tuple(got) == st.outputs, st.name
        assert all(isinstance(a, np.ndarray) for a in got.values()), st.name


def test_stage_reference_names_no_stage() -> None:
    """The harness's stage reference is the registry's run: no ``if stage == ...`` chain re-plumbing arguments."""
    source = inspect.getsource(stage_reference)
    literals = {n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant)
                and isinstance(n.value, str)}
    assert not literals & {s.name for s in FORWARD_STAGES}


def test_negative_control_a_stale_name_is_caught() -> None:
    try:
        _resolve("pldr_ref.layer.no_such_body")
    except AttributeError:
        return
    raise AssertionError("a stale name resolved")
