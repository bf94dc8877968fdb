"""TODO docstring: harness.plugin.hooks"""

from __future__ import annotations

import pytest

from harness.session.engines import Session

SESSION_KEY = pytest.StashKey[Session]()
UNGATED_KEY = pytest.StashKey[list]()  # (model/shape on hardware, {metric: hardware with a reference})
