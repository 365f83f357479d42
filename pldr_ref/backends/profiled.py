"""A bundled backend configured to a released code base's profile (issue 30): it declares exactly the switch values
of that profile (``pldr_ref.config.EMULATIONS``), as a backend wrapping the released code would.

``ProfiledBackend(inner, profile)`` runs every case with ``inner`` (e.g. :class:`pldr_ref.backends.numpy32.
Numpy32Backend`, whose float32 arithmetic is what the float32 profiles compute: float32 tables, rotation, score
scale, mask addition and softmax) and declares the profile's value of every switch the profile sets; the other
switches keep the inner backend's declaration.  A profile whose padding comes only from an attention mask
(``pad_source="attention_mask"``, the HF profiles) runs its cases with token padding off.  The harness then judges it
on the templates instantiated at the profile (``pldr-ref validate --profile NAME``), e.g.
``pldr-ref validate --backend pldr_ref.backends.profiled:numpy32_pt_v510_float32 --profile pt-v510-float32``.
``torch_profile_<profile>`` is the bundled torch backend so configured (its bfloat16 and float16 runs).  A profiled
backend declares no isolated stage: it is judged end to end (docs/backends.md section 12, "Verdicts").
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pldr_ref.config import profile_switches
from pldr_ref.harness.protocol import SWITCHES, Capabilities, Unsupported
from pldr_ref.model import resolve_pad_masking
from pldr_ref.switches import BY_NAME

#: RoPE pairings an HF config may choose (``reference_rope``): an HF profile's rope arithmetic follows it.
LAYOUTS = tuple(BY_NAME["rope_layout"].values)


class ProfiledBackend:
    """``inner`` declaring the switch values of ``profile`` (see the module docstring).

    For an HF profile the declared RoPE arithmetic is that of either pairing (HF reads ``reference_rope`` from the
    model config).  A fully masked query row is where ``masked_row`` acts: an inner backend that lists the values
    it implements (``MASKED_ROWS``, e.g. numpy32: zeros, 1/T or NaN forced as the reference does) runs every case;
    any other gives the softmax of what the mask leaves (zeros under the ideal mask), so a case with such a row
    whose ``masked_row`` asks for something else (``nan``: HF eager's NaN rows, ``uniform``) is reported
    unsupported at run time, never misjudged."""

    def __init__(self, inner: Any, profile: str) -> None:
        self.inner = inner
        self.profile = profile
        values: dict[str, tuple[str, ...]] = {}
        for layout in LAYOUTS:
            for k, v in profile_switches(profile, layout).items():
                if k in SWITCHES and v not in values.get(k, ()):
                    values[k] = (*values.get(k, ()), v)
        self.values = values
        self.name = f"{inner.name}@{profile}"

    def capabilities(self) -> Capabilities:
        """The inner capabilities with the profile's value of every switch the profile sets, and no isolated
        stage: the inner backend's ``run_stage`` computes at its own switch values (the torch backend's stages
        mask padding ids, for one), so a profiled backend is judged end to end."""
        caps = self.inner.capabilities()
        return dataclasses.replace(caps, switches={**caps.switches, **self.values}, stages=())

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        """The inner backend's run; token padding off when the profile pads from the attention mask only."""
        c = case.config
        if c is not None and c.masked_row not in inner_masked_rows(self.inner, c) and has_fully_masked_row(case):
            raise Unsupported(f"{self.inner.name} gives a fully masked row the softmax of its masked scores, not "
                              f"masked_row={c.masked_row!r}")
        if c is not None and c.pad_source == "attention_mask":
            case = dataclasses.replace(case, args={"pad_masking": False, **dict(case.args)})
        return self.inner.run_case(case, dtype)


def inner_masked_rows(inner: Any, config: Any) -> tuple[str, ...]:
    """The ``masked_row`` values ``inner`` gives a fully masked row: its ``MASKED_ROWS`` attribute (the values it
    implements) when it has one, else :func:`natural_masked_rows`."""
    return tuple(getattr(inner, "MASKED_ROWS", ())) or natural_masked_rows(config)


def natural_masked_rows(config: Any) -> tuple[str, ...]:
    """The ``masked_row`` values a plain softmax of the masked scores gives: zeros under the ideal mask."""
    return ("arithmetic", "zeros") if config.mask_mode == "ideal" else ("arithmetic",)


def has_fully_masked_row(case: Any) -> bool:
    """Whether a query row of ``case`` has no key left: a layer mask row all True, or a forward whose first key is
    padding (left padding; causal rows see keys up to their own position)."""
    inputs = case.inputs
    if "mask" in inputs:
        return bool(np.asarray(inputs["mask"], dtype=bool).all(axis=-1).any())
    if "attention_mask" in inputs:
        return bool((np.asarray(inputs["attention_mask"])[:, 0] == 0).any())
    pad_masking = resolve_pad_masking(case.config, case.args.get("pad_masking"))
    ids = inputs.get("token_ids")
    return bool(pad_masking and ids is not None and (np.asarray(ids)[:, 0] == case.config.pad_id).any())


def numpy32_profile(profile: str) -> ProfiledBackend:
    """The float32 NumPy backend declaring ``profile``."""
    from pldr_ref.backends.numpy32 import Numpy32Backend

    return ProfiledBackend(Numpy32Backend(), profile)


def numpy32_pt_v510_float32() -> ProfiledBackend:
    """``numpy32_profile("pt-v510-float32")``: the released PT-v510 float32 model's switch values."""
    return numpy32_profile("pt-v510-float32")


def numpy32_profile_pt_v510_float32() -> ProfiledBackend:
    """numpy32 declaring ``pt-v510-float32``."""
    return numpy32_profile("pt-v510-float32")


def numpy32_profile_tf_v500() -> ProfiledBackend:
    """numpy32 declaring ``tf-v500``."""
    return numpy32_profile("tf-v500")


def numpy32_profile_tf_v900() -> ProfiledBackend:
    """numpy32 declaring ``tf-v900``."""
    return numpy32_profile("tf-v900")


def numpy32_profile_hf_sdpa() -> ProfiledBackend:
    """numpy32 declaring ``hf-sdpa``."""
    return numpy32_profile("hf-sdpa")


def numpy32_profile_hf_eager() -> ProfiledBackend:
    """numpy32 declaring ``hf-eager``."""
    return numpy32_profile("hf-eager")


def torch_profile(profile: str) -> ProfiledBackend:
    """The bundled torch backend declaring ``profile`` (its 16-bit runs: in bfloat16 the float32-versus-float64
    arithmetic of the emulation switches is far below the storage rounding; token padding follows the profile,
    a fully masked row it cannot give is unsupported, no isolated stage)."""
    from pldr_ref.backends.torch_backend import TorchBackend

    return ProfiledBackend(TorchBackend(), profile)


def torch_profile_pt_v510_float32() -> ProfiledBackend:
    """torch declaring ``pt-v510-float32``."""
    return torch_profile("pt-v510-float32")


def torch_profile_tf_v500() -> ProfiledBackend:
    """torch declaring ``tf-v500``."""
    return torch_profile("tf-v500")


def torch_profile_tf_v900() -> ProfiledBackend:
    """torch declaring ``tf-v900``."""
    return torch_profile("tf-v900")


def torch_profile_hf_sdpa() -> ProfiledBackend:
    """torch declaring ``hf-sdpa``."""
    return torch_profile("hf-sdpa")


def torch_profile_hf_eager() -> ProfiledBackend:
    """torch declaring ``hf-eager``."""
    return torch_profile("hf-eager")


__all__ = ["ProfiledBackend", "numpy32_profile", "numpy32_profile_hf_eager", "numpy32_profile_hf_sdpa",
           "numpy32_profile_pt_v510_float32", "numpy32_profile_tf_v500", "numpy32_profile_tf_v900",
           "numpy32_pt_v510_float32", "torch_profile", "torch_profile_hf_eager", "torch_profile_hf_sdpa",
           "torch_profile_pt_v510_float32", "torch_profile_tf_v500", "torch_profile_tf_v900"]
