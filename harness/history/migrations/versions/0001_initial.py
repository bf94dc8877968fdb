"""The first schema: sources, release checks, runs, figures (harness.history.schema at 0001).

Revision ID: 0001
Revises:
"""

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "sources",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("content_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("path", sa.Text, nullable=False),
        sa.Column("added_at", sa.String(40), nullable=False),
    )
    op.create_table(
        "release_checks",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("source_id", sa.Integer, sa.ForeignKey("sources.id"), nullable=False),
        sa.Column("time", sa.String(40), nullable=False),
        sa.Column("baseline", sa.Text, nullable=False),
        sa.Column("candidate", sa.Text, nullable=False),
        sa.Column("verdict", sa.String(32), nullable=False),
        sa.Column("reasons", sa.JSON, nullable=False),
        sa.Column("report", sa.Text, nullable=False),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("source_id", sa.Integer, sa.ForeignKey("sources.id"), nullable=False),
        sa.Column("release_check_id", sa.Integer, sa.ForeignKey("release_checks.id"), nullable=True),
        sa.Column("side", sa.String(32), nullable=True),
        sa.Column("round", sa.Integer, nullable=True),
        sa.Column("time", sa.String(40), nullable=False),
        sa.Column("commit", sa.String(64), nullable=True),
        sa.Column("release", sa.Text, nullable=False),
        sa.Column("versions", sa.JSON, nullable=False),
        sa.Column("report", sa.Text, nullable=False),
    )
    op.create_table(
        "figures",
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
        sa.Column("direction", sa.String(3), nullable=False),
    )
    op.create_index("figures_series", "figures", ["figure", "benchmark", "model", "shape", "backend", "hardware"])


def downgrade() -> None:
    op.drop_index("figures_series", "figures")
    for table in ("figures", "runs", "release_checks", "sources"):
        op.drop_table(table)
