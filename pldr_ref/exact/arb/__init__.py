"""The certified ball-arithmetic engine of the exact tier (FLINT's Arb through ``python-flint``).

Every stage of the forward map is evaluated on balls that provably contain the real value
(:mod:`~pldr_ref.exact.arb.stages`; matrix products through ``arb_mat``); each value is then
rounded to float64 *with a certificate* - both ends of its ball round to the same binary64 - and
Ziv's strategy raises the working precision until every value is certified or a stated limit is
reached (:mod:`~pldr_ref.exact.arb.ziv`).  python-flint is a core dependency of pldr-ref.

* :func:`forward` / :func:`forward_certified` - the full forward trace (``pldr_ref.exact.forward(...,
  engine="arb")`` calls :func:`forward`);
* :func:`arb_op` - op-level certified values (the op names of ``pldr_ref.exact.exact_op``);
* :func:`certify` - Ziv's loop over any staged ball computation.
"""

from pldr_ref.exact.arb.model import UncertifiedError, forward, forward_certified, initial_precision, trace_names
from pldr_ref.exact.arb.ops import ARB_OPS, arb_op, arb_op_certified
from pldr_ref.exact.arb.ziv import Certified, certify, next_precision

__all__ = [
    "ARB_OPS",
    "Certified",
    "UncertifiedError",
    "arb_op",
    "arb_op_certified",
    "certify",
    "forward",
    "forward_certified",
    "initial_precision",
    "next_precision",
    "trace_names",
]
