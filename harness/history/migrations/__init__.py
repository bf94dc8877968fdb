"""The store's versioned schema: Alembic migrations, run by ``harness.history.store.open_store``."""
