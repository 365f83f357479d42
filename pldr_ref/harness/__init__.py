"""Backend validation harness: run a backend on the golden fixtures, compare every tensor,
judge it with a per-precision tolerance policy and localize the first failing stage.

Modules: :mod:`~pldr_ref.harness.protocol` (what a backend is, ``load_backend``),
:mod:`~pldr_ref.harness.verdict.compare` (per-tensor error statistics and ULP distances),
:mod:`~pldr_ref.harness.policy.tolerance` (the pass/fail policy, ``docs/tolerances.md``),
:mod:`~pldr_ref.harness.verdict.localize` (stage isolation from golden upstream values),
:mod:`~pldr_ref.harness.policy.stage_reference` (one float64 reference stage, for isolated baselines),
:mod:`~pldr_ref.harness.validate` (verdict per case and dtype), :mod:`~pldr_ref.harness.report`
(terminal table, JSON report, JUnit XML), :mod:`~pldr_ref.harness.cli` (``pldr-ref validate``),
:mod:`~pldr_ref.harness.pytest_plugin` (``pytest --pldr-backend MODULE:ATTR``),
:mod:`~pldr_ref.harness.controls.mutants` (deliberately broken torch backends, ``docs/mutations.md``) and
:mod:`~pldr_ref.harness.tools.margins` (how much of each tolerance a backend uses).
A backend author's guide is ``docs/backends.md``.
"""
