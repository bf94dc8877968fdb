"""Scoring's pure parts: window and variant parsing with the errors that name the variant, the
shipped fixture's determinism, figures and cost, rope scaling, the long-context plan and the
CTE-only NeuronConfig kwargs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from harness.backends.neuron.config import neuron_config_kwargs, scoring_neuron_config_kwargs
from harness.carbon.variants import (
    FIXTURE_DIR,
    Variant,
    VariantError,
    Window,
    check_variants,
    format_fasta,
    format_variants,
    parse_fasta,
    parse_variants,
    saturation_variants,
    synthetic_variants,
    synthetic_window,
    write_fixture,
)
from harness.cli import main
from harness.core.cost import usd_per_million
from harness.core.hardware import get_profile
from harness.core.plan import PlanError, check_context, check_plan, make_plan
from harness.core.spec import MODELS, SHAPES, RopeScaling, SpecError, parse_rope_scaling
from harness.workloads.scoring import ScoringError, batches, log_marginals, scoring_figures

pytestmark = pytest.mark.unit

WINDOW = Window("chr1", 101, "ACGTAC" * 3 + "GG")  # 20 bp, all scored: 3 whole 6-mers and a trailing partial one


# -- parsing ------------------------------------------------------------------------------------

def test_fasta_header_gives_chrom_and_start():
    w = parse_fasta(">chr1:101-120 a comment\nacgtac\nACGTACACGTAC\nGG\n")
    assert (w.chrom, w.start, w.end, w.sequence, w.scored_bp) == ("chr1", 101, 120, WINDOW.sequence, 20)
    assert (w.whole_kmers, w.predicted_kmers) == (3, 4)
    assert parse_fasta(">myseq\nACGT\n") == Window("myseq", 1, "ACGT")


@pytest.mark.parametrize("text,message", [
    ("ACGT\n", "starts with a '>' header"),
    (">a\nACGT\n>b\nACGT\n", "holds 2 records; a window is exactly one"),
    (">a\nACGNT\n", r"non-ACGT character 'N' at position 4"),
    (">chr1:1-10\nACGT\n", "header chr1:1-10 spans 10 bp but the record holds 4 bp"),
    (">a\n", "has no sequence"),
])
def test_bad_fasta_is_named(text, message):
    with pytest.raises(VariantError, match=message):
        parse_fasta(text, "w.fa")


def test_variants_tsv():
    vs = parse_variants("#chrom\tpos\tref\talt\tid\nchr1\t103\tg\tA\trs1\n\nchr1 104 T C rs2\n")
    assert vs == [Variant("chr1", 103, "G", "A", "rs1", 2), Variant("chr1", 104, "T", "C", "rs2", 4)]


@pytest.mark.parametrize("text,message", [
    ("chr1\t103\tG\tA\n", r"line 1: 4 columns; expected 5 \(chrom, pos, ref, alt, id\)"),
    ("chr1\tx\tG\tA\trs1\n", r"line 1 \(id 'rs1'\): pos 'x' is not an integer"),
    ("chr1\t0\tG\tA\trs1\n", r"pos 0 must be >= 1"),
    ("chr1\t103\tG\tA\trs1\nchr1\t104\tT\tC\trs1\n", "line 2: id 'rs1' repeats line 1"),
])
def test_bad_variant_rows_are_named(text, message):
    with pytest.raises(VariantError, match=message):
        parse_variants(text, "v.tsv")


@pytest.mark.parametrize("variant,message", [
    (Variant("chr1", 100, "A", "C", "before"),
     r"variant 'before' chr1:100 A>C: outside the scored window chr1:101-120"),
    (Variant("chr1", 121, "A", "C", "after"), "'after'.*outside the scored window"),
    (Variant("chr1", 101, "A", "N", "nalt", 7),
     r"variant 'nalt' chr1:101 A>N \(line 7\): alt allele 'N' is not one of"),
    (Variant("chr1", 101, "AC", "A", "indel"), "ref allele 'AC' is not one of A, C, G, T"),
    (Variant("chr1", 101, "C", "G", "wrongref"),
     r"'wrongref'.*ref allele 'C' does not match the window's base 'A' at chr1:101"),
    (Variant("chr2", 101, "A", "C", "otherchrom"), "chromosome 'chr2' is not the window's 'chr1'"),
    (Variant("chr1", 101, "A", "A", "same"), "alt equals ref"),
])
def test_unscorable_variants_are_named(variant, message):
    ok = Variant("chr1", 102, "C", "T", "fine")
    with pytest.raises(VariantError, match=message):
        check_variants(WINDOW, [ok, variant])


def test_no_variants_is_an_error():
    with pytest.raises(VariantError, match="no variants to score"):
        check_variants(WINDOW, [])


def test_saturation_has_three_alts_per_position():
    vs = saturation_variants(WINDOW)
    assert len(vs) == 3 * 20 and len({v.id for v in vs}) == len(vs)  # the trailing partial 6-mer's 2 bases too
    assert all(v.ref == WINDOW.sequence[v.pos - 101] != v.alt for v in vs)
    check_variants(WINDOW, vs)
    with pytest.raises(VariantError, match="saturation position chr1:121 is outside the scored window chr1:101-120"):
        saturation_variants(WINDOW, 120, 121)


def test_shipped_fixture_is_regenerated_byte_for_byte(tmp_path):
    fa, tsv = write_fixture(tmp_path)
    assert fa.read_text() == (FIXTURE_DIR / "window.fa").read_text()
    assert tsv.read_text() == (FIXTURE_DIR / "variants.tsv").read_text()
    window = parse_fasta(fa.read_text())
    assert window == synthetic_window() and len(check_variants(window, parse_variants(tsv.read_text()))) == 15


def test_formats_round_trip():
    w = synthetic_window(bp=130, seed=3)
    vs = synthetic_variants(w, 5, seed=3)
    assert parse_fasta(format_fasta(w)) == w
    assert [(v.pos, v.ref, v.alt, v.id) for v in parse_variants(format_variants(vs))] == \
        [(v.pos, v.ref, v.alt, v.id) for v in vs]


# -- math ---------------------------------------------------------------------------------------

def test_log_marginals_are_normalised_log_probabilities():
    logits = torch.randn(5, 4096, generator=torch.Generator().manual_seed(0))
    lm = log_marginals(logits, 4)
    assert lm.shape == (24, 4)
    np.testing.assert_allclose(np.exp(lm).sum(-1), 1.0, rtol=1e-5)


def test_batches_cover_every_row_once():
    assert [list(b) for b in batches(17, 8)] == [list(range(8)), list(range(8, 16)), [16]]
    with pytest.raises(ScoringError, match="batch size 0 must be at least 1"):
        batches(3, 0)


def test_scoring_figures():
    f = scoring_figures(100, 30_000, [400.0, 500.0, 600.0], [100.0, 120.0, 130.0], price_per_hour=3.6)
    assert f["variants_per_s"] == pytest.approx(200.0)
    assert f["scored_kbp_per_s"] == pytest.approx(60.0)
    assert f["cte_ms_p50"] == pytest.approx(120.0) and f["cte_ms_p99"] == pytest.approx(129.8)
    assert f["usd_per_million_variants"] == pytest.approx(5.0)  # $0.001/s / 200 variants/s * 1e6
    assert "usd_per_million_variants" not in scoring_figures(1, 6, [1.0], [1.0])


def test_cost_rejects_nonsense():
    with pytest.raises(ValueError, match="items_per_s=0"):
        usd_per_million(0, 2.0)


# -- rope scaling and the long-context plan -----------------------------------------------------

def test_rope_scaling_parses_and_extends_positions():
    spec = MODELS["carbon-3b"]
    assert parse_rope_scaling("yarn:4", spec) == RopeScaling(4.0, 32768)
    scaled = spec.with_rope_scaling(parse_rope_scaling("yarn:4:16384", spec))
    assert scaled.max_position_embeddings == 65536  # the card's "65,536 with YaRN factor=4"
    assert scaled.hf_config()["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 16384}
    assert spec.hf_config()["rope_scaling"] is None


@pytest.mark.parametrize("value,message", [
    ("linear:4", "expected yarn:FACTOR"), ("yarn:x", "factor 'x' is not a number"), ("yarn:1", "factor 1 must be > 1"),
    ("yarn:4:-3", "original max positions .-3. must be a positive integer")])
def test_bad_rope_scaling_is_named(value, message):
    with pytest.raises(SpecError, match=f"rope scaling '{value}': {message}"):
        parse_rope_scaling(value, MODELS["carbon-3b"])


@pytest.mark.parametrize("model", ["carbon-500m", "carbon-3b", "carbon-8b"])
@pytest.mark.parametrize("shape", ["scan-8k", "scan-32k", "scan-64k", "vep-bs8"])
def test_long_context_plan_on_trn2(model, shape):
    spec, s = MODELS[model], SHAPES[shape]
    plan = make_plan(spec, s, get_profile("trn2.3xlarge"))
    assert plan.context_fits == (s.seq_len <= spec.max_position_embeddings)
    assert plan.fits  # every Carbon size fits a trn2.3xlarge's HBM at these shapes
    assert plan.logits_bytes_per_rank == s.batch_size * s.seq_len * 4096 * 4  # the 6-mer head, fp32, on every rank
    assert plan.cte_floor_ms > 0
    if not plan.context_fits:
        with pytest.raises(PlanError, match=f"{model} / {shape}: {s.seq_len} positions exceed .*--rope-scaling yarn:"):
            check_plan(plan)
        scaled = spec.with_rope_scaling(parse_rope_scaling(f"yarn:{s.seq_len // spec.max_position_embeddings}", spec))
        check_plan(make_plan(scaled, s, get_profile("trn2.3xlarge")))
        check_context(scaled, s)


def test_device_that_cannot_hold_the_scan_is_refused():
    """8B at tp=1 holds all its weights, a 64k scan's KV cache and its 6-mer logits on one 24 GiB rank:
    refused before compiling. The 32k scan fits there (0.50 GiB of logits: the scoring build returns
    the 6-mer head only; the full vocabulary's would be 19 GiB)."""
    yarn = MODELS["carbon-8b"].with_rope_scaling(parse_rope_scaling("yarn:2", MODELS["carbon-8b"]))  # 64k positions
    plan = make_plan(yarn, SHAPES["scan-64k"], get_profile("trn2.3xlarge"), tp_degree=1)
    assert plan.fits is False
    with pytest.raises(PlanError, match=r"carbon-8b at tp=1 on trn2.3xlarge does not fit: weights 15.38 GiB \+ KV "
                                         r"8.00 GiB \+ scoring logits 1.00 GiB per rank > 24.00 GiB HBM per rank"):
        check_plan(plan)
    assert make_plan(MODELS["carbon-8b"], SHAPES["scan-32k"], get_profile("trn2.3xlarge"), tp_degree=1).fits


def test_plan_cli_covers_the_long_shapes(capsys):
    assert main(["plan", "--model", "carbon-3b", "--shape", "scan-32k", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["context_fits"] and data["max_position_embeddings"] == 32768
    assert main(["plan", "--model", "carbon-3b", "--shape", "scan-64k"]) == 1
    assert "--rope-scaling yarn:2" in capsys.readouterr().err
    assert main(["plan", "--model", "carbon-3b", "--shape", "scan-64k", "--rope-scaling", "yarn:4"]) == 0
    assert "131072" in capsys.readouterr().out
    assert main(["plan", "--model", "carbon-3b", "--shape", "scan-64k", "--rope-scaling", "ntk:4"]) == 2
    assert "rope scaling 'ntk:4'" in capsys.readouterr().err


def test_checkpoint_cli_carries_rope_scaling(tmp_path):
    out = tmp_path / "ck"
    assert main(["checkpoint", "--model", "carbon-3b", "--out", str(out), "--config-only",
                 "--rope-scaling", "yarn:4:16384"]) == 0
    config = json.loads((out / "config.json").read_text())
    assert config["rope_scaling"] == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 16384}
    assert config["max_position_embeddings"] == 65536
    assert json.loads((out / "tokenizer_config.json").read_text())["model_max_length"] == 65536


def test_transformers_reads_the_rope_scaling(tmp_path):
    from transformers import AutoConfig

    out = tmp_path / "ck"
    main(["checkpoint", "--model", "carbon-3b", "--out", str(out), "--config-only", "--rope-scaling", "yarn:4"])
    config = AutoConfig.from_pretrained(out)
    params = getattr(config, "rope_parameters", None) or config.rope_scaling  # 5.x / 4.57
    assert params["rope_type"] == "yarn" and params["factor"] == 4.0
    assert config.max_position_embeddings == 131072


# -- neuron -------------------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["carbon-500m", "carbon-3b", "carbon-8b"])
def test_scoring_neuron_kwargs_are_cte_only_with_logits(model):
    kw = scoring_neuron_config_kwargs(model, "vep-bs8")
    base = neuron_config_kwargs(model, "vep-bs8")
    # no on-device sampling: the CTE's output is the logits (output_logits would add a duplicate copy)
    assert kw["on_device_sampling_config"] is None and not kw.get("output_logits")
    assert (kw["max_context_length"], kw["seq_len"], kw["max_length"], kw["max_new_tokens"]) == (256, 256, 256, 0)
    assert kw["context_encoding_buckets"] == [256] and kw["token_generation_buckets"] == [256]
    assert kw["batch_size"] == kw["ctx_batch_size"] == 8
    same = {k for k in base if k not in ("on_device_sampling_config", "max_new_tokens")}
    assert {k: kw[k] for k in same} == {k: base[k] for k in same}
    assert scoring_neuron_config_kwargs(model, "vep-bs8", ["fused-qkv"])["fused_qkv"] is True


def test_scoring_neuron_kwargs_refuse_a_context_the_model_lacks():
    with pytest.raises(PlanError, match="carbon-500m / scan-32k: 32768 positions exceed"):
        scoring_neuron_config_kwargs("carbon-500m", "scan-32k")
    spec = MODELS["carbon-3b"].with_rope_scaling(RopeScaling(4.0, 16384))
    assert scoring_neuron_config_kwargs(spec, "scan-64k")["max_context_length"] == 65536
    assert math.isclose(spec.rope_scaling.factor, 4.0)


# -- report -------------------------------------------------------------------------------------

def test_report_shows_scoring_beside_generation(tmp_path):
    from harness.analysis.report import markdown
    from harness.analysis.results import load_results

    bench = [
        {"name": "test_e2e[carbon-tiny-smoke]", "group": "e2e-smoke", "stats": {"median": 0.5},
         "extra_info": {"model": "carbon-tiny", "shape": "smoke", "e2e_ms_p50": 500.0, "tokens_per_s": 256.0}},
        {"name": "test_vep[carbon-tiny]", "group": "scoring-carbon-tiny", "stats": {"median": 0.2},
         "extra_info": {"model": "carbon-tiny", "shape": "vep-bs8", "workload": "vep", "cte_ms_p50": 90.0,
                        "variants_per_s": 75.0, "scored_kbp_per_s": 9.6, "usd_per_million_variants": 8.28}},
    ]
    path = tmp_path / "out.json"
    path.write_text(json.dumps({"benchmarks": bench, "machine_info": {}}))
    results, _ = load_results(path)
    assert results[1].figures["variants_per_s"] == 75.0  # a known metric: compare gates it too
    table = markdown(results)
    header, _, e2e, vep = table.splitlines()
    assert "tok/s" in header and "variants/s" in header and "scored kbp/s" in header and "$/M variants" in header
    assert "| 500.0 | 256.0 |" in e2e and "| vep | 75.000 | 9.600 | 8.280 |" in vep
