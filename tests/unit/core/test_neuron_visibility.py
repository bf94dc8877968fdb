"""Which variable a vLLM Neuron server's NeuronCores go in (``harness.core.neuron_visibility``): the one the
installed plugin's platform class declares (read from its source, as both generations write it), else its
release's, else the runtime's own; the other unset."""

from __future__ import annotations

import pytest

from harness.core.neuron_visibility import (
    CHOSEN_SOURCE,
    CHOSEN_VARIABLE,
    RT_VISIBLE_CORES,
    VISIBLE_DEVICES,
    Visibility,
    declared_variable,
    given_cores,
    plugin_dir,
    plugin_visibility,
    release_variable,
)
from tests.helpers import REPO

pytestmark = pytest.mark.unit

# each generation's platform line, as its source writes it (the 2.32+ fork at ce02eaf4de30, 0.2.0 at a96712544a52)
PLATFORM_2_32 = 'class NeuronPlatform(Platform):\n    _enum = PlatformEnum.OOT\n    device_control_env_var: str = "NEURON_VISIBLE_DEVICES"\n'
PLATFORM_0_2 = 'class NeuronPlatform(Platform):\n    device_name = "neuron"\n    device_control_env_var = "NEURON_RT_VISIBLE_CORES"\n'


def plugin(tmp_path, relative: str, text: str):
    path = tmp_path / "vllm_neuron" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return tmp_path / "vllm_neuron"


@pytest.mark.parametrize("text, want", [(PLATFORM_2_32, VISIBLE_DEVICES), (PLATFORM_0_2, RT_VISIBLE_CORES),
                                        ("class P:\n    other = 'x'\n", None), ("device_control_env_var = 'X'\n", None)])
def test_the_platform_class_says_which_variable(text, want):
    assert declared_variable(text) == want


@pytest.mark.parametrize("version, want", [("0.29.0.1.2.0", VISIBLE_DEVICES), ("0.24.0.1.1.0", VISIBLE_DEVICES),
                                           ("0.21.0.1.0.0", RT_VISIBLE_CORES), ("0.2.0", RT_VISIBLE_CORES),
                                           ("1.0.0+794754d", VISIBLE_DEVICES)])
def test_a_release_without_its_source_is_judged_by_its_vllm_release(version, want):
    assert release_variable(version) == want


def test_a_version_that_is_no_release_is_refused_naming_it():
    with pytest.raises(ValueError, match="'main': not a release version"):
        release_variable("main")


def test_the_source_wins_over_the_release_and_says_so(tmp_path):
    package = plugin(tmp_path, "vllm/platform.py", PLATFORM_2_32)
    chosen = plugin_visibility(package, "0.21.0.1.0.0")  # a release that would say the other
    assert chosen.variable == VISIBLE_DEVICES and str(package / "vllm" / "platform.py") in chosen.source
    assert plugin_visibility(plugin(tmp_path / "b", "platform.py", PLATFORM_0_2), None).variable == RT_VISIBLE_CORES


def test_without_the_source_the_release_decides_and_without_a_plugin_the_runtime(tmp_path):
    assert plugin_visibility(tmp_path, "0.24.0.1.1.0").variable == VISIBLE_DEVICES
    assert "release" in plugin_visibility(tmp_path, "0.24.0.1.1.0").source
    none = plugin_visibility(None, None)
    assert none.variable == RT_VISIBLE_CORES and "no vLLM Neuron plugin" in none.source


def test_a_platform_naming_another_variable_is_refused(tmp_path):
    package = plugin(tmp_path, "vllm/platform.py", 'class P:\n    device_control_env_var = "CUDA_VISIBLE_DEVICES"\n')
    with pytest.raises(ValueError, match="'CUDA_VISIBLE_DEVICES'; the harness gives NeuronCores through"):
        plugin_visibility(package, None)


def test_the_stand_in_plugin_is_found_without_running_it():
    """The 2.32+ stand-in's package is located by find_spec (its ``__init__`` would import nothing harmful, but
    a real plugin's starts its framework: never run)."""
    import importlib.util
    import sys

    sys.path.insert(0, str(REPO / "tests" / "stand_ins" / "vllm_neuron_2_32"))
    try:
        package = plugin_dir(importlib.util.find_spec)
        assert package is not None and "vllm_neuron" not in sys.modules
        assert plugin_visibility(package, None).variable == VISIBLE_DEVICES
    finally:
        sys.path.pop(0)
        importlib.invalidate_caches()


def test_the_chosen_variable_is_set_the_other_removed_and_the_choice_recorded():
    env = Visibility(VISIBLE_DEVICES, "here").environ("4-7", {RT_VISIBLE_CORES: "0-63", "PATH": "/bin"})
    assert env == {"PATH": "/bin", VISIBLE_DEVICES: "4-7", CHOSEN_VARIABLE: VISIBLE_DEVICES, CHOSEN_SOURCE: "here"}
    assert given_cores(env) == (VISIBLE_DEVICES, "4-7") and given_cores({}) is None


# issue 57: the release fallback reached through plugin_visibility, as a real host reaches it. A 0.2.0 / 2.31
# plugin (vLLM 0.11 / 0.21) takes NEURON_RT_VISIBLE_CORES; handed NEURON_VISIBLE_DEVICES it ignores it and takes
# every core. Its platform source may be missing (a wheel laid out otherwise), or present and silent.
@pytest.mark.parametrize("version", ["0.2.0", "0.21.0.1.0.0", "0.11.0+neuron"])
@pytest.mark.parametrize("layout", ["no package", "empty package", "silent platform"])
def test_an_old_plugin_whose_platform_source_is_not_found_gets_the_runtimes_variable(tmp_path, version, layout):
    package = None
    if layout == "empty package":
        package = tmp_path / "vllm_neuron"
        package.mkdir()
    elif layout == "silent platform":
        package = plugin(tmp_path, "platform.py", "class NeuronPlatform:\n    device_name = 'neuron'\n")
    chosen = plugin_visibility(package, version)
    assert chosen.variable == RT_VISIBLE_CORES, chosen
    assert chosen.source.startswith(f"vllm-neuron {version}'s release (its platform source was not found")
    env = chosen.environ("0-3", {VISIBLE_DEVICES: "0-63"})
    assert env[RT_VISIBLE_CORES] == "0-3" and VISIBLE_DEVICES not in env and env[CHOSEN_VARIABLE] == RT_VISIBLE_CORES


@pytest.mark.parametrize("version", ["0.24.0.1.1.0", "0.29.0.1.2.0"])
def test_a_new_plugin_whose_platform_source_is_not_found_gets_the_devices_variable(tmp_path, version):
    for package in (None, tmp_path):
        chosen = plugin_visibility(package, version)
        assert chosen.variable == VISIBLE_DEVICES and f"vllm-neuron {version}'s release" in chosen.source
    assert f"not found under {tmp_path})" in plugin_visibility(tmp_path, version).source
    assert "not found)" in plugin_visibility(None, version).source


def test_the_0_2_platform_file_is_read_where_the_2_32_file_is_absent_and_names_the_version(tmp_path):
    package = plugin(tmp_path, "platform.py", PLATFORM_0_2)
    chosen = plugin_visibility(package, "0.2.0")
    assert chosen.variable == RT_VISIBLE_CORES
    assert chosen.source == f"{package / 'platform.py'} (device_control_env_var, vllm-neuron 0.2.0)"
    assert plugin_visibility(package, None).source.endswith("vllm-neuron version unknown)")


def test_a_platform_file_that_declares_nothing_defers_to_the_next(tmp_path):
    """A ``vllm/platform.py`` without the attribute (a module that only re-exports) is passed over for the
    package's ``platform.py``, which declares it."""
    package = plugin(tmp_path, "vllm/platform.py", "from vllm_neuron.platform import NeuronPlatform\n")
    plugin(tmp_path, "platform.py", PLATFORM_0_2)
    chosen = plugin_visibility(package, "0.29.0.1.2.0")  # a release that would say the other
    assert chosen.variable == RT_VISIBLE_CORES and chosen.source.startswith(str(package / "platform.py"))


# survivors of the generated mutants (nox -s mutation), each pinned
def test_the_attribute_is_found_among_a_classs_docstring_methods_and_chained_assignments():
    source = ('class NeuronPlatform(Platform):\n    """The platform."""\n    a = b = "NEURON_RT_VISIBLE_CORES"\n'
              '    def name(self):\n        return "neuron"\n    device_control_env_var = "NEURON_VISIBLE_DEVICES"\n')
    assert declared_variable(source) == VISIBLE_DEVICES
    assert declared_variable('class P:\n    device_control_env_var = other = "NEURON_VISIBLE_DEVICES"\n') is None


def test_the_chosen_variable_is_read_only_where_the_process_has_it():
    """A worker whose environment names a chosen variable it lacks runs with the one it has."""
    assert given_cores({CHOSEN_VARIABLE: VISIBLE_DEVICES, RT_VISIBLE_CORES: "3"}) == (RT_VISIBLE_CORES, "3")
    assert given_cores({CHOSEN_VARIABLE: "OTHER", RT_VISIBLE_CORES: "3", VISIBLE_DEVICES: "4-7"}) == (
        RT_VISIBLE_CORES, "3")


@pytest.mark.parametrize("version, want", [("0.24+neuron", VISIBLE_DEVICES), ("0.2.dev0", RT_VISIBLE_CORES),
                                           ("0.21+local.build", RT_VISIBLE_CORES)])
def test_a_release_is_read_from_its_first_two_parts_before_any_local_label(version, want):
    assert release_variable(version) == want


def test_the_plugin_package_is_found_by_its_spec_and_only_a_package_counts(tmp_path):
    from types import SimpleNamespace

    assert plugin_dir(lambda name: None) is None  # not installed
    assert plugin_dir(lambda name: SimpleNamespace()) is None  # a module, not a package
    asked = []
    found = plugin_dir(lambda name: asked.append(name) or SimpleNamespace(submodule_search_locations=[str(tmp_path)]))
    assert found == tmp_path and asked == ["vllm_neuron"]


def test_the_plugins_version_is_asked_of_its_distribution(monkeypatch):
    import importlib.metadata

    from harness.core.neuron_visibility import plugin_version

    asked = []

    def version(name):
        asked.append(name)
        if name != "vllm-neuron":
            raise importlib.metadata.PackageNotFoundError(name)
        return "0.2.0"

    monkeypatch.setattr(importlib.metadata, "version", version)
    assert plugin_version() == "0.2.0" and asked == ["vllm-neuron"]
    monkeypatch.setattr(importlib.metadata, "version",
                        lambda name: (_ for _ in ()).throw(importlib.metadata.PackageNotFoundError(name)))
    assert plugin_version() is None


def test_the_installed_plugin_is_judged_by_its_directory_and_version_and_printed_as_json(tmp_path, monkeypatch, capsys):
    import json

    import harness.core.neuron_visibility as nv

    monkeypatch.setattr(nv, "plugin_dir", lambda: tmp_path)
    monkeypatch.setattr(nv, "plugin_version", lambda: "0.29.0.1.2.0")
    chosen = nv.installed_visibility()
    assert chosen.variable == VISIBLE_DEVICES and f"not found under {tmp_path})" in chosen.source
    assert nv.main() == 0
    assert json.loads(capsys.readouterr().out) == {"variable": VISIBLE_DEVICES, "source": chosen.source}


def test_the_messages_name_both_variables_and_the_runtimes_own():
    assert plugin_visibility(None, None).source == ("no vLLM Neuron plugin installed: the Neuron runtime's own "
                                                     "variable")
    with pytest.raises(ValueError, match="the harness gives NeuronCores through NEURON_RT_VISIBLE_CORES or "
                                         "NEURON_VISIBLE_DEVICES$"):
        import tempfile
        from pathlib import Path

        with tempfile.TemporaryDirectory() as tmp:
            plugin_visibility(plugin(Path(tmp), "platform.py", 'class P:\n    device_control_env_var = "X"\n'), None)
