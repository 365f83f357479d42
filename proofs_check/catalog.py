"""The 79 Lean theorem names of PLDR-LLM-Math-Foundations, grouped by Lean file.

``LEAN_NAMES`` is a committed copy kept in code;
:func:`parse_catalog` reads the same list out of the bundled ``pldr_ref/resources/lean_catalog.md`` (section 2,
``### File.lean`` headings and ``- **name**`` bullets) and a test checks both agree.
"""

from __future__ import annotations

import re
from pathlib import Path

#: Lean file -> theorem/lemma names, in catalog order (commit 78ba3fb0 of the Lean repository).
LEAN_FILES: dict[str, tuple[str, ...]] = {
    "Iswiglu": (
        "sigmoid_pos", "sigmoid_lt_one", "iswiglu_nonneg", "iswiglu_pos", "metric_entry_ge", "metric_entry_pos",
    ),
    "Softmax": (
        "softmax_denom_pos", "softmax_pos", "softmax_sum_one", "softmax_shift", "softmax_avg_le",
        "softmax_eq_iff_shift", "maskedSoftmax_denom_pos", "maskedSoftmax_nonneg", "maskedSoftmax_pos",
        "maskedSoftmax_eq_zero", "maskedSoftmax_sum_one", "maskedSoftmax_shift", "maskedSoftmax_eq_iff_shift",
    ),
    "DensityOperator": (
        "density_isSymm", "density_posSemidef", "density_quadratic_nonneg", "density_rank", "density_rank_le",
    ),
    "HadamardPower": ("hadPow_apply", "hadPow_zero", "hadPow_add"),
    "RankOne": (
        "rowClone_apply", "rowClone_rank_le_one", "rowClone_eq_zero_iff", "rowClone_rank_eq_one",
        "rowClone_det_eq_zero", "rowClone_mulVec_one", "rowClone_mul_self", "rowClone_pow", "rowClone_sq_eq_zero",
    ),
    "LayerNorm": (
        "rowVar_nonneg", "rowMean_shift", "rowVar_shift", "rowMean_smul", "rowVar_smul", "lnEps_shift",
        "lnEps_scale_eps_zero", "sum_sq_normalized",
    ),
    "Rope": (
        "rot_zero", "rot_mul", "rot_transpose", "rot_orthogonal", "smul_one_add_smul_rotJ_commute",
        "commute_rot_iff", "relative_position_of_commute",
    ),
    "TwirlBound": ("norm_one_sub_exp", "geom_orbit_bound"),
    "DagLoss": (
        "pow_entry_nonneg", "trace_pow_nonneg", "trace_exp_ge_card", "trace_exp_ge_card_add_trace",
        "trace_exp_ge_of_diag_bound",
    ),
    "Contraction": ("diam_comp_le", "diam_iterate_le"),
    "InferenceCollapse": (
        "score_sdpa_special_case", "absorb_operator", "absorb_operator_affine", "cache_sufficiency_scores",
        "cache_sufficiency_rows",
    ),
    "OnlineContract": (
        "online_causal", "prefixConsistentShaped_getElem", "constNil_prefixConsistent",
        "constNil_not_prefixConsistentShaped", "prefixConsistent_of_rowLocal", "prefixConsistentShaped_of_rowLocal",
        "rowMapDecoder_rowLocal", "rowMapDecoder_lengthPreserving", "rowMapDecoder_prefixConsistent",
        "rowMapDecoder_prefixConsistentShaped", "rowMapDecoder_block_eq_online", "globalSumDecoder_lengthPreserving",
        "globalSumDecoder_not_prefixConsistent", "globalSumDecoder_not_prefixConsistentShaped",
    ),
}

#: Every Lean name, in catalog order (79).
LEAN_NAMES: tuple[str, ...] = tuple(name for names in LEAN_FILES.values() for name in names)

#: Lean name -> Lean file stem.
LEAN_FILE_OF: dict[str, str] = {name: f for f, names in LEAN_FILES.items() for name in names}

_FILE_HEADING = re.compile(r"^### (\w+)\.lean")
_NAME_BULLET = re.compile(r"^- \*\*(\w+)\*\*")


def default_catalog_path() -> Path:
    """The bundled catalog (:func:`pldr_ref.resources.lean_catalog_path`)."""
    from pldr_ref.resources import lean_catalog_path

    return lean_catalog_path()


def parse_catalog(path: str | Path | None = None) -> dict[str, tuple[str, ...]]:
    """Lean file -> names, parsed from section 2 ("Per-file catalog") of the catalog markdown.

    Raises ``FileNotFoundError`` naming the path when the catalog is absent.
    """
    p = Path(path) if path is not None else default_catalog_path()
    if not p.is_file():
        raise FileNotFoundError(f"Lean catalog not found at {p}")
    text = p.read_text(encoding="utf-8")
    if "## 2. Per-file catalog" not in text:
        raise ValueError(f"{p} has no '## 2. Per-file catalog' section")
    section = text.split("## 2. Per-file catalog", 1)[1].split("\n## 3.", 1)[0]
    files: dict[str, list[str]] = {}
    current = None
    for line in section.splitlines():
        heading = _FILE_HEADING.match(line)
        if heading:
            current = heading.group(1)
            files[current] = []
            continue
        bullet = _NAME_BULLET.match(line)
        if bullet and current is not None:
            files[current].append(bullet.group(1))
    return {k: tuple(v) for k, v in files.items()}


#: Lean name -> its hypotheses as stated in the Lean source (catalog section 2), in order; () when none.
#: A negative control "drops a hypothesis" only when its ``dropped`` text is one of these strings.
LEAN_HYPOTHESES: dict[str, tuple[str, ...]] = {
    "sigmoid_pos": (), "sigmoid_lt_one": (), "iswiglu_nonneg": (), "iswiglu_pos": ("u != 0",),
    "metric_entry_ge": (), "metric_entry_pos": ("eps > 0",),
    "softmax_denom_pos": ("n >= 1",), "softmax_pos": ("n >= 1",), "softmax_sum_one": ("n >= 1",),
    "softmax_shift": ("n >= 1",), "softmax_avg_le": ("n >= 1", "v_i <= M for all i"),
    "softmax_eq_iff_shift": ("n >= 1",), "maskedSoftmax_denom_pos": ("J nonempty",),
    "maskedSoftmax_nonneg": ("J nonempty",), "maskedSoftmax_pos": ("J nonempty", "i in J"),
    "maskedSoftmax_eq_zero": ("i not in J",), "maskedSoftmax_sum_one": ("J nonempty",), "maskedSoftmax_shift": (),
    "maskedSoftmax_eq_iff_shift": ("J nonempty",),
    "density_isSymm": (), "density_posSemidef": (), "density_quadratic_nonneg": (), "density_rank": (),
    "density_rank_le": (),
    "hadPow_apply": (), "hadPow_zero": (), "hadPow_add": ("A_ij > 0 for all i, j",),
    "rowClone_apply": (), "rowClone_rank_le_one": (), "rowClone_eq_zero_iff": (),
    "rowClone_rank_eq_one": ("alpha != 0",), "rowClone_det_eq_zero": ("d >= 2",), "rowClone_mulVec_one": (),
    "rowClone_mul_self": (), "rowClone_pow": (), "rowClone_sq_eq_zero": ("sum alpha = 0",),
    "rowVar_nonneg": (), "rowMean_shift": ("d >= 1",), "rowVar_shift": ("d >= 1",), "rowMean_smul": ("d >= 1",),
    "rowVar_smul": ("d >= 1",), "lnEps_shift": ("d >= 1",),
    "lnEps_scale_eps_zero": ("d >= 1", "c > 0", "rowVar r > 0"), "sum_sq_normalized": ("d >= 1", "eps > 0"),
    "rot_zero": (), "rot_mul": (), "rot_transpose": (), "rot_orthogonal": (), "smul_one_add_smul_rotJ_commute": (),
    "commute_rot_iff": ("sin theta != 0",), "relative_position_of_commute": ("G rot t = rot t G for all t",),
    "norm_one_sub_exp": (), "geom_orbit_bound": ("sin(w/2) != 0",),
    "pow_entry_nonneg": ("N >= 0",), "trace_pow_nonneg": ("N >= 0",), "trace_exp_ge_card": ("N >= 0",),
    "trace_exp_ge_card_add_trace": ("N >= 0",), "trace_exp_ge_of_diag_bound": ("N >= 0", "N_ii >= eps for all i"),
    "diam_comp_le": ("f is K_f-Lipschitz", "g is K_g-Lipschitz"), "diam_iterate_le": ("f is K-Lipschitz",),
    "score_sdpa_special_case": (), "absorb_operator": (), "absorb_operator_affine": (),
    "cache_sufficiency_scores": ("G = G_c",), "cache_sufficiency_rows": ("G = G_c",),
    "online_causal": ("x.take t = y.take t",),
    "prefixConsistentShaped_getElem": ("PrefixConsistentShaped F", "r < |x|"),
    "constNil_prefixConsistent": (), "constNil_not_prefixConsistentShaped": (),
    "prefixConsistent_of_rowLocal": ("RowLocal F",),
    "prefixConsistentShaped_of_rowLocal": ("LengthPreserving F", "RowLocal F"), "rowMapDecoder_rowLocal": (),
    "rowMapDecoder_lengthPreserving": (), "rowMapDecoder_prefixConsistent": (),
    "rowMapDecoder_prefixConsistentShaped": (), "rowMapDecoder_block_eq_online": ("r < |x|",),
    "globalSumDecoder_lengthPreserving": (), "globalSumDecoder_not_prefixConsistent": (),
    "globalSumDecoder_not_prefixConsistentShaped": (),
}

#: Lean hypotheses whose removal cannot falsify the conclusion (Lean's total functions or an empty index set make
#: it vacuous): the check's control is then a labelled mutation control, and the reason is printed in the table.
REDUNDANT_HYPOTHESES: dict[str, str] = {
    "softmax_pos": "n >= 1: with n = 0 there is no index i, the conclusion is vacuous",
    "softmax_shift": "n >= 1: with n = 0 both sides are the empty vector",
    "softmax_eq_iff_shift": "n >= 1: with n = 0 both sides of the iff hold",
    "maskedSoftmax_nonneg": "J nonempty: an empty J gives the zero row (Lean x/0 = 0; pldr_ref the same), still >= 0",
    "maskedSoftmax_eq_iff_shift": "J nonempty: with J empty both rows are zero and the shift condition is vacuous",
    "rowVar_shift": "d >= 1: at d = 0 Lean's rowVar is 0/0 = 0 on both sides",
    "rowMean_smul": "d >= 1: at d = 0 Lean's rowMean is 0 = c 0",
    "rowVar_smul": "d >= 1: at d = 0 Lean's rowVar is 0 = c^2 0",
    "lnEps_shift": "d >= 1: at d = 0 both sides are the empty vector",
}
