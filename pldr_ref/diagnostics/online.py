"""Model section ``online``: the online-contract checks of paper §4.5 (the S = t generation contract).

On the first ``online_prompts`` prompts:

* historical rows after a suffix change: change the last token and compare the logits of every earlier row,
  max |diff| / max |logits| (0 under historical-row prefix consistency; > 0 for the global Gram, whose A0 sums
  every supplied row);
* repeatability: the same call twice, max |diff| (0: bitwise repeatable);
* padding at the Gram boundary: 4 appended right-padding tokens masked by an attention mask, for two padding
  contents (pad id, random tokens): change of the final real row (max |diff| and relative 2-norm); and
  strip-restores: each padded row stripped by its mask (``pldr_ref.inference.padding.stripped_logits``)
  and scored alone equals the unpadded call (max |diff|, 0 = bitwise);
* block vs sequential scoring on ``online_rows`` rows t (evenly spaced, the last row included): the blockwise
  row t against the final row of the prefix call on x_{0..t} (max |dlogit|) and the gap of the NLL summed over
  those rows, |sum block NLL - sum sequential NLL| / |sum sequential NLL|.
"""

from __future__ import annotations

import numpy as np

from pldr_ref.diagnostics.run import ModelRun, final_row_forward
from pldr_ref.inference.generation import log_softmax
from pldr_ref.inference.padding import append_right_padding, stripped_logits
from pldr_ref.model import forward

#: Number of appended padding tokens in the Gram-boundary check.
PAD_LENGTH = 4


def _nll(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """-log softmax(logits)[target] per row: logits [..., V], targets [...]."""
    return -np.take_along_axis(log_softmax(logits), targets[..., None], axis=-1)[..., 0]


def online_section(run: ModelRun) -> dict:
    """The four contract checks (see module doc) as JSON-ready numbers."""
    c = run.config
    ids = run.ids[: run.options.online_prompts]
    base = forward(run.params, ids).logits
    changed = ids.copy()
    changed[:, -1] = (changed[:, -1] % (c.vocab_size - 1)) + 1  # a different real token (never the pad id)
    hist = float(np.max(np.abs(forward(run.params, changed).logits[:, :-1] - base[:, :-1])))
    repeat = float(np.max(np.abs(forward(run.params, ids).logits - base)))
    rng = np.random.Generator(np.random.PCG64(run.options.seed))
    pads = {"pad_id": np.full(PAD_LENGTH, c.pad_id), "random_tokens": rng.integers(1, c.vocab_size, PAD_LENGTH)}
    padding = {}
    final = base[:, -1]
    for name, p in pads.items():
        padded, mask = append_right_padding(ids, p)
        row = forward(run.params, padded, attention_mask=mask).logits[:, ids.shape[1] - 1]
        diff = float(np.max(np.abs(row - final)))
        padding[name] = {"final_row_max_abs": diff,
                         "final_row_relative": 0.0 if diff == 0.0 else
                         float(np.linalg.norm(row - final) / np.linalg.norm(final))}
    # strip-restores: each padded row stripped by its attention mask and scored alone equals the unpadded call
    stripped = stripped_logits(run.params, padded, mask)
    padding["strip_restores_max_abs"] = float(max(np.max(np.abs(s - b)) for s, b in zip(stripped, base, strict=True)))
    # sequential: final row of the prefix call x_{0..t} for the checked rows t (one call per row: the definition)
    n_rows = ids.shape[1] - 1
    rows = np.unique(np.linspace(0, n_rows - 1, min(run.options.online_rows, n_rows)).round().astype(int))
    seq = np.stack([final_row_forward(run.params, ids[:, : t + 1])[0] for t in rows], axis=1)
    block = base[:, rows]
    targets = ids[:, rows + 1]
    nll_b, nll_s = _nll(block, targets).sum(), _nll(seq, targets).sum()
    return {
        "n_prompts": int(ids.shape[0]),
        "historical_rows_after_suffix_change": {"max_abs": hist, "relative": hist / float(np.max(np.abs(base)))},
        "repeatability_max_abs": repeat,
        "padding_at_gram_boundary": padding,
        "block_vs_sequential": {
            "rows": rows.tolist(),
            "max_abs_logit_gap": float(np.max(np.abs(block - seq))),
            "total_nll_block": float(nll_b),
            "total_nll_sequential": float(nll_s),
            "relative_total_gap": float(abs(nll_b - nll_s) / abs(nll_s)),
        },
    }
