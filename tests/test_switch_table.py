"""The switch table (:mod:`pldr_ref.switches`) is the one place a switch's values, default and engine support live.

Checked here: everything that lists switch values agrees with the table (config validation and defaults, the
emulation list, the harness's switches, each backend's declared values, the arb engine's pinned values); the
exact engines refuse by name what the table says they do not evaluate; an extra value put into the table
propagates everywhere, accepted or refused consistently (in a fresh process, the table patched before
``pldr_ref`` is imported); and no module spells a switch's value list literally (an AST scan, with a negative
control).
"""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import pldr_ref
from pldr_ref import config as config_module
from pldr_ref.config import EMULATION_SWITCHES, PLDRConfig, switch_defaults
from pldr_ref.harness import protocol
from pldr_ref.switches import (
    AUTO,
    BY_NAME,
    ENGINE_SWITCHES,
    ENGINES,
    SWITCHES,
    Switch,
    declared_switches,
    names,
    pinned_values,
    require_engine_support,
    switch,
)

ROOT = Path(__file__).resolve().parents[1]
TINY = PLDRConfig.preset("tiny")


# ----------------------------------------------------------------------------- what derives from the table
def test_config_fields_choices_and_defaults_are_the_tables() -> None:
    hints = {f.name: f for f in dataclasses.fields(PLDRConfig)}
    str_fields = {f.name for f in dataclasses.fields(PLDRConfig) if f.type in ("str", str)}
    assert str_fields == set(BY_NAME)
    assert {s.name: s.choices for s in SWITCHES} == config_module._CHOICES
    for s in SWITCHES:
        assert hints[s.name].default == s.default, s.name
    assert switch("score_scale").choices == config_module.SCORE_SCALES
    assert names("emulation") == EMULATION_SWITCHES
    assert switch_defaults() == {n: BY_NAME[n].default for n in EMULATION_SWITCHES}


def test_harness_switches_and_backend_declarations_are_the_tables() -> None:
    assert protocol.SWITCHES == ENGINE_SWITCHES == tuple(s.name for s in SWITCHES if s.group != "init")
    assert {n: (BY_NAME[n].default,) for n in EMULATION_SWITCHES} == protocol.DEFAULT_EMULATION_SWITCHES
    from pldr_ref.backends.numpy32 import Numpy32Backend
    from pldr_ref.backends.reference import ReferenceBackend

    assert dict(Numpy32Backend().capabilities().switches) == declared_switches("numpy32")
    # the reference implements every value of every switch, and says so (an undeclared switch is its default only)
    assert dict(ReferenceBackend().capabilities().switches) == declared_switches("float64") \
        == protocol.every_value(*protocol.SWITCHES)


def test_torch_declares_the_tables_values() -> None:
    pytest.importorskip("torch")
    from pldr_ref.backends.torch_backend import TorchBackend

    assert dict(TorchBackend().capabilities().switches) == declared_switches("torch")


def _capabilities_switch_args(path: Path) -> list[str]:
    """The ``switches=`` argument of every ``Capabilities(...)`` call in ``path``, as source text."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [ast.unparse(kw.value) for node in ast.walk(tree) if isinstance(node, ast.Call)
            and getattr(node.func, "id", None) == "Capabilities" for kw in node.keywords if kw.arg == "switches"]


@pytest.mark.parametrize("engine, module", [("torch", "torch_backend"), ("numpy32", "numpy32"),
                                            ("jax", "jax_backend"), ("onnx", "onnx_backend")])
def test_every_backend_declares_its_switches_from_the_table(engine: str, module: str) -> None:
    """Read statically, so it holds without jax / onnxruntime installed."""
    args = _capabilities_switch_args(ROOT / "pldr_ref" / "backends" / f"{module}.py")
    assert args and set(args) == {f"declared_switches({engine!r})"}, args


def test_triton_has_torchs_column_because_it_inherits_torchs_capabilities() -> None:
    tree = ast.parse((ROOT / "pldr_ref" / "backends" / "triton_attention.py").read_text(encoding="utf-8"))
    (cls,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "TritonAttentionBackend"]
    assert [ast.unparse(b) for b in cls.bases] == ["TorchBackend"]
    assert "capabilities" not in {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    assert all(s.engines["triton"] == s.engines["torch"] for s in SWITCHES)


def test_arb_pins_the_tables_values() -> None:
    from pldr_ref.exact.arb.model import ARB_SWITCH_VALUES

    assert pinned_values("arb") == ARB_SWITCH_VALUES
    # every emulation switch but pad_source (resolved before the engine runs) is pinned; a model switch may be too
    assert set(ARB_SWITCH_VALUES) & set(EMULATION_SWITCHES) == set(EMULATION_SWITCHES) - {"pad_source"}


def test_the_table_refuses_inconsistent_records() -> None:
    sw = switch("score_scale")
    with pytest.raises(ValueError, match="default 'bogus' is not one of"):
        dataclasses.replace(sw, default="bogus")
    with pytest.raises(ValueError, match="engine 'torch' lists"):
        dataclasses.replace(sw, engines={**sw.engines, "torch": ("float32",)})  # the default missing
    with pytest.raises(ValueError, match="engines must name exactly"):
        dataclasses.replace(sw, engines={e: v for e, v in sw.engines.items() if e != "onnx"})
    with pytest.raises(ValueError, match="group 'other'"):
        dataclasses.replace(sw, group="other")
    assert dataclasses.replace(sw, meaning="another line") != sw  # negative control: a valid change is accepted


def test_error_messages_name_the_field_the_value_and_the_allowed_values() -> None:
    with pytest.raises(ValueError, match=r"PLDRConfig\.masked_row='never' is not one of \('arithmetic', 'zeros'"):
        TINY.replace(masked_row="never")
    from pldr_ref import attention, rope

    with pytest.raises(ValueError, match=r"score_scale must be one of \('exact', 'float32', 'reciprocal'\), "
                                         r"got 'float16'"):
        attention.score_scale_divisor(8, "float16")
    with pytest.raises(ValueError, match=r"rope_layout must be one of \('interleaved', 'half'\), got 'gptj'"):
        rope.apply_rope(np.zeros((1, 1, 2, 4)), np.arange(2), layout="gptj")


# ----------------------------------------------------------------------------- engines refuse what they lack
def _config_with(name: str, value: str) -> PLDRConfig:
    """Tiny with ``name=value`` and the companions the value needs to be a valid config."""
    extra: dict[str, str] = {}
    if name == "rope_table" and value in config_module.ROPE_PRECISIONS:
        extra["rope_precision"] = value
    if name == "mask_add_dtype" and value == "float32":
        extra["mask_mode"] = "additive"
    return TINY.replace(**{name: value}, **extra)


def _lacking(engine: str) -> list[tuple[str, str]]:
    return [(n, v) for n, vals in declared_switches(engine).items() for v in BY_NAME[n].choices if v not in vals]


@pytest.mark.parametrize("engine", ["mpmath", "arb"])
def test_exact_engines_refuse_every_value_the_table_says_they_lack(engine: str) -> None:
    from pldr_ref.exact import forward as exact_forward
    from pldr_ref.params import init_params

    lacking = _lacking(engine)
    assert lacking
    ids = np.array([[1, 2, 3]])
    for name, value in lacking:
        params = init_params(_config_with(name, value), seed=0)
        with pytest.raises(NotImplementedError, match=name):
            exact_forward(params, ids, engine=engine, guard=False, dps=20)
    # negative control: the defaults run
    assert exact_forward(init_params(TINY, seed=0), ids, engine=engine, guard=False, dps=20)["logits"].shape == (
        1, 3, TINY.vocab_size)


def test_harness_reports_a_value_a_backend_lacks_as_unsupported() -> None:
    from pldr_ref.backends.numpy32 import Numpy32Backend

    backend = Numpy32Backend()
    for name, value in _lacking("numpy32"):
        case = types.SimpleNamespace(kind="forward", config=_config_with(name, value), inputs={}, args={})
        assert protocol.unsupported_reason(backend, case, "float32") == (
            f"{name}={value!r} not supported (declared: {', '.join(declared_switches('numpy32')[name])})")
    plain = types.SimpleNamespace(kind="forward", config=TINY, inputs={}, args={})
    assert protocol.unsupported_reason(backend, plain, "float32") is None


def test_require_engine_support_names_every_lacking_value() -> None:
    cfg = TINY.replace(score_scale="float32", masked_row="zeros")
    with pytest.raises(NotImplementedError, match=r"score_scale='float32'.*masked_row='zeros'"):
        require_engine_support("numpy32", cfg)
    require_engine_support("float64", cfg)  # the reference implements every value


# ----------------------------------------------------------------------------- an extra value propagates
_PROPAGATION = r"""
import dataclasses, importlib.util, json, sys
import numpy as np

patch = sys.argv[1] == "patch"
spec = importlib.util.spec_from_file_location("pldr_ref.switches", sys.argv[2])
table = importlib.util.module_from_spec(spec)
sys.modules["pldr_ref.switches"] = table
spec.loader.exec_module(table)
if patch:  # an extra score_scale value that no engine implements yet
    old = table.BY_NAME["score_scale"]
    new = dataclasses.replace(old, values={**old.values, "float16": "divide by the float16 sqrt(d_k)"})
    table.SWITCHES = tuple(new if s is old else s for s in table.SWITCHES)
    table.BY_NAME = {s.name: s for s in table.SWITCHES}

import pldr_ref
from pldr_ref import attention, config
from pldr_ref.backends.numpy32 import Numpy32Backend
from pldr_ref.exact import forward as exact_forward
from pldr_ref.exact.arb.model import ARB_SWITCH_VALUES
from pldr_ref.fixtures.suite import build_suite
from pldr_ref.fixtures.suite_switches import TABLE_TAG
from pldr_ref.harness.protocol import unsupported_reason
from pldr_ref.harness.controls.switch_mutants import table_mutations
from pldr_ref.params import init_params


def outcome(fn):
    try:
        fn()
        return "ok"
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


out = {"config": outcome(lambda: config.PLDRConfig.preset("tiny", score_scale="float16")),
       "bogus": outcome(lambda: config.PLDRConfig.preset("tiny", score_scale="bogus")),
       "choices": list(config.SCORE_SCALES), "float64_values": list(attention.SCORE_SCALES)}
if patch:
    cfg = config.PLDRConfig.preset("tiny", score_scale="float16")
    params = init_params(cfg, seed=0)
    ids = np.array([[1, 2, 3]])
    out["float64"] = outcome(lambda: pldr_ref.forward(params, ids))
    out["mpmath"] = outcome(lambda: exact_forward(params, ids, guard=False, dps=20))
    out["arb"] = outcome(lambda: exact_forward(params, ids, engine="arb"))
    out["arb_pinned"] = ARB_SWITCH_VALUES["score_scale"]
    case = type("Case", (), {"kind": "forward", "config": cfg, "inputs": {}, "args": {}})()
    out["numpy32"] = unsupported_reason(Numpy32Backend(), case, "float32")
out["cases"] = [(c.name, c.tier) for c in build_suite("default") if TABLE_TAG in c.tags]
out["mutants"] = [(m.switch, m.wrong, m.case) for m in table_mutations("default")]
print(json.dumps(out))
"""


def _propagate(mode: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    res = subprocess.run([sys.executable, "-c", _PROPAGATION, mode, str(ROOT / "pldr_ref" / "switches.py")],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_an_extra_table_value_propagates_and_is_accepted_or_refused_consistently() -> None:
    got = _propagate("patch")
    assert got["config"] == "ok"  # a config may name it ...
    assert got["choices"] == ["exact", "float32", "reciprocal", "float16"]
    assert "('exact', 'float32', 'reciprocal', 'float16')" in got["bogus"]
    # ... and every engine that does not implement it refuses it by name, listing what it implements
    assert got["float64_values"] == ["exact", "float32", "reciprocal"]
    assert got["float64"].startswith("ValueError: score_scale must be one of ('exact', 'float32', 'reciprocal'), "
                                     "got 'float16'"), got["float64"]
    assert got["mpmath"].startswith("NotImplementedError: the mpmath engine does not evaluate score_scale='float16'")
    assert got["arb"].startswith("NotImplementedError") and "score_scale" in got["arb"]
    assert got["arb_pinned"] == "exact"
    assert got["numpy32"] == "score_scale='float16' not supported (declared: exact)"
    # the fixtures and the harness pick it up: a generated float64-tier case and its mutant
    plain = _propagate("plain")
    assert [c for c in got["cases"] if c not in plain["cases"]] == [["model/switch_score_scale_float16", "float64"]]
    assert [m for m in got["mutants"] if m not in plain["mutants"]] == [
        ["score_scale", "exact", "switch_score_scale_float16"]]


def test_without_the_extra_value_the_same_probe_is_refused() -> None:
    got = _propagate("plain")  # negative control of the test above
    assert got["config"].startswith("ValueError: PLDRConfig.score_scale='float16' is not one of ('exact', "
                                    "'float32', 'reciprocal')")
    assert got["choices"] == got["float64_values"] == ["exact", "float32", "reciprocal"]


# ----------------------------------------------------------------------------- no literal value lists
#: Literal collections that equal a switch's value set by coincidence, each with the reason.
NOT_SWITCH_LISTS = {
    ("pldr_ref/harness/controls/engine_mutants.py", "('float64', 'float32')"): "the compute dtypes a mutant runs in",
}


def literal_value_lists(source: str, path: str = "<source>") -> list[str]:
    """Every place in ``source`` that spells a switch's value list (or its values without ``auto``) or a list of
    three or more switch names literally: a tuple / list / set of string constants, or a string (an error
    message) holding the repr of such a tuple."""
    lists = {}
    for s in SWITCHES:
        lists.setdefault(frozenset(s.choices), s.name)
        lists.setdefault(frozenset(s.concrete), s.name)
    reprs = {repr(tuple(vals)): s.name for s in SWITCHES for vals in (s.choices, s.concrete)}
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and node.elts and all(
                isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
            values = frozenset(e.value for e in node.elts)
            text = ast.unparse(node)
            if (path, text) in NOT_SWITCH_LISTS:
                continue
            if len(values) >= 2 and values in lists:
                found.append(f"{path}:{node.lineno}: {text} is {lists[values]}'s value list")
            elif len(values) >= 3 and values <= set(BY_NAME):
                found.append(f"{path}:{node.lineno}: {text} lists switch names")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            found += [f"{path}:{node.lineno}: a string spells {name}'s values {r}" for r, name in reprs.items()
                      if r in node.value]
    return found


def test_no_module_spells_a_switch_value_list_literally() -> None:
    found = []
    for folder in ("pldr_ref", "proofs_check"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel != "pldr_ref/switches.py":
                found += literal_value_lists(path.read_text(encoding="utf-8"), rel)
    assert not found, "\n".join(found)


def test_literal_scan_catches_a_spelled_list() -> None:
    """Negative control: the scan flags the patterns the table replaced, and not their derived forms."""
    spelled = ('MODES = ("ideal", "additive", "finfo_min")\n'
               'def f(layout):\n'
               '    raise ValueError(f"rope layout must be one of (\'interleaved\', \'half\'), got {layout!r}")\n'
               'SW = ("score_scale", "masked_row", "pad_source")\n'
               'TABLES = ["exact", "float32", "keras-0.6.4", "explicit"]\n')
    found = literal_value_lists(spelled)
    assert len(found) == 4, found
    derived = 'MODES = switch("mask_mode").choices\nraise switch("rope_layout").error(layout)\n'
    assert literal_value_lists(derived) == []


def test_table_meanings_are_one_line_each() -> None:
    for s in SWITCHES:
        for text in (s.meaning, *s.values.values()):
            assert text and "\n" not in text and len(text) < 120, (s.name, text)
        assert AUTO not in s.values or s.group == "emulation"
    assert set(ENGINES) == {"float64", "mpmath", "arb", "torch", "numpy32", "jax", "onnx", "triton"}
    assert isinstance(SWITCHES[0], Switch) and pldr_ref.PLDRConfig is PLDRConfig


# ----------------------------------------------------------------------------- docs/adding_a_switch.md
DOC = ROOT / "docs" / "adding_a_switch.md"
TABLE_BEGIN, TABLE_END = "<!-- switch-table:begin -->\n", "<!-- switch-table:end -->"


def doc_problems(text: str) -> list[str]:
    """Repository paths the page names that do not exist, names it gives to the table's API that it lacks, and a
    table section that is not the table's Markdown."""
    import re

    from pldr_ref import switches as table_module

    problems = [f"missing path {p}" for p in sorted(set(re.findall(r"`((?:pldr_ref|tests|docs)/[\w./-]+)`", text)))
                if not (ROOT / p.split("::")[0]).exists()]
    problems += [f"pldr_ref.switches has no {n}" for n in ("SWITCHES", "declared_switches", "pinned_values",
                                                             "require_engine_support", "markdown")
                 if f"`{n}" in text and not hasattr(table_module, n)]
    start, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if start < 0 or end < start or text[start + len(TABLE_BEGIN):end] != table_module.markdown():
        problems.append("the table section is not pldr_ref.switches.markdown()")
    return problems


def test_adding_a_switch_doc_is_honest() -> None:
    text = DOC.read_text(encoding="utf-8")
    assert doc_problems(text) == []
    from pldr_ref.fixtures import suite_switches
    from pldr_ref.harness.controls import switch_mutants

    assert callable(suite_switches.table_cases) and callable(switch_mutants.table_mutations)
    # the steps name every file a new switch needs on this branch, in order
    steps = [text.find(f"`{p}`") for p in ("pldr_ref/switches.py", "pldr_ref/config.py", "docs/equations.md")]
    assert -1 not in steps and steps == sorted(steps)


def test_doc_check_catches_a_stale_doc() -> None:
    """Negative control: a path that does not exist and a table row that no longer matches are reported."""
    text = DOC.read_text(encoding="utf-8")
    stale = text.replace("`pldr_ref/harness/controls/switch_mutants.py`", "`pldr_ref/harness/switch_mutant.py`", 1)
    stale = stale.replace("forced to 1/T", "forced to 1/S", 1)
    problems = doc_problems(stale)
    assert "missing path pldr_ref/harness/switch_mutant.py" in problems
    assert "the table section is not pldr_ref.switches.markdown()" in problems


# ----------------------------------------------------------------------------- generated docs
def test_generated_switch_docs_are_fresh() -> None:
    """Every doc that embeds the table holds the current table (``python -m pldr_ref.switch_docs --write``)."""
    from pldr_ref import switch_docs

    assert switch_docs.stale() == []
    assert switch_docs.main(["--check"]) == 0


def test_switch_docs_catch_a_stale_or_missing_section(tmp_path) -> None:
    """Negative control: a hand-edited row is stale until regenerated; a doc without the markers is named."""
    from pldr_ref import switch_docs

    for rel in switch_docs.DOCS:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        text = (ROOT / rel).read_text(encoding="utf-8")
        (tmp_path / rel).write_text(text.replace("forced to 1/T", "forced to 1/S", 1), encoding="utf-8")
    assert switch_docs.stale(tmp_path) == list(switch_docs.DOCS)
    assert switch_docs.main(["--check", "--root", str(tmp_path)]) == 1
    assert switch_docs.write(tmp_path) == list(switch_docs.DOCS) and switch_docs.stale(tmp_path) == []
    with pytest.raises(ValueError, match=r"docs/equations\.md: no <!-- switch-table:begin -->"):
        switch_docs.render("no section", "docs/equations.md")
