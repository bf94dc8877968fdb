"""Gate power from measured noise: streams of real perf rounds measuring every figure a release check
gates, the noise of a pair and the correlations between figures estimated from them, and the check's
rule simulated at that noise for the real families of figures.

Why not subsets of one check: every subset of k pairs of one run shares its pairs, so its "rates" are
one draw, not a rate. Instead:

1. ``stream`` (``streams``) runs interleaved triples of fresh perf rounds (A, A again, a planted B), quiet
   or with one core kept busy, and keeps a compact record in fixtures/release/;
2. ``analyse`` (``noise``, ``report``) estimates each gated figure's sigma and the correlations (bootstrap
   intervals over whole triples), simulates each family (``simulate``: the verdict's own
   ``harness.core.sequential.decide``) at that noise, writes the table, fixtures/release/noise.json (what
   the aims' unit test reads) and the power table of docs/release-check.md.

    python -m harness.release.power stream --nxdi-source "$CARBON_NXDI_SOURCE" --out /tmp/power-cpu-quiet \\
        --record fixtures/release/stream-cpu-quiet.json
    python -m harness.release.power analyse fixtures/release/stream-*.json --out /tmp/power.md \\
        --fixture fixtures/release/noise.json --page docs/release-check.md
"""

from harness.release.power.simulation import (
    OUTCOMES,
    Family,
    FigureSpec,
    MultiNormal,
    Noise,
    Rates,
    Rounds,
    leg_check,
    merged,
    normal,
    simulate,
)

__all__ = ["OUTCOMES", "Family", "FigureSpec", "MultiNormal", "Noise", "Rates", "Rounds", "leg_check", "merged",
           "normal", "simulate"]
