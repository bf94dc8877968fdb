"""The transformers backend: ``LlamaForCausalLM`` on CPU or CUDA with its own greedy loop.

It does not use ``model.generate`` so that prefill (CTE) and each decode step (TKG) can be timed
separately, only the last real position of each prompt goes through the lm head in prefill, and
right-padded rows get their own position ids, so every row generates what it would alone.
"""

from __future__ import annotations

import inspect
import json
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from harness.backends.base import Batch, Engine, EngineInfo, GenerationResult, Selector
from harness.backends.device import DeviceClock, device_clock_for
from harness.carbon.fns import KMER_START, KMERS
from harness.core.errors import BackendError
from harness.core.measure import Timer
from harness.core.spec import RunShape
from harness.core.vocab import PAD_TOKEN_ID

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def parse_dtype(name: str) -> torch.dtype:
    if name not in DTYPES:
        raise BackendError(f"dtype {name!r} is not supported; expected one of {', '.join(DTYPES)}")
    return DTYPES[name]


def cuda_device_name() -> str | None:
    """The first CUDA device's name (None without one), for hardware-profile detection."""
    try:
        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # detection must never break a session
        return None


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise BackendError(f"device {device!r} is not a device; expected auto, cpu, cuda or cuda:N") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise BackendError(f"device {device!r} asked for but CUDA is not available here; use --carbon-device cpu")
    if dev.type not in ("cpu", "cuda"):
        raise BackendError(f"device {device!r} is not supported by the hf backend; expected cpu, cuda or cuda:N")
    return dev


def default_dtype(device: torch.device) -> str:
    """bf16 on GPUs (as the reference runs), fp32 on CPUs (bf16 matmuls are emulated and slow there)."""
    return "bf16" if device.type == "cuda" else "fp32"


def cache_argument(decoder: Any) -> str:
    """The name under which the installed transformers' decoder takes a KV cache: ``cache`` where its
    forward has it (5.x: ``past_key_values`` warns at every call that it goes in 5.40), else
    ``past_key_values`` (4.57, the Trn2 stack's)."""
    return "cache" if "cache" in inspect.signature(decoder.forward).parameters else "past_key_values"


# Loaded models by (checkpoint, dtype, device): engines of several shapes share one copy of the
# weights (an 8B model in fp32 is 33 GB; one copy per shape would not fit). Weak values: a model
# goes when its last engine closes.
_LOADED: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


def engine_config(model: Any) -> dict[str, Any]:
    """The loaded model's config and generation config as transformers serializes them (defaults
    included), for a release check's config drift."""
    generation = getattr(model, "generation_config", None)
    out = {"model_config": model.config.to_dict(),
           "generation_config": generation.to_dict() if generation is not None else None}
    return json.loads(json.dumps(out, default=repr))


class HFEngine(Engine):
    scores_padded_batches = True  # its continuation_logits prefills and decodes a padded batch as it is

    def __init__(self, checkpoint: Path, shape: RunShape, model_name: str, device: str = "auto",
                 dtype: str = "auto", share_weights: bool = True) -> None:
        """``share_weights=False`` loads a private copy (for a test that perturbs weights)."""
        from transformers import AutoModelForCausalLM

        self.shape = shape
        self.device = resolve_device(device)
        dtype = default_dtype(self.device) if dtype == "auto" else dtype
        self.torch_dtype = parse_dtype(dtype)
        key = (str(Path(checkpoint).resolve()), dtype, str(self.device))
        start = time.perf_counter()
        model = _LOADED.get(key) if share_weights else None
        shared = model is not None
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(str(checkpoint), dtype=self.torch_dtype)
            model.to(self.device).eval()
            if share_weights:
                _LOADED[key] = model
        self.model = model
        self._cache_arg = cache_argument(model.model)
        self.synchronize()
        load_s = time.perf_counter() - start
        self.info = EngineInfo("hf", model_name, str(checkpoint), shape.name, str(self.device), dtype, load_s,
                               extra={"attn_implementation": getattr(self.model.config, "_attn_implementation", None),
                                      "shared_weights": shared, "torch_threads": torch.get_num_threads(),
                                      "engine_config": engine_config(self.model)})
        self.reset()

    # -- helpers ----------------------------------------------------------------------------
    def synchronize(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def device_clock(self) -> DeviceClock | None:
        return device_clock_for(self.device)

    def _timer(self) -> Timer:
        return Timer(self.synchronize)

    def _new_cache(self, batch_size: int) -> Any:
        """The KV cache a prefill starts (eager: transformers' growing DynamicCache)."""
        from transformers import DynamicCache

        return DynamicCache()

    def _decoder(self, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor) -> Any:
        """The decoder over the engine's KV cache, passed under the name the installed transformers
        takes (``cache_argument``); the cache is updated in place (read back from the output, a
        renamed attribute would warn as well)."""
        return self.model.model(input_ids=input_ids, attention_mask=mask, position_ids=positions,
                                use_cache=True, **{self._cache_arg: self._cache})

    def reset(self) -> None:
        self._cache = None
        self._mask: torch.Tensor | None = None
        self._next: torch.Tensor | None = None
        self._lengths: torch.Tensor | None = None
        self._steps = 0
        self._width = 0

    @property
    def steps_left(self) -> int:
        if self._cache is None:
            return 0
        return self.shape.seq_len - (self._width + self._steps)

    @torch.inference_mode()
    def _forward_last(self, input_ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor,
                      rows_last: torch.Tensor) -> torch.Tensor:
        """Logits [B, V] of one position per row (only those go through the lm head)."""
        if self._cache is None:
            self._cache = self._new_cache(input_ids.shape[0])
        out = self._decoder(input_ids, mask, positions)
        hidden = out.last_hidden_state[torch.arange(input_ids.shape[0], device=self.device), rows_last]
        return self.model.lm_head(hidden)

    # -- the protocol -----------------------------------------------------------------------
    def prefill_logits(self, batch: Batch) -> torch.Tensor:
        """Context encoding; returns the logits [B, V] of each prompt's last real position."""
        self.check_batch(batch)
        self.reset()
        ids = batch.input_ids.to(self.device)
        mask = batch.attention_mask.to(self.device)
        lengths = mask.sum(dim=1)
        positions = torch.arange(ids.shape[1], device=self.device).expand_as(ids)
        logits = self._forward_last(ids, mask, positions, lengths - 1)
        self._mask, self._lengths, self._width = mask, lengths, ids.shape[1]
        return logits

    def decode_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """One decode step feeding ``tokens`` [B]; returns the next logits [B, V]."""
        if self._mask is None:
            raise RuntimeError("decode_step() before prefill(): nothing to decode from")
        if self.steps_left <= 0:
            raise RuntimeError(f"the KV cache is full at seq_len={self.shape.seq_len}; reset() and prefill again")
        bsz = tokens.shape[0]
        self._mask = torch.cat([self._mask, torch.ones(bsz, 1, dtype=self._mask.dtype, device=self.device)], dim=1)
        positions = (self._lengths + self._steps).unsqueeze(1)
        last = torch.zeros(bsz, dtype=torch.long, device=self.device)
        logits = self._forward_last(tokens.to(self.device).unsqueeze(1), self._mask, positions, last)
        self._steps += 1
        return logits

    @torch.inference_mode()
    def extend_logits(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed ``tokens`` [B, n] after the cache in one forward pass; logits [B, n, V] of every fed
        position (speculative verification: one target step scores all draft tokens)."""
        if self._mask is None:
            raise RuntimeError("extend_logits() before prefill(): nothing to extend")
        bsz, n = tokens.shape
        if n > self.steps_left:
            raise RuntimeError(f"{n} tokens do not fit: {self.steps_left} positions left at seq_len={self.shape.seq_len}")
        self._mask = torch.cat([self._mask, torch.ones(bsz, n, dtype=self._mask.dtype, device=self.device)], dim=1)
        positions = (self._lengths + self._steps).unsqueeze(1) + torch.arange(n, device=self.device)
        out = self._decoder(tokens.to(self.device), self._mask, positions)
        self._steps += n
        return self.model.lm_head(out.last_hidden_state)

    def rewind(self, n: int) -> None:
        """Drop the last ``n`` fed positions from the KV cache (rejected draft tokens)."""
        if not 0 <= n <= self._steps:
            raise ValueError(f"cannot rewind {n} positions: {self._steps} were fed since prefill")
        if n:
            self._steps -= n
            self._cache.crop(-n)  # a negative length drops that many positions (transformers 4.57 and 5.x)
            self._mask = self._mask[:, : self._width + self._steps]

    def prefill(self, batch: Batch) -> torch.Tensor:
        self._next = self.prefill_logits(batch).argmax(dim=-1)
        return self._next

    def decode_step(self) -> torch.Tensor:
        if self._next is None:
            raise RuntimeError("decode_step() before prefill(): nothing to decode from")
        self._next = self.decode_logits(self._next).argmax(dim=-1)
        return self._next

    def generate(self, batch: Batch, max_new_tokens: int, select: Selector | None = None) -> GenerationResult:
        """Greedy by default; ``select`` maps logits [B, V] to the next ids [B] (FNS decoding)."""
        self.check_batch(batch, max_new_tokens)
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens={max_new_tokens} must be at least 1")
        choose = select or (lambda logits: logits.argmax(dim=-1))
        tokens, tkg = [], []
        with self._timer() as total:
            with self._timer() as cte:
                tokens.append(choose(self.prefill_logits(batch)))
            for _ in range(max_new_tokens - 1):
                with self._timer() as step:
                    tokens.append(choose(self.decode_logits(tokens[-1])))
                tkg.append(step.ms)
        self._next = tokens[-1]
        return GenerationResult(torch.stack(tokens, dim=1).cpu(), cte.ms, tkg, total.ms)

    @torch.inference_mode()
    def generate_until_eos(self, prompt: Sequence[int], max_new_tokens: int, eos_token_id: int) -> list[int]:
        """Through transformers' own ``generate`` (its stopping criteria, as a team's code would call it),
        greedy, with ``eos_token_id`` as EOS."""
        ids = torch.tensor([list(prompt)], device=self.device)
        out = self.model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                  do_sample=False, eos_token_id=eos_token_id, pad_token_id=PAD_TOKEN_ID)
        return out[0, ids.shape[1]:].tolist()

    @torch.inference_mode()
    def continuation_logits(self, batch: Batch, continuation: torch.Tensor) -> torch.Tensor:
        """Teacher-forced logits ``[B * N, V]``: prefill the prompts, then decode steps fed the given
        tokens (as the neuron engine does), so any request ``generate`` accepts is accepted here;
        one forward pass over prompt + continuation would need them to fit the context length."""
        self.check_batch(batch, int(continuation.shape[1]))
        steps = [self.prefill_logits(batch).float()]
        for i in range(continuation.shape[1] - 1):
            steps.append(self.decode_logits(continuation[:, i]).float())
        self.reset()
        logits = torch.stack(steps, dim=1)  # [B, N, V]
        return logits.reshape(-1, logits.shape[-1]).cpu()

    @torch.inference_mode()
    def logits(self, batch: Batch) -> torch.Tensor:
        self.check_batch(batch)
        out = self.model(input_ids=batch.input_ids.to(self.device), attention_mask=batch.attention_mask.to(self.device),
                         use_cache=False)
        return out.logits.float().cpu()

    @torch.inference_mode()
    def kmer_logits(self, batch: Batch) -> torch.Tensor:
        """The 6-mer head alone at every position: the decoder's final hidden states times the lm
        head's 4,096 6-mer rows, in the model's dtype as its lm head computes them. On a small model
        the full 155,776-row head is most of a scoring pass (carbon-tiny: its hidden size is 64)."""
        self.check_batch(batch)
        hidden = self.model.get_decoder()(input_ids=batch.input_ids.to(self.device),
                                          attention_mask=batch.attention_mask.to(self.device),
                                          use_cache=False).last_hidden_state
        rows = self.model.get_output_embeddings().weight[KMER_START:KMER_START + len(KMERS)]
        return torch.nn.functional.linear(hidden, rows).float().cpu()

    def close(self) -> None:
        self.reset()
        del self.model
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
