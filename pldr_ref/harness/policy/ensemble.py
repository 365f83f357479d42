"""The calibration ensemble and its statistics (``docs/tolerances.md``): what the pass/fail policy scales.

Each member of :data:`ENSEMBLE` is an :class:`~pldr_ref.harness.policy.arithmetic.Arithmetic`: one legitimate way to
compute the model in a storage dtype (accumulation in float32 or in the dtype, elementwise work in float32 or in
the dtype, one-pass or blocked sums in two orders, two-pass or online softmax, exp or exp2, division or
reciprocal, fused or unfused bias and activation, TF32 products in float32 runs, and a member evaluating each
stage in float64 that rounds only stage outputs).  Every member runs the case (or the isolated stage) through the
reference code with its arithmetic (passed as ``ops``: :func:`pldr_ref.harness.policy.arithmetic.arithmetic_ops`); its
error against the golden value gives four numbers per output (max error, relative RMS, offset, gain).  The
statistic of each (:func:`robust_stats`) is the largest, over the groups of members making one arithmetic choice
(:func:`choice_groups`), of the group's **median** -- never one run's maximum -- taken among the members the
arithmetic a backend declares covers (:data:`ARITHMETIC_KEYS`: the float32-accumulating GPU default, or every
member), and the policy (:mod:`pldr_ref.harness.policy.tolerance`) scales it.  The statistics are rounded up to
:data:`SIGNIFICANT_DIGITS` significant digits, so an allowance is the same on every machine, BLAS, thread count and
ml_dtypes version (the arithmetic is elementwise NumPy in explicit order -- or the same loops compiled, with the same
bits, :mod:`pldr_ref.harness.policy.compiled_sums` -- the rounding pldr_ref's own).

Members are evaluated once per case, dtype (and isolated stage) and process (:func:`case_runs`, memoized on the
case's content); the statistics of the committed suite are read from :data:`CACHE_FILE`, which
:mod:`pldr_ref.harness.policy.calibration` writes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from pldr_ref.harness.policy.arithmetic import Arithmetic, arithmetic_ops
from pldr_ref.harness.policy.storage_run import ArithmeticStats, ErrorStats, storage_outputs
from pldr_ref.ops import Ops

#: The calibration ensemble (12 members for bfloat16 / float16; the float32 ensemble adds a TF32 member); the
#: member evaluating each stage in float64 is issue 19's "naive" run.
ENSEMBLE: tuple[Arithmetic, ...] = (
    Arithmetic("f64-inside-stages", internal=False),
    Arithmetic("f32acc-seq"),
    Arithmetic("f32acc-t16-online16-exp2", tile=16, softmax="online", softmax_tile=16, exp2=True),
    Arithmetic("f32acc-t64-online64-recip-unfused", tile=64, softmax="online", softmax_tile=64, reciprocal=True,
               fused=False),
    Arithmetic("f32acc-t256-exp2-recip", tile=256, exp2=True, reciprocal=True),
    Arithmetic("f32acc-reverse-unfused", order="reverse", fused=False),
    Arithmetic("dtype-acc-t16", accumulate="storage", tile=16),
    Arithmetic("dtype-acc-seq-online64", accumulate="storage", softmax="online", softmax_tile=64),
    Arithmetic("dtype-all-t64-recip", accumulate="storage", compute="storage", tile=64, reciprocal=True),
    # two more members doing their elementwise work in the dtype (eager 16-bit frameworks round every op's
    # output), so that choice has a group of MIN_GROUP members (:func:`choice_groups`)
    Arithmetic("dtype-all-t16-online16-unfused", accumulate="storage", compute="storage", tile=16, softmax="online",
               softmax_tile=16, fused=False),
    Arithmetic("f32acc-t256-dtype-elementwise-reverse-exp2", compute="storage", tile=256, order="reverse", exp2=True),
    Arithmetic("f32acc-reverse-t16-online256-exp2-unfused", order="reverse", tile=16, softmax="online",
               softmax_tile=256, exp2=True, fused=False),
)
#: Added to the float32 ensemble only.
TF32_MEMBER = Arithmetic("tf32-products", tf32=True, tile=64)

#: Medians are rounded up to this many significant digits (machine independence, see module docstring).
SIGNIFICANT_DIGITS = 2


def members(dtype: str) -> tuple[Arithmetic, ...]:
    """The calibration ensemble of ``dtype``."""
    return ENSEMBLE + ((TF32_MEMBER,) if dtype == "float32" else ())


def round_up(x: float, digits: int = SIGNIFICANT_DIGITS) -> float:
    """``x`` >= 0 rounded up to ``digits`` significant decimal digits (0 stays 0)."""
    if not x > 0 or not math.isfinite(x):
        return x
    e = math.floor(math.log10(x)) - digits + 1
    q = 10.0 ** e
    return float(f"{math.ceil(x / q - 1e-9) * q:.{digits}g}")


def config_text(config: Any) -> str:
    """The config as :func:`case_digest` hashes it: the sorted JSON of ``PLDRConfig.to_dict()``, which holds a switch
    only at a value other than its default, so a switch added at its default leaves every digest as it was
    (``"None"`` for a case without a model)."""
    return "None" if config is None else json.dumps(config.to_dict(), sort_keys=True)


def case_digest(case: Any) -> str:
    """A digest of what a calibration depends on: the case's name, kind, config (:func:`config_text`), args,
    inputs, outputs, params."""
    h = hashlib.sha256()
    h.update(repr((case.name, case.kind, config_text(case.config), sorted(case.args.items()))).encode())
    tensors = [case.inputs, case.outputs] + ([dict(case.params.items())] if case.params is not None else [])
    for group in tensors:
        for k in sorted(group):
            a = np.ascontiguousarray(group[k])
            h.update(k.encode())
            h.update(str(a.dtype).encode())
            h.update(repr(a.shape).encode())
            h.update(a.data if a.ndim else a.tobytes())  # the same bytes, without a copy of 110 M parameters
    return h.hexdigest()


_MEMO: dict[tuple, Any] = {}
#: Most member runs kept in :data:`_MEMO` (oldest dropped first): the statistics are kept in :data:`_STORE`, the
#: runs only while the outputs of one case are judged.
MEMO_ENTRIES = 48
#: Most bytes of arrays :data:`_MEMO` keeps besides its newest entry (oldest dropped first): one ``v510-110m`` case's
#: runs are 0.2-0.5 GB (every member's trace and logits), and a calibration of 16 such cases kept them all.
MEMO_BYTES = 1 << 30


def _nbytes(value: Any) -> int:
    """Bytes of the arrays in a memoized value (lists and tuples of (name, dict of arrays or None))."""
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


def _memo(key: tuple, compute: Callable[[], Any]) -> Any:
    if key not in _MEMO:
        value = compute()
        while _MEMO and (len(_MEMO) >= MEMO_ENTRIES or sum(_nbytes(v) for v in _MEMO.values()) + _nbytes(value)
                         > MEMO_BYTES):
            _MEMO.pop(next(iter(_MEMO)))
        _MEMO[key] = value
    return _MEMO[key]


def _digest(case: Any) -> str:
    cached = getattr(case, "_calibration_digest", None)
    if cached is None:
        cached = case_digest(case)
        with contextlib.suppress(AttributeError, TypeError):
            object.__setattr__(case, "_calibration_digest", cached)
    return cached


def member_threads() -> int:
    """Threads the members of one run share (:func:`each_member`): ``PLDR_REF_THREADS`` if set, else the CPUs this
    process may use (:func:`pldr_ref.row_blocks.worker_count`)."""
    from pldr_ref.row_blocks import worker_count

    return worker_count()


def each_member(dtype: str, run: Callable[[Arithmetic], Any]) -> list[tuple[str, Any]]:
    """(member name, ``run(member)``) for every member of ``members(dtype)``, in that order, the runs spread over
    :func:`member_threads` threads.

    Why threads: a member's run is elementwise NumPy over every product of every matrix multiplication (one pass
    per tile position, :meth:`~pldr_ref.harness.policy.arithmetic.EmulatedOps.matmul`), one core's work, and NumPy
    releases the GIL inside its loops; the members are independent, so two cores run two members at once.
    Exactness: each run computes from the case and its member alone (the shared memos -- the rounded parameter
    sets, the rounded weights -- hold the same values whichever thread fills them first, under a lock), so the
    outputs are bit-identical to the runs one after another (``tests/test_harness_calibration.py``).  The runs
    start slowest first (the members accumulating in the storage dtype), each worker taking the next member when
    it is free; every worker runs under the caller's NumPy error state.  When a run raises (or the caller is
    interrupted, e.g. by the per-case time limit), the members not yet started are cancelled and the call
    re-raises once the running ones have ended."""
    ms = members(dtype)
    workers = min(member_threads(), len(ms))
    if workers < 2:
        return [(m.name, run(m)) for m in ms]
    import concurrent.futures

    err, callback = np.geterr(), np.geterrcall()

    def one(m: Arithmetic) -> Any:
        with np.errstate(call=callback, **err):
            return run(m)

    order = sorted(range(len(ms)), key=lambda i: ms[i].accumulate != "storage")  # stable: slowest first
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="pldr_ref-members") as pool:
        futures = {i: pool.submit(one, ms[i]) for i in order}
        try:
            return [(m.name, futures[i].result()) for i, m in enumerate(ms)]
        except BaseException:
            for f in futures.values():
                f.cancel()
            raise


def case_runs(case: Any, dtype: str) -> list[tuple[str, dict[str, np.ndarray] | None]]:
    """(member name, outputs) of every member's run of ``case`` in ``dtype`` (None: no run for this kind)."""
    def compute() -> list[tuple[str, dict[str, np.ndarray] | None]]:
        return each_member(dtype, lambda m: storage_outputs(case, dtype, arithmetic_ops(m, dtype)))

    return _memo(("case", _digest(case), dtype), compute)


def stage_runs(case: Any, stage: str, layer: int | None, dtype: str,
               run: Callable[[Ops], dict[str, np.ndarray] | None]) -> list[tuple[str, dict[str, np.ndarray] | None]]:
    """(member name, outputs) of every member's run of one isolated stage (``run(ops)`` evaluates it in the
    member's arithmetic)."""

    def compute() -> list[tuple[str, dict[str, np.ndarray] | None]]:
        return each_member(dtype, lambda m: run(arithmetic_ops(m, dtype)))

    return _memo(("stage", _digest(case), dtype, stage, layer), compute)


# ---------------------------------------------------------------------------------------------------------------
# the statistics store: computed once per case, dtype and output, committed in CACHE_FILE

#: The committed statistics of the committed suite (``python -m pldr_ref.harness.policy.calibration --write``):
#: validation reads them instead of running the ensemble; a case whose digest is absent (another suite, a changed case)
#: is calibrated at validation time.  ``tests/test_harness_calibration.py`` recomputes a sample and checks coverage.
CACHE_FILE = Path(__file__).with_name("calibration.json")
#: Bumped whenever the emulated arithmetic or the statistic changes: statistics of another revision are ignored.
CALIBRATION_REVISION = 3

_STORE: dict[str, Any] | None = None


def fingerprint() -> str:
    """Identifies the ensemble, the statistic and :data:`CALIBRATION_REVISION`."""
    text = repr((members("float32"), members("bfloat16"), SIGNIFICANT_DIGITS, CHOICES, MIN_GROUP, ARITHMETIC_KEYS,
                 CALIBRATION_REVISION))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _store() -> dict[str, Any]:
    global _STORE
    if _STORE is None:
        from pldr_ref.harness.policy.calibration_store import load_store_cases  # checked: names the file if malformed

        _STORE = load_store_cases(CACHE_FILE, fingerprint())
    return _STORE


def _encode(st: Any, dtype: str) -> list | str | None:
    """Stored form of an :class:`ArithmeticStats`: [n, per key of ARITHMETIC_KEYS: [max, rms, |offset|, |gain|,
    the index in ``choice_groups(dtype, key)`` of the group that set each], 0 where a key's numbers equal the
    previous key's, None where non-finite]; None and strings (absent) as they are."""
    if st is None or isinstance(st, str):
        return st
    out: list[Any] = [st.widest.n]
    prev: Any = None
    for key, s in st.by_arithmetic:
        numbers = None if s is None else [s.max_abs, s.rms_rel, s.offset, s.gain]
        if numbers is not None and prev is not None and numbers == prev:
            out.append(0)
        elif numbers is None:
            out.append(None)
        else:
            labels = _label_table(dtype, key)
            out.append([*numbers, [labels.index(g) if g in labels else -1 for g in (s.groups or ("all",) * 4)]])
        prev = numbers
    return out


def _label_table(dtype: str, key: str) -> list[str]:
    """The group labels a statistic of arithmetic ``key`` can carry: its own choice groups, then those of the
    narrower keys, qualified by their key (:func:`_at_least`)."""
    out = [label for label, _ in choice_groups(dtype, key)]
    for narrower in ARITHMETIC_KEYS[:ARITHMETIC_KEYS.index(key)]:
        out += [f"{label} [{narrower}]" for label, _ in choice_groups(dtype, narrower)]
    return out


def _decode(v: list | str | None, dtype: str) -> Any:
    if v is None or isinstance(v, str):
        return v
    n, entries, prev = int(v[0]), [], None
    for key, e in zip(ARITHMETIC_KEYS, v[1:], strict=True):
        if e == 0:
            s = prev
        elif e is None:
            s = None
        else:
            labels = _label_table(dtype, key)
            groups = tuple(labels[i] if 0 <= i < len(labels) else "?" for i in e[4])
            s = ErrorStats(e[0], e[1], e[2], e[3], n, groups=groups)
        entries.append((key, s))
        prev = s
    return ArithmeticStats(tuple(entries))


def stored_stats(case: Any, dtype: str, key: str, compute: Callable[[], Any]) -> Any:
    """The ensemble statistics of ``key`` (an output name, or ``stage:layer:leaf``) of ``case`` in ``dtype``:
    from the store, else ``compute()`` (then kept in the store for this process)."""
    entry = _store().setdefault(_digest(case), {}).setdefault(dtype, {})
    if key not in entry:
        entry[key] = _encode(compute(), dtype)
    return _decode(entry[key], dtype)


#: Arithmetic choices (fields of :class:`~pldr_ref.harness.policy.arithmetic.Arithmetic`) whose values group the members
#: for the statistic (:func:`choice_groups`).
CHOICES = ("accumulate", "compute", "tile", "order", "softmax", "exp2", "reciprocal", "fused", "tf32")
#: A choice group counts when at least this many members make that choice: its median is then not one member's
#: value, and one member's unlucky rounding moves it by at most one rank.
MIN_GROUP = 3

#: The arithmetic a verdict can be judged against, narrowest first (:func:`arithmetic_key` maps a backend's declared
#: :data:`pldr_ref.harness.protocol.ARITHMETICS` to one): ``float32-accumulate`` -- the members accumulating and
#: computing elementwise in float32 (and the member evaluating each stage in float64): what GPU kernels do, the
#: default; ``dtype-accumulate-or-elementwise`` -- every member, those accumulating or computing elementwise in the
#: dtype included: the widest legitimate arithmetic.  Both dtype declarations are judged against the widest: judged
#: against the dtype-accumulating members alone (without the elementwise ones), a battery backend accumulating in
#: float16 failed ``g_mode/learned_tiny`` (A_P at 2.4 x the widest reference error, above 4 x that narrower one's).
ARITHMETIC_KEYS = ("float32-accumulate", "dtype-accumulate-or-elementwise")
#: The widest: every member (what the gross-error bound of :mod:`pldr_ref.harness.policy.tolerance` scales).
WIDEST = ARITHMETIC_KEYS[-1]


def arithmetic_key(declared: Any) -> str:
    """The key of :data:`ARITHMETIC_KEYS` a backend declaring ``declared`` (names of
    :data:`pldr_ref.harness.protocol.ARITHMETICS`) is judged against: the widest when it declares any dtype
    arithmetic, else the GPU default."""
    declared = set(declared)
    return WIDEST if declared & {"dtype-accumulate", "dtype-elementwise"} else "float32-accumulate"


def member_arithmetic(m: Arithmetic) -> str:
    """The narrowest key of :data:`ARITHMETIC_KEYS` whose members include ``m``."""
    return WIDEST if "storage" in (m.compute, m.accumulate) else "float32-accumulate"


def covered_members(dtype: str, key: str = WIDEST) -> tuple[int, ...]:
    """Indices (in ``members(dtype)``) of the members arithmetic ``key`` covers."""
    rank = ARITHMETIC_KEYS.index(key)
    return tuple(i for i, m in enumerate(members(dtype)) if ARITHMETIC_KEYS.index(member_arithmetic(m)) <= rank)


def choice_groups(dtype: str, key: str = WIDEST) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """(label, member indices) of the groups the statistic of arithmetic ``key`` takes its median over: every member
    ``key`` covers (label ``all``), and for each value of each arithmetic choice in :data:`CHOICES` (accumulation in
    float32 or in the dtype, elementwise work in float32 or in the dtype, a tile size, an order, online softmax,
    exp2, reciprocals, unfused bias and activation, TF32) the covered members that make it, when at least
    :data:`MIN_GROUP` do.  The member evaluating each stage in float64 makes none of those choices and belongs to
    ``all`` only."""
    ms = members(dtype)
    covered = covered_members(dtype, key)
    groups: list[tuple[str, tuple[int, ...]]] = [("all", covered)]
    for field in CHOICES:
        values = sorted({repr(getattr(ms[i], field)) for i in covered if ms[i].internal})
        for v in values:
            idx = tuple(i for i in covered if ms[i].internal and repr(getattr(ms[i], field)) == v)
            if MIN_GROUP <= len(idx) < len(covered):
                groups.append((f"{field}={v}", idx))
    return tuple(groups)


def robust_stats(per_member: list[Any], dtype: str | None = None, key: str = WIDEST) -> Any:
    """The ensemble's statistic of one output under arithmetic ``key``: each of max error, relative RMS, |offset|
    and |gain| taken as **the largest, over the choice groups of the members ``key`` covers, of the median over the
    group's members** (:func:`choice_groups`; rounded up to :data:`SIGNIFICANT_DIGITS` digits), with the label of
    the group that set it (:attr:`ErrorStats.groups`).

    ``per_member`` in the order of ``members(dtype)``; without ``dtype`` (or with another number of entries) the
    only group is the whole list.  Why per group: the members form clusters by their choices -- accumulation in
    the 16-bit dtype lands 4-5x, elementwise work in the dtype 10x, unfused epilogues up to 15x (a 3-element
    score) from the float32-accumulating majority -- and a median over all members covers the majority only, so a
    legitimate kernel making a minority choice failed (issue 19, the whole battery).  Each choice is covered by
    the typical member making it; no single member's value decides (a group has at least :data:`MIN_GROUP`).
    None (non-finite) when at least half the covered members are non-finite."""
    if dtype is not None and len(per_member) == len(members(dtype)):
        groups = choice_groups(dtype, key)
    else:
        groups = (("all", tuple(range(len(per_member)))),)
    covered = groups[0][1]
    ok = {i: per_member[i] is not None and per_member[i].max_abs is not None for i in covered}
    if not covered or 2 * sum(ok.values()) <= len(covered):
        return None
    n = next(per_member[i].n for i in covered if ok[i])

    def stat(value: Callable[[Any], float]) -> tuple[float, str]:
        best, label = 0.0, "all"
        for name, idx in groups:
            vals = [value(per_member[i]) for i in idx if ok[i]]
            if 2 * len(vals) > len(idx):  # a group mostly non-finite has no median
                med = float(np.median(np.asarray(vals, dtype=np.float64)))
                if med > best:
                    best, label = med, name
        return round_up(best), label

    stats = [stat(lambda s: s.max_abs), stat(lambda s: s.rms_rel), stat(lambda s: abs(s.offset)),
             stat(lambda s: abs(s.gain))]
    return ErrorStats(stats[0][0], stats[1][0], stats[2][0], stats[3][0], n,
                      groups=tuple(label for _, label in stats))


def arithmetic_stats(per_member: list[Any], dtype: str) -> ArithmeticStats | None:
    """:func:`robust_stats` of one output under every key of :data:`ARITHMETIC_KEYS`, each number at least that of
    every narrower key (a wider declaration never gets a tighter allowance: its choice groups mix the narrower
    members with the others); None: non-finite under the widest."""
    out: list[tuple[str, ErrorStats | None]] = []
    prev: ErrorStats | None = None
    prev_key = ""
    for key in ARITHMETIC_KEYS:
        s = robust_stats(per_member, dtype, key)
        if s is not None and prev is not None:
            s = _at_least(s, prev, prev_key)
        out.append((key, s))
        if s is not None:
            prev, prev_key = s, key
    return None if out[-1][1] is None else ArithmeticStats(tuple(out))


def _at_least(s: ErrorStats, narrower: ErrorStats, key: str) -> ErrorStats:
    """``s`` with each of max, rms, offset, gain raised to ``narrower``'s (the statistic of arithmetic ``key``) where
    larger, with that group's label qualified by ``key``."""
    pairs = [(s.max_abs, narrower.max_abs), (s.rms_rel, narrower.rms_rel), (s.offset, narrower.offset),
             (s.gain, narrower.gain)]
    labels = s.groups or ("all",) * 4
    low = tuple(g if g.endswith("]") else f"{g} [{key}]" for g in (narrower.groups or ("all",) * 4))
    vals = [max(a, b) for a, b in pairs]
    groups = tuple(lab if a >= b else lo for (a, b), lab, lo in zip(pairs, labels, low, strict=True))
    return ErrorStats(vals[0], vals[1], vals[2], vals[3], s.n, groups=groups)
