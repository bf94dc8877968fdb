"""Qualifying a release: the same suite in two environments (baseline, candidate), perf rounds
interleaved in fresh processes, one verdict with reasons and versions (``carbon-harness release-check``).
It drives pytest in subprocesses and never imports pytest itself."""
