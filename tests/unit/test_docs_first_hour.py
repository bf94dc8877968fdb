"""A new user's first hour, as the README and the site give it: the clone, the install, the smoke job before
the 50-minute ``nox``, a warning against the CPU torch pin inside a Neuron DLAMI venv, a ``site_url`` (the 404
page's links under a subpath), and NxDI's end stated once, in the same words, wherever it is stated."""

from __future__ import annotations

import re

import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.unit

NXDI_END = "NxD Inference's last release is in Neuron 2.31; its support on Trn2 ends in Neuron 2.34."
# Other wordings of the same fact, which read as a second date: each must be the sentence above instead.
OTHER_WORDINGS = re.compile(r"(?:NxDI|NxD Inference)(?:'s)? (?:support|had its last|ends)|ends NxD Inference|"
                            r"ship no NxDI|last release (?:is )?in (?:Neuron )?2\.3\d|support on Trn2 ends", re.I)


def shown(text: str) -> str:
    """A page's prose as one line: quote markers and line breaks gone, so a wrapped sentence reads whole."""
    return " ".join(re.sub(r"^\s*>\s?", "", text, flags=re.M).split())


def user_texts() -> dict[str, str]:
    paths = [REPO / "README.md", REPO / "ci" / "troubleshooting_causes.yaml", *sorted((REPO / "docs").rglob("*.md"))]
    return {p.relative_to(REPO).as_posix(): shown(p.read_text(encoding="utf-8").replace("''", "'")) for p in paths}


def test_nxdis_end_is_one_sentence_everywhere():
    texts = user_texts()
    stated = [page for page, text in texts.items() if NXDI_END in text]
    assert {"README.md", "docs/migration.md", "docs/trn2.md"} <= set(stated), stated
    other = [f"{page}: ...{text[max(0, m.start() - 60):m.end() + 60]}..." for page, text in texts.items()
             for m in OTHER_WORDINGS.finditer(text.replace(NXDI_END, ""))]
    assert not other, "NxDI's end in other words (use the one sentence):\n" + "\n".join(other)


@pytest.mark.parametrize("text, other", [("AWS ends NxD Inference on Trn2 in Neuron 2.34", True),
                                         ("2.32 and later, which ship no NxDI", True),
                                         ("NxDI's support on Trn2 ends in Neuron 2.34", True),
                                         (NXDI_END, False), ("NxDI 0.10 (SDK 2.30, 2.31) is on the pip", False)])
def test_the_other_wordings_are_caught(text, other):
    assert bool(OTHER_WORDINGS.search(text.replace(NXDI_END, ""))) is other


def test_the_readme_goes_clone_install_smoke_then_nox():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    clone = readme.index("git clone https://github.com/huggingface-bio/carbon-harness")
    install = readme.index('pip install -e ".[plot,test]"')
    smoke = readme.index("```bash\npytest -m perf --carbon-shape smoke --benchmark-json out.json\n```")
    assert clone < install < smoke < readme.index("## The three jobs")
    assert re.search(r"between the install and `nox`", readme)


def test_a_warning_against_the_cpu_torch_pin_in_a_dlami_venv():
    for page in ("README.md", "docs/getting-started.md"):
        text = shown((REPO / page).read_text(encoding="utf-8"))
        assert re.search(r"Not inside a Neuron DLAMI venv", text, re.I), page
        assert "Neuron torch" in text, page


def test_the_site_has_its_url():
    assert re.search(r"^site_url: https://\S+/\s", (REPO / "mkdocs.yml").read_text(encoding="utf-8"), re.M)
