"""Measured effect of every emulation switch and profile on the tiny preset (issue 12; docs/equations.md).

    PYTHONPATH=. python benchmarks/switch_effects.py [--seed 1]

Model: ``PLDRConfig.preset("tiny")`` (L 2, H 2, d_k 8), parameters ``perturb_params(init_params(cfg, seed),
seed + 100)``.  Inputs: A = one unpadded row of 8 tokens; B = a batch of 2 rows of 8 tokens whose first row has
2 left pads (token id 0 and attention mask 0).  Each line is max |logits(switch) - logits(default)| and that over
max |logits(default)| (normwise relative); NaN means the switch makes a sample NaN.  The default is every switch
at its default value; for a profile, the default switches with the profile's RoPE pairing and metric learner
(so that only the emulated numerics differ).  With torch installed it also counts torch's float32 RoPE table
entries that differ from the correctly rounded float32 table, measures torch's float32 softmax against the correctly
rounded one, and how far ``pt-v510-double`` moves without torch's own table (``rope_table="float32"`` instead).
"""

from __future__ import annotations

import argparse

import numpy as np

from pldr_ref import PLDRConfig, forward, init_params, perturb_params
from pldr_ref.config import EMULATIONS
from pldr_ref.params import Params
from pldr_ref.rope import RopeTable, rope_angles

SWITCHES: tuple[tuple[str, dict[str, object]], ...] = (
    ("rope_table=float32 (rope_arithmetic=float64)", {"rope_precision": "float32", "rope_table": "float32",
                                                      "rope_arithmetic": "float64"}),
    ("rope_table=keras-0.6.4", {"rope_table": "keras-0.6.4"}),
    ("rope_table=explicit (float32 table, 20% entries +1 ulp)", {"rope_table": "explicit"}),
    ("rope_arithmetic=float32 (float32 table)", {"rope_precision": "float32", "rope_table": "float32",
                                                  "rope_arithmetic": "float32"}),
    ("rope_arithmetic=float64_qk_f32 (float32 table)",
     {"rope_precision": "float32", "rope_table": "float32", "rope_arithmetic": "float64_qk_f32"}),
    ("score_scale=float32", {"score_scale": "float32"}),
    ("score_scale=reciprocal", {"score_scale": "reciprocal"}),
    ("mask_mode=additive", {"mask_mode": "additive"}),
    ("mask_mode=additive, mask_add_dtype=float32", {"mask_mode": "additive", "mask_add_dtype": "float32"}),
    ("softmax_precision=float32", {"softmax_precision": "float32"}),
    ("masked_row=zeros", {"masked_row": "zeros"}),
    ("masked_row=uniform", {"masked_row": "uniform"}),
    ("masked_row=nan", {"masked_row": "nan"}),
    ("pad_source=attention_mask", {"pad_source": "attention_mask"}),
)


def moved_table(config: PLDRConfig) -> RopeTable:
    """The float32 table with every entry where (p + i) % 5 == 0 moved up one float32 ulp."""
    pos = np.arange(config.max_seq_len)
    cos, sin = rope_angles(pos, config.d_k, config.rope_base, "float32")
    sel = (pos[:, None] + np.arange(config.d_k // 2)[None, :]) % 5 == 0
    up = np.float32(np.inf)
    return RopeTable(np.where(sel, np.nextafter(cos, up), cos), np.where(sel, np.nextafter(sin, up), sin))


def logits(params: Params, ids: np.ndarray, mask: np.ndarray | None, table: RopeTable | None) -> np.ndarray:
    return forward(params, ids, attention_mask=mask, check_finite_values=False, rope_table=table).logits


def effect(base: np.ndarray, other: np.ndarray) -> str:
    if np.isnan(other).any():
        rows = sorted({int(b) for b in np.argwhere(np.isnan(other))[:, 0]})
        return f"NaN (sample {', '.join(map(str, rows))})"
    d = float(np.max(np.abs(other - base)))
    return "0 (bitwise)" if d == 0 else f"{d:.2e} ({d / float(np.max(np.abs(base))):.2e} rel)"


def torch_table(config: PLDRConfig) -> RopeTable | None:
    """torch's own float32 torchtune table (``RotaryPositionalEmbeddings.cache`` restated with torch), or None."""
    try:
        import torch
    except ImportError:
        return None
    d_k = config.d_k
    theta = 1.0 / (config.rope_base ** (torch.arange(0, d_k, 2)[: d_k // 2].float() / d_k))
    idx = torch.einsum("i,j->ij", torch.arange(config.max_seq_len, dtype=theta.dtype), theta).float()
    return RopeTable.from_torchtune_cache(torch.stack([torch.cos(idx), torch.sin(idx)], dim=-1))


def torch_softmax_distance(rows: int = 1000, width: int = 9, scale: float = 6.0, seed: int = 0) -> str:
    """How far torch's float32 softmax is from the correctly rounded one on standard normal logits * scale."""
    try:
        import torch
    except ImportError:
        return "torch not installed"
    from pldr_ref.attention import softmax_float32

    logits = np.random.default_rng(seed).standard_normal((rows, width)) * scale
    cr = softmax_float32(logits).astype(np.float32)
    tt = torch.softmax(torch.from_numpy(logits.astype(np.float32)), dim=-1).numpy()
    ulps = np.abs(tt.view(np.int32).astype(np.int64) - cr.view(np.int32).astype(np.int64))
    return (f"{100 * np.mean(ulps > 0):.1f} % of {ulps.size} entries differ, by up to {int(ulps.max())} float32 ulps "
            f"({rows}x{width} logits, default_rng({seed}), scale {scale}, torch {torch.__version__})")


def double_without_table(cfg: PLDRConfig, seed: int, ids: np.ndarray) -> str:
    """pt-v510-double with the correctly rounded float32 table instead of torch's: max |d logits| / max |logits|,
    also in units of 2^-53 (the float64 rounding unit)."""
    table = torch_table(cfg)
    if table is None:
        return "torch not installed"
    p = perturb_params(init_params(cfg, seed), seed + 100)
    dbl = cfg.emulate("pt-v510-double")
    want = logits(Params(dbl, dict(p.items())), ids, None, table)
    got = logits(Params(dbl.replace(rope_table="float32"), dict(p.items())), ids, None, None)
    rel = float(np.max(np.abs(got - want)) / np.max(np.abs(want)))
    return f"{rel:.2e} relative = {rel / 2.0**-53:.1e} x 2^-53"


def torch_table_mismatches(d_k: int, positions: int) -> str:
    try:
        import torch
    except ImportError:
        return "torch not installed"
    theta = 1.0 / (10000.0 ** (torch.arange(0, d_k, 2)[: d_k // 2].float() / d_k))
    idx = torch.einsum("i,j->ij", torch.arange(positions, dtype=theta.dtype), theta).float()
    tc, ts = torch.cos(idx).numpy(), torch.sin(idx).numpy()
    rc, rs = rope_angles(np.arange(positions), d_k, 10000.0, "float32")
    n = int(np.sum(tc != rc) + np.sum(ts != rs))
    return f"{n} of {2 * tc.size} entries differ (d_k {d_k}, {positions} positions, torch {torch.__version__})"


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    cfg = PLDRConfig.preset("tiny")
    rng = np.random.Generator(np.random.PCG64(args.seed))
    ids_a = rng.integers(1, cfg.vocab_size, size=(1, 8))
    ids_b = rng.integers(1, cfg.vocab_size, size=(2, 8))
    ids_b[0, :2] = cfg.pad_id
    mask_b = np.ones((2, 8), dtype=np.int64)
    mask_b[0, :2] = 0

    def params_for(c: PLDRConfig) -> Params:
        return perturb_params(init_params(c, args.seed), args.seed + 100)

    base = params_for(cfg)
    ref_a, ref_b = logits(base, ids_a, None, None), logits(base, ids_b, mask_b, None)
    print("| switch (others default) | A: unpadded 1x8 | B: left-padded 2x8 |\n|---|---|---|")
    for label, change in SWITCHES:
        p = Params(cfg.replace(**change), dict(base.items()))
        table = moved_table(cfg) if change.get("rope_table") == "explicit" else None
        print(f"| `{label}` | {effect(ref_a, logits(p, ids_a, None, table))} | "
              f"{effect(ref_b, logits(p, ids_b, mask_b, table))} |")
    print("\n| profile | A: unpadded 1x8 | B: left-padded 2x8 |\n|---|---|---|")
    for name in EMULATIONS:
        # baseline: default switches with the profile's architecture (RoPE pairing, metric learner)
        arch = {k: EMULATIONS[name][k] for k in ("rope_layout", "metric_learner") if k in EMULATIONS[name]}
        dflt = cfg.replace(**arch, **({"A_dff_depth": 12} if name == "tf-v900" else {}))
        pd = params_for(dflt)
        p = Params(dflt.emulate(name), dict(pd.items()))
        # an explicit-table profile (pt-v510-double) replays torch's table, else the moved table
        table = (torch_table(dflt) or moved_table(dflt)) if p.config.rope_table == "explicit" else None
        ra, rb = logits(pd, ids_a, None, None), logits(pd, ids_b, mask_b, None)
        a, b = effect(ra, logits(p, ids_a, None, table)), effect(rb, logits(p, ids_b, mask_b, table))
        print(f"| `{name}` | {a} | {b} |")
    print(f"\ntorch float32 table vs correctly rounded: {torch_table_mismatches(64, 1024)}; "
          f"{torch_table_mismatches(8, 64)}")
    print(f"torch float32 softmax vs correctly rounded: {torch_softmax_distance()}")
    f32 = cfg.emulate("pt-v510-float32")
    moved = logits(Params(f32.replace(mask_add_dtype="float64"), dict(base.items())), ids_b, mask_b, None)
    print(f"pt-v510-float32 with the mask added in float64 instead (input B): "
          f"{effect(logits(Params(f32, dict(base.items())), ids_b, mask_b, None), moved)}")
    wide = PLDRConfig.preset("v510-110m", num_layers=1, vocab_size=256, max_seq_len=64, dff=256, A_dff=32,
                             num_reslayerA=1)
    for label, c, ids in (("tiny, input A", cfg, ids_a),
                          ("v510-110m widths (1 layer, V 256), 1x32 tokens", wide,
                           rng.integers(1, wide.vocab_size, size=(1, 32)))):
        print(f"pt-v510-double without torch's table ({label}): {double_without_table(c, args.seed, ids)}")


if __name__ == "__main__":
    main()
