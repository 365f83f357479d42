"""Issue 32 item 5: the golden op cases come from the ops' own declarations in :mod:`pldr_ref.op_samples`.

Each registry op of the ``op`` category declares its golden cases (:data:`pldr_ref.op_samples.GOLDEN`) next to its
engine samples; the suite turns them into ``golden/op/*`` (:func:`pldr_ref.fixtures.suite.op_case`).  The committed
inputs and case.json fields equal what those declarations give (``tests/test_fixtures_committed.py``,
``test_every_committed_case_matches_its_spec``); here: every op has its declaration, nothing else declares op cases,
and the declarations use the suite's own models.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping

from pldr_ref import op_samples, registry
from pldr_ref.fixtures import suite, suite_base, suite_kernels
from pldr_ref.fixtures.case import DEFAULT_GOLDEN_DIR


def declaration_problems(ops: Iterable[registry.Op], golden: Mapping[str, tuple[op_samples.GoldenSample, ...]]
                         ) -> list[str]:
    """Ops of the ``op`` category without golden samples, and golden samples of no such op."""
    names = {op.name for op in ops if op.category == "op"}
    return ([f"{n}: no golden sample" for n in sorted(names - set(golden)) + sorted(n for n in golden if not golden[n])]
            + [f"{n}: golden samples of no registry op" for n in sorted(set(golden) - names)])


def undeclared_op_cases(committed: Iterable[str], declared: Iterable[str]) -> list[str]:
    """Committed ``op/*`` cases that no declaration gives, and declared ones not committed."""
    have = {n for n in committed if n.startswith("op/")}
    want = set(declared)
    return [f"{n}: committed, not declared" for n in sorted(have - want)] + [
        f"{n}: declared, not committed" for n in sorted(want - have)]


def _declared_names() -> list[str]:
    golden = [f"op/{g.name}" for cases in op_samples.GOLDEN.values() for g in cases]
    kernels = [c.name for c in suite_kernels.kernel_cases() if c.group == "op"]
    return golden + kernels


def test_every_op_declares_its_golden_samples():
    assert declaration_problems(registry.OPS, op_samples.GOLDEN) == []


def test_the_declaration_check_flags_a_missing_and_a_stray_op():
    """Negative control: an op without golden samples and golden samples of an unknown op are reported."""
    golden = dict(op_samples.GOLDEN)
    del golden["linear"]
    golden["no_such_op"] = op_samples.LINEAR_GOLDEN
    assert declaration_problems(registry.OPS, golden) == ["linear: no golden sample",
                                                          "no_such_op: golden samples of no registry op"]


def test_the_committed_op_cases_are_the_declared_ones():
    committed = json.loads((DEFAULT_GOLDEN_DIR / "MANIFEST.json").read_text(encoding="utf-8"))["cases"]
    declared = _declared_names()
    assert len(declared) == len(set(declared))
    assert undeclared_op_cases(committed, declared) == []
    assert [c.name for c in suite._op_cases()] == [f"op/{g.name}" for gs in op_samples.GOLDEN.values() for g in gs]


def test_the_op_case_check_flags_a_dropped_declaration():
    """Negative control: a committed op case whose declaration is gone, and a declaration never built."""
    committed = json.loads((DEFAULT_GOLDEN_DIR / "MANIFEST.json").read_text(encoding="utf-8"))["cases"]
    declared = [n for n in _declared_names() if n != "op/glu"] + ["op/glu_new"]
    assert undeclared_op_cases(committed, declared) == ["op/glu: committed, not declared",
                                                        "op/glu_new: declared, not committed"]


def test_the_golden_samples_use_the_suite_models():
    assert op_samples.GOLDEN_TINY == suite_base.TINY
    assert op_samples.GOLDEN_TINY_V900 == suite_base.TINY_V900
    configs = {g.config for gs in op_samples.GOLDEN.values() for g in gs if g.config is not None}
    assert configs == {suite_base.TINY, suite_base.TINY_V900}


def test_an_op_case_draws_from_its_own_streams():
    """The case op/<name> reads the streams "op/<name>:<tensor>": the same sample under another name draws other
    values (so two cases never share inputs by accident)."""
    golden = op_samples.LINEAR_GOLDEN[0]
    here = suite.op_case("linear", golden).inputs()
    moved = suite.op_case("linear", dataclasses.replace(golden, name="linear_moved")).inputs()
    assert here["x"].tobytes() == suite_base.draw_uniform("op/linear", "x", (2, 3, 5)).tobytes()
    assert here["x"].tobytes() != moved["x"].tobytes()
