"""The Hypothesis profiles ("ci": derandomized and bounded; "dev": explores more) are registered and loaded in
the suite's root ``tests/conftest.py``, so a targeted run of any test file gets them, not only one that collects
this folder."""
