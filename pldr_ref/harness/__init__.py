"""Backend validation harness: run a backend on the golden fixtures, compare every tensor,
judge it with a per-precision tolerance policy and localize the first failing stage.

Split by job (``tests/test_harness_layout.py`` checks the import rules and the folder sizes):

* here, the public API: :mod:`~pldr_ref.harness.protocol` (what a backend is, ``load_backend``),
  :mod:`~pldr_ref.harness.validate` (verdict per case and dtype), :mod:`~pldr_ref.harness.report` (terminal table,
  JSON report, JUnit XML), :mod:`~pldr_ref.harness.cli` (``pldr-ref validate``),
  :mod:`~pldr_ref.harness.pytest_plugin` (``pytest --pldr-backend MODULE:ATTR``),
  :mod:`~pldr_ref.harness.suite_loading`, :mod:`~pldr_ref.harness.profile_suites` (generated suites),
  :mod:`~pldr_ref.harness.engine_process` and :mod:`~pldr_ref.harness.deadline` (time limits for any engine);
* :mod:`pldr_ref.harness.verdict`: how one case is judged below ``validate`` (per-tensor comparison, stage
  localization and isolation from golden upstream values, the rows and outputs that are judged);
* :mod:`pldr_ref.harness.policy`: the pass/fail policy (tolerances, the calibration ensemble and its emulated
  arithmetic, the calibration store, the float64 reference stage of isolated baselines);
* :mod:`pldr_ref.harness.controls`: the harness's own negative controls (torch, engine and switch mutants,
  ``docs/mutations.md``), the false-positive battery and the verdict power;
* :mod:`pldr_ref.harness.tools`: report and figure tools (``docs/engines.md``, margin figures, allowance margins).

Neither the API, the verdict nor the policy imports the controls or the tools.
A backend author's guide is ``docs/backends.md``.
"""
