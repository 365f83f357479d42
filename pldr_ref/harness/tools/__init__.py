"""Report and figure tools (``python -m pldr_ref.harness.tools.NAME``): ``docs/engines.md``, the margin
figures, the allowance margins a backend uses.
"""
