"""The plugin's keys into ``config.stash``: the session, and the figures it could not gate. Apart
from the hooks so that the fixtures and benchmark hooks read them without importing the hooks."""

from __future__ import annotations

import pytest

from harness.session.engines import Session

SESSION_KEY = pytest.StashKey[Session]()
UNGATED_KEY = pytest.StashKey[list]()  # (model/shape on hardware, {metric: hardware with a reference})
