"""Benchmark of the masked softmax of one layer: unblocked vs row-blocked (pldr_ref.row_blocks), 1 and N threads.

Times, at the v510-110m attention size (B = 1, H = 14, S = T = 1024, causal mask, additive -1e9):

* ``unblocked``: ``attention_weights(apply_mask(scores, mask))`` on the whole [B, H, S, T] array;
* ``blocked, k threads``: :func:`pldr_ref.attention.masked_attention_weights` (new E, scores kept), and
  ``in place`` (E over the scores, as ``forward(keep_trace=False)`` does).

Each is the best of ``--repeats`` runs, standalone: no BLAS call runs just before, so OpenBLAS's worker threads
are asleep (inside a forward pass they busy-wait for about 0.1 s after each call and take the second core).
Every variant's E is checked bit-identical to the unblocked one.  Last, on Linux, the CPU time the BLAS worker
threads spend busy-waiting after one GEMM while the main thread sleeps 0.5 s.

Usage: ``python benchmarks/bench_softmax.py [--heads 14] [--seq 1024] [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import os
import threading
import time

import numpy as np

from pldr_ref.attention import apply_mask, attention_weights, causal_padding_mask, masked_attention_weights
from pldr_ref.row_blocks import worker_count


def _best(fn, repeats: int) -> tuple[float, np.ndarray]:
    out = fn()
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def blas_spin_seconds(idle: float = 0.5) -> float | None:
    """CPU seconds the process's other threads burn while the main thread sleeps ``idle`` s right after a GEMM.

    OpenBLAS's worker threads busy-wait for new work before they sleep; this measures how long (Linux only:
    per-thread times from /proc; None elsewhere).
    """
    task = "/proc/self/task"
    if not os.path.isdir(task):
        return None

    def cpu_ticks() -> dict[str, int]:
        ticks = {}
        for tid in os.listdir(task):
            try:
                with open(f"{task}/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # the thread ended meanwhile
                continue
            ticks[tid] = int(fields[11]) + int(fields[12])  # utime + stime
        return ticks

    a = np.random.default_rng(0).standard_normal((1024, 1024))
    me = str(threading.get_native_id())
    a @ a
    before = cpu_ticks()
    time.sleep(idle)
    after = cpu_ticks()
    others = sum(t - before.get(tid, 0) for tid, t in after.items() if tid != me)
    return others / os.sysconf("SC_CLK_TCK")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=14)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    s = args.seq
    scores = np.random.default_rng(0).standard_normal((1, args.heads, s, s)) * 5
    mask = causal_padding_mask(np.arange(s), np.arange(s), None)
    base, want = _best(lambda: attention_weights(apply_mask(scores, mask, "additive"), mask), args.repeats)
    print(f"[1, {args.heads}, {s}, {s}] float64, causal additive mask, {os.cpu_count()} CPUs")
    print(f"  {'unblocked':<24}: {base * 1e3:7.1f} ms")
    saved = os.environ.get("PLDR_REF_THREADS")
    try:
        for threads in sorted({1, worker_count()}):
            os.environ["PLDR_REF_THREADS"] = str(threads)
            t_new, e = _best(lambda: masked_attention_weights(scores, mask, mask_mode="additive"), args.repeats)
            same = np.array_equal(e.view(np.int64), want.view(np.int64))
            t_in, _ = _best(lambda: masked_attention_weights(scores.copy(), mask, mask_mode="additive",
                                                             in_place=True), args.repeats)
            t_copy, _ = _best(scores.copy, args.repeats)
            print(f"  {f'blocked, {threads} thread(s)':<24}: {t_new * 1e3:7.1f} ms (bit-identical: {same}); in place "
                  f"{(t_in - t_copy) * 1e3:.1f} ms")
    finally:
        if saved is None:
            os.environ.pop("PLDR_REF_THREADS", None)
        else:
            os.environ["PLDR_REF_THREADS"] = saved
    spin = blas_spin_seconds()
    if spin is not None:
        print(f"  after one GEMM, the BLAS worker threads burn {spin:.2f} CPU s of a 0.5 s idle wait")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
