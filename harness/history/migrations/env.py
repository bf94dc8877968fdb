"""Alembic's environment: migrations run on the connection ``harness.history.store`` passes in
``config.attributes["connection"]`` (inside its transaction), never from an ini file."""

from alembic import context

connection = context.config.attributes["connection"]
context.configure(connection=connection, target_metadata=None, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
