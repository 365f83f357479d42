"""pldr_ref.diagnostics: the paper's Appendix D diagnostics on any parameters (``pldr-ref diagnose``).

Analytic (no weights): :func:`twirl_table` (RoPE twirl multipliers, C_Theta).  Stored operators:
:func:`g_lm_report` (commutant residual, spectra, Perron-Frobenius, DAG loss of a G_LM [L, H, d_k, d_k]).
Models: :func:`make_run` then :func:`model_report` (spectra, order parameter, eps-LayerNorm scale error, twirl
energy, row-map contraction, cached vs recomputed decoding, perturbation budget proxy, DAG loss, online contract).
Reports: :func:`document`, :func:`write_json`, :func:`markdown`.  Definitions: docs/diagnostics.md.
"""

from pldr_ref.diagnostics.commutant import commutant_fraction, commutant_projection, commutant_residual, rope_eigenbasis
from pldr_ref.diagnostics.g_lm import g_lm_report, load_g_lm
from pldr_ref.diagnostics.model import SECTIONS, model_report
from pldr_ref.diagnostics.report import SCHEMA_VERSION, document, markdown, write_json
from pldr_ref.diagnostics.run import ModelOptions, ModelRun, make_run, random_prompts
from pldr_ref.diagnostics.spectra import RANK_RULE, numerical_rank
from pldr_ref.diagnostics.twirl import c_theta, difference_frequencies, twirl_multiplier, twirl_table

__all__ = [
    "RANK_RULE",
    "SCHEMA_VERSION",
    "SECTIONS",
    "ModelOptions",
    "ModelRun",
    "c_theta",
    "commutant_fraction",
    "commutant_projection",
    "commutant_residual",
    "difference_frequencies",
    "document",
    "g_lm_report",
    "load_g_lm",
    "make_run",
    "markdown",
    "model_report",
    "numerical_rank",
    "random_prompts",
    "rope_eigenbasis",
    "twirl_multiplier",
    "twirl_table",
    "write_json",
]
