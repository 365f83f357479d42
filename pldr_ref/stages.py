"""The ordered list of forward-map stages: each equation, its function, the trace entries it produces and
its paper / Lean reference -- derived from the one registry :mod:`pldr_ref.registry` (this module keeps the
public names other code imports).

Used by ``docs/equations.md``, by the fixture-coverage test (every stage must have a
golden case) and by the validation harness (stage localisation walks this order).
"""

from __future__ import annotations

from pldr_ref.registry import FORWARD_STAGES, OP_FUNCTIONS, STRUCTURE_STAGES, Stage

__all__ = ["FORWARD_STAGES", "OP_FUNCTIONS", "STRUCTURE_STAGES", "Stage", "stage_of_output"]


def stage_of_output(trace_name: str) -> Stage:
    """The stage producing trace entry ``trace_name`` (``layers.{l}.X`` or a top-level name)."""
    leaf = trace_name.rsplit(".", 1)[-1]
    for stage in FORWARD_STAGES:
        if leaf in stage.outputs:
            return stage
    if leaf == "x":
        return next(s for s in FORWARD_STAGES if s.name == "input_norm")
    raise KeyError(f"no stage produces trace entry {trace_name!r}")
