"""Speed of the calibration's emulated products, compiled (``pldr_ref.harness.policy.compiled_sums``, the ``[fast]``
extra) against the NumPy loops that define them, on the shapes of the ``v510-110m`` model: the metric learner's
maps (896 rows of A, 64 -> 170 -> 64), the LM head (6 tokens, 896 -> 32000) and the FFN (6 tokens, 896 -> 2389), for
a float32-accumulating member and a 16-bit-accumulating one in float16 and in float32.  Each line: seconds of one
``linear`` call (after a first call that compiles and makes the weight's contiguous copy), multiply-adds per second,
and whether the two results are the same bits (they must be).  Usage::

    python benchmarks/bench_compiled_sums.py [--repeats N]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np


def best_seconds(run, repeats: int) -> tuple[float, np.ndarray]:
    """The fastest of ``repeats`` calls of ``run`` (after one untimed call) and its result."""
    out = run()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = run()
        best = min(best, time.perf_counter() - t0)
    return best, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    if args.repeats < 1:
        p.error(f"--repeats {args.repeats}: at least 1")
    from pldr_ref.harness.policy import compiled_sums
    from pldr_ref.harness.policy.arithmetic import Arithmetic, EmulatedOps, round_to_dtype

    if not compiled_sums.installed():
        p.error("numba is not installed: pip install \"pldr-ref[fast]\"")
    rng = np.random.default_rng(0)
    shapes = {"metric learner 896 x 64 -> 170": (14, 64, 64, 170), "metric learner 896 x 170 -> 64": (14, 64, 170, 64),
              "LM head 6 x 896 -> 32000": (1, 6, 896, 32000), "FFN 6 x 896 -> 2389": (1, 6, 896, 2389)}
    members = (Arithmetic("float32 accumulator, tiles of 16", tile=16),
               Arithmetic("16-bit accumulator, tiles of 16", accumulate="storage", tile=16))
    for dtype in ("float16", "float32"):
        for member in members:
            ops = EmulatedOps(member, dtype)
            for label, (heads, rows, k, n) in shapes.items():
                x = round_to_dtype(rng.standard_normal((1, heads, rows, k)), dtype)
                w = np.array(round_to_dtype(rng.standard_normal((n, k)) / np.sqrt(k), dtype))
                w.flags.writeable = False  # a parameter: read-only, its transposed copy kept
                fast, got = best_seconds(lambda ops=ops, x=x, w=w: ops.linear(x, w), args.repeats)
                with compiled_sums.numpy_only():
                    slow, want = best_seconds(lambda ops=ops, x=x, w=w: ops.linear(x, w), 1)
                madds = heads * rows * k * n
                same = np.array_equal(got, want, equal_nan=True)
                print(f"{dtype:8s} {member.name:34s} {label:32s} compiled {fast:7.4f} s ({madds / fast / 1e9:5.2f} G/s)"
                      f"  NumPy {slow:7.4f} s ({slow / fast:5.1f}x)  same bits: {same}", flush=True)
                if not same:
                    return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
