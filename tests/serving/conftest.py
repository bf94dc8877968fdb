"""Fixtures of the serving tests: the session's server comes from the plugin (``carbon_endpoint``)."""

from __future__ import annotations

import pytest

from harness.backends.hf import HFEngine
from harness.core.spec import RunShape


@pytest.fixture(scope="session")
def served_checkpoint(carbon_session, carbon_endpoint):
    """The checkpoint the server serves: the session's first model (what --carbon-serve started)."""
    return carbon_session.checkpoint(carbon_session.config.models[0])


@pytest.fixture(scope="session")
def served_hf_engine(served_checkpoint, carbon_engine_pool):
    """transformers on the served checkpoint, fp32 on the CPU, one engine per shape."""

    def get(shape: RunShape) -> HFEngine:
        return carbon_engine_pool.get(("served-hf", shape), lambda: HFEngine(
            served_checkpoint, shape, "served", device="cpu", dtype="fp32"))

    return get


@pytest.fixture
def speculative_endpoint(carbon_session, carbon_endpoint, carbon_draft):
    """A vLLM server on the served model with this test's draft (``--speculative-config``), started by
    the session; only with --carbon-serve vllm (a running server's draft is not the harness's to set)."""
    from harness.serving.client import ServingError
    from harness.serving.server import ServerError

    if carbon_session.config.serve != "vllm":
        pytest.skip("speculative serving needs --carbon-serve vllm: the harness starts a server with each "
                    "--carbon-draft itself (a server at --carbon-endpoint runs a draft the harness cannot know)")
    try:
        return carbon_session.speculative_endpoint(carbon_draft)
    except (ServerError, ServingError) as exc:
        pytest.fail(f"speculative vLLM server with draft {carbon_draft.label} unavailable: {exc}", pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the speculative tests draft by draft, keeping pytest's order within a draft, and the tests
    that use no draft (the ends comparison) after them: the session keeps one speculative server at a
    time, and pytest's own grouping by parameter interleaves drafts once other parameters vary."""
    positions = [i for i, item in enumerate(items) if item.module.__name__.endswith("test_speculative_serving")]
    if not positions:
        return
    mine = [items[i] for i in positions]

    def draft(item: pytest.Item) -> str | None:
        ref = getattr(getattr(item, "callspec", None), "params", {}).get("carbon_draft")
        return None if ref is None else ref.label

    drafts = list(dict.fromkeys(d for d in map(draft, mine) if d is not None))  # first-seen order

    def key(pair: tuple[int, pytest.Item]) -> tuple[int, int]:
        order, item = pair
        label = draft(item)
        return (drafts.index(label) if label is not None else len(drafts), order)

    for i, (_, item) in zip(positions, sorted(enumerate(mine), key=key)):
        items[i] = item
