"""How much of the tolerance a backend uses: the numbers behind ``docs/tolerances.md``.

    python -m pldr_ref.harness.margins --backend pldr_ref.backends.torch_backend:TorchBackend \\
        --dtype float32,bfloat16 [--suite DIR]

For each dtype, over every judged output (end to end) and every isolated-stage output: how many
there are, the largest ratio error / naive baseline (the measured k), and the largest ratio
error / allowance (must stay below 1 for a pass; the gap is the safety margin).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pldr_ref.harness.localize import OutputResult


def _ratios(o: OutputResult) -> tuple[float | None, float | None]:
    c, a = o.comparison, o.allowance
    if c is None or a is None or not a.judged or a.atol is None or c.error is not None:
        return None, None
    base = a.detail.get("baseline")
    k_used = c.max_abs / base if base else None
    bound = a.atol + a.rtol * c.ref_max_abs
    return k_used, (c.max_abs / bound if bound > 0 else None)


def margins(results: list[Any]) -> dict[str, dict[str, Any]]:
    """{dtype: {"end_to_end"|"isolated": {"n", "max_k", "max_k_at", "max_use", "max_use_at"}}}."""
    out: dict[str, dict[str, Any]] = {}
    for r in results:
        for where, outs in (("end_to_end", r.outputs), ("isolated", [o for s in r.stages for o in s.outputs])):
            slot = out.setdefault(r.dtype, {}).setdefault(where, {"n": 0, "max_k": 0.0, "max_k_at": "-",
                                                                  "max_use": 0.0, "max_use_at": "-"})
            for o in outs:
                k_used, use = _ratios(o)
                if use is None:
                    continue
                slot["n"] += 1
                if k_used is not None and k_used > slot["max_k"]:
                    slot["max_k"], slot["max_k_at"] = k_used, f"{r.case}:{o.name}"
                if use > slot["max_use"]:
                    slot["max_use"], slot["max_use_at"] = use, f"{r.case}:{o.name}"
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the margins table."""
    from pldr_ref.harness.cli import load_suite, parse_dtypes, suite_root
    from pldr_ref.harness.protocol import load_backend
    from pldr_ref.harness.validate import validate

    p = argparse.ArgumentParser(prog="python -m pldr_ref.harness.margins", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", required=True)
    p.add_argument("--dtype", action="append", default=None)
    p.add_argument("--suite", default="default")
    args = p.parse_args(argv)
    backend = load_backend(args.backend)
    dtypes = parse_dtypes(args.dtype, backend.capabilities().dtypes)
    results = validate(backend, load_suite(suite_root(args.suite), None, None), dtypes)
    print("| dtype | checked | outputs | max error / baseline (k used) | at | max error / allowance | at |")
    print("|---|---|---|---|---|---|---|")
    for dtype, table in margins(results).items():
        for where, s in table.items():
            print(f"| {dtype} | {where} | {s['n']} | {s['max_k']:.2f} | `{s['max_k_at']}` | {s['max_use']:.3f} | "
                  f"`{s['max_use_at']}` |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
