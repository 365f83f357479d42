"""How much of each allowance a backend uses: the numbers behind ``docs/tolerances.md``.

    python -m pldr_ref.harness.tools.margins --backend pldr_ref.backends.torch_backend:TorchBackend \\
        --dtype float32,bfloat16,float16 [--suite-dir DIR]

For each dtype and each place (isolated stages, end-to-end outputs of multi-stage cases, op cases) and each
of the four tests (max, relative RMS, offset, gain): the largest use = observed / allowed over every judged
output, and where.  Every use must stay below 1 for a pass; the gap is the safety margin.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from pldr_ref.harness.verdict.localize import OutputResult

#: The four tests of the low-precision policy, in report order.
TESTS = ("max", "rms", "offset", "gain")


def uses(o: OutputResult) -> dict[str, float]:
    """observed / allowed for each test that applies to ``o`` (empty when it was not judged)."""
    c, a = o.comparison, o.allowance
    if c is None or a is None or not a.judged or a.atol is None or c.error is not None:
        return {}
    out = {}
    bound = a.atol + a.rtol * c.ref_max_abs
    if bound > 0:
        out["max"] = c.max_abs / bound
    for test, got, allowed in (("rms", c.rms_rel, a.rms), ("offset", abs(c.offset), a.offset),
                               ("gain", abs(c.gain), a.gain)):
        if allowed:
            out[test] = got / allowed
    return out


def margins(results: list[Any]) -> dict[str, dict[str, dict[str, tuple[float, str]]]]:
    """{dtype: {"isolated" | "end_to_end" | "op": {test: (largest use, "case:output")}}}."""
    from pldr_ref.harness.policy.tolerance import SINGLE_STAGE_KINDS

    out: dict[str, dict[str, dict[str, tuple[float, str]]]] = {}
    for r in results:
        e2e = "op" if r.kind in SINGLE_STAGE_KINDS else "end_to_end"
        for where, outs in ((e2e, r.outputs), ("isolated", [o for s in r.stages for o in s.outputs])):
            slot = out.setdefault(r.dtype, {}).setdefault(where, {})
            for o in outs:
                for test, u in uses(o).items():
                    if u > slot.get(test, (-1.0, ""))[0]:
                        slot[test] = (u, f"{r.case}:{o.name}")
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the margins table."""
    from pldr_ref.harness.cli import parse_dtypes
    from pldr_ref.harness.protocol import load_backend
    from pldr_ref.harness.suite_loading import load_suite, suite_root
    from pldr_ref.harness.validate import validate

    p = argparse.ArgumentParser(prog="python -m pldr_ref.harness.tools.margins", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", required=True)
    p.add_argument("--dtype", action="append", default=None)
    p.add_argument("--suite-dir", "--suite", dest="suite", default="default")
    args = p.parse_args(argv)
    backend = load_backend(args.backend)
    dtypes = parse_dtypes(args.dtype, backend.capabilities().dtypes)
    results = validate(backend, load_suite(suite_root(args.suite), None, None), dtypes)
    print("| dtype | where | " + " | ".join(TESTS) + " |")
    print("|---|---|" + "---|" * len(TESTS))
    for dtype, table in margins(results).items():
        for where, slot in sorted(table.items()):
            cells = [f"{slot[t][0]:.3f} (`{slot[t][1]}`)" if t in slot else "-" for t in TESTS]
            print(f"| {dtype} | {where} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
