"""How one case is judged below :func:`pldr_ref.harness.validate.validate`: the per-tensor comparison,
stage localization and isolation, the rows and outputs that are judged, the type check of returned
values.

Imports neither :mod:`pldr_ref.harness.controls` nor :mod:`pldr_ref.harness.tools`
(``tests/test_harness_layout.py``).
"""
