"""``extended`` docs commands (``<!-- run: extended -->``, whole jobs of minutes) run only where ``-m`` selects
extended (``nox -s release-extended``); a plain ``pytest`` and CI's sessions skip them, saying where they run."""

from __future__ import annotations

import pytest

from harness.plugin.recording import marker_selected

EXTENDED_SKIP = ("a whole docs job, beyond CI's time: nox -s release-extended runs it (pytest -m extended tests/docs); "
                 "CI parses and collects it")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if marker_selected(config.option.markexpr, "extended"):
        return
    for item in items:
        if item.get_closest_marker("extended") is not None and item.get_closest_marker("docs") is not None:
            item.add_marker(pytest.mark.skip(reason=EXTENDED_SKIP))
