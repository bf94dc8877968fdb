"""Where the history lives, and the only module that writes it: ``--store URL`` (``sqlite:///PATH`` or
``postgresql://...``), else ``$CARBON_HARNESS_HISTORY``, else a SQLite file in the harness's cache
(``$CARBON_HARNESS_CACHE`` or ``~/.cache/carbon-harness``), which needs no server. Opening a store
upgrades it to the newest migration; ``add`` records every input in one transaction, so an input that
cannot be read, or a connection lost half-way, leaves the store as it was."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from alembic import command
from alembic.config import Config

from harness.history import schema
from harness.history.records import HistoryError, Source, read_source

STORE_ENV = "CARBON_HARNESS_HISTORY"
CACHE_ENV = "CARBON_HARNESS_CACHE"  # as harness.plugin.hooks
MIGRATIONS = Path(__file__).with_name("migrations")
SCHEMES = ("sqlite", "postgresql")


def default_url() -> str:
    cache = Path(os.environ.get(CACHE_ENV) or "~/.cache/carbon-harness").expanduser()
    return f"sqlite:///{cache / 'history.sqlite'}"


def resolve_url(url: str | None) -> str:
    """The store a command uses: the option, else the environment variable, else the embedded default."""
    return url or os.environ.get(STORE_ENV) or default_url()


def shown(url: sa.URL) -> str:
    """A URL as messages show it: never its password."""
    return url.render_as_string(hide_password=True)


def make_engine(url: str) -> sa.Engine:
    try:
        parsed = sa.make_url(url)
    except sa.exc.ArgumentError:
        raise HistoryError(f"history store {url!r} is not a database URL: give sqlite:///PATH or "
                           "postgresql://USER@HOST:PORT/DB") from None
    if parsed.get_backend_name() not in SCHEMES:
        raise HistoryError(f"history store {shown(parsed)}: {parsed.get_backend_name()!r} is not supported; give "
                           "sqlite:///PATH or postgresql://USER@HOST:PORT/DB")
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        parsed = parsed.set(drivername="postgresql+psycopg")  # psycopg 3, the history extra's driver
    if parsed.get_backend_name() == "sqlite" and parsed.database not in (None, "", ":memory:"):
        Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
    args = {"connect_timeout": 10} if parsed.get_backend_name() == "postgresql" else {}
    try:
        engine = sa.create_engine(parsed, connect_args=args)
    except ModuleNotFoundError as exc:
        raise HistoryError(f"history store {shown(parsed)} needs {exc.name}: pip install -e '.[history]'") from None
    if parsed.get_backend_name() == "sqlite":
        transactional_ddl(engine)
    return engine


def transactional_ddl(engine: sa.Engine) -> None:
    """SQLite's Python driver commits before DDL on its own, so a first add that fails would leave the
    tables without their migration's version row; SQLAlchemy's recipe (docs: "Serializable isolation /
    Savepoints / Transactional DDL" for pysqlite): the driver never begins, SQLAlchemy emits BEGIN."""
    @sa.event.listens_for(engine, "connect")
    def no_driver_transactions(dbapi_connection, _record) -> None:
        dbapi_connection.isolation_level = None

    @sa.event.listens_for(engine, "begin")
    def begin(conn) -> None:
        conn.exec_driver_sql("BEGIN")


@contextmanager
def connected(url: str | None) -> Iterator[sa.Connection]:
    """One transaction on the store at its newest schema: committed when the block ends, rolled back on
    any error. A store that cannot be reached is one ``HistoryError`` naming it."""
    resolved = resolve_url(url)
    engine = make_engine(resolved)
    try:
        try:
            conn = engine.connect()
        except sa.exc.OperationalError as exc:
            reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc)
            raise HistoryError(f"history store {shown(sa.make_url(resolved))} cannot be reached: {reason}") from None
        with conn, conn.begin():
            upgrade(conn)
            yield conn
    finally:
        engine.dispose()


def upgrade(conn: sa.Connection) -> None:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.attributes["connection"] = conn
    command.upgrade(cfg, "head")


def revision(conn: sa.Connection) -> str | None:
    return conn.execute(sa.text("SELECT version_num FROM alembic_version")).scalar()


@dataclass
class Added:
    path: str
    runs: int
    figures: int
    new: bool  # False: the same content was recorded before


def record(conn: sa.Connection, source: Source) -> Added:
    figures = sum(len(r.figures) for r in source.runs)
    if conn.execute(sa.select(schema.sources.c.id).where(schema.sources.c.content_hash == source.content_hash)).first():
        return Added(source.path, len(source.runs), figures, False)
    now = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    source_id = conn.execute(schema.sources.insert().values(
        content_hash=source.content_hash, kind=source.kind, path=source.path, added_at=now)).inserted_primary_key[0]
    check_id = None
    if source.release_check is not None:
        c = source.release_check
        check_id = conn.execute(schema.release_checks.insert().values(
            source_id=source_id, time=c.time, baseline=c.baseline, candidate=c.candidate, verdict=c.verdict,
            reasons=c.reasons, report=c.report)).inserted_primary_key[0]
    for run in source.runs:
        run_id = conn.execute(schema.runs.insert().values(
            source_id=source_id, release_check_id=check_id, side=run.side, round=run.round, time=run.time,
            commit=run.commit, release=run.release, versions=run.versions, report=run.report)).inserted_primary_key[0]
        if run.figures:
            conn.execute(schema.figures.insert(), [{"run_id": run_id, **f.__dict__} for f in run.figures])
    return Added(source.path, len(source.runs), figures, True)


def add(url: str | None, paths: Iterable[Path]) -> list[Added]:
    """Every input read first (a bad one raises before the store is touched), then all recorded in one
    transaction."""
    sources = [read_source(Path(p)) for p in paths]
    with connected(url) as conn:
        return [record(conn, s) for s in sources]


# The columns that name a series: one figure of one benchmark at one model, shape, backend, dtype, hardware,
# timed by one timer (CPU or wall time: records.TIMERS).
SERIES_COLUMNS = ("figure", "benchmark", "model", "shape", "backend", "dtype", "hardware", "timer")


def points(conn: sa.Connection) -> list[dict[str, Any]]:
    """Every recorded figure with its run, oldest run first (ties by run id: the order they were added).
    A release check's rounds stand at the check's time, the baseline's before the candidate's, each side's
    in round order: its A B / B A rounds interleaved in time would hide the step between the two sides."""
    f, r, c, s = schema.figures, schema.runs, schema.release_checks, schema.sources
    candidate = sa.case((r.c.side == "candidate", 1), else_=0)
    q = (sa.select(*[f.c[k] for k in SERIES_COLUMNS], f.c.value, f.c.direction, r.c.id.label("run_id"), r.c.time,
                   r.c.commit, r.c.release, r.c.report, r.c.side, r.c.round, r.c.release_check_id,
                   s.c.content_hash.label("source_hash"))
         .join(r, f.c.run_id == r.c.id).join(s, r.c.source_id == s.c.id).outerjoin(c, r.c.release_check_id == c.c.id)
         .order_by(sa.func.coalesce(c.c.time, r.c.time), candidate, r.c.round, r.c.time, r.c.id, f.c.id))
    return [dict(row._mapping) for row in conn.execute(q)]


def checks(conn: sa.Connection) -> list[dict[str, Any]]:
    c = schema.release_checks
    q = sa.select(c.c.id, c.c.time, c.c.baseline, c.c.candidate, c.c.verdict, c.c.reasons, c.c.report).order_by(
        c.c.time, c.c.id)
    return [dict(row._mapping) for row in conn.execute(q)]


def counts(conn: sa.Connection) -> dict[str, int]:
    """Rows per table: what a test compares before and after an add that must change nothing."""
    return {t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
            for t in (schema.sources, schema.release_checks, schema.runs, schema.figures)}
