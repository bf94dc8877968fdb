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


def usd_per_item(items_per_s: float, price_per_hour: float, what: str = "items_per_s") -> float:
    """Dollars per item (base pair, variant...) at full utilisation: no orchestration, storage or
    idle time, the same caveat as the reference report. The one cost formula of the harness."""
    if items_per_s <= 0:
        raise ValueError(f"{what}={items_per_s} must be positive")
    if price_per_hour <= 0:
        raise ValueError(f"price_per_hour={price_per_hour} must be positive")
    return price_per_hour / 3600.0 / items_per_s


def cost(bp_per_s: float, price_per_hour: float) -> Cost:
    """$ per giga-base-pair and mega-base-pairs per $."""
    usd_per_bp = usd_per_item(bp_per_s, price_per_hour, "bp_per_s")
    return Cost(bp_per_s, price_per_hour, bp_per_s * 3600.0, usd_per_bp * 1e9, 1.0 / usd_per_bp / 1e6)


def usd_per_million(items_per_s: float, price_per_hour: float) -> float:
    """Dollars per million items (variants scored, windows scanned)."""
    return usd_per_item(items_per_s, price_per_hour) * 1e6
