"""The release check's one error: it cannot be run as asked."""


class ReleaseCheckError(ValueError):
    """The check cannot be run as asked (a side that does not exist, a baseline that cannot run)."""
