"""A harness session: its configuration, engines, servers, preflight checks and run manifest."""
