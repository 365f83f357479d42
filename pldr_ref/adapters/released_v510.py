"""The declaration of the authors' released PyTorch v510 model for :class:`~pldr_ref.adapters.torch_module.
TorchModuleBackend` (module names only: the code is obtained by the user from the authors' repository,
github.com/burcgokden/PLDR-LLM-with-KVG-cache, ``src/pldr_model_v510/``; pldr_ref does not vendor it).

Facts the declaration rests on (read from that code):

* ``PLDR_Model([ids, mask])`` returns ``(logits, decoder output, attention weights, KV caches)``; ``mask`` is the
  float32 ``[B, 1, S, S]`` mask, 1 = masked, added as ``Ep + mask * -1e9``; the forward without a KV cache starts
  at position 0 (torchtune's ``input_pos`` is only passed with a cache);
* the golden parameter names are its state-dict names (``decoder.dec_layers.{l}.mha1.wq.weight`` ...);
* ``decoder.embedding`` is scaled inline by the float32 ``sqrt(d)`` (the scaled value is what
  ``decoder.layernorm1`` receives); every decoder layer is called with one list ``[x, mask]``;
* ``mha1.wq`` / ``wk`` / ``wv`` return ``[B, S, d]``; ``mha1.rotary_embedding`` (torchtune) is called on queries,
  then keys, in ``[B, S, H, d_k]``; ``A0 = q^T q`` is computed inline and fed to ``mha1.layernorm1``;
* ``mha1.plgatt_layer`` is called with ``[q, k, v, A, mask]`` and returns ``(Z, [A_LM, P, a, b_a, G_LM, scores])``
  -- returned for inspection only (its inputs are consumed inline); ``A_P = torch.pow(A_LM, P)`` and
  ``E = F.softmax(..., dim=-1)`` are inline calls in that module.
"""

from __future__ import annotations

from typing import Any

from pldr_ref.adapters.stage_map import Call, Input, Output
from pldr_ref.harness.protocol import Unsupported

_L = "decoder.dec_layers.{l}"
_M = f"{_L}.mha1"
_G = f"{_M}.plgatt_layer"

#: Golden trace name -> where the released v510 model computes it (all 21 entries).
V510_STAGE_MAP = {
    "embed": Input("decoder.layernorm1"),
    "x0": Output("decoder.layernorm1"),
    "layers.{l}.x": Input(_L, arg=0, pick=(0,)),
    "layers.{l}.q": Output(f"{_M}.wq", layout="bs(hd)"),
    "layers.{l}.k": Output(f"{_M}.wk", layout="bs(hd)"),
    "layers.{l}.v": Output(f"{_M}.wv", layout="bs(hd)"),
    "layers.{l}.q_rot": Output(f"{_M}.rotary_embedding", layout="bshd"),
    "layers.{l}.k_rot": Output(f"{_M}.rotary_embedding", call=1, layout="bshd"),
    "layers.{l}.A0": Input(f"{_M}.layernorm1"),
    "layers.{l}.A": Input(_G, arg=0, pick=(3,)),
    "layers.{l}.A_LM": Output(_G, pick=(1, 0)),
    "layers.{l}.A_P": Call("torch.pow", _G),
    "layers.{l}.G_LM": Output(_G, pick=(1, 4)),
    "layers.{l}.scores": Output(_G, pick=(1, 5)),
    "layers.{l}.E": Call("softmax", _G),
    "layers.{l}.ctx": Input(f"{_M}.dense"),
    "layers.{l}.attn_out": Output(_M, pick=(0,)),
    "layers.{l}.out1": Output(f"{_L}.layernorm1"),
    "layers.{l}.ffn_out": Output(f"{_L}.ffn"),
    "layers.{l}.out2": Output(f"{_L}.layernorm2"),
    "logits": Output("final_layer"),
}

#: The switch values the released model computes beyond its emulation profile (``pt-v510-float32``).
V510_SWITCHES = {"metric_learner": "v500", "g_mode": "learned", "gram_mode": "global"}


def v510_call(model: Any, ids: Any, mask: Any, start_pos: int) -> Any:
    """``model([ids, mask])[0]``: the logits of the released forward (positions from 0 only)."""
    if start_pos:
        raise Unsupported("the released v510 forward without a KV cache starts at position 0")
    return model([ids, mask])[0]


def v510_factory(pldr_model_v510: Any) -> Any:
    """``config -> PLDR_Model(...)`` for the imported module ``pldr_model_v510`` of the authors' repository."""
    def build(c: Any) -> Any:
        return pldr_model_v510.PLDR_Model(
            num_layers=c.num_layers, d_model=c.d_model, num_heads=c.num_heads, dff=c.dff,
            input_vocab_size=c.vocab_size, A_dff=c.A_dff, num_reslayerA=c.num_reslayerA, num_denseA=c.num_denseA,
            max_seq_len=c.max_seq_len)
    return build
