"""The cost lens: what a measured base-pair throughput costs at an instance's hourly price."""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Cost:
    bp_per_s: float
    price_per_hour: float
    bp_per_hour: float
    usd_per_gbp: float
    mbp_per_usd: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def _check_rate(items_per_s: float, price_per_hour: float, what: str) -> None:
    if items_per_s <= 0:
        raise ValueError(f"{what}={items_per_s} must be positive")
    if price_per_hour <= 0:
        raise ValueError(f"price_per_hour={price_per_hour} must be positive")


def cost(bp_per_s: float, price_per_hour: float) -> Cost:
    """$ per giga-base-pair and mega-base-pairs per $ at full utilisation (no orchestration,
    storage or idle time: the same caveat as the reference report)."""
    _check_rate(bp_per_s, price_per_hour, "bp_per_s")
    bp_per_hour = bp_per_s * 3600.0
    return Cost(bp_per_s, price_per_hour, bp_per_hour, price_per_hour / bp_per_hour * 1e9,
                bp_per_hour / price_per_hour / 1e6)


def usd_per_million(items_per_s: float, price_per_hour: float) -> float:
    """Dollars per million items (variants scored, windows scanned), with the same caveat."""
    _check_rate(items_per_s, price_per_hour, "items_per_s")
    return price_per_hour / 3600.0 / items_per_s * 1e6
