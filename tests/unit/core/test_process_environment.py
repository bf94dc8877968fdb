"""What a side runs with beyond its packages (``harness.core.process_environment``): recorded in a real child
interpreter, so that a ``sitecustomize`` put on its ``PYTHONPATH`` (as the zoo plants defects, and as a host
with a preload or a module path differs) shows as a difference, and the same interpreter twice shows none."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.core.process_environment import differences, flattened, normalized, recorded_env, runs_code
from tests.helpers import REPO

pytestmark = pytest.mark.unit

RECORD = "import json; from harness.core.process_environment import environment_record as r; print(json.dumps(r()))"


def record_in_child(env: dict[str, str]) -> dict:
    r = subprocess.run([sys.executable, "-c", RECORD], cwd=REPO, capture_output=True, text=True, timeout=60,
                       env={"PATH": "/usr/bin:/bin", **env})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_hook_on_the_module_path_shows_as_differences_and_the_same_process_twice_as_none(tmp_path):
    hook = tmp_path / "plant" / "sitecustomize.py"
    hook.parent.mkdir()
    hook.write_text("X = 1  # a planted start hook\n")
    plain = record_in_child({})
    assert differences(plain, record_in_child({})) == []  # an A/A
    planted = record_in_child({"PYTHONPATH": str(hook.parent)})
    found = {key: (a, b) for key, a, b in differences(plain, planted)}
    assert found["env PYTHONPATH"] == ("-", str(hook.parent))
    assert found["hook sitecustomize"][1].startswith(f"{hook} (sha256 ")
    assert "sys.path" in found


@pytest.mark.parametrize("name, value, kept", [
    ("OMP_NUM_THREADS", "1", True), ("LD_PRELOAD", "/usr/lib/libjemalloc.so", True),
    ("TORCH_HUB_TOKEN", "abc", False), ("MALLOC_ARENA_MAX", "2", True),
    ("TORCH_LOGS", "a" * 40, False),  # a value that looks like a key: its name is enough
])
def test_secrets_are_recorded_by_name_only(name, value, kept):
    got = recorded_env({name: value, "HOME": "/root"})
    assert "HOME" not in got and got[name] == (value if kept else "<set>")


def test_a_venvs_location_and_python_minor_are_not_differences():
    prefixes = {"/opt/venvs/a": "<prefix>"}
    assert normalized("/opt/venvs/a/lib/python3.12/site-packages", prefixes) == "<prefix>/lib/pythonX.Y/site-packages"
    assert normalized("/opt/venvs/ab/x", prefixes) == "/opt/venvs/ab/x"  # a sibling is not under the prefix


def test_a_pth_that_imports_is_named_as_running_code():
    assert runs_code("import os; os.environ['X'] = '1'\n") and not runs_code("/some/path\n")
    line = flattened({"pth": {"<prefix>/x.pth": {"sha256": "0" * 64, "runs_code": True}}})["pth x.pth"]
    assert line == "sha256 000000000000, runs code"


@pytest.mark.parametrize("hook", ["sitecustomize", "usercustomize"])
def test_a_start_hook_of_either_kind_shows_as_a_difference_in_process(tmp_path, hook):
    """site imports ``usercustomize`` after ``sitecustomize`` (where user site-packages are enabled): either
    runs before the benchmark, so either, loaded on one side only or with other contents, is a difference."""
    from types import SimpleNamespace

    from harness.core.process_environment import environment_record

    def record(modules):
        return environment_record(environ={}, path=["/x"], modules=modules, site_dirs=[], driver=tmp_path / "none")

    file = tmp_path / f"{hook}.py"
    file.write_text("X = 1\n")
    plain, planted = record({}), record({hook: SimpleNamespace(__file__=str(file))})
    assert differences(plain, record({})) == []
    found = {key: (a, b) for key, a, b in differences(plain, planted)}
    assert list(found) == [f"hook {hook}"] and found[f"hook {hook}"][0] == "-"
    assert found[f"hook {hook}"][1].startswith(f"{file} (sha256 ")
    other = tmp_path / "other" / f"{hook}.py"
    other.parent.mkdir()
    other.write_text("X = 2\n")
    moved = record({hook: SimpleNamespace(__file__=str(other))})
    assert [key for key, _, _ in differences(planted, moved)] == [f"hook {hook}"]
    file.write_text("X = 3  # the same path, other contents\n")
    rewritten = record({hook: SimpleNamespace(__file__=str(file))})
    assert [key for key, _, _ in differences(planted, rewritten)] == [f"hook {hook}"]


# issue 57: the length-55 error. A served release check stopped, after its verdict, on "dictionary update sequence
# element #0 has length 55; 2 is required": the length of the baseline's --baseline-env as one string, PYTHONPATH= and
# the 2.32+ plugin's stand-in in the checkout it ran in (54 at /work/main; 55 at /check/main).
BASELINE_ENV = "PYTHONPATH=/check/main/tests/stand_ins/vllm_neuron_2_32"


def test_a_name_value_string_is_what_dict_refuses_with_length_55():
    assert len(BASELINE_ENV) == 55
    with pytest.raises(ValueError, match="dictionary update sequence element #0 has length 55; 2 is required"):
        dict((BASELINE_ENV,))


@pytest.mark.parametrize("entries", [(BASELINE_ENV,), [BASELINE_ENV], (("PYTHONPATH", BASELINE_ENV[11:]),),
                                     {"PYTHONPATH": BASELINE_ENV[11:]}, [["PYTHONPATH", BASELINE_ENV[11:]]]])
def test_a_sides_variables_are_pairs_whichever_way_they_are_written(entries):
    from harness.core.process_environment import env_pairs

    assert env_pairs(entries) == (("PYTHONPATH", "/check/main/tests/stand_ins/vllm_neuron_2_32"),)
    assert env_pairs(("A=b=c", "EMPTY=")) == (("A", "b=c"), ("EMPTY", ""))  # the first '=' splits


@pytest.mark.parametrize("bad", ["PYTHONPATH", "=x", ("A",), ("A", "b", "c"), ("A", 1), 7])
def test_an_entry_that_is_no_variable_is_refused_naming_it(bad):
    from harness.core.process_environment import env_pairs

    with pytest.raises(ValueError, match=r"environment entry .*: give NAME=VALUE or a \(NAME, VALUE\) pair"):
        env_pairs([bad])


# the record's edges (survivors of the generated mutants, nox -s mutation), each pinned
@pytest.mark.parametrize("name, value, shown", [
    ("TORCH_LOGS", "a" * 31, "a" * 31), ("TORCH_LOGS", "a" * 32, "<set>"), ("TORCH_LOGS", "/x/" + "a" * 40, None),
    ("MKL_API_KEY", "1", "<set>"), ("OMP_secret", "1", "<set>"), ("PYTORCH_CREDENTIALS", "1", "<set>"),
    ("MALLOC_PASSWORD", "1", "<set>"), ("TORCH_TOKEN_X", "1", "<set>"),
])
def test_a_secret_is_told_by_its_name_or_a_key_shaped_value(name, value, shown):
    assert recorded_env({name: value})[name] == (value if shown is None else shown)


def test_only_the_variables_that_change_loading_threads_or_allocation_are_recorded_in_order():
    environ = {"ZZ": "1", "PYTHONHOME": "/h", "PYTHONSTARTUP": "/s", "LD_LIBRARY_PATH": "/l", "PYTORCH_X": "1",
               "MKL_NUM_THREADS": "2", "OMP_X": "3", "TORCHX": "4", "PATH": "/bin", "MALLOC_X": "5"}
    got = recorded_env(environ)
    assert list(got) == ["LD_LIBRARY_PATH", "MALLOC_X", "MKL_NUM_THREADS", "OMP_X", "PYTHONHOME", "PYTHONSTARTUP",
                         "PYTORCH_X"]


@pytest.mark.parametrize("path, want", [
    ("/opt/venvs/a", "<prefix>"), ("/opt/venvs/a/", "<prefix>/"), ("/home/u/x/lib/python3.11/y", "~/x/lib/pythonX.Y/y"),
    ("/usr/lib/python311.zip", "/usr/lib/pythonX.Y.zip"), ("/base/lib/python3.12", "<base>/lib/pythonX.Y"),
])
def test_paths_are_written_relative_to_the_first_prefix_they_lie_under(path, want):
    prefixes = {"/opt/venvs/a": "<prefix>", "/base": "<base>", "/home/u": "~", "": "<never>"}
    assert normalized(path, prefixes) == want


def test_a_pth_line_runs_code_only_when_it_starts_with_import_and_a_space_or_tab():
    assert runs_code("x\nimport\tsite\n") and runs_code("import os\n")
    assert not runs_code("importlib\n") and not runs_code(" import os\n") and not runs_code("")


def test_the_record_holds_each_pth_file_its_driver_and_its_path(tmp_path):
    from harness.core.process_environment import environment_record, sha256

    site_dir = tmp_path / "site"
    site_dir.mkdir()
    (site_dir / "a.pth").write_text("import os\n")
    (site_dir / "b.pth").write_text("/some/dir\n")
    (site_dir / "c.txt").write_text("not a pth\n")
    driver = tmp_path / "version"
    driver.write_text("2.19.64.0\n")
    record = environment_record(environ={"OMP_NUM_THREADS": "1", "HOME": "/h"}, path=["/a", "", "/b"], modules={},
                                site_dirs=[str(site_dir), str(tmp_path / "missing")], driver=driver)
    assert record == {"env": {"OMP_NUM_THREADS": "1"}, "sys_path": ["/a", "/b"], "hooks": {},
                      "pth": {str(site_dir / "a.pth"): {"sha256": sha256(site_dir / "a.pth"), "runs_code": True},
                              str(site_dir / "b.pth"): {"sha256": sha256(site_dir / "b.pth"), "runs_code": False}},
                      "neuron_driver": "2.19.64.0"}
    lines = flattened(record)
    assert lines == {"env OMP_NUM_THREADS": "1", "sys.path": "/a, /b",
                     "pth a.pth": f"sha256 {sha256(site_dir / 'a.pth')[:12]}, runs code",
                     "pth b.pth": f"sha256 {sha256(site_dir / 'b.pth')[:12]}", "neuron driver": "2.19.64.0"}
    assert flattened({}) == {"sys.path": "", "neuron driver": "-"}
    assert differences(record, {**record, "neuron_driver": None}) == [("neuron driver", "2.19.64.0", "-")]
    assert differences({}, {"env": {"OMP_NUM_THREADS": "1"}}) == [("env OMP_NUM_THREADS", "-", "1")]


def test_a_value_of_dash_on_one_side_only_is_no_difference_and_a_key_on_one_side_is():
    assert differences({}, {"env": {"X": "-"}}) == [] and differences({"env": {"X": "-"}}, {}) == []
    assert differences({"env": {"X": "1"}}, {}) == [("env X", "1", "-")]


def test_the_record_by_default_reads_this_interpreter_and_writes_its_prefixes_home_and_hook_digests(tmp_path):
    import hashlib
    import sys
    from pathlib import Path
    from types import SimpleNamespace

    from harness.core.process_environment import environment_record

    record = environment_record(environ={}, driver=tmp_path / "none")
    assert record["sys_path"] and len(record["sys_path"]) == len([p for p in sys.path if p])
    assert record["neuron_driver"] is None and isinstance(record["pth"], dict)
    here = environment_record(environ={}, path=[sys.prefix + "/lib/x", sys.base_prefix + "/lib/y",
                                                str(Path.home() / "z")], site_dirs=[], driver=tmp_path / "none")
    prefix = "<prefix>" if sys.prefix != sys.base_prefix else "<base>"
    assert here["sys_path"] == [f"{prefix}/lib/x", "<base>/lib/y", "~/z"]
    assert normalized("/opt/a/x", {"/opt/a/": "<p>"}) == "<p>/x"
    assert normalized("/opt/venv-X/lib", {"/opt/venv-X": "<p>"}) == "<p>/lib"  # only a trailing / is dropped
    hook = tmp_path / "usercustomize.py"
    hook.write_bytes(b"X = 1\n")
    line = flattened(environment_record(environ={}, path=[], modules={"usercustomize": SimpleNamespace(__file__=str(hook))},
                                        site_dirs=[], driver=tmp_path / "none"))["hook usercustomize"]
    assert line == f"{hook} (sha256 {hashlib.sha256(hook.read_bytes()).hexdigest()[:12]})"


def test_a_pth_file_that_is_no_utf8_is_still_recorded(tmp_path):
    from harness.core.process_environment import environment_record

    (tmp_path / "odd.pth").write_bytes(b"import os # caf\xff\n")
    record = environment_record(environ={}, path=[], modules={}, site_dirs=[str(tmp_path)], driver=tmp_path / "none")
    assert record["pth"][str(tmp_path / "odd.pth")]["runs_code"] is True
