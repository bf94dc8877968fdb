"""The release check's errors: it cannot be run as asked, or it was told to stop."""

import signal


class ReleaseCheckError(ValueError):
    """The check cannot be run as asked (a side that does not exist, a baseline that cannot run)."""


class CheckStopped(BaseException):
    """SIGTERM or SIGHUP reached the check (a cancelled CI job, a closed terminal). A BaseException, as
    KeyboardInterrupt is for SIGINT: no ``except Exception`` on the way out swallows it, and every
    ``finally`` (the one that stops the check's vLLM servers) runs. Python's default for these signals ends
    the process without either, which left a served side's server holding its NeuronCores."""

    def __init__(self, signum: int) -> None:
        self.name = signal.Signals(signum).name
        super().__init__(self.name)


STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _stopped(signum: int, frame: object) -> None:
    for sig in STOP_SIGNALS:  # a second signal must not break off the stopping of the servers
        signal.signal(sig, signal.SIG_IGN)
    raise CheckStopped(signum)


def stop_on_signals() -> dict[int, object]:
    """SIGTERM and SIGHUP raise CheckStopped from here on; returns the handlers they had."""
    return {sig: signal.signal(sig, _stopped) for sig in STOP_SIGNALS}
