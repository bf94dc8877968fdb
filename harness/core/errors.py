"""Errors every layer may raise."""

from __future__ import annotations


class BackendError(RuntimeError):
    """A backend cannot run here; the message says what to provide."""


class BackendCannot(NotImplementedError):
    """This backend cannot do this here (a server has no logits, a compiled model no per-step
    logits): the one signal a test may turn into a skip. A plain NotImplementedError is a bug."""
