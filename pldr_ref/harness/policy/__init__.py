"""The pass/fail policy (``docs/tolerances.md``): the tolerances, the calibration ensemble and its
emulated low-precision arithmetic, the committed calibration store and its writer.

Imports neither :mod:`pldr_ref.harness.controls` nor :mod:`pldr_ref.harness.tools`
(``tests/test_harness_layout.py``).
"""
