"""Hypothesis profiles: "ci" is derandomized and bounded so CI is reproducible and fast;
"dev" explores more. Pick with HYPOTHESIS_PROFILE (default: ci when CI is set, else dev)."""

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, max_examples=150, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", max_examples=300, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci" if os.environ.get("CI") else "dev"))
