"""bf16 safetensors bytes written from numpy, so the same values give byte-identical files on any
machine and torch version: the synthetic writer (``harness.carbon.checkpoint``) streams its seeded
init through these, and the trainer (``harness.carbon.training``) its trained weights."""

from __future__ import annotations

import json
import struct

import numpy as np


def float32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round-to-nearest-even float32 -> bfloat16 bit patterns (uint16), as torch does."""
    bits = x.astype(np.float32, copy=False).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded >> np.uint32(16)).astype(np.uint16)


def safetensors_header(shapes: dict[str, tuple[int, ...]], metadata: dict[str, str]) -> bytes:
    offsets, header, pos = {}, {"__metadata__": metadata}, 0
    for name, shape in shapes.items():
        nbytes = int(np.prod(shape)) * 2
        header[name] = {"dtype": "BF16", "shape": list(shape), "data_offsets": [pos, pos + nbytes]}
        offsets[name] = pos
        pos += nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * ((-len(raw)) % 8)  # safetensors aligns the data section to 8 bytes
    return struct.pack("<Q", len(raw)) + raw


def write_bf16(path, tensors: dict[str, np.ndarray], metadata: dict[str, str]) -> None:
    """``tensors`` (float32 arrays, written in this order) as one bf16 safetensors file at ``path``."""
    with open(path, "wb") as f:
        f.write(safetensors_header({k: tuple(v.shape) for k, v in tensors.items()}, metadata))
        for value in tensors.values():
            f.write(float32_to_bf16_bits(np.ascontiguousarray(value, dtype=np.float32)).tobytes())
