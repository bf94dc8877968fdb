"""``--carbon-hf-compile``: the transformers backend with a static KV cache and a compiled decode step.

Eager transformers on a GPU measures Python: a 28-layer decode step launches ~900 kernels one by one,
and the device waits on the host for ~95% of the step. Here the decode step is one ``torch.compile``d
function over transformers' ``StaticCache`` (fixed addresses, fixed shapes: one graph per batch size),
with CUDA graphs on a GPU (``mode="reduce-overhead"``: a step is one graph replay) and inductor's C++
kernels on a CPU. The prefill stays eager (one call per generation; its length varies).

The eager engine stays the reference: the output contract's fp32 reference is the eager engine, and
the compiled engine's greedy tokens are checked against the eager one's (tests/compat/test_hf_compile.py).

Layout: the static cache's slots are the eager engine's positions (the prompt's padded width, then one
slot per decode step), and a ``[B, seq_len]`` attention mask buffer marks the filled, non-padding slots,
updated in place, so every decode call has the same shapes. The compile (the first calls at the shape's
batch size, CUDA graph recording included) happens at load and is recorded as ``compile_s``.
"""

from __future__ import annotations

import inspect
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from harness.backends.base import Batch
from harness.backends.hf import HFEngine, resolve_device
from harness.carbon.fns import KMER_START
from harness.core.errors import BackendCannot, BackendError
from harness.core.spec import RunShape

WARM_UP_STEPS = 3  # CUDA graph trees: a warm-up run, the recording, then a replay


def compile_unavailable_reason(device: torch.device) -> str | None:
    """Why the compiled engine cannot run here (one line), or None. Inductor's CPU kernels are C++
    built at compile time: a CPU without a C++ compiler is refused."""
    if device.type == "cpu" and not any(shutil.which(cc) for cc in ("g++", "c++", "clang++")):
        return ("--carbon-hf-compile on a CPU needs a C++ compiler for inductor's kernels (g++, c++ or clang++ on "
                "PATH); none was found: install one or run without --carbon-hf-compile")
    if not hasattr(torch, "compile"):
        return f"--carbon-hf-compile needs torch.compile (torch >= 2.0); this torch is {torch.__version__}"
    return None


class CompiledHFEngine(HFEngine):
    """``HFEngine`` whose decode step is compiled over a static KV cache (see the module docstring)."""

    def __init__(self, checkpoint: Path, shape: RunShape, model_name: str, device: str = "auto",
                 dtype: str = "auto") -> None:
        reason = compile_unavailable_reason(resolve_device(device))
        if reason:
            raise BackendError(reason)
        self._statics: dict[int, tuple[Any, torch.Tensor]] = {}
        self._filled = 0
        super().__init__(checkpoint, shape, model_name, device=device, dtype=dtype)
        self._cache_position = "cache_position" in inspect.signature(self.model.model.forward).parameters
        self._graphs = self.device.type == "cuda"
        mode = "reduce-overhead" if self._graphs else "default"
        self._step = torch.compile(self._decode_forward, mode=mode, dynamic=False)
        compile_s = self._warm_up()
        self.info = replace(self.info, compile_s=compile_s, extra={
            **self.info.extra, "compile": {"mode": mode, "cuda_graphs": self._graphs, "cache": "static",
                                           "compiled": "decode step"}})

    # -- the static cache -------------------------------------------------------------------
    def _static(self, batch_size: int) -> tuple[Any, torch.Tensor]:
        """The cache and mask buffer of a batch size, made once (their addresses are the graph's)."""
        if batch_size not in self._statics:
            from transformers import StaticCache

            mask = torch.zeros(batch_size, self.shape.seq_len, dtype=torch.long, device=self.device)
            if hasattr(torch, "_dynamo"):
                torch._dynamo.mark_static_address(mask)
            self._statics[batch_size] = (StaticCache(config=self.model.config, max_cache_len=self.shape.seq_len), mask)
        return self._statics[batch_size]

    def reset(self) -> None:
        super().reset()
        self._filled = 0
        with torch.inference_mode():  # the cache's tensors were made in the inference-mode forward
            for cache, mask in getattr(self, "_statics", {}).values():
                if all(getattr(layer, "is_initialized", True) for layer in getattr(cache, "layers", ())):
                    cache.reset()
                mask.zero_()

    def _new_cache(self, batch_size: int) -> Any:
        return self._static(batch_size)[0]

    def _decoder(self, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> Any:
        kwargs: dict[str, Any] = {self._cache_arg: self._cache}
        if self._cache_position:  # transformers 4.57: the static cache writes where it is told
            kwargs["cache_position"] = torch.arange(self._filled, self._filled + input_ids.shape[1], device=self.device)
        self._filled += input_ids.shape[1]
        return self.model.model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                                **kwargs)

    def _decode_forward(self, ids: torch.Tensor, positions: torch.Tensor, mask: torch.Tensor,
                        cache_position: torch.Tensor) -> torch.Tensor:
        """What is compiled: one decode step's decoder and lm head on the static cache."""
        kwargs: dict[str, Any] = {self._cache_arg: self._cache}
        if self._cache_position:
            kwargs["cache_position"] = cache_position
        out = self.model.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, **kwargs)
        return self.model.lm_head(out.last_hidden_state[:, -1])

    # -- the protocol -----------------------------------------------------------------------
    def prefill_logits(self, batch: Batch) -> torch.Tensor:
        self.check_batch(batch)
        self.reset()
        ids = batch.input_ids.to(self.device)
        self._cache, mask = self._static(ids.shape[0])
        width = ids.shape[1]
        mask[:, :width] = batch.attention_mask.to(self.device)
        lengths = mask[:, :width].sum(dim=1)
        positions = torch.arange(width, device=self.device).expand_as(ids)
        logits = self._forward_last(ids, mask, positions, lengths - 1)
        self._mask, self._lengths, self._width = mask, lengths, width
        return logits

    @torch.inference_mode()
    def decode_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        if self._mask is None:
            raise RuntimeError("decode_step() before prefill(): nothing to decode from")
        if self.steps_left <= 0:
            raise RuntimeError(f"the KV cache is full at seq_len={self.shape.seq_len}; reset() and prefill again")
        slot = self._width + self._steps
        self._mask[:, slot] = 1
        positions = (self._lengths + self._steps).unsqueeze(1)
        cache_position = torch.full((1,), slot, dtype=torch.long, device=self.device)
        if self._graphs:
            torch.compiler.cudagraph_mark_step_begin()
        ids = tokens.to(self.device).contiguous().unsqueeze(1)  # a column of teacher-forced ids is a strided view
        logits = self._step(ids, positions, self._mask, cache_position)
        self._filled += 1
        self._steps += 1
        return logits.clone() if self._graphs else logits  # a graph's output is overwritten by its next replay

    def extend_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        raise BackendCannot("the compiled engine decodes one token a step on a static cache: draft verification "
                            "and rewinds run on the eager engine (without --carbon-hf-compile)")

    def rewind(self, n: int) -> None:
        self.extend_logits(torch.empty(0))

    def _warm_up(self) -> float:
        """Compile (and on a GPU record the CUDA graph of) the decode step at the shape's batch size;
        the seconds it took, the engine's ``compile_s``."""
        batch = Batch.from_ids([[KMER_START, KMER_START + 1]] * self.shape.batch_size)
        start = time.perf_counter()
        token = self.prefill_logits(batch).argmax(dim=-1)
        for _ in range(WARM_UP_STEPS):
            token = self.decode_logits(token).argmax(dim=-1)
        self.synchronize()
        seconds = time.perf_counter() - start
        self.reset()
        return seconds
