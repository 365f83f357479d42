"""A bundled backend configured to a released code base's profile (issue 30): it declares exactly the switch values
of that profile (``pldr_ref.config.EMULATIONS``), as a backend wrapping the released code would.

``ProfiledBackend(inner, profile)`` runs every case with ``inner`` (e.g. :class:`pldr_ref.backends.numpy32.
Numpy32Backend`, whose float32 arithmetic is what the float32 profiles compute: float32 tables, rotation, score
scale, mask addition and softmax) and declares the profile's value of every switch the profile sets; the other
switches keep the inner backend's declaration.  A profile whose padding comes only from an attention mask
(``pad_source="attention_mask"``, the HF profiles) runs its cases with token padding off.  The harness then judges it
on the templates instantiated at the profile (``pldr-ref validate --profile NAME``), e.g.
``pldr-ref validate --backend pldr_ref.backends.profiled:numpy32_pt_v510_float32 --profile pt-v510-float32``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from pldr_ref.config import profile_switches
from pldr_ref.harness.protocol import SWITCHES, Capabilities


class ProfiledBackend:
    """``inner`` declaring the switch values of ``profile`` (see the module docstring)."""

    def __init__(self, inner: Any, profile: str, rope_layout: str = "interleaved") -> None:
        self.inner = inner
        self.profile = profile
        self.values = {k: v for k, v in profile_switches(profile, rope_layout).items() if k in SWITCHES}
        self.name = f"{inner.name}@{profile}"

    def capabilities(self) -> Capabilities:
        """The inner capabilities with the profile's value for every switch the profile sets."""
        caps = self.inner.capabilities()
        switches = {**caps.switches, **{k: (v,) for k, v in self.values.items()}}
        return dataclasses.replace(caps, switches=switches)

    def run_case(self, case: Any, dtype: str) -> dict[str, np.ndarray]:
        """The inner backend's run; token padding off when the profile pads from the attention mask only."""
        if case.config is not None and case.config.pad_source == "attention_mask":
            case = dataclasses.replace(case, args={"pad_masking": False, **dict(case.args)})
        return self.inner.run_case(case, dtype)


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


__all__ = ["ProfiledBackend", "numpy32_profile", "numpy32_profile_hf_eager", "numpy32_profile_hf_sdpa",
           "numpy32_profile_pt_v510_float32", "numpy32_profile_tf_v500", "numpy32_profile_tf_v900",
           "numpy32_pt_v510_float32"]
