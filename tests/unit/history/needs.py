"""What the history's tests need beyond the test extra; each test module calls ``require()`` before it
imports harness.history, so a session without them (nox -s latest) skips the module saying what to install."""

from __future__ import annotations

import pytest


def require() -> None:
    pytest.importorskip("sqlalchemy", reason="the history store needs SQLAlchemy: pip install -e '.[history]'")
    pytest.importorskip("alembic", reason="the history store needs Alembic: pip install -e '.[history]'")
    pytest.importorskip("scipy", reason="the history's intervals need scipy: pip install -e '.[history]'")
    pytest.importorskip("otava", reason="history changes need Apache Otava: pip install --no-deps apache-otava==0.8.0")
