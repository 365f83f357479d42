"""The float64 reference itself as a backend (``pldr_ref.backends.reference:ReferenceBackend``).

It runs every case kind with the same public functions that produced the golden values
(:mod:`pldr_ref.fixtures.runners`) and every stage with
:func:`pldr_ref.harness.policy.stage_reference.reference_stage`.  It is the smallest complete example of
the backend protocol and the harness's own control: in float64 it must pass every case.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from pldr_ref.harness.policy.stage_reference import reference_stage
from pldr_ref.harness.protocol import Capabilities, StageRequest, Unsupported
from pldr_ref.registry import ALL_STAGES
from pldr_ref.switches import declared_switches


class ReferenceBackend:
    """float64 NumPy reference; declares float64 only, every kind, every stage, both caches."""

    name = "reference"

    def capabilities(self) -> Capabilities:
        from pldr_ref.fixtures.runners import RUNNERS

        return Capabilities(dtypes=("float64",), kinds=tuple(sorted(RUNNERS)),
                            stages=tuple(s.name for s in ALL_STAGES), caches=("kv", "g"), position_ids=True,
                            switches=declared_switches("float64"))

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        if dtype != "float64":
            raise Unsupported(f"the reference backend computes in float64 only, not {dtype}")
        from pldr_ref.fixtures.runners import run_kind

        return run_kind(case.kind, case.config, case.params, case.args, case.inputs)

    def run_stage(self, request: StageRequest) -> dict[str, np.ndarray]:
        return reference_stage(request.stage, request.layer, request.config, request.params, request.inputs)
