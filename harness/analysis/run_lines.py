"""The report's lines about the run rather than its figures: the device it ran on, whether a device
clock timed it, which tests failed after they were timed (and why), why its figures were not gated,
and the harness's own revision. Pure functions of the run's manifest and benchmarks."""

from __future__ import annotations

from typing import Any

from harness.analysis.results import BenchResult
from harness.core.paths import FIXTURES_DIR

FAILED = "failed"  # extra_info["outcome"] of a benchmark whose test failed after it was timed


def failure(extra: dict[str, Any]) -> str | None:
    """Why a benchmark's test failed (``harness.plugin.benchmark_hooks`` records it), None if it did not."""
    if extra.get("outcome") != FAILED:
        return None
    return str(extra.get("failure") or "no reason recorded")


def failed_tests(results: list[BenchResult]) -> list[str]:
    return [r.name for r in results if failure(r.extra) is not None]


def device_line(manifest: dict[str, Any]) -> str | None:
    """``device NVIDIA H100 80GB HBM3 (cuda:0)``: what the engines ran on, where the run recorded it."""
    name = manifest.get("device_name")
    if not name:
        return None
    where = manifest.get("device_resolved") or manifest.get("device")
    return f"device {name}" + (f" ({where})" if where and where != name else "")


def device_time_line(results: list[BenchResult]) -> str:
    """Whether the timings carry the device's own clock beside the wall time (``harness.plugin.timing``)."""
    clocks = {str(r.extra["device_clock"]) for r in results if r.extra.get("device_clock")}
    measured = sorted(c for c in clocks if not c.startswith("none"))
    if measured:
        return (f"{', '.join(measured)} beside the wall time (device ms: the device's span of a call; host-bound: the "
                "share of a call the device waited on the host, from the profiler's kernel time)")
    if clocks:
        return "absent: no device clock on these engines (on a CPU the wall time is the device's time)"
    return "not recorded"


def harness_revision(manifest: dict[str, Any]) -> str:
    """The harness's own commit where its package is a git checkout, else its installed version."""
    sha = manifest.get("harness_git_sha")
    if sha:
        return str(sha)
    version = manifest.get("harness_version")
    return f"{version} (installed; not a git checkout)" if version else "not recorded"


def not_gated_line(results: list[BenchResult], manifest: dict[str, Any]) -> str | None:
    """Why figures had no threshold, where the run's hardware has no thresholds file: a GPU's file comes
    only from a measured run (``ci/scripts/gpu-check.sh`` derives it with provenance)."""
    from harness.analysis.gates import NO_THRESHOLD, figure_outcomes

    unthresholded = sum(1 for r in results for _, outcome in figure_outcomes(r.extra) if outcome == NO_THRESHOLD)
    hardware = manifest.get("hardware")
    name = hardware.get("name") if isinstance(hardware, dict) else hardware
    if not unthresholded or not name:
        return None
    kind = hardware.get("kind") if isinstance(hardware, dict) else None
    shipped = FIXTURES_DIR / "thresholds" / f"{name}.json"
    if shipped.is_file():
        return f"{unthresholded} figures have no entry for hardware {name!r} in the run's thresholds"
    text = f"{unthresholded} figures are not gated: there is no fixtures/thresholds/{name}.json"
    if kind == "cuda":
        text += (" (a GPU's thresholds come only from a measured run on that GPU: ci/scripts/gpu-check.sh writes one "
                 "with its provenance, carbon-harness thresholds --from RUN.json --headroom H --out FILE)")
    return text
