"""The history of runs and release checks: every figure of every run recorded in one database
(SQLite by default, a team's PostgreSQL by URL), change points over each series found by Apache
Otava's E-divisive means, a new run judged against its series' recent history, and a static page of
trends. It reads what the harness writes (pytest-benchmark JSON, release-check output directories)
and never imports pytest or torch."""
