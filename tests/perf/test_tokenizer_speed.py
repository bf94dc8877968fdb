"""The vectorised DNA path against the straightforward per-6-mer loop, on a multi-Mbp prompt.

Both implementations are recorded as benchmarks of one group; the vectorised one also times the
loop itself so its ``dna_encode_speedup`` does not depend on test order. The speedup is gated by
``fixtures/thresholds`` (not by a literal here).
"""

from __future__ import annotations

import pytest

from harness.dna import batch_suite
from harness.fixtures import round_ms
from harness.measure import percentile, time_calls
from harness.tokenizer import dna_ids, dna_ids_loop

pytestmark = pytest.mark.perf

MBP = 3
SEQUENCE = "".join(c.sequence for c in batch_suite(1020, 16)) * (MBP * 1_000_000 // (1020 * 16))


def test_dna_encode_loop(benchmark):
    benchmark.group = "tokenizer-dna-encode"
    ids = benchmark.pedantic(dna_ids_loop, args=(SEQUENCE,), rounds=3, iterations=1, warmup_rounds=0)
    assert len(ids) == -(-len(SEQUENCE) // 6)
    median_s = percentile(round_ms(benchmark), 50) / 1000.0
    benchmark.extra_info.update(bp=len(SEQUENCE), implementation="per-6-mer loop", bp_per_s=len(SEQUENCE) / median_s)


def test_dna_encode_vectorised(benchmark, carbon_gate):
    benchmark.group = "tokenizer-dna-encode"
    ids = benchmark.pedantic(dna_ids, args=(SEQUENCE,), rounds=10, iterations=1, warmup_rounds=1)
    assert ids.tolist() == dna_ids_loop(SEQUENCE)
    median_s = percentile(round_ms(benchmark), 50) / 1000.0
    loop_ms = percentile(time_calls(lambda: dna_ids_loop(SEQUENCE), runs=3), 50)
    figures = {"bp_per_s": len(SEQUENCE) / median_s, "dna_encode_speedup": loop_ms / 1000.0 / median_s}
    benchmark.extra_info.update(bp=len(SEQUENCE), implementation="numpy", loop_ms_p50=loop_ms, **figures)
    carbon_gate(benchmark, model="*", shape="tokenizer", figures={"dna_encode_speedup": figures["dna_encode_speedup"]})
