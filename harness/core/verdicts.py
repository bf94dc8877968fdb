"""The three verdicts of the commands that judge a release (``release-check``, ``compare``), and their
exit codes: one convention for every CI script that reads them.

- PASS (0): nothing fails, and every gated figure is decided.
- FAIL (1): a regression, a broken contract, a candidate that cannot run, an outcome change.
- INCONCLUSIVE (3): nothing fails, but some gated figure is still open where the evidence stopped:
  the lack of evidence is neither a pass nor a regression.

Exit code 2 stays what it is for every command of the harness: a usage or environment error.
"""

from __future__ import annotations

from collections.abc import Iterable

PASS, FAIL, INCONCLUSIVE = "PASS", "FAIL", "INCONCLUSIVE"
EXIT_CODES = {PASS: 0, FAIL: 1, INCONCLUSIVE: 3}
USAGE_ERROR = 2


def worst(words: Iterable[str | None]) -> str:
    """Several verdicts as one (the legs of a check): any FAIL (or a word that is none of the three)
    fails, else any INCONCLUSIVE is inconclusive, else PASS."""
    seen = list(words)
    if any(w not in (PASS, INCONCLUSIVE) for w in seen):
        return FAIL
    return INCONCLUSIVE if INCONCLUSIVE in seen else PASS


def exit_code(word: str) -> int:
    return EXIT_CODES.get(word, EXIT_CODES[FAIL])
