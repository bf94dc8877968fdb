"""What ``history add`` derives and how it names a series' timer: each benchmark's fastest round
(``tkg_ms_min``, ``cte_ms_min``) beside the median the benchmark reports, and the timer (pytest-benchmark's
``options.timer``) as part of the series, so a CPU-time history never judges a wall-time run. Against SQLite
and a real PostgreSQL (conftest.py); the upgrade of a store written at the first schema."""

from __future__ import annotations

import copy
import json

import pytest

from tests.unit.history.needs import require

require()

import sqlalchemy as sa  # noqa: E402
from alembic import command  # noqa: E402
from alembic.config import Config  # noqa: E402

from harness.history import schema  # noqa: E402
from harness.history.gate import judge  # noqa: E402
from harness.history.records import read_source, round_minimums, timer_of  # noqa: E402
from harness.history.store import MIGRATIONS, add, connected, make_engine, points, revision  # noqa: E402
from tests.unit.history.series import REAL  # noqa: E402

FIRST = REAL / "run-01.json"


def raw_benchmark(data: dict, test: str) -> dict:
    return next(b for b in data["benchmarks"] if b["name"].startswith(test))


@pytest.mark.parametrize(("timer", "name"), [("process_time", "cpu"), ("time.process_time", "cpu"),
                                             ("perf_counter", "wall"), ("thread_time", "thread-cpu"),
                                             ("my_clock", "my_clock"), (None, "-")])
def test_the_timer_is_named_as_a_series_names_it(timer, name):
    assert timer_of({"options": {"timer": timer}} if timer else {}) == name


def test_the_fastest_round_is_derived_where_the_median_is_the_rounds_own():
    data = json.loads(FIRST.read_text())
    tkg, cte, e2e = (raw_benchmark(data, t) for t in ("test_tkg", "test_cte", "test_e2e"))
    assert round_minimums(tkg, tkg["extra_info"]) == {"tkg_ms_min": 1000 * tkg["stats"]["min"]}
    assert round_minimums(cte, cte["extra_info"]) == {"cte_ms_min": 1000 * cte["stats"]["min"]}
    # test_e2e's cte/tkg figures are its generations' (TTFT, ITL), not its rounds' median: no minimum of them
    assert round_minimums(e2e, e2e["extra_info"]) == {}
    moved = {**tkg["extra_info"], "tkg_ms_p50": tkg["extra_info"]["tkg_ms_p50"] * 1.001}
    assert round_minimums(tkg, moved) == {}
    assert round_minimums({**tkg, "stats": {**tkg["stats"], "min": float("nan")}}, tkg["extra_info"]) == {}


def test_every_figure_of_a_run_carries_its_timer_and_the_minimum_is_recorded():
    run = read_source(FIRST).runs[0]
    assert {f.timer for f in run.figures} == {"cpu"}
    (low,) = [f for f in run.figures if f.figure == "tkg_ms_min"]
    assert low.direction == "max" and "test_tkg" in low.benchmark
    (p50,) = [f for f in run.figures if f.figure == "tkg_ms_p50" and f.benchmark == low.benchmark]
    assert 0 < low.value < p50.value


def with_timer(tmp_path, name: str, timer: str, scale: float = 1.0):
    data = copy.deepcopy(json.loads(FIRST.read_text()))
    for b in data["benchmarks"]:
        b["options"]["timer"] = timer
        for k in ("min", "median"):
            b["stats"][k] *= scale
        for k, v in list(b["extra_info"].items()):
            if k.endswith("_ms_p50") or k.endswith("_ms_p99"):
                b["extra_info"][k] = v * scale
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_wall_and_cpu_figures_of_the_same_benchmark_are_two_series(store_url, tmp_path):
    add(store_url, [with_timer(tmp_path, "cpu.json", "process_time"),
                    with_timer(tmp_path, "wall.json", "perf_counter", scale=3.0)])
    with connected(store_url) as conn:
        pts = [p for p in points(conn) if p["figure"] == "tkg_ms_min" and "test_tkg" in p["benchmark"]]
    assert sorted(p["timer"] for p in pts) == ["cpu", "wall"]


def test_a_wall_time_run_is_not_judged_against_a_cpu_time_history(tmp_path):
    history = [p for i in range(4) for p in fake_points(read_source(FIRST).runs[0], i)]
    wall = read_source(with_timer(tmp_path, "wall.json", "perf_counter", scale=3.0)).runs[0]
    assert all(j.history == 0 and not j.regression for j in judge(wall, history))
    cpu = read_source(with_timer(tmp_path, "cpu.json", "process_time", scale=3.0)).runs[0]
    assert any(j.regression and j.series["figure"] == "tkg_ms_min" for j in judge(cpu, history))


def fake_points(run, i: int) -> list[dict]:
    """``run``'s figures as the store returns them, at run ``i`` with a 1% wobble (a history with a spread)."""
    return [{**f.__dict__, "value": f.value * (1 + 0.01 * (i % 2)), "run_id": i, "time": f"t{i}", "commit": None,
             "release": run.release, "report": "r", "side": None, "round": None, "release_check_id": None,
             "source_hash": f"h{i}"} for f in run.figures]


def test_a_store_at_the_first_schema_is_upgraded_its_figures_timer_unknown(tmp_path):
    url = f"sqlite:///{tmp_path / 'old.sqlite'}"
    engine = make_engine(url)
    with engine.begin() as conn:  # a store as the first release of the history wrote it
        cfg = Config()
        cfg.set_main_option("script_location", str(MIGRATIONS))
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "0001")
        conn.execute(sa.text("INSERT INTO sources (content_hash, kind, path, added_at) VALUES ('h', 'benchmark', 'p', 't')"))
        conn.execute(sa.text("INSERT INTO runs (source_id, time, release, versions, report) VALUES (1, 't', 'r', '{}', 'p')"))
        conn.execute(sa.text("INSERT INTO figures (run_id, benchmark, figure, model, shape, backend, dtype, hardware, "
                             "value, direction) VALUES (1, 'b', 'tkg_ms_p50', 'm', 's', 'hf', 'fp32', 'cpu', 2.5, 'max')"))
    engine.dispose()
    add(url, [FIRST])
    with connected(url) as conn:
        assert revision(conn) == schema.HEAD == "0002"
        timers = {(p["benchmark"], p["timer"]) for p in points(conn) if p["figure"] == "tkg_ms_p50"}
    assert ("b", "-") in timers and any(t == "cpu" for _, t in timers)
