"""proofs_check: numerical mirrors of the Lean-checked lemmas of PLDR-LLM and of the paper's proved results
that Lean does not cover, run on the real ``pldr_ref`` operators (``pldr-ref prove``)."""

from proofs_check.catalog import LEAN_NAMES
from proofs_check.registry import Check, Outcome, all_checks, run_check

__all__ = ["LEAN_NAMES", "Check", "Outcome", "all_checks", "run_check"]
