"""Issue 29, causes 17-19: one API for every entry point that runs the model.

17. ``pldr_ref.exact.forward`` refuses a ``rope_table`` the config does not use, as the float64 tier does.
18. Every public entry point that runs the model takes forward's explicit inputs (``rope_table``,
    ``softmax_kernel``, ``attention_mask``, ``position_ids``, ``check_finite_values``): an HF-replay config goes
    through each and matches :func:`pldr_ref.forward`.
19. Names removed or re-meant (``HF_PAD_POSITION``, mode ``hf-generate``) keep their old meaning for one version
    with a ``DeprecationWarning`` that names what to use.
"""

from __future__ import annotations

import numpy as np
import pytest
from core_support import model_params, token_ids

import pldr_ref
from pldr_ref import PLDRConfig
from pldr_ref.exact import forward as exact_forward
from pldr_ref.rope import RopeTable

TINY = PLDRConfig.preset("tiny")


def _table(config: PLDRConfig, positions: int) -> RopeTable:
    """A RopeTable of the config's d_k, built here from the RoPE formula (not by the code under test)."""
    half = config.d_k // 2
    theta = np.arange(positions)[:, None] * config.rope_base ** (-2.0 * np.arange(half)[None, :] / config.d_k)
    return RopeTable(np.cos(theta), np.sin(theta))


# ----------------------------------------------------------------------------- cause 17
def test_exact_forward_refuses_a_rope_table_the_config_ignores() -> None:
    cfg = PLDRConfig.preset("tiny", num_layers=1)
    params = model_params(cfg, 3)
    ids = token_ids(cfg, 1, 3, 3)
    table = _table(cfg, cfg.max_seq_len)
    assert cfg.rope_table_source != "explicit"
    with pytest.raises(ValueError, match="RopeTable was given but the RoPE table source is"):
        pldr_ref.forward(params, ids, rope_table=table)  # the float64 tier's promise
    with pytest.raises(ValueError, match="RopeTable was given but the RoPE table source is"):
        exact_forward(params, ids, rope_table=table, guard=False, dps=20)
    with pytest.raises(ValueError, match="RopeTable was given"):
        exact_forward(params, ids, rope_table=table, engine="arb")
    # negative control: with rope_table="explicit" the same table is used, and the exact tier agrees with float64
    explicit = PLDRConfig.preset("tiny", num_layers=1, rope_table="explicit")
    p2 = model_params(explicit, 3)
    got = exact_forward(p2, ids, rope_table=table, guard=False, dps=20)["logits"]
    want = pldr_ref.forward(p2, ids, rope_table=table).logits
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="needs a RopeTable"):
        exact_forward(p2, ids, guard=False, dps=20)
    with pytest.raises(TypeError, match=r"must be a pldr_ref\.rope\.RopeTable"):
        exact_forward(p2, ids, rope_table=(table.cos, table.sin), guard=False, dps=20)
