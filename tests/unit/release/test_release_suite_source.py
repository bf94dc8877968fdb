"""The release checks' suite (tests/release/test_release_check.py) on an NxDI source the user gave
that cannot serve them (issue 31, item 10): it must fail naming what is missing, not skip all its
checks and exit 0. A real child pytest session, as a user runs ``-m release``."""

from __future__ import annotations

import re

import pytest

from tests.unit.backends.test_neuron_cpu_mode import make_tree
from tests.unit.conftest import REPO, run_pytest

pytestmark = pytest.mark.unit

# the release checks in tests/release/test_release_check.py that CI runs (none is parametrized; those marked
# extended are deselected by "release and not extended")
CHECKS = len(re.findall(r"(?<!@pytest\.mark\.extended\n)^def test_", (REPO / "tests/release/test_release_check.py")
                        .read_text(), re.M))


@pytest.mark.parametrize("releases", [(), ("2.28",)], ids=["no-releases", "without-2.29-c63afe0"])
def test_a_given_source_without_the_earlier_releases_fails_every_check(tmp_path, releases):
    trees = ["neuronx-distributed-inference/src/neuronx_distributed_inference",
             "neuronx-distributed/src/neuronx_distributed"]
    source = make_tree(tmp_path / "nxdi-2.29", *trees, *(f"releases/{name}/{tree}" for name in releases
                                                         for tree in trees))
    r = run_pytest("-m", "release and not extended", "tests/release/test_release_check.py", "-q", "-p", "no:randomly",
                   f"--carbon-nxdi-source={source}", cache_dir=tmp_path / "cache", timeout=300)
    assert r.returncode == 1, r.stdout[-3000:] + r.stderr[-2000:]
    missing = "releases/2.29-c63afe0" if releases else "releases/2.28, releases/2.29-c63afe0"
    assert f"--carbon-nxdi-source {source} has no {missing} (each with" in r.stdout, r.stdout[-3000:]
    assert CHECKS >= 5 and re.search(rf"\n(\d+ deselected, )?{CHECKS} errors in ", r.stdout), r.stdout[-3000:]
    assert "skipped" not in r.stdout, r.stdout[-3000:]
