"""The arithmetic of the forward map, passed to it: the primitives every stage body computes with.

A stage body (:mod:`pldr_ref.layer`, :mod:`pldr_ref.model`, :mod:`pldr_ref.metric_learner`) and every caller above
it (the inference and scoring entry points, the fixture runners, the harness's storage runs) take an ``ops``
argument, an :class:`Ops`: the affine map, the SwiGLU unit, LayerNorm, the activations, the Gram (density)
operators, the PLGA tensors, the attention scores, the softmax (attention weights), the value mix and the RoPE
table and rotation.  The default, :data:`FLOAT64_OPS`, is the float64 reference: the public functions of
:mod:`pldr_ref.linear_map`, :mod:`pldr_ref.glu`, :mod:`pldr_ref.norms`, :mod:`pldr_ref.activations`,
:mod:`pldr_ref.density`, :mod:`pldr_ref.plga`, :mod:`pldr_ref.attention` and :mod:`pldr_ref.rope`.  The
calibration's emulated low-precision arithmetic (:class:`pldr_ref.harness.policy.arithmetic.EmulatedOps`) is a subclass
overriding every primitive; it is handed to the same code, never swapped into a module (no module attribute is
reassigned at run time: ``tests/test_no_module_patching.py``).

The three modules whose own composites call a primitive (:func:`pldr_ref.norms.configured_layer_norm`,
:func:`pldr_ref.attention.masked_attention_weights`, :func:`pldr_ref.rope.apply_rope`) sit below this one, so they
take ``ops=None`` for "this module's float64 function".
"""

from __future__ import annotations

from pldr_ref import activations, attention, density, linear_map, norms, plga, rope
from pldr_ref import glu as swiglu

#: The primitives an :class:`Ops` provides, by name (each the name of its float64 function).
PRIMITIVES: tuple[str, ...] = (
    "linear", "glu", "layer_norm", "sigmoid", "silu", "iswiglu", "density_operator", "cumulative_density_operator",
    "metric_tensor", "potential_tensor", "energy_curvature", "attention_scores", "attention_weights", "mix_values",
    "rope_angles", "rotate_pairs",
)


class Ops:
    """The float64 reference arithmetic: each primitive of :data:`PRIMITIVES` is the reference function of the
    same name (same signature).  A subclass computing in another arithmetic overrides every one of them."""

    linear = staticmethod(linear_map.linear)
    glu = staticmethod(swiglu.glu)
    layer_norm = staticmethod(norms.layer_norm)
    sigmoid = staticmethod(activations.sigmoid)
    silu = staticmethod(activations.silu)
    iswiglu = staticmethod(activations.iswiglu)
    density_operator = staticmethod(density.density_operator)
    cumulative_density_operator = staticmethod(density.cumulative_density_operator)
    metric_tensor = staticmethod(plga.metric_tensor)
    potential_tensor = staticmethod(plga.potential_tensor)
    energy_curvature = staticmethod(plga.energy_curvature)
    attention_scores = staticmethod(attention.attention_scores)
    attention_weights = staticmethod(attention.attention_weights)
    mix_values = staticmethod(attention.mix_values)
    rope_angles = staticmethod(rope.rope_angles)
    rotate_pairs = staticmethod(rope.rotate_pairs)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


#: The float64 reference arithmetic, every ``ops`` argument's default.
FLOAT64_OPS = Ops()

__all__ = ["FLOAT64_OPS", "PRIMITIVES", "Ops"]
