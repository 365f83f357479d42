"""pldr_ref: float64 and exact reference implementation of PLDR-LLM and Power Law Graph Attention."""

from pldr_ref.config import PLDRConfig
from pldr_ref.layer import LAYER_STAGES, LayerTrace, decoder_layer
from pldr_ref.model import ForwardOutput, forward
from pldr_ref.params import Params, init_params, param_shapes, perturb_params, with_fixed_g

__version__ = "0.1.0"

__all__ = [
    "LAYER_STAGES",
    "ForwardOutput",
    "LayerTrace",
    "PLDRConfig",
    "Params",
    "__version__",
    "decoder_layer",
    "forward",
    "init_params",
    "param_shapes",
    "perturb_params",
    "with_fixed_g",
]
