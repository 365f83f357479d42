"""Size guard: the bytes a config's parameters and a traced forward will allocate, refused above a budget.

Without it a config such as ``num_layers=10**8`` grinds for tens of seconds through shape bookkeeping into a
bare ``MemoryError``.  The estimates are closed-form (O(1) in the config, computed before any allocation) and
are upper bounds of what :func:`pldr_ref.params.init_params` and :func:`pldr_ref.model.forward` allocate at
their peak, within a factor 3 (``tests/test_hostile_size.py`` measures both with ``tracemalloc``).

Budget: :data:`DEFAULT_BUDGET_BYTES` (32 GiB), or the environment variable ``PLDR_REF_MEMORY_BUDGET`` -- a
byte count with an optional K/M/G/T suffix (powers of 1024), e.g. ``PLDR_REF_MEMORY_BUDGET=200G``, or
``none`` to switch the guard off -- or the ``budget`` argument of the check functions.
"""

from __future__ import annotations

import math

from pldr_ref.config import PLDRConfig
from pldr_ref.env_vars import BYTE_SUFFIXES, read_env
from pldr_ref.switches import added_params

#: Environment variable overriding the budget (bytes, optional K/M/G/T suffix; "none" disables the guard).
BUDGET_ENV = "PLDR_REF_MEMORY_BUDGET"
#: Default budget: 32 GiB (the v510-110m preset's parameters take 0.9 GB, its traced forward at B=1,
#: S=1024 about 2 GB).
DEFAULT_BUDGET_BYTES = 32 * 2**30
#: Bytes of one float64.
FLOAT64_BYTES = 8
#: Suffix -> multiplier of the budget variable.
SUFFIXES = BYTE_SUFFIXES
#: [B, S, d] arrays one layer's trace keeps: x, q, k, q_rot, k_rot, v, ctx, attn_out, out1, ffn_out, out2.
TRACE_ROW_ARRAYS = 11
#: [B, H, (S,) d_k, d_k] arrays one layer's trace keeps: A0, A, A_LM, A_P, G_LM.
TRACE_METRIC_ARRAYS = 5
#: [B, H, S, S] arrays: kept per layer (scores, E) and live as temporaries (mask arithmetic, softmax).
TRACE_SCORE_ARRAYS = 2
WORK_SCORE_ARRAYS = 2
#: GLU hidden arrays live at once (W1 z, W2 z, their product).
GLU_HIDDEN_ARRAYS = 3
#: Copies of the parameters alive while they are built (the drawn arrays and the frozen copy in Params).
PARAMS_BUILD_COPIES = 2
#: Python objects beside the arrays (names, dicts, trace records): a fixed allowance.
FIXED_OVERHEAD_BYTES = 2**17


class MemoryBudgetError(ValueError):
    """A config or forward whose estimated allocation exceeds the memory budget; the message names the
    estimate, the budget and how to raise it."""


def memory_budget(budget: int | None = None) -> int | None:
    """The budget in bytes: ``budget`` if given, else ``PLDR_REF_MEMORY_BUDGET``, else the default;
    None when the variable says ``none`` (guard off).  A malformed variable is an
    :class:`~pldr_ref.env_vars.EnvVarError` (a ValueError) naming it (:func:`pldr_ref.env_vars.read_env`)."""
    if budget is not None:
        return int(budget)
    return read_env(BUDGET_ENV, DEFAULT_BUDGET_BYTES)


def parameter_count(config: PLDRConfig) -> int:
    """Scalars of every tensor :func:`pldr_ref.params.param_shapes` lists (the fixed-G buffer included),
    in closed form."""
    c = config
    d, dk, h, w = c.d_model, c.d_k, c.num_heads, c.metric_width

    def glu(n_in: int, hidden: int, n_out: int) -> int:
        return 2 * hidden * n_in + n_out * hidden + (2 * hidden + n_out if c.glu_bias else 0)

    layer = 4 * (d * d + (d if c.attn_bias else 0))
    if c.metric_learner == "v500":
        layer += 2 * dk
    elif c.metric_learner == "v900":
        layer += (w * dk + w) + 2 * w + (dk * w + dk) + 2 * dk
    if c.metric_learner != "none":
        layer += c.num_reslayerA * (c.num_denseA * glu(w, c.A_dff, w) + 2 * w)
    if c.uses_plga_params:
        layer += 5 * h * dk * dk
    layer += glu(d, c.dff, d) + 4 * d
    total = c.vocab_size * d + 2 * d + c.num_layers * layer + c.vocab_size * d + (c.vocab_size if c.final_bias else 0)
    if not c.uses_plga_params:
        total += c.num_layers * 3 * h * dk * dk
    for per_layer, times in ((True, c.num_layers), (False, 1)):  # the tensors switch values add
        total += times * sum(math.prod(a.resolve(c)) for a in added_params(c, per_layer=per_layer))
    return total


def parameter_bytes(config: PLDRConfig) -> int:
    """Bytes of the float64 parameters of ``config``."""
    return FLOAT64_BYTES * parameter_count(config)


def build_bytes(config: PLDRConfig) -> int:
    """Upper estimate of the bytes building the parameters allocates at its peak (drawn arrays, their frozen
    copy, one temporary of the largest tensor, a fixed allowance for Python objects)."""
    c = config
    largest = max(c.vocab_size * c.d_model, c.dff * c.d_model, c.d_model * c.d_model,
                  0 if c.uses_plga_params else c.num_layers * 3 * c.num_heads * c.d_k * c.d_k)
    return PARAMS_BUILD_COPIES * parameter_bytes(config) + FLOAT64_BYTES * largest + FIXED_OVERHEAD_BYTES


def forward_bytes(config: PLDRConfig, batch: int, seq_len: int, *, keep_trace: bool = True) -> int:
    """Upper estimate of the bytes a float64 forward of ``batch`` x ``seq_len`` tokens allocates (the
    parameters excluded): every layer's trace when ``keep_trace`` (else one layer's), the live temporaries
    of one layer (attention scores, GLU hidden arrays, metric-learner hidden arrays), embedding and logits."""
    c = config
    b, s, d, h, dk = int(batch), int(seq_len), c.d_model, c.num_heads, c.d_k
    g = s if c.gram_mode == "cumulative" else 1  # the cumulative Gram keeps one metric per position
    per_layer = (TRACE_ROW_ARRAYS * b * s * d + TRACE_METRIC_ARRAYS * b * h * g * dk * dk
                 + TRACE_SCORE_ARRAYS * b * h * s * s)
    work = (WORK_SCORE_ARRAYS * b * h * s * s + GLU_HIDDEN_ARRAYS * b * s * c.dff
            + GLU_HIDDEN_ARRAYS * b * h * g * c.metric_width * max(c.A_dff, c.metric_width) + 2 * b * s * d)
    kept = c.num_layers if keep_trace else 1
    return FLOAT64_BYTES * (kept * per_layer + work + 3 * b * s * d + 2 * b * s * c.vocab_size) + FIXED_OVERHEAD_BYTES


def _gib(n: int) -> str:
    return f"{n / 2**30:.3g} GiB"


def check_parameter_budget(config: PLDRConfig, budget: int | None = None) -> None:
    """``MemoryBudgetError`` if the parameters of ``config`` exceed the budget (see :func:`memory_budget`)."""
    limit = memory_budget(budget)
    need = build_bytes(config)
    if limit is not None and need > limit:
        raise MemoryBudgetError(
            f"config (num_layers={config.num_layers}, d_model={config.d_model}, dff={config.dff}, "
            f"vocab_size={config.vocab_size}) needs an estimated {_gib(need)} to build its float64 parameters "
            f"({_gib(parameter_bytes(config))} stored), above "
            f"the memory budget of {_gib(limit)}; if the machine has the memory, raise it with "
            f"{BUDGET_ENV}=<bytes, e.g. {need // 2**30 + 1}G> (or {BUDGET_ENV}=none)")


def check_forward_budget(config: PLDRConfig, batch: int, seq_len: int, *, keep_trace: bool = True,
                         budget: int | None = None) -> None:
    """``MemoryBudgetError`` if a forward of ``batch`` x ``seq_len`` tokens is estimated above the budget."""
    limit = memory_budget(budget)
    need = forward_bytes(config, batch, seq_len, keep_trace=keep_trace)
    if limit is not None and need > limit:
        hint = "; keep_trace=False keeps one layer's trace" if keep_trace and config.num_layers > 1 else ""
        raise MemoryBudgetError(
            f"forward of B={batch} x S={seq_len} tokens with num_layers={config.num_layers} is estimated to "
            f"allocate {_gib(need)}, above the memory budget of {_gib(limit)}{hint}; if the machine has the "
            f"memory, raise it with {BUDGET_ENV}=<bytes, e.g. {need // 2**30 + 1}G> (or {BUDGET_ENV}=none)")


def check_load_budget(what: str, need: int, budget: int | None = None) -> None:
    """``MemoryBudgetError`` if loading ``what`` (a file, named in the message) is estimated to allocate ``need``
    bytes, above the budget; called with an estimate from the file's size or headers, before its data is read."""
    limit = memory_budget(budget)
    if limit is not None and need > limit:
        raise MemoryBudgetError(
            f"loading {what} needs an estimated {_gib(need)}, above the memory budget of {_gib(limit)}; if the "
            f"machine has the memory, raise it with {BUDGET_ENV}=<bytes, e.g. {need // 2**30 + 1}G> "
            f"(or {BUDGET_ENV}=none)")
