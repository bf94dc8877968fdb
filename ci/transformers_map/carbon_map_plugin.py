"""pytest plugin of a ``ci/transformers_map.py record`` run: in the top process, each test's lines are
recorded under its node id, and the processes it starts inherit that id (``CARBON_MAP_TEST``)."""

import os

import pytest

TOP = not os.environ.get("CARBON_MAP_TEST")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if not TOP:
        yield
        return
    import coverage

    cov = coverage.Coverage.current()
    os.environ["CARBON_MAP_TEST"] = item.nodeid
    if cov is not None:
        cov.switch_context(item.nodeid)
    try:
        yield
    finally:
        os.environ.pop("CARBON_MAP_TEST", None)
        if cov is not None:
            cov.switch_context("-")
