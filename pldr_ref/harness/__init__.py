"""Backend validation harness: run a backend on the golden fixtures, compare every tensor,
judge it with a per-precision tolerance policy and localize the first failing stage.

Modules: :mod:`~pldr_ref.harness.protocol` (what a backend is), :mod:`~pldr_ref.harness.compare`
(per-tensor error statistics), :mod:`~pldr_ref.harness.tolerance` (the pass/fail policy),
:mod:`~pldr_ref.harness.localize` (stage isolation), :mod:`~pldr_ref.harness.report`
(terminal table, JSON, JUnit XML), :mod:`~pldr_ref.harness.cli` (``pldr-ref validate``) and
:mod:`~pldr_ref.harness.pytest_plugin` (``pytest --pldr-backend MODULE:ATTR``).
"""
