"""Inference and scoring semantics of PLDR-LLM (spec §7-§8; paper §4.4-§4.5, §5.1-§5.2).

Modules: ``cache`` (KV-cache, G-cache, the HF combined G buffer), ``step`` (a cached forward step),
``modes`` (the four native kv x G modes, HF prefill semantics, fixed external G), ``generation``
(greedy / temperature / top-k / top-p decoding), ``scoring`` (the five semantics of paper §4.5 by
name), ``padding`` (appended right padding at the Gram boundary).
"""

from pldr_ref.inference.cache import GCache, KVCache, LayerG, LayerKV
from pldr_ref.inference.generation import GenerationResult, SamplingConfig, generate
from pldr_ref.inference.modes import HF_MODE, NATIVE_MODES, InferenceMode, load_external_g, params_with_external_g
from pldr_ref.inference.step import StepOutput, cached_forward

__all__ = [
    "HF_MODE",
    "NATIVE_MODES",
    "GCache",
    "GenerationResult",
    "InferenceMode",
    "KVCache",
    "LayerG",
    "LayerKV",
    "SamplingConfig",
    "StepOutput",
    "cached_forward",
    "generate",
    "load_external_g",
    "params_with_external_g",
]
