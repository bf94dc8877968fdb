"""``history add``: every figure recorded with what identifies it, once per content, in one transaction;
bad input (not harness output, truncated JSON, a store that cannot be reached) is one line, exit 2, and
the store as it was. Against SQLite and a real PostgreSQL (conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.history.needs import require

require()

import sqlalchemy as sa  # noqa: E402

from harness.cli import main  # noqa: E402
from harness.core.paths import FIXTURES_DIR  # noqa: E402
from harness.history import schema  # noqa: E402
from harness.history.records import HistoryError, read_source, release_label  # noqa: E402
from harness.history.store import add, connected, counts, default_url, points, resolve_url, revision  # noqa: E402
from tests.unit.history.series import REAL  # noqa: E402

RECORDED = FIXTURES_DIR / "docs" / "recorded" / "perf-main.json"
FIRST = REAL / "run-01.json"


def test_add_records_every_figure_with_its_identity(store_url):
    added = add(store_url, [FIRST])
    run = read_source(FIRST).runs[0]
    assert added[0].new and added[0].figures == len(run.figures) > 0
    with connected(store_url) as conn:
        pts = points(conn)
        assert revision(conn) == schema.HEAD
    tkg = [p for p in pts if p["figure"] == "tkg_ms_p50" and "test_tkg" in p["benchmark"]]
    assert len(tkg) == 1
    p = tkg[0]
    raw = json.loads(FIRST.read_text())
    extra = next(b["extra_info"] for b in raw["benchmarks"] if b["name"].startswith("test_tkg"))
    assert (p["model"], p["shape"], p["backend"], p["dtype"], p["hardware"]) == ("carbon-tiny", "smoke", "hf", "fp32", "cpu")
    assert p["value"] == extra["tkg_ms_p50"] and p["direction"] == "max"
    assert p["commit"] == raw["carbon_harness"]["harness_git_sha"]
    assert p["release"] == release_label(raw["carbon_harness"]["versions"])
    assert p["time"].startswith(raw["datetime"][:19])


def test_adding_the_same_content_twice_records_it_once(store_url, tmp_path):
    add(store_url, [FIRST])
    with connected(store_url) as conn:
        before = counts(conn)
    copy = tmp_path / "elsewhere.json"
    copy.write_bytes(FIRST.read_bytes())  # the same content under another name: still the same run
    again = add(store_url, [FIRST, copy])
    assert [a.new for a in again] == [False, False]
    with connected(store_url) as conn:
        assert counts(conn) == before


def bad_inputs(tmp_path: Path) -> dict[str, Path]:
    truncated = tmp_path / "truncated.json"
    truncated.write_text(FIRST.read_text()[:5000])
    foreign = tmp_path / "foreign.json"  # pytest-benchmark JSON, but not a carbon-harness run
    data = json.loads(FIRST.read_text())
    data.pop("carbon_harness")
    data["machine_info"].pop("carbon_harness", None)
    foreign.write_text(json.dumps(data))
    not_json = tmp_path / "notes.json"
    not_json.write_text('{"hello": 1}')
    return {"truncated": truncated, "foreign": foreign, "not benchmark": not_json, "absent": tmp_path / "nope.json"}


@pytest.mark.parametrize("kind", ["truncated", "foreign", "not benchmark", "absent"])
def test_bad_input_is_one_line_exit_2_and_the_store_unchanged(store_url, tmp_path, capsys, kind):
    add(store_url, [FIRST])
    with connected(store_url) as conn:
        before = counts(conn)
    bad = bad_inputs(tmp_path)[kind]
    # the bad file after a good new one: the good one must not be recorded either
    rc = main(["history", "add", str(REAL / "run-02.json"), str(bad), "--store", store_url])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and str(bad) in err[0]
    with connected(store_url) as conn:
        assert counts(conn) == before


def test_a_failure_inside_the_transaction_rolls_everything_back(store_url, monkeypatch):
    import harness.history.store as store

    real = store.record
    calls = []

    def second_fails(conn, source):
        calls.append(source.path)
        if len(calls) == 2:
            raise OSError("connection lost")  # after the first input's rows were written
        return real(conn, source)

    monkeypatch.setattr(store, "record", second_fails)
    with pytest.raises(OSError):
        add(store_url, [REAL / "run-01.json", REAL / "run-02.json"])
    monkeypatch.setattr(store, "record", real)
    with connected(store_url) as conn:
        assert counts(conn) == {"sources": 0, "release_checks": 0, "runs": 0, "figures": 0}


def test_an_unreachable_postgresql_url_is_one_line_exit_2(capsys, sqlite_url):
    from harness.core.ports import free_port

    url = f"postgresql://carbon:secret@127.0.0.1:{free_port()}/history"
    rc = main(["history", "add", str(FIRST), "--store", url])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1
    assert "cannot be reached" in err[0] and "127.0.0.1" in err[0] and "secret" not in err[0]


@pytest.mark.parametrize("url", ["mysql://x@h/db", "not a url"])
def test_an_unsupported_store_url_names_what_is_accepted(url, capsys):
    assert main(["history", "changes", "--store", url]) == 2
    err = capsys.readouterr().err
    assert "sqlite:///PATH" in err and "postgresql://" in err


def test_the_store_url_comes_from_the_option_then_the_environment_then_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("CARBON_HARNESS_CACHE", str(tmp_path))
    monkeypatch.delenv("CARBON_HARNESS_HISTORY", raising=False)
    assert resolve_url(None) == default_url() == f"sqlite:///{tmp_path / 'history.sqlite'}"
    monkeypatch.setenv("CARBON_HARNESS_HISTORY", "sqlite:////env.sqlite")
    assert resolve_url(None) == "sqlite:////env.sqlite"
    assert resolve_url("sqlite:////opt.sqlite") == "sqlite:////opt.sqlite"


def test_the_migrations_create_the_schema_the_queries_use(store_url):
    with connected(store_url) as conn:
        inspector = sa.inspect(conn)
        for table in schema.metadata.sorted_tables:
            migrated = {c["name"]: c["nullable"] for c in inspector.get_columns(table.name)}
            assert migrated == {c.name: c.nullable for c in table.columns}, table.name


def release_check_dir(tmp_path: Path, verdict: str = "PASS") -> Path:
    """A release-check --out directory in the layout harness.release.run / rounds write: verdict.json
    (VERDICT_SCHEMA 3's keys this reads) and each side's perf-round-K.json (real harness runs)."""
    out = tmp_path / "check"
    sides = {}
    for side, version, runs in (("baseline", "4.57.6", ("run-01", "run-03")), ("candidate", "5.24.0", ("run-02", "run-04"))):
        (out / side).mkdir(parents=True)
        for k, name in enumerate(runs, 1):
            (out / side / f"perf-round-{k}.json").write_bytes((REAL / f"{name}.json").read_bytes())
        sides[side] = {"backend": "hf", "dtype": None, "versions": {"transformers": version, "torch": "2.13.0+cpu"},
                       "rounds": len(runs)}
    (out / "verdict.json").write_text(json.dumps({"schema": 3, "verdict": verdict, "reasons": ["r1"], "sides": sides}))
    (out / "verdict.md").write_text("## Release check\n")
    return out


def test_a_release_check_directory_records_its_verdict_pair_and_rounds(store_url, tmp_path):
    out = release_check_dir(tmp_path, "FAIL")
    assert [a.new for a in add(store_url, [out])] == [True]
    assert [a.new for a in add(store_url, [out])] == [False]  # the same directory again: recorded once
    with connected(store_url) as conn:
        from harness.history.store import checks

        (check,) = checks(conn)
        pts = points(conn)
    assert (check["verdict"], check["baseline"], check["candidate"]) == (
        "FAIL", "transformers=4.57.6 torch=2.13.0+cpu", "transformers=5.24.0 torch=2.13.0+cpu")
    assert check["reasons"] == ["r1"] and check["report"].endswith("verdict.md")
    runs = {(p["side"], p["round"]) for p in pts}
    assert runs == {("baseline", 1), ("baseline", 2), ("candidate", 1), ("candidate", 2)}
    assert {p["release_check_id"] for p in pts} == {check["id"]}


def test_a_directory_whose_verdict_is_not_a_release_checks_is_refused(tmp_path):
    out = release_check_dir(tmp_path)
    (out / "verdict.json").write_text(json.dumps({"verdict": "MAYBE", "sides": {}}))
    with pytest.raises(HistoryError, match="not a release-check verdict"):
        read_source(out)


def test_a_release_checks_rounds_stand_baseline_then_candidate_at_the_checks_time(store_url, tmp_path):
    add(store_url, [release_check_dir(tmp_path)])  # rounds run A B / B A: interleaved in time
    with connected(store_url) as conn:
        pts = [p for p in points(conn) if p["figure"] == "tkg_ms_p50" and "test_tkg" in p["benchmark"]]
    assert [(p["side"], p["round"]) for p in pts] == [("baseline", 1), ("baseline", 2), ("candidate", 1),
                                                        ("candidate", 2)]
    assert sorted(p["time"] for p in pts) != [p["time"] for p in pts]  # not the order of their own times
