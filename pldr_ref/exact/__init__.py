"""The exact tier: every stage of PLDR-LLM over mpmath numbers, correctly rounded to float64.

Independent of the float64 functions (only ``PLDRConfig`` / ``Params`` structure is shared).

* :func:`forward` - full forward trace (``embed``, ``x0``, ``layers.{l}.{stage}``, ``logits``),
  each value the computed real rounded once to binary64, guarded by a ``2 * dps`` re-run;
* :func:`exact_op` - op-level exact values on NumPy inputs (names of ``pldr_ref.registry.OP_FUNCTIONS``);
* :func:`blockwise_loss` - blockwise cross-entropy and DAG terms;
* :mod:`pldr_ref.exact.certified` - interval enclosures of the elementwise ops;
* :mod:`pldr_ref.exact.numbers` - exact float64 <-> mpf conversion and correct rounding;
* :mod:`pldr_ref.exact.accuracy` - the ``pldr-ref accuracy`` report;
* :mod:`pldr_ref.exact.arb` - the second engine, certified ball arithmetic (python-flint), reached
  with ``forward(..., engine="arb")``; it scales to the real architecture.
"""

from pldr_ref.exact.guard import PrecisionError
from pldr_ref.exact.loss import blockwise_loss
from pldr_ref.exact.model import forward, forward_mp
from pldr_ref.exact.numbers import mpf_exact, round_mpf, to_float64, to_mp, ulp_distance
from pldr_ref.exact.op_api import OPS, exact_op

__all__ = [
    "OPS",
    "PrecisionError",
    "blockwise_loss",
    "exact_op",
    "forward",
    "forward_mp",
    "mpf_exact",
    "round_mpf",
    "to_float64",
    "to_mp",
    "ulp_distance",
]
