"""Each figure's timer (pytest-benchmark's options.timer: "cpu", "wall"), part of its series: a CPU-time
figure and a wall-time one of the same benchmark are never one series (harness.history.schema at 0002).
Rows recorded before it read "-" (their files did not say, to the store).

Revision ID: 0002
Revises: 0001
"""

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

OLD = ["figure", "benchmark", "model", "shape", "backend", "hardware"]
NEW = ["figure", "benchmark", "model", "shape", "backend", "dtype", "hardware", "timer"]


def upgrade() -> None:
    with op.batch_alter_table("figures") as batch:
        batch.add_column(sa.Column("timer", sa.String(20), nullable=False, server_default="-"))
    op.drop_index("figures_series", "figures")
    op.create_index("figures_series", "figures", NEW)


def downgrade() -> None:
    op.drop_index("figures_series", "figures")
    with op.batch_alter_table("figures") as batch:
        batch.drop_column("timer")
    op.create_index("figures_series", "figures", OLD)
