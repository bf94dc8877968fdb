"""The generated-mutant audit's own logic (``tests.mutation.generated``; mutmut itself runs only in ``nox -s
mutation``): mutmut's results read per mutant, a survivor matched to its equivalence mark by its changed lines,
the kill rate over the mutants not marked equivalent (a mutant no test reaches counts against it), and a mark
without a one-line reason refused."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.helpers import REPO
from tests.mutation.generated import (
    EQUIVALENT,
    MODULES,
    Equivalent,
    EquivalentError,
    ModuleResult,
    checkout_commit,
    load_equivalent,
    main,
    markdown,
    merge,
    parse_results,
    setup_cfg,
)

pytestmark = pytest.mark.unit

RESULTS = """    harness.core.work.x_growth__mutmut_1: killed
    harness.core.work.xǁWorkCountǁto_dict__mutmut_2: survived
    harness.core.work.x_kept__mutmut_3: no tests
    harness.core.work.x_kept__mutmut_4: timeout
"""
DIFF = """# harness.core.work.x_kept__mutmut_7: survived
--- harness/core/work.py
+++ harness/core/work.py
@@ -1,4 +1,4 @@
-    if rest:
+    if rest > 0:
         out["(other)"] = out.get("(other)", 0.0) + rest
"""


def test_mutmuts_results_are_read_one_status_per_mutant():
    got = parse_results(RESULTS + "some other line\n")
    assert got == {"harness.core.work.x_growth__mutmut_1": "killed",
                   "harness.core.work.xǁWorkCountǁto_dict__mutmut_2": "survived",
                   "harness.core.work.x_kept__mutmut_3": "no tests", "harness.core.work.x_kept__mutmut_4": "timeout"}


def test_the_kill_rate_leaves_out_only_what_is_marked_equivalent():
    r = ModuleResult("harness/core/work.py", [], statuses=parse_results(RESULTS))
    assert (r.killed, r.counted, r.rate) == (2, 4, 0.5)  # a timeout kills; "no tests" does not
    r.equivalent.append({"name": "harness.core.work.xǁWorkCountǁto_dict__mutmut_2", "why": "x", "diff": ""})
    assert (r.counted, r.rate) == (3, pytest.approx(2 / 3))
    assert ModuleResult("m", []).rate is None
    md = markdown([r], 0.85)
    assert "| `harness/core/work.py` | 4 | 2 | 0 | 1 | 66.7% | no |" in md


def test_a_survivor_is_marked_equivalent_by_its_module_and_changed_lines():
    mark = Equivalent("harness/core/work.py", "if rest:", "if rest > 0:", "rest is a sum of counts, never negative")
    assert mark.matches("harness/core/work.py", DIFF)
    assert not mark.matches("harness/core/stats.py", DIFF)
    assert not Equivalent("harness/core/work.py", "if rest:", "if rest >= 0:", "x").matches("harness/core/work.py", DIFF)


@pytest.mark.parametrize("entry, message", [
    ('{module = "m.py", original = "a", mutated = "b"}', "needs exactly module, original, mutated and a one-line why"),
    ('{module = "m.py", original = "a", mutated = "b", why = ""}', "needs exactly"),
    ('{module = "m.py", original = "a", mutated = "b", why = "x\\ny"}', "why must be one line"),
])
def test_a_mark_without_its_reason_is_refused(tmp_path, entry, message):
    path = tmp_path / "equivalent.toml"
    path.write_text(f"equivalent = [\n  {entry},\n]\n")
    with pytest.raises(EquivalentError, match=message):
        load_equivalent(path)


def test_the_shipped_marks_load_and_name_listed_modules():
    assert all(m.module in MODULES for m in load_equivalent(EQUIVALENT))


def test_each_listed_module_and_its_tests_exist_and_the_config_mutates_only_it():
    for module, tests in MODULES.items():
        assert (REPO / module).is_file(), module
        assert all((REPO / t).is_file() for t in tests), (module, tests)
    cfg = setup_cfg("harness/core/work.py", ("tests/unit/core/test_work.py",))
    assert "only_mutate = harness/core/work.py\n" in cfg and "    tests/unit/core/test_work.py\n" in cfg


def test_runs_of_single_modules_merge_into_one_report_each_row_naming_its_commit(tmp_path):
    """Modules run one at a time (one mutmut child on 2 cores) make one report: a module run twice keeps its
    last run, each row says which commit it ran on, and the exit says whether every module met the floor."""
    work = ModuleResult("harness/core/work.py", ["t.py"], statuses=parse_results(RESULTS), seconds=12.5,
                        commit="a" * 40, survivors=[{"name": n, "status": st, "diff": DIFF} for n, st in
                                                    parse_results(RESULTS).items() if st in ("survived", "no tests")])
    stats_old = ModuleResult("harness/core/stats.py", ["s.py"], statuses={"x__mutmut_1": "survived"}, commit="b" * 40)
    stats_new = ModuleResult("harness/core/stats.py", ["s.py"], statuses={"x__mutmut_1": "killed"},
                             commit="c" * 40 + "+modified")
    paths = []
    for i, results in enumerate(([work, stats_old], [stats_new])):
        out = tmp_path / f"run{i}"
        out.mkdir()
        (out / "mutation.json").write_text(json.dumps({"floor": 0.85, "modules": [r.to_dict() for r in results]}))
        paths.append(out / "mutation.json")
    merged = merge(paths)
    assert [(r.module, r.commit, r.killed) for r in merged] == [("harness/core/work.py", "a" * 40, 2),
                                                                 ("harness/core/stats.py", "c" * 40 + "+modified", 1)]
    assert merged[0].to_dict() == work.to_dict()
    assert main(["--merge", *map(str, paths), "--out", str(tmp_path / "all")]) == 1  # work at 50%
    md = (tmp_path / "all" / "mutation.md").read_text()
    assert f"| `harness/core/work.py` | 4 | 2 | 2 | 0 | 50.0% | no | 12.5 | {'a' * 12} |" in md
    assert f"| `harness/core/stats.py` | 1 | 1 | 0 | 0 | 100.0% | yes | 0 | {'c' * 12}+modified |" in md
    assert main(["--merge", str(paths[1]), "--out", str(tmp_path / "one")]) == 0
    with pytest.raises(SystemExit, match="none.json: not a report's mutation.json"):
        merge([tmp_path / "none.json"])


def test_a_run_names_its_checkouts_commit_and_whether_a_tracked_file_differed(tmp_path):
    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=tmp_path,  # noqa: E731
                                    capture_output=True, text=True, check=True).stdout.strip()
    assert checkout_commit(tmp_path) == "unknown"  # not a git checkout
    git("init", "-q")
    (tmp_path / "m.py").write_text("x = 1\n")
    git("add", "m.py")
    git("commit", "-q", "-m", "m")
    head = git("rev-parse", "HEAD")
    (tmp_path / "new.py").write_text("")  # untracked: not what the mutants ran on
    assert checkout_commit(tmp_path) == head
    (tmp_path / "m.py").write_text("x = 2\n")
    assert checkout_commit(tmp_path) == head + "+modified"
