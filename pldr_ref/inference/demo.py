"""Worked example of the caches and the five semantics (``python -m pldr_ref.inference.demo``).

Prints the numbers quoted in ``docs/inference.md``: blockwise vs sequential scoring, one-pass vs
sequential candidate scores, cached vs recomputed generation, prompt-frozen cache inference,
padding at the Gram boundary, the DAG terms and the order parameter, for a small random model
with learned G (global Gram), identity G, the cumulative Gram, and the trained PLDRv51-110M-1 G
as a fixed external operator.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import numpy as np

from pldr_ref.config import PLDRConfig
from pldr_ref.dag import training_loss
from pldr_ref.inference.generation import SamplingConfig, generate
from pldr_ref.inference.modes import cache_gap, default_external_g_path, external_g_config, params_with_external_g
from pldr_ref.inference.padding import final_real_row_effect
from pldr_ref.inference.scoring import (
    one_pass_block_scores,
    prefix_consistency_gap,
    prompt_frozen_scores,
    scoring_gap,
    sequential_candidate_scores,
    sequential_nll,
)
from pldr_ref.model import forward
from pldr_ref.order_parameter import order_parameter
from pldr_ref.params import Params, init_params, perturb_params


def demo_models(preset: str, seed: int) -> dict[str, Params]:
    """The three variants of one random model: learned G (global Gram), identity G, cumulative Gram."""

    def make(**over: object) -> Params:
        return perturb_params(init_params(PLDRConfig.preset(preset, **over), seed), seed + 100)

    return {"learned": make(), "identity": make(g_mode="identity"), "cumulative": make(gram_mode="cumulative")}


def _fmt(a: np.ndarray) -> str:
    return "[" + ", ".join(f"{x:.6f}" for x in np.ravel(a)) + "]"


def run(preset: str = "tiny", seed: int = 1, external: bool = True) -> None:
    """Print the worked example."""
    models = demo_models(preset, seed)
    vocab = models["learned"].config.vocab_size
    rng = np.random.Generator(np.random.PCG64(seed))
    seq = rng.integers(1, vocab, size=(1, 10))
    prompt, cont = seq[:, :5], seq[:, 5:]
    cands = [rng.integers(1, vocab, size=n) for n in (1, 2, 3)]
    print(f"model: preset {preset!r}, init seed {seed}, perturbed norms/biases; tokens {seq[0].tolist()}")

    print("\n1-2. blockwise cross-entropy vs sequential autoregressive NLL (sum over 9 targets)")
    for name, p in models.items():
        g = scoring_gap(p, seq)
        print(f"  {name:10s} blockwise {g.blockwise.total:.12f}  sequential {g.sequential.total:.12f}  "
              f"rel gap {g.relative_total_gap:.3e}  prefix-consistency gap {prefix_consistency_gap(p, seq):.3e}")

    print("\n3. one-pass block scoring vs sequential chain-rule scores of candidates after the prompt")
    print(f"  candidates {[c.tolist() for c in cands]}")
    for name in ("learned", "cumulative"):
        p = models[name]
        print(f"  {name:10s} one-pass {_fmt(one_pass_block_scores(p, prompt[0], cands))}  "
              f"sequential {_fmt(sequential_candidate_scores(p, prompt[0], cands))}")

    print("\n4. sequential generation (greedy, 8 tokens; mode 'none') vs cached generation (mode 'kv+g')")
    for name, p in models.items():
        if name == "cumulative":
            continue  # a G cache freezes one operator per head; the cumulative Gram has one per row
        a = generate(p, prompt, 8, mode="none", sampling=SamplingConfig("greedy"))
        b = generate(p, prompt, 8, mode="kv+g", sampling=SamplingConfig("greedy"))
        print(f"  {name:10s} none {a.tokens[0].tolist()}  kv+g {b.tokens[0].tolist()}  "
              f"teacher-forced cached-vs-recomputed logit gap {cache_gap(p, prompt, cont):.3e}")
    a = generate(models["cumulative"], prompt, 8, mode="none")
    b = generate(models["cumulative"], prompt, 8, mode="kv")
    rel = np.max(np.abs(a.step_logits - b.step_logits)) / np.max(np.abs(a.step_logits))
    print(f"  cumulative none {a.tokens[0].tolist()}  kv   {b.tokens[0].tolist()}  logit gap {rel:.3e}")
    s = SamplingConfig("sample", temperature=0.8, top_k=10, top_p=0.9)
    r1 = generate(models["learned"], prompt, 8, sampling=s, seed=42)
    r2 = generate(models["learned"], prompt, 8, sampling=s, seed=42)
    print(f"  sampling T=0.8, top-k 10, top-p 0.9, seed 42: {r1.tokens[0].tolist()} "
          f"(rerun identical: {np.array_equal(r1.tokens, r2.tokens)})")

    print("\n5. prompt-frozen cache inference (kv+g) vs sequential log-probs of the 5 continuation tokens")
    for name in ("learned", "identity"):
        p = models[name]
        frozen = prompt_frozen_scores(p, prompt, cont)[0]
        seql = -sequential_nll(p, seq).nll[0, 4:]
        print(f"  {name:10s} frozen {_fmt(frozen)}\n  {'':10s} seq    {_fmt(seql)}")

    if external:
        ext = external_g_config()
        pe = params_with_external_g(perturb_params(init_params(ext, seed), seed + 100), default_external_g_path())
        ids = rng.integers(1, ext.vocab_size, size=(1, 10))
        print(f"\n   external trained G (PLDRv51-110M-1, L=5 H=14 d_k=64): cached-vs-recomputed logit gap "
              f"{cache_gap(pe, ids[:, :5], ids[:, 5:]):.3e}, prefix-consistency gap "
              f"{prefix_consistency_gap(pe, ids):.3e}")

    print("\npadding: 3 appended attention-masked pad tokens (id 0), relative change of the final real row")
    for name, p in models.items():
        print(f"  {name:10s} {final_real_row_effect(p, seq, np.zeros((1, 3), dtype=np.int64)).relative:.3e}")

    tl = training_loss(models["learned"], seq)
    print(f"\nDAG (TF coefficients 1e-3, 5e-3, 5e-3): CE {tl.cross_entropy:.6f}  "
          + "  ".join(f"D({k}) {v:.6f}" for k, v in tl.dag.items()) + f"  total {tl.total:.6f}")

    other = rng.integers(1, vocab, size=(1, 10))
    print("\norder parameter m between two inputs, per layer")
    for name in ("learned", "identity"):
        m = order_parameter(forward(models[name], seq), forward(models[name], other))
        print(f"  {name:10s} " + "  ".join(f"{k} {_fmt(v)}" for k, v in m.items()))


def main(argv: Sequence[str] | None = None) -> int:
    """Command line entry: ``python -m pldr_ref.inference.demo [--preset tiny] [--seed 1] [--no-external]``."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="tiny", choices=["tiny", "small", "medium"])
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-external", action="store_true", help="skip the bundled trained PLDRv51-110M-1 external G")
    args = ap.parse_args(argv)
    run(args.preset, args.seed, external=not args.no_external)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
