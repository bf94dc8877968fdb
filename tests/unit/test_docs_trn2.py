"""The "Setting up for a Trn2 team" section of docs/trn2.md states figures that live elsewhere (the model
specs, the thresholds file, the Trn2 workflow); these tests hold them to their sources, so a changed spec,
threshold or runner label cannot leave the docs saying the old one. The checks of commands and options
that may stand on any page (a retired ``--device neuron``, a constraints file) read every page and the
README."""

from __future__ import annotations

import json
import re

import pytest

from harness.core.spec import get_model
from tests.docs.blocks import pages
from tests.unit.conftest import REPO

pytestmark = pytest.mark.unit

PUBLISHED = ("carbon-500m", "carbon-3b", "carbon-8b")


TRN2 = REPO / "docs" / "trn2.md"


def section() -> str:
    text = TRN2.read_text()
    found = re.search(r"^## Setting up for a Trn2 team\n(.*?)(?=^##|\Z)", text, re.S | re.M)
    assert found, f'{TRN2} has no "## Setting up for a Trn2 team" section'
    return found.group(1)


def every_page() -> str:
    """README.md and every page of the docs site, one text."""
    return "\n".join(p.read_text() for p in pages(REPO))


def table_row(text: str, first_cell: str) -> list[str]:
    """The cells of the first table row of text whose first cell is first_cell."""
    rows = [line for line in text.splitlines() if line.startswith(f"| {first_cell} |")]
    assert rows, f"no table row for {first_cell}"
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


@pytest.mark.parametrize("model", PUBLISHED)
def test_checkpoint_sources_and_directory_names_match_the_spec(model):
    text, name = section(), get_model(model).hf_name
    assert f"HuggingFaceBio/{name}" in text and f"`{name}`" in text


@pytest.mark.parametrize("model", PUBLISHED)
def test_sizes_are_the_specs_parameter_counts(model):
    spec = get_model(model)
    cells = table_row(section().split("**Disk and host memory**")[1], spec.hf_name)
    n = spec.num_parameters
    assert cells[1] == f"{n:,}"
    assert cells[2] == f"{2 * n / 1e9:.1f} GB"
    assert cells[3].startswith(f"{4 * n / 1e9:.1f} GB")


@pytest.mark.parametrize("model", PUBLISHED)
def test_compile_and_load_seconds_are_the_reference_figures(model):
    data = json.loads((REPO / "fixtures" / "reference" / "trn2.3xlarge-sdk2.29.json").read_text())
    figure = {f["metric"]: f["value"] for f in data["figures"]
              if f["model"] == model and f["shape"] == "report-bs1" and f["metric"] in ("compile_s", "load_s")}
    cells = table_row(section().split("**Compile time**")[1], get_model(model).hf_name)
    assert cells[1:3] == [f"{figure['compile_s']} s", f"{figure['load_s']} s"]


def test_runner_labels_and_paths_are_the_workflows():
    workflow = (REPO / "ci" / "trn2.yml").read_text()
    labels = re.search(r"runs-on: \[(self-hosted[^\]]*)\]", workflow).group(1)
    text = " ".join(section().split())
    assert labels.endswith('"${{ matrix.instance }}"')  # one label per instance type: ci/scripts/leg-matrix.sh's
    script = (REPO / "ci" / "scripts" / "leg-matrix.sh").read_text()
    instances = re.search(r'case "\$instance" in ([^)]*)\)', script).group(1).split(" | ")
    assert instances == ["trn2.3xlarge", "trn2.48xlarge"]
    for instance in instances:
        assert f"`{labels.replace(chr(34) + '${{ matrix.instance }}' + chr(34), instance)}`" in text, instance
    for path in re.findall(r"^  (?:MODEL_ROOT|CARBON_HARNESS_CACHE|VENVS): (\S+)", workflow, re.M):
        assert path in text, path
    assert "cp ci/cpu.yml ci/trn2.yml .github/workflows/" in text


def test_the_dlami_venv_is_named():
    assert "source /opt/aws_neuronx_venv_pytorch_" in section()


def test_the_disk_total_runner_version_and_the_2_32_note_are_stated():
    text = " ".join(section().split())
    assert re.search(r"about \*\*\d+ GB\*\* per release pair", text), "no disk total per release pair"
    assert "512 GB" in text
    assert "2.327.1" in text
    assert "2.32" in text and "torch-neuronx is no longer on DLAMIs" in text


def test_the_48xlarge_command_uses_all_64_cores():
    assert "-n 16 --carbon-cores-per-worker 4" in TRN2.read_text()
    assert "-n 4 --carbon-cores-per-worker 16" not in every_page()


def test_a_release_check_names_constraints_files_not_spec_ranges():
    text = every_page()
    assert '"==2.10.*"' not in text and '"==0.10.*"' not in text
    for name in re.findall(r"ci/constraints/([a-z0-9.-]+\.txt)", text):
        assert (REPO / "ci" / "constraints" / name).is_file(), name


def test_the_core_split_per_instance_and_the_shared_runtime_are_stated():
    """Issue 39: how the sides share NeuronCores on each instance type, and what a shared host runtime hides."""
    text = " ".join(section().split())
    assert "On a **trn2.48xlarge** (64 logical cores at LNC=2) each side gets its own range" in text
    assert "On a **trn2.3xlarge** (4 logical cores)" in text and "the server is stopped" in text
    assert "a runtime regression between the SDKs cannot be seen" in text and "--candidate-image" in text
    assert "--device neuron" not in every_page().replace("There is no `--device neuron`", "")
