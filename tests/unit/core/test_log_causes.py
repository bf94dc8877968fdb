"""Fixes that work when followed (issue 58): two errors name their actual cause, and the fix they print,
applied as written, makes the error go away.

- A served side's checkpoint missing under ``--model-root``: the error names ``<root>/Carbon-3B`` and the
  ``hf download ... --local-dir DIR`` that puts it there. The download cannot run here (no hub): the test
  puts a checkpoint directory where the printed ``--local-dir`` says, and the same lookup then finds it.
- A vLLM server that dies on a missing module: a real server start (``VLLMServer``, the real command) in an
  interpreter without vLLM dies with ``ModuleNotFoundError``, and the error names the module and the venv to
  install into. For the harness's own module, in a real venv that lacks it, the printed install (a ``.pth``
  of this checkout stands in for ``pip install -e``, which needs the network) makes the import work.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import venv
from pathlib import Path

import pytest

from harness.core.log_causes import missing_checkpoint_message, missing_module, missing_module_note, venv_of
from harness.release.errors import ReleaseCheckError
from harness.release.served import served_checkpoint
from harness.serving.server import ServerError, VLLMServer
from tests.helpers import REPO

pytestmark = pytest.mark.unit


def test_a_missing_checkpoint_names_the_directory_and_its_download_and_the_fix_works(tmp_path):
    root = tmp_path / "models"
    root.mkdir()
    with pytest.raises(ReleaseCheckError) as err:
        served_checkpoint(("carbon-3b",), root, None)
    message = str(err.value)
    assert f"no checkpoint at {root / 'Carbon-3B'}" in message
    download = re.search(r"hf download (\S+) --local-dir (\S+?),", message)
    assert download and download.group(1) == "HuggingFaceBio/Carbon-3B"
    assert "--model PATH" not in message  # --model takes a name: the old fix answered "unknown model"
    Path(download.group(2)).mkdir()  # what the download leaves: the checkpoint where the message says
    assert served_checkpoint(("carbon-3b",), root, None) == (root / "Carbon-3B").resolve()


def test_the_message_names_each_model_by_its_hub_directory(tmp_path):
    assert missing_checkpoint_message(tmp_path, "carbon-8b", "Carbon-8B").endswith(
        f"--local-dir {tmp_path / 'Carbon-8B'}, or give --model-root the directory that holds Carbon-8B/")


@pytest.mark.parametrize("log, module", [
    ("Traceback ...\nModuleNotFoundError: No module named 'harness'\n", "harness"),
    ("ImportError: No module named 'vllm_neuron.platform'", "vllm_neuron.platform"),
    ("ModuleNotFoundError: No module named 'a'\n...\nModuleNotFoundError: No module named 'b'", "b"),
    ("RuntimeError: Engine core initialization failed", None),
])
def test_the_missing_module_is_read_from_the_log(log, module):
    assert missing_module(log) == module


def test_a_server_without_vllm_dies_naming_the_module_and_the_venv(tmp_path):
    """The real start, in an interpreter that has no vLLM (this one: vLLM lives in .nox/serving)."""
    if subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode == 0:
        pytest.skip("this interpreter has vLLM: the test needs one without it")
    server = VLLMServer(tmp_path / "ckpt", None, tmp_path / "server.log", python=sys.executable).start()
    with pytest.raises(ServerError) as err:
        server.wait_ready(timeout_s=120)
    message = str(err.value)
    assert message.startswith("vLLM server exited with code 1 before it was ready")
    cause = message.splitlines()[-1]
    assert cause.startswith("cause: the log says ModuleNotFoundError: No module named 'vllm'")
    assert f"install into that venv ({venv_of(sys.executable)})" in cause
    assert cause.endswith("the side's vLLM build, from its ci/constraints file (ci/scripts/sdk-venv.sh builds the "
                          "venv from it; vLLM's CPU build: nox -s serving)")


def test_the_harness_missing_from_a_side_venv_is_named_and_the_printed_install_fixes_it(tmp_path):
    side = tmp_path / "side-venv"
    venv.EnvBuilder(with_pip=False).create(side)
    python = side / "bin" / "python"
    log = tmp_path / "server.log"
    r = subprocess.run([str(python), "-c", "import harness.core.vllm_neuron"], capture_output=True, text=True,
                       cwd=tmp_path)
    log.write_text(r.stderr)
    note = missing_module_note(log, python)
    assert r.returncode == 1 and "No module named 'harness'" in note and f"install into that venv ({side})" in note
    install = note.split(f"{python} -m pip install ", 1)[1]
    assert shlex.split(install)[:2] == ["-e", ".[test,serving]"]  # from the checkout, into the named venv
    # pip install -e puts the checkout on that venv's path (it needs an index here, so its .pth is written directly)
    site = next((side / "lib").glob("python3*/site-packages"))
    (site / "carbon_harness_editable.pth").write_text(f"{REPO}\n")
    r = subprocess.run([str(python), "-c", "import harness.core.log_causes"], capture_output=True, text=True,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_another_module_is_installed_by_its_name(tmp_path):
    (tmp_path / "log").write_text("ModuleNotFoundError: No module named 'msgspec.json'\n")
    assert missing_module_note(tmp_path / "log", "/v/bin/python").endswith(
        "install into that venv (/v): /v/bin/python -m pip install msgspec")


def test_no_note_when_the_log_names_no_module_or_is_gone(tmp_path):
    (tmp_path / "log").write_text("RuntimeError: Engine core initialization failed\n")
    assert missing_module_note(tmp_path / "log", sys.executable) == ""
    assert missing_module_note(tmp_path / "absent", sys.executable) == ""
