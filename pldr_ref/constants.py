"""Named numerical constants of PLDR-LLM (spec ``equations.md`` §3).

Every constant the released implementations use is named here once, so that a
reader can see the exact value and a test can pin it.  Values are Python floats
(exact IEEE-754 binary64) unless noted.
"""

from __future__ import annotations

import numpy as np

#: LayerNorm epsilon of every LayerNorm in the model (input, post-attention,
#: post-FFN, the A0 norm, the residual-unit norms, v900 extra norms).
EPS_LN: float = 1e-6

#: epsilonAdj added after iSwiGLU so that A_LM is entrywise positive (paper eq. 3.4).
EPS_ADJ: float = 1e-9

#: Additive mask constant of the native TF / PyTorch implementations: scores + MASK_VALUE * M.
MASK_VALUE: float = -1e9

#: RoPE base (TF ``max_wavelength``, PT ``base``, HF ``rope_theta``).
ROPE_BASE: float = 10000.0

#: Logit value given to tokens removed by top-k / top-p filtering in native generate.
FILTERED_LOGIT: float = -1e10

#: Padding token id of the native masks and losses (spec §7.1, §9).
PAD_ID: int = 0

#: HF label value ignored by its cross-entropy.
HF_IGNORE_INDEX: int = -100

#: exp(x) is exactly +0.0 in float64 for every x <= EXP_ZERO_BELOW (exp(-746) ~ 0.42 * 2^-1075 rounds to 0).
#: The softmax skips exp for such entries: NumPy's SIMD exp falls back to a slow path for them.
EXP_ZERO_BELOW: float = -746.0

#: torch.finfo(float64).min, the HF eager mask value for a float64 model.
FINFO_MIN_F64: float = float(np.finfo(np.float64).min)
