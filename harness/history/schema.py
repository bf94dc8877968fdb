"""The store's tables, one schema for SQLite and PostgreSQL (SQLAlchemy Core). The migrations under
``harness/history/migrations/versions`` create and change them; this module describes the head
revision for the queries, and ``tests/unit/history`` checks that the two agree."""

from __future__ import annotations

import sqlalchemy as sa

HEAD = "0002"  # the newest migration's revision: a store at another one is upgraded when opened

metadata = sa.MetaData()

# One file (or release-check directory) added, by the hash of its content: adding it again is a no-op.
sources = sa.Table(
    "sources", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("content_hash", sa.String(64), nullable=False, unique=True),
    sa.Column("kind", sa.String(32), nullable=False),  # "benchmark" or "release-check"
    sa.Column("path", sa.Text, nullable=False),
    sa.Column("added_at", sa.String(40), nullable=False),
)

release_checks = sa.Table(
    "release_checks", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("source_id", sa.Integer, sa.ForeignKey("sources.id"), nullable=False),
    sa.Column("time", sa.String(40), nullable=False),
    sa.Column("baseline", sa.Text, nullable=False),  # the release label of each side
    sa.Column("candidate", sa.Text, nullable=False),
    sa.Column("verdict", sa.String(32), nullable=False),
    sa.Column("reasons", sa.JSON, nullable=False),
    sa.Column("report", sa.Text, nullable=False),  # verdict.md's path
)

# One harness run: a pytest-benchmark JSON, or one side's perf round of a release check.
runs = sa.Table(
    "runs", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("source_id", sa.Integer, sa.ForeignKey("sources.id"), nullable=False),
    sa.Column("release_check_id", sa.Integer, sa.ForeignKey("release_checks.id"), nullable=True),
    sa.Column("side", sa.String(32), nullable=True),
    sa.Column("round", sa.Integer, nullable=True),
    sa.Column("time", sa.String(40), nullable=False),  # ISO 8601 in UTC: sorts as text on both databases
    sa.Column("commit", sa.String(64), nullable=True),
    sa.Column("release", sa.Text, nullable=False),
    sa.Column("versions", sa.JSON, nullable=False),
    sa.Column("report", sa.Text, nullable=False),  # the file the run's figures came from
)

figures = sa.Table(
    "figures", metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
    sa.Column("run_id", sa.Integer, sa.ForeignKey("runs.id"), nullable=False),
    sa.Column("benchmark", sa.Text, nullable=False),
    sa.Column("figure", sa.String(80), nullable=False),
    sa.Column("model", sa.String(80), nullable=False),
    sa.Column("shape", sa.String(80), nullable=False),
    sa.Column("backend", sa.String(40), nullable=False),
    sa.Column("dtype", sa.String(20), nullable=False),
    sa.Column("hardware", sa.String(80), nullable=False),
    sa.Column("value", sa.Float, nullable=False),
    sa.Column("direction", sa.String(3), nullable=False),  # "max": lower is better; "min": higher is better
    # what timed it (records.TIMERS: "cpu", "wall"; "-" unrecorded, as every row from before 0002): part of
    # the series, so a CPU-time history never judges a wall-time run
    sa.Column("timer", sa.String(20), nullable=False, server_default="-"),
    sa.Index("figures_series", "figure", "benchmark", "model", "shape", "backend", "dtype", "hardware", "timer"),
)
