"""Errors every layer may raise."""

from __future__ import annotations


class BackendError(RuntimeError):
    """A backend cannot run here; the message says what to provide."""
