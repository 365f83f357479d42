"""Issue 32 item 1: the layer's data flow is declared once, in the registry (``pldr_ref.registry.Output``,
``DEPTH_LOOP``), and the harness modules that used to keep a hand-written copy of it derive their tables from it:
none of them spells a trace name."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pldr_ref import registry
from pldr_ref.config import PLDRConfig
from pldr_ref.harness import validate
from pldr_ref.harness.verdict import localize, representable, unresolved_upstream
from pldr_ref.registry import GRAM, ROW, ROWS_OWN, CacheUse, Output, Stage, check_declared

ROOT = Path(__file__).resolve().parents[1]
#: The harness modules whose tables derive from the registry's data-flow facts.
DERIVED = ("verdict.localize", "verdict.representable", "verdict.unresolved_upstream", "validate")


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring nodes of a module and of its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def trace_name_literals(source: str, names: frozenset[str] = registry.TRACE_NAMES) -> list[tuple[int, str]]:
    """(line, name) of every trace name spelled in a string literal of ``source``: each string constant (f-string
    parts and regular expressions included) that is not a docstring and holds no whitespace (prose messages are
    not names) is split at non-word characters, and a piece that is one of ``names`` is reported."""
    tree = ast.parse(source)
    skip = _docstrings(tree)
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            if re.search(r"\s", node.value):
                continue
            hits += [(node.lineno, piece) for piece in re.split(r"\W+", node.value) if piece in names]
    return hits


@pytest.mark.parametrize("module", DERIVED)
def test_the_harness_modules_spell_no_trace_name(module):
    path = ROOT / "pldr_ref" / "harness" / f"{module.replace('.', '/')}.py"
    assert trace_name_literals(path.read_text(encoding="utf-8")) == [], module


def test_the_grep_flags_a_hand_written_table():
    """Negative control: the tables these modules used to hold are flagged, docstrings and prose are not."""
    src = ('"""The layer reads x and writes E."""\n'
           'KEY_AXIS_OUTPUTS = ("k_rot", "v")\n'
           'def f(n):\n'
           '    """Returns out2."""\n'
           '    raise ValueError(f"no E in {n}")\n'
           '    return f"layers.{n}.out2", r"^(?P<leaf>embed|x0|logits)$"\n')
    assert sorted(trace_name_literals(src)) == [(2, "k_rot"), (2, "v"), (6, "embed"), (6, "logits"), (6, "out2"),
                                                (6, "x0")]
    assert {"x", "E", "A_P", "G_LM", "scores", "logits", "new_logits"} <= registry.TRACE_NAMES


def test_the_derived_tables_are_the_former_hand_written_ones():
    """What the modules held by hand before issue 32, now derived (verdicts unchanged)."""
    assert localize.FROZEN_BY == {"frozen_A": ("density_operator", "metric_learner"),
                                  "frozen_G_LM": ("metric_tensor", "potential_tensor", "energy_curvature")}
    assert set(localize.KEY_AXIS_OUTPUTS) == {"k_rot", "v"}
    assert unresolved_upstream.CACHE_ENTRIES == {
        "kv_cache": {"k_rot": ("k_rot", "extended"), "v": ("v", "extended"), "gram": ("A0", "extended"),
                     "A": ("A", "frozen")},
        "g_cache": {"A_LM": ("A_LM", "frozen"), "A_P": ("A_P", "frozen"), "G_LM": ("G_LM", "frozen")}}
    assert unresolved_upstream.GRAM_CHAIN == ("A0", "A", "A_LM", "A_P", "G_LM")
    assert unresolved_upstream.SOURCE_LEAVES == ("E",)
    layout = {o.name: o.layout for o in registry.LAYER_FLOW if o.name not in _OFF_BY_DEFAULT}
    assert {n for n, v in layout.items() if v == ROW} == {"x", "ctx", "attn_out", "out1", "ffn_out", "out2"}
    assert {n for n, v in layout.items() if v == GRAM} == {"A0", "A", "A_LM", "A_P", "G_LM"}
    assert tuple(n for n in registry.MODEL_OUTPUTS_BEFORE if n not in _OFF_BY_DEFAULT) == ("embed", "x0")
    assert tuple(n for n in registry.MODEL_OUTPUTS_AFTER if n not in _OFF_BY_DEFAULT) == ("logits", "new_logits")


#: The outputs (and their other names) of the stages a config at every switch default does not run: the former
#: tables spoke of the others, and an optional stage added later (off at its default) extends the derived tables
#: without an edit here.
_OFF_BY_DEFAULT = frozenset(
    name for st in registry.FORWARD_STAGES if not st.enabled(PLDRConfig.preset("tiny")) for o in st.outputs
    for name in (getattr(o, "name", o), *getattr(o, "aliases", ())))


def test_trace_sort_key_orders_a_cached_trace():
    names = ["g_cache.layers.0.G_LM", "kv_cache.layers.0.v", "steps.1.logits", "steps.0.new_logits",
             "steps.0.logits", "steps.0.layers.0.E", "prefill.logits", "prefill.layers.1.x", "prefill.layers.0.out2",
             "prefill.layers.0.q", "prefill.x0", "prefill.embed", "steps.0.embed", "prefill.zz"]
    assert sorted(names, key=validate.trace_sort_key) == [
        "prefill.embed", "prefill.x0", "prefill.layers.0.q", "prefill.layers.0.out2", "prefill.layers.1.x",
        "prefill.logits", "prefill.zz", "steps.0.embed", "steps.0.layers.0.E", "steps.0.logits",
        "steps.0.new_logits", "steps.1.logits", "kv_cache.layers.0.v", "g_cache.layers.0.G_LM"]


def test_an_undeclared_output_is_refused():
    """A numeric stage must declare its outputs' facts; a half-declared one, or a bad layout, is refused."""
    plain = Stage("plain", len, ("y",), "y = x", "none")
    with pytest.raises(TypeError, match="declare no Output"):
        check_declared((plain,))
    check_declared(registry.FORWARD_STAGES)  # the control: every registered stage declares them
    with pytest.raises(TypeError, match="every output"):
        Stage("half", len, (Output("y", ROW, ROWS_OWN), "z"), "y = x", "none")
    with pytest.raises(ValueError, match="layout"):
        Output("y", "rows", ROWS_OWN)
    with pytest.raises(ValueError, match="cache use"):
        CacheUse("kv_cache", "y", "kept")
    declared = Stage("declared", len, (Output("y", ROW, ROWS_OWN),), "y = x", "none")
    assert declared.outputs == ("y",) and declared.flow[0].layout == ROW


def test_representable_reads_the_layouts_and_rows_of_the_registry():
    """The keep mask of an output follows its declared layout: a row output keeps rows, a global Gram the sample."""
    import numpy as np

    taint = np.array([[False, True, False]])
    row = representable._keep_for("out2", taint, (1, 3, 4), "global")
    assert row.shape == (1, 3, 4) and row[0, :, 0].tolist() == [True, False, True]
    gram = representable._keep_for("G_LM", np.array([[True, True, True]]), (1, 2, 4, 4), "global")
    assert not gram.any()
    assert representable._keep_for("not_a_trace_name", taint, (1, 3, 4), "global") is None
