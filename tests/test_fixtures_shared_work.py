"""Work shared across the cases of one config (issue 30, the v510-110m ONNX suite): the memoized parameter sets,
rounded parameter sets and perturbation sign patterns give exactly what a fresh computation gives, the chunked
SplitMix64 generator is the definition, the config target's instances share one seed, and a backend still cannot
write into a parameter it is handed as a view."""

from __future__ import annotations

import numpy as np
import pytest

from pldr_ref.config import PLDRConfig
from pldr_ref.fixtures import baselines, splitmix, weights
from pldr_ref.fixtures.build import perturbation_signs
from pldr_ref.fixtures.templates import CONFIG_PARAMS_SEED, Target, all_templates, instantiate
from pldr_ref.harness.verdict.localize import read_only

TINY = PLDRConfig.preset("tiny")


@pytest.mark.parametrize("n", [0, 1, 7, splitmix.BLOCK - 1, splitmix.BLOCK, splitmix.BLOCK + 3])
def test_the_chunked_sequence_is_the_counter_definition(n):
    seed = 0xDEADBEEF12345
    want = splitmix.splitmix64_at(seed, np.arange(n, dtype=np.uint64))
    assert np.array_equal(splitmix.splitmix64_sequence(seed, n), want)
    bits = splitmix.splitmix64_at(splitmix.stream_key(3, "w"), np.arange(n, dtype=np.uint64))
    got = splitmix.uniform_symmetric(3, "w", (n,), 0.3)
    assert np.array_equal(got.view(np.uint64), (splitmix.to_symmetric_interval(bits) * 0.3).view(np.uint64))


def test_a_memoized_parameter_set_is_the_generated_one():
    weights._PARAMS_MEMO.clear()
    first = weights.fixture_params(TINY, 5)
    assert weights.fixture_params(TINY, 5) is first  # generated once
    weights._PARAMS_MEMO.clear()
    fresh = weights.fixture_params(TINY, 5)
    assert fresh is not first and all(np.array_equal(fresh[k], first[k]) for k in first)
    scaled = weights.fixture_params(TINY, 5, {"*.mha1.wq.weight": 0.5})
    assert np.array_equal(scaled["decoder.dec_layers.0.mha1.wq.weight"],
                          0.5 * fresh["decoder.dec_layers.0.mha1.wq.weight"])
    # negative control: another seed is another set
    assert not np.array_equal(weights.fixture_params(TINY, 6)["decoder.embedding.weight"],
                              fresh["decoder.embedding.weight"])


def test_a_memoized_rounded_set_is_the_rounded_one():
    params = weights.fixture_params(TINY, 5)
    got = baselines.rounded_params(params, np.float16)
    assert baselines.rounded_params(params, np.float16) is got
    for k, v in params.items():
        assert np.array_equal(got[k], baselines.storage_round(v, np.float16))
    # negative control: another dtype is another rounding
    assert not np.array_equal(baselines.rounded_params(params, np.float32)["decoder.embedding.weight"],
                              got["decoder.embedding.weight"])


def test_kept_perturbation_signs_are_the_stream_signs():
    for shape in [(3, 5), (), (0,), (2, 3, 9)]:
        want = np.where((splitmix.stream_bits(2, "param:x", shape) >> np.uint64(63)) == 1, 1.0, -1.0)
        for _ in range(2):  # drawn, then read back from the kept bits
            got = perturbation_signs(2, "param:x", shape)
            assert got.shape == want.shape and np.array_equal(got, want)
    assert not np.array_equal(perturbation_signs(1, "param:x", (64,)), perturbation_signs(2, "param:x",
                                                                                                        (64,)))


def test_a_config_target_shares_one_seed_and_leaves_out_the_switch_templates():
    target = Target(config=TINY.replace(vocab_size=48))
    made = {}
    for t in all_templates():
        got = instantiate(t, target, max_seq_len=64)
        made[t.name] = got
    specs = [s for s in made.values() if not isinstance(s, str)]
    assert specs and {s.params_seed for s in specs} == {CONFIG_PARAMS_SEED}
    assert made["model/tiny_padded_exact"].baselines  # a small model keeps its naive baselines ...
    big = instantiate(next(t for t in all_templates() if t.name == "model/tiny_padded_exact"),
                      Target(config=PLDRConfig.preset("v510-110m")), max_seq_len=64)
    assert big.params_seed == CONFIG_PARAMS_SEED and not big.baselines  # ... a 110 M-parameter one does not
    assert "switch template" in made["model/switch_score_scale_float32"]
    assert not isinstance(made["model/tiny_padded_exact"], str)
    # negative control: a profile target keeps each template's own seed and its switch templates
    own = instantiate(next(t for t in all_templates() if t.name == "model/switch_score_scale_float32"),
                      Target(profile="pt-v510-float32"))
    assert not isinstance(own, str) and own.params_seed != CONFIG_PARAMS_SEED


def test_a_parameter_handed_as_a_view_cannot_be_made_writeable():
    params = weights.fixture_params(TINY, 5)
    handed = read_only(dict(params.items()))
    w = handed["decoder.embedding.weight"]
    assert np.shares_memory(w, params["decoder.embedding.weight"])  # no copy of a read-only owner
    with pytest.raises(ValueError):
        w.flags.writeable = True
    # negative control: a read-only view of a writeable array is copied (its view could be made writeable)
    base = np.arange(4.0)
    view = base[:]
    view.flags.writeable = False
    got = read_only({"v": view})["v"]
    assert not np.shares_memory(got, base)


def _storage_round_by_the_rule(x: np.ndarray, dtype: object) -> np.ndarray:
    """storage_round's rule spelt out with pldr_ref.format_rounding (the definition; slow)."""
    from pldr_ref.format_rounding import FLOAT32, float_format, round_to_format

    a = np.array(x, dtype=np.float64)
    fmt = float_format(dtype)
    mag = np.abs(a)
    outside = np.isfinite(a) & ((mag > fmt.max) | ((mag > 0) & (mag < fmt.smallest_normal)))
    keep64 = (mag > FLOAT32.max) | ((mag > 0) & (mag < FLOAT32.smallest_normal))
    return np.where(outside, np.where(keep64, a, round_to_format(a, FLOAT32)), round_to_format(a, fmt))


def _rounding_traps() -> np.ndarray:
    """Normals over the whole float64 range, exact ties and values 2^-40 off a tie of each format (the ones a
    rounding through float32 gets wrong), both ends of each format's normal range, zeros, infinities, NaN."""
    from pldr_ref.format_rounding import FORMATS

    rng = np.random.default_rng(30)
    parts = [rng.standard_normal(3000) * 10.0 ** rng.integers(-320, 308, 3000), [0.0, -0.0, np.inf, -np.inf, np.nan]]
    for f in FORMATS.values():
        m = rng.integers(2 ** (f.precision - 1), 2**f.precision, 500).astype(np.float64)
        tie = (m + 0.5) * 2.0 ** (rng.integers(f.emin, f.emax, 500) - f.precision + 1)
        steps = 1 + 2.0 ** -np.arange(1, 53)
        edge = np.concatenate([f.smallest_normal * steps, f.max * steps])
        parts += [tie, tie * (1 + 2.0**-40), tie * (1 - 2.0**-40), edge, edge * (1 - 2.0**-52) / (1 + 2.0**-52)]
    x = np.concatenate(parts)
    return np.concatenate([x, -x])


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_storage_round_is_its_rule_bit_for_bit(dtype):
    """The fast storage rounding (bits, IEEE cast, the out-of-range elements redone) is the rule of its docstring
    computed by pldr_ref.format_rounding, bit for bit (signed zeros, NaN), on arrays of any layout and on scalars."""
    x = _rounding_traps()
    want = _storage_round_by_the_rule(x, baselines.PRECISIONS[dtype])
    got = baselines.storage_round(x, baselines.PRECISIONS[dtype])
    same = (got.view(np.uint64) == want.view(np.uint64)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]
    strided = x[: x.size // 2 * 2].reshape(-1, 2)[::-3, ::-1]
    assert np.array_equal(baselines.storage_round(strided, baselines.PRECISIONS[dtype]),
                          _storage_round_by_the_rule(strided, baselines.PRECISIONS[dtype]), equal_nan=True)
    assert baselines.storage_round(np.float64(1.0 + 2.0**-30), baselines.PRECISIONS[dtype]).shape == ()
    # negative control: rounding through float32 first (two roundings) misses the near-ties of the 16-bit formats
    if dtype != "float32":
        twice = _storage_round_by_the_rule(_storage_round_by_the_rule(x, np.float32), baselines.PRECISIONS[dtype])
        assert not np.array_equal(twice, want, equal_nan=True)


def _sum_by_the_definition(a: np.ndarray, b: np.ndarray, arith, dtype: str) -> np.ndarray:
    """matmul of the emulated arithmetic, one output element at a time: operands rounded, order reversed or
    not, zero-padded tiles, within a tile the first product rounded to the accumulator then acc = RN(acc + p) with
    the exact float64 product, then the tiles' partial sums added in order (float32 additions for a float32
    accumulator, RN(total + part) for a 16-bit one)."""
    from pldr_ref.harness.policy.arithmetic import round_to_dtype

    a = round_to_dtype(a, "tf32" if arith.tf32 and dtype == "float32" else dtype)
    b = round_to_dtype(b, "tf32" if arith.tf32 and dtype == "float32" else dtype)
    f32 = arith.accumulate == "float32" or dtype == "float32"

    def rn(v: float) -> float:
        return float(np.float32(v)) if f32 else float(round_to_dtype(np.array(v), dtype))

    k = a.shape[-1]
    order = list(range(k))[::-1] if arith.order == "reverse" else list(range(k))
    tile = min(arith.tile or k, k)
    order += [None] * (-len(order) % tile)
    out = np.empty((*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1]))
    for idx in np.ndindex(out.shape):
        row = np.broadcast_to(a, out.shape[:-2] + a.shape[-2:])[idx[:-1]]
        col = np.broadcast_to(b, out.shape[:-2] + b.shape[-2:])[idx[:-2]][:, idx[-1]]
        total = None
        for t0 in range(0, len(order), tile):
            acc = None
            for j in order[t0:t0 + tile]:
                p = 0.0 if j is None else float(row[j]) * float(col[j])
                acc = rn(p) if acc is None else rn(acc + p)
            if total is not None:
                acc = float(np.float32(total) + np.float32(acc)) if f32 else rn(total + acc)
            total = acc
        out[idx] = total
    return out


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_the_emulated_sums_are_their_definition(dtype):
    """Every member's matmul (the float32-product fast path, the float64-product path, 16-bit accumulators, tiles,
    reverse order, padding, broadcast batch axes) is the definition computed element by element, bit for bit;
    negative control: the same sums in one pass instead of tiles differ."""
    from pldr_ref.harness.policy import arithmetic as ar
    from pldr_ref.harness.policy.ensemble import members

    rng = np.random.default_rng(7)
    a = rng.standard_normal((2, 1, 37)) * 10.0 ** rng.integers(-2, 3, (2, 1, 37))
    b = rng.standard_normal((2, 37, 3))
    for m in members(dtype):
        if not m.internal:
            continue
        got = ar.EmulatedOps(m, dtype).matmul(a, b)
        want = _sum_by_the_definition(a, b, m, dtype)
        assert np.array_equal(got, want), m.name
    tiled = next(m for m in members(dtype) if m.tile == 16 and m.accumulate == "storage")
    import dataclasses

    one_pass = _sum_by_the_definition(a, b, dataclasses.replace(tiled, tile=None), dtype)
    assert not np.array_equal(ar.EmulatedOps(tiled, dtype).matmul(a, b), one_pass)


def test_a_remembered_rounded_weight_gives_the_rounded_product():
    """linear() skips rounding a read-only weight found already rounded (the parameters every member shares): the
    same result as a writable copy, rounded each time; a read-only weight that is not rounded is rounded once and
    its rounded copy remembered (the TF32 member's operands), never the weight itself (negative control: its
    product is the rounded one, not the float64 one)."""
    from pldr_ref.harness.policy import arithmetic as ar
    from pldr_ref.harness.policy.ensemble import members

    rng = np.random.default_rng(11)
    x = rng.standard_normal((3, 20))
    raw = rng.standard_normal((5, 20))
    member = ar.EmulatedOps(members("float16")[1], "float16")
    rounded = baselines.storage_round(raw, np.float16)
    for w in (rounded, raw):
        ro = w.copy()
        ro.setflags(write=False)
        first, again, fresh = member.linear(x, ro), member.linear(x, ro), member.linear(x, w.copy())
        assert np.array_equal(first, fresh) and np.array_equal(again, fresh)
        held, operand = ar._ROUNDED_OPERANDS[(id(ro), "float16")]
        assert held is ro and (operand is ro) == (w is rounded) and not operand.flags.writeable
        assert np.array_equal(operand, rounded)
    assert not np.array_equal(member.linear(x, raw), member.matmul(x, raw.T, y_rounded=True))


def test_a_suite_build_perturbs_a_shared_parameter_set_once():
    """Inside shared_perturbations (a suite build), the perturbed parameter sets of a config target's instances are
    made once and shared: every case's files are the bytes computed without sharing; the memo holds one set per
    perturbation, for the block only.  Negative control: the sets of two seeds differ."""
    import importlib

    build = importlib.import_module("pldr_ref.fixtures.build")  # the package's name `build` is a function

    target = Target(config=TINY.replace(vocab_size=48))
    names = ("model/tiny_padded_exact", "model/small")
    specs = [instantiate(next(t for t in all_templates() if t.name == n), target, max_seq_len=64) for n in names]
    alone = [build.compute_case(s)[0] for s in specs]
    with build.shared_perturbations():
        shared = [build.compute_case(s)[0] for s in specs]
        memo = dict(build._PERTURBED_MEMO)
    assert shared == alone
    assert build._PERTURBED_MEMO is None
    params = build.spec_params(specs[0])[0]
    assert params is build.spec_params(specs[1])[0]  # one parameter set ...
    seeds = build.PERTURBATION_SEEDS + ((build.FLOAT32_PERTURBATION_SEED,) if build._uses_float32(specs[0]) else ())
    assert {(key[1], hit[0] is params) for key, hit in memo.items()} == {(s, True) for s in seeds}
    one, two = (memo[(id(params), s, 2.0**-52)][1] for s in build.PERTURBATION_SEEDS)  # ... perturbed once per seed
    w = next(iter(dict(params.items())))
    assert not np.array_equal(one[w], two[w]) and np.array_equal(one[w], build._perturb(params[w], 1, f"param:{w}"))


def test_a_weights_remembered_facts_keep_the_products_of_the_definition():
    """The float32-product path of a float32-accumulating member reads a read-only weight's facts (float32 values,
    smallest nonzero magnitude) once (``_OPERAND_FACTS``): where products fall below float32's normal range it
    still takes the float64 products, so the result is the definition's, as with a writable copy.  Negative
    control: products formed in float32 there (a fact claiming they need no check) differ."""
    from pldr_ref.harness.policy import arithmetic as ar
    from pldr_ref.harness.policy.ensemble import members

    rng = np.random.default_rng(5)
    member = next(m for m in members("float16") if m.internal and m.accumulate == "float32" and m.tile is None
                  and m.order == "forward")
    ops = ar.EmulatedOps(member, "float16")
    # below float16's normal range: kept in float32 (range-aware); their products are float32 subnormals, added
    # to a first product in float32's normal range (where rounding them first differs: two roundings)
    x = rng.standard_normal((8, 64)) * 1e-20
    w = rng.standard_normal((16, 64)) * 1e-20
    x[:, 0], w[:, 0] = 1e-18, 1e-18
    x, w = (baselines.storage_round(v, np.float16) for v in (x, w))
    ro = w.copy()
    ro.setflags(write=False)
    want = _sum_by_the_definition(x, w.T, member, "float16")
    for _ in range(2):  # the facts measured, then read back
        assert np.array_equal(ops.matmul(x, ro.T, y_rounded=True), want)
    assert ar._OPERAND_FACTS[id(ro)][0] is ro
    assert np.array_equal(ops.matmul(x, w.T.copy(), y_rounded=True), want)
    lying = ar._float32_running_sums(x, w.T.copy(), 64, 1, (), b_facts=(True, 1.0))
    assert lying is not None and not np.array_equal(lying, want)
