"""Hypothesis properties of the tokenizer, checked against an independent per-6-mer loop and against
the published algorithm itself (``PublishedReference``: ids and token masks)."""

from __future__ import annotations

import unicodedata

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from harness.carbon.dna_keys import SHORT_DNA_CHARS, dna_ids_loop
from harness.carbon.fastbpe import FastQwen3Bpe
from harness.carbon.tokenizer import CarbonTokenizer
from harness.carbon.tokenizer_reference import PublishedReference

pytestmark = pytest.mark.dna

TOK = CarbonTokenizer.builtin()
TOK_OOV = CarbonTokenizer.builtin(case_policy="oov")
BEGIN, END, OOV = TOK.dna_begin_token_id, TOK.dna_end_token_id, TOK.oov_token_id
DNA_LO, DNA_HI = TOK.dna_start_id, TOK.vocab_size

acgt = st.text(alphabet="ACGT", max_size=600)
kmers = st.lists(st.text(alphabet="ACGT", min_size=6, max_size=6), max_size=80).map("".join)
dna_noise = st.text(alphabet=st.sampled_from(list("ACGTacgtNRYKM -\n\tß") + ["é", "✓"]), max_size=300)


@given(kmers)
def test_round_trip_of_whole_kmers(seq):
    ids = TOK.encode("<dna>" + seq)
    assert len(ids) == 1 + len(seq) // 6
    assert TOK.decode(ids) == "<dna>" + seq
    assert TOK.decode(ids, skip_special_tokens=True) == seq


@given(st.text(max_size=300))
def test_encode_never_raises_and_ids_are_in_vocab(text):
    ids = TOK.encode(text)
    assert all(0 <= i < TOK.vocab_size for i in ids)
    TOK.decode(ids)
    TOK.decode(ids, skip_special_tokens=True)


@given(st.text(max_size=120), dna_noise, st.text(max_size=120))
@example("", "ACGTAC", "<dna>")  # ids end with <dna>: the scan once found that same <dna> again, for ever
@example("<dna>", "ACGTAC", "x<dna>AC</dna><dna>")
def test_ids_inside_a_dna_block_are_dna_ids(before, content, after):
    ids = TOK.encode(before + "<dna>" + content + "</dna>" + after)
    start = ids.index(BEGIN)
    while start >= 0:  # every <dna> ... </dna> span, wherever the random text put one
        stop = ids.index(END, start) if END in ids[start:] else len(ids) - 1
        assert all(DNA_LO <= i < DNA_HI for i in ids[start:stop + 1])
        start = ids.index(BEGIN, stop + 1) if BEGIN in ids[stop + 1:] else -1


@given(acgt)
def test_partial_blocks_are_padded_with_A(seq):
    ids = TOK.encode("<dna>" + seq)
    assert len(ids) - 1 == -(-len(seq) // 6)
    decoded = TOK.decode(ids, skip_special_tokens=True)
    assert decoded == seq + "A" * ((-len(seq)) % 6)


@given(dna_noise)
def test_vectorised_ids_equal_the_per_kmer_loop(content):
    for tok, policy in ((TOK, "upper"), (TOK_OOV, "oov")):
        assert tok.encode("<dna>" + content)[1:] == dna_ids_loop(content, tok.layout, policy)


@given(st.lists(st.tuples(st.integers(0, 20), st.booleans()), min_size=1, max_size=30))
def test_oov_count_is_exactly_predicted(blocks):
    """Each block is 6 bases with (or without) one N at a chosen place: exactly the N blocks are <oov>."""
    seq = "".join(("ACGTAC"[: p % 6] + "N" + "ACGTAC"[p % 6 + 1:]) if bad else "GATTAC" for p, bad in blocks)
    ids = TOK.encode("<dna>" + seq)
    assert ids.count(OOV) == sum(bad for _, bad in blocks)


@given(st.lists(st.one_of(acgt.map(lambda s: "<dna>" + s), st.text(max_size=60)), min_size=1, max_size=8))
def test_batch_encode_equals_per_item_encode(texts):
    enc = TOK(texts, padding=True)
    width = max(len(TOK.encode(t)) for t in texts)
    for text, row, mask in zip(texts, enc["input_ids"], enc["attention_mask"]):
        ids = TOK.encode(text)
        assert row == ids + [TOK.pad_token_id] * (width - len(ids))
        assert mask == [1] * len(ids) + [0] * (width - len(ids))


printable = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="<>", exclude_categories=["Cs", "Cc"]),
                    max_size=40)


@given(st.lists(st.one_of(printable.map(lambda t: ("text", t)), kmers.map(lambda d: ("dna", d)),
                          st.sampled_from(["<vertebrate_mammalian>", "<protein_coding_region>"]).map(lambda t: ("tag", t))),
                max_size=8))
@example([("text", "\U0002f800")])  # a CJK compatibility ideograph: NFC maps it to U+4E3D
@example([("text", "e"), ("dna", "ACGTAC"), ("text", "\u0301")])  # no composition across a DNA block
@example([("dna", "ACGTAC"), ("text", "\u0338")])  # "</dna>" keeps its ">" (">" + U+0338 is "≯" under NFC)
@example([("tag", "<vertebrate_mammalian>"), ("text", "\u0338")])  # a tag is BPE text: its ">" composes
def test_mixed_text_dna_and_tags_round_trip(parts):
    text = "".join(f"<dna>{v}</dna>" if k == "dna" else v for k, v in parts)
    assert TOK.decode(TOK.encode(text)) == nfc_outside_dna(parts)


def nfc_outside_dna(parts: list[tuple[str, str]]) -> str:
    """What a round trip gives back: each DNA block exactly, and each run of text and tags between
    them in its NFC form, because the Qwen3 BPE side normalises every run of text it is handed (as
    the published code does); DNA blocks are split off before it and never normalised."""
    out, run = [], ""
    for kind, value in parts:
        if kind == "dna":
            out += [unicodedata.normalize("NFC", run), f"<dna>{value}</dna>"]
            run = ""
        else:
            run += value
    return "".join(out) + unicodedata.normalize("NFC", run)


# -- against the published algorithm (ids and FNS token masks) -------------------------------------

REFERENCE = PublishedReference()
tags = st.sampled_from(["<dna>", "</dna>", "<vertebrate_mammalian>", "<|endoftext|>", "<think>", "\n", " "])
dna_runs = st.text(alphabet=st.sampled_from(list("ACGTACGTACGTacgtN \n")), min_size=0, max_size=200)
mixed_parts = st.lists(st.one_of(st.text(max_size=40), tags, dna_runs, printable), max_size=12).map("".join)


@given(mixed_parts, st.booleans())
def test_encode_and_token_mask_equal_the_published_algorithm(text, auto):
    expected = REFERENCE.encode(text, return_token_mask=True, auto_dna_tags=auto)
    assert TOK.encode(text, return_token_mask=True, auto_dna_tags=auto) == expected
    assert TOK.encode(text, auto_dna_tags=auto) == expected[0]


@given(st.text(alphabet=st.sampled_from(list("ACGTNacgt")), min_size=SHORT_DNA_CHARS, max_size=700))
def test_long_dna_ids_and_masks_equal_the_published_algorithm(seq):
    """Long content takes the table path (short content a dict lookup per 6-mer): both must agree."""
    assert TOK.encode("<dna>" + seq, return_token_mask=True) == REFERENCE.encode("<dna>" + seq, return_token_mask=True)


# Text the fast BPE path takes (ASCII, Latin-1, General Punctuation) mixed with what it must leave
# to tokenizers (combining marks, other scripts, Unicode spaces, the long s that folds to s).
fast_alphabet = st.characters(codec="utf-8", categories=None, max_codepoint=0xFF) | st.sampled_from(
    [chr(c) for c in range(0x2010, 0x2060)] + ["\u0301", "\u3000", "\u2028", "\u017f", "\u212a", "日", "\U0001F600"])
fast_text = st.lists(st.one_of(st.text(alphabet=fast_alphabet, max_size=30), tags,
                               st.sampled_from(["'s", "'LL", "\r\n", "\n\n", "  x", "12345", "<|im_start|>"])),
                     max_size=10).map("".join)


FAST = FastQwen3Bpe(TOK._bpe)  # one instance: its word cache warms across examples, as in use


@given(fast_text)
def test_fast_bpe_path_equals_tokenizers(text):
    assert FAST.supported
    assert FAST.encode(text) == TOK._bpe.encode(text, add_special_tokens=False).ids
