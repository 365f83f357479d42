"""Shared test configuration: hypothesis profiles ``ci`` (default) and ``thorough``.

Select with ``HYPOTHESIS_PROFILE=thorough pytest`` (or ``--hypothesis-profile=thorough``).

Both profiles are deterministic and portable (issue 10 item 3): ``derandomize=True`` draws each test's
examples from a seed derived from the test's own source, so the outcome does not depend on the checkout
path, the machine, the test order or earlier runs; ``database=None`` keeps no example database (a
replayed failure from a previous run would make two runs of the same commit differ).
"""

import os

from hypothesis import HealthCheck, settings

#: Examples per property in the default run and in the thorough run.
CI_EXAMPLES = 25
THOROUGH_EXAMPLES = 1000

settings.register_profile(
    "ci", max_examples=CI_EXAMPLES, derandomize=True, database=None, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "thorough", max_examples=THOROUGH_EXAMPLES, derandomize=True, database=None, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
