"""Shared test configuration: hypothesis profiles ``ci`` (default) and ``thorough``.

Select with ``HYPOTHESIS_PROFILE=thorough pytest`` (or ``--hypothesis-profile=thorough``).
"""

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=25, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "thorough", max_examples=1000, derandomize=False, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
