"""The tokenizer contract: id-for-id the published HybridDNATokenizer (DESIGN.md, "Tokenizer")."""

from __future__ import annotations

import itertools
import re
import warnings

import numpy as np
import pytest
import torch

from harness.carbon.qwen3 import builtin_tokenizer_dir
from harness.carbon.tokenizer import CarbonTokenizer
from harness.carbon.tokenizer_reference import detect_case_policy, load_remote_tokenizer
from harness.core.storage import sha256_file
from harness.core.vocab import DnaLayout, TokenizerError

pytestmark = pytest.mark.compat

BEGIN, END, OOV, PAD = 151669, 151670, 151671, 151643


@pytest.fixture(scope="module")
def tok(carbon_tokenizer: CarbonTokenizer) -> CarbonTokenizer:
    return carbon_tokenizer


@pytest.fixture(scope="module")
def tok_oov() -> CarbonTokenizer:
    return CarbonTokenizer.builtin(case_policy="oov")


def kmer(tok: CarbonTokenizer, s: str) -> int:
    return tok.convert_tokens_to_ids([s])[0]


# -- id layout ----------------------------------------------------------------------------------

def test_id_layout_attributes(tok):
    assert (tok.k, tok.dna_start_id, tok.dna_begin_token_id, tok.dna_end_token_id, tok.oov_token_id) == (
        6, 151669, BEGIN, END, OOV)
    assert tok.pad_token_id == PAD and tok.eos_token_id == PAD
    assert tok.vocab_size == 155776 == len(tok) and tok.vocab_size % 128 == 0


@pytest.mark.parametrize("token,expected", [
    ("AAAAAA", 151672), ("AAAAAT", 151673), ("CCCCCC", 154402), ("GGGGGG", 155767),
    ("<unused_0>", 155768), ("<unused_7>", 155775), ("<dna>", BEGIN), ("</dna>", END), ("<oov>", OOV),
])
def test_token_ids(tok, token, expected):
    assert tok.convert_tokens_to_ids([token]) == [expected]
    assert tok.convert_ids_to_tokens([expected]) == [token]


def test_kmer_ids_follow_itertools_product_order(tok):
    ids = tok.kmer_ids()
    assert len(ids) == 4096 and ids[0] == 151672 and ids[-1] == 155767
    expected = ["".join(p) for p in itertools.product("ATCG", repeat=6)]
    assert tok.convert_ids_to_tokens(ids.tolist()) == expected


def test_bpe_part_is_qwen3(tok):
    assert sha256_file(builtin_tokenizer_dir() / "tokenizer.json") == (
        "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4")
    assert tok.convert_tokens_to_ids(["CCCCCC"]) == [154402]  # the DNA token wins inside the DNA block
    assert tok._bpe.token_to_id("CCCCCC") == 91443
    assert tok.convert_ids_to_tokens([PAD]) == ["<|endoftext|>"]


# -- encode -------------------------------------------------------------------------------------

@pytest.mark.parametrize("bp,tokens", [(1020, 171), (1080, 181), (6, 2), (7, 3), (0, 1)])
def test_dna_prompt_token_counts(tok, bp, tokens):
    assert len(tok.encode("<dna>" + "ACGTTG" * (bp // 6) + "A" * (bp % 6))) == tokens


def test_no_bos_or_eos_added(tok):
    ids = tok.encode("<dna>ACGTAC")
    assert ids == [BEGIN, kmer(tok, "ACGTAC")]
    assert tok.encode("hello", add_special_tokens=True) == tok._bpe.encode("hello", add_special_tokens=False).ids
    assert tok.encode("") == []


def test_partial_block_is_right_padded_with_A(tok):
    assert tok.encode("<dna>ACGCTATAG")[-1] == kmer(tok, "TAGAAA") == 152888
    assert tok.encode("<dna>G") == [BEGIN, kmer(tok, "GAAAAA")]


@pytest.mark.parametrize("content,expected", [
    ("ACGTNC", ["<oov>"]),                          # N
    ("ACGTRY", ["<oov>"]),                          # IUPAC codes
    ("ACGWSKMBDHV", ["<oov>", "<oov>"]),             # more IUPAC codes, padded tail too
    ("ACG TAC", ["<oov>", "CAAAAA"]),                # inner whitespace is a character
    ("ACGTAC\nGGGGGG", ["ACGTAC", "<oov>", "GAAAAA"]),  # inner newline shifts the frame
    ("  ACGTAC \n", ["ACGTAC"]),                     # surrounding whitespace is stripped
    ("ACGTA-", ["<oov>"]),
    ("ACGTAé", ["<oov>"]),                           # non-ASCII is one character
    ("ßACGTAC", ["<oov>", "ACAAAA"]),                # str.upper: ß -> SS shifts the frame
])
def test_oov_and_normalisation(tok, content, expected):
    ids = tok.encode("<dna>" + content)
    assert tok.convert_ids_to_tokens(ids[1:]) == expected


@pytest.mark.parametrize("policy,expected", [("upper", ["ACGTAC", "GGTTAA"]), ("oov", ["<oov>", "<oov>"])])
def test_lowercase_under_each_case_policy(policy, expected):
    t = CarbonTokenizer.builtin(case_policy=policy)
    assert t.convert_ids_to_tokens(t.encode("<dna>acgtacggttaa")[1:]) == expected
    assert detect_case_policy(t.encode) == policy


def test_mixed_case_under_oov_policy(tok_oov):
    assert tok_oov.convert_ids_to_tokens(tok_oov.encode("<dna>ACGTACggttaa")[1:]) == ["ACGTAC", "<oov>"]


def test_unknown_case_policy_is_rejected():
    with pytest.raises(TokenizerError, match="case_policy='lower'.*'upper', 'oov'"):
        CarbonTokenizer.builtin(case_policy="lower")


def test_bpe_outside_tags(tok):
    bpe = tok._bpe
    text = "The promoter <dna>TATAAA</dna> drives expression."
    ids = tok.encode(text)
    assert ids == (bpe.encode("The promoter ", add_special_tokens=False).ids + [BEGIN, kmer(tok, "TATAAA"), END]
                   + bpe.encode(" drives expression.", add_special_tokens=False).ids)


def test_added_tokens_in_text_are_recognised(tok):
    assert PAD in tok.encode("end<|endoftext|>start")


def test_metadata_tag_prompt(tok):
    prompt = "<vertebrate_mammalian><protein_coding_region><dna>ATGGCC"
    ids = tok.encode(prompt)
    head = tok._bpe.encode("<vertebrate_mammalian><protein_coding_region>", add_special_tokens=False).ids
    assert ids == head + [BEGIN, kmer(tok, "ATGGCC")]
    assert all(i < 151669 for i in head)


@pytest.mark.parametrize("text,expected_tokens", [
    ("<dna>ACGTAC", ["<dna>", "ACGTAC"]),                             # unclosed <dna>: DNA to the end
    ("<dna>", ["<dna>"]),                                             # a bare tag
    ("</dna>", ["</dna>"]),
    ("<dna></dna>", ["<dna>", "</dna>"]),
    ("ACGTAC</dna>", ["ACGTAC", "</dna>"]),                          # text before a stray </dna> is DNA
    ("xy</dna>", ["<oov>", "</dna>"]),
    ("<dna>AAAAAA</dna><dna>CCCCCC</dna>", ["<dna>", "AAAAAA", "</dna>", "<dna>", "CCCCCC", "</dna>"]),
    ("<dna>AC<dna>GT</dna>", ["<dna>", "<oov>", "<oov>", "</dna>"]),  # an inner <dna> is content
])
def test_tag_splitting(tok, text, expected_tokens):
    assert tok.convert_ids_to_tokens(tok.encode(text)) == expected_tokens


def test_end_tag_before_begin_tag(tok):
    """``</dna>`` first: it closes a (content-less) DNA region, the text up to ``<dna>`` is BPE."""
    ids = tok.encode("</dna>GGGGGG<dna>AAAAAA")
    assert ids == [END] + tok._bpe.encode("GGGGGG", add_special_tokens=False).ids + [BEGIN, 151672]


def test_text_between_blocks(tok):
    ids = tok.encode("<dna>AAAAAA</dna> and <dna>CCCCCC</dna>")
    middle = tok._bpe.encode(" and ", add_special_tokens=False).ids
    assert ids == [BEGIN, 151672, END] + middle + [BEGIN, 154402, END]


# -- batches ------------------------------------------------------------------------------------

def test_right_padding_and_mask(tok):
    enc = tok(["<dna>ACGTACGTACGT", "<dna>ACGTAC"], padding=True, return_tensors="pt")
    assert enc["input_ids"].tolist() == [tok.encode("<dna>ACGTACGTACGT"), tok.encode("<dna>ACGTAC") + [PAD]]
    assert enc["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert enc["input_ids"].dtype == torch.long


def test_padding_side_is_ignored(tok):
    tok.padding_side = "left"
    try:
        enc = tok(["<dna>AAAAAAAAAAAA", "<dna>A"], padding=True)
    finally:
        del tok.padding_side
    assert enc["input_ids"][1][-1] == PAD and enc["attention_mask"][1] == [1, 1, 0]


def test_single_string_call_and_numpy(tok):
    enc = tok("<dna>ACGTAC")
    assert enc == {"input_ids": [BEGIN, kmer(tok, "ACGTAC")], "attention_mask": [1, 1]}
    arr = tok(["<dna>A", "<dna>AAAAAAC"], padding="longest", return_tensors="np")["input_ids"]
    assert isinstance(arr, np.ndarray) and arr.shape == (2, 3)


def test_unpadded_ragged_batch_cannot_become_a_tensor(tok):
    with pytest.raises(TokenizerError, match="padding=True"):
        tok(["<dna>A", "<dna>AAAAAAC"], return_tensors="pt")


# -- a drop-in for the published class's call ----------------------------------------------------
# The published HybridDNATokenizer overrides transformers' __call__: these are its semantics.

BATCH = ["<dna>ACGTACGTACGTACGTAC", "<dna>A"]  # 4 and 2 ids


@pytest.mark.parametrize("padding", [True, "longest", "max_length", "do_not_pad"])
def test_any_truthy_padding_pads_to_the_longest_row(tok, padding):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # 'do_not_pad' pads (as published) and says so
        enc = tok(BATCH, padding=padding)
    assert enc["input_ids"] == [tok.encode(BATCH[0]), tok.encode(BATCH[1]) + [PAD, PAD]]
    assert enc["attention_mask"] == [[1, 1, 1, 1], [1, 1, 0, 0]]


def test_do_not_pad_warns_that_it_pads(tok):
    with pytest.warns(UserWarning, match="pads to the longest row"):
        tok(BATCH, padding="do_not_pad")


@pytest.mark.parametrize("max_length,width", [(3, 3), (100, 4), (1, 1)])
def test_max_length_caps_padded_rows(tok, max_length, width):
    enc = tok(BATCH, padding="max_length", max_length=max_length, truncation=True, return_token_mask=True)
    long, short = tok.encode(BATCH[0], return_token_mask=True), tok.encode(BATCH[1], return_token_mask=True)
    assert enc["input_ids"] == [long[0][:width], (short[0] + [PAD] * 2)[:width]]
    assert enc["token_mask"] == [long[1][:width], (short[1] + [-2] * 2)[:width]]
    assert enc["attention_mask"] == [[1] * width, ([1, 1, 0, 0])[:width]]


def test_max_length_cuts_one_padded_string(tok):
    assert tok(BATCH[0], padding=True, max_length=2)["input_ids"] == tok.encode(BATCH[0])[:2]


def test_max_length_without_padding_cuts_nothing_and_says_so(tok):
    with pytest.warns(UserWarning, match="no effect without padding"):
        enc = tok(BATCH, max_length=2, truncation=True)
    assert enc["input_ids"] == [tok.encode(t) for t in BATCH]


def test_token_mask_values(tok):
    ids, mask = tok.encode("hi <dna>ACGTACGTNCAAGGTT</dna>", return_token_mask=True)
    text = tok._bpe.encode("hi ", add_special_tokens=False).ids
    assert ids[len(text):] == [BEGIN, kmer(tok, "ACGTAC"), OOV, kmer(tok, "GGTTAA"), END]
    assert mask == [-1] * len(text) + [0, 6, 0, 4, 0]  # text, <dna>, full 6-mer, <oov>, 4 real bases, </dna>
    enc = tok(["<dna>ACGTACG", "<dna>A"], padding=True, return_token_mask=True, return_tensors="pt")
    assert enc["token_mask"].tolist() == [[0, 6, 1], [0, 1, -2]]


def test_token_mask_of_a_padded_oov_tail_is_zero(tok):
    assert tok.encode("<dna>ACGTACGN", return_token_mask=True)[1] == [0, 6, 0]


def test_auto_dna_tags(tok):
    auto = CarbonTokenizer.builtin(auto_dna_tags=True)
    assert auto.encode("ACGTAC") == [BEGIN, kmer(tok, "ACGTAC"), END] == tok.encode("ACGTAC", auto_dna_tags=True)
    assert auto.encode("ACGTAC", auto_dna_tags=False) == tok.encode("ACGTAC")
    assert auto.encode("<dna>ACGTAC") == tok.encode("<dna>ACGTAC")  # already tagged: left alone
    assert auto(["ACGTAC"])["input_ids"] == [[BEGIN, kmer(tok, "ACGTAC"), END]]


def test_auto_dna_tags_from_dna_config(tmp_path):
    (tmp_path / "dna_config.json").write_text(
        '{"k": 6, "dna_start_id": 151669, "dna_vocab_size": 4107, "auto_dna_tags": true}')
    assert CarbonTokenizer.from_checkpoint(tmp_path).encode("GGGGGG") == [BEGIN, 155767, END]
    (tmp_path / "dna_config.json").write_text(
        '{"k": 6, "dna_start_id": 151669, "dna_vocab_size": 4107, "auto_dna_tags": "yes"}')
    with pytest.raises(TokenizerError, match="auto_dna_tags='yes'; expected true or false"):
        CarbonTokenizer.from_checkpoint(tmp_path)


@pytest.mark.parametrize("one_id", [151672, np.int64(151672), torch.tensor(151672)])
def test_decode_of_one_id(tok, one_id):
    assert tok.decode(one_id) == "AAAAAA"
    assert tok.decode(OOV, skip_special_tokens=True) == ""


def test_decode_accepts_transformers_keywords(tok):
    assert tok.decode([BEGIN, 151672], clean_up_tokenization_spaces=False) == "<dna>AAAAAA"
    assert tok.batch_decode([[151672]], clean_up_tokenization_spaces=True) == ["AAAAAA"]


def test_convert_one_token_and_unknown_tokens(tok):
    assert tok.convert_tokens_to_ids("CCCCCC") == 154402
    assert tok.convert_tokens_to_ids("<|endoftext|>") == PAD
    assert tok.convert_tokens_to_ids("no-such-token") == 0  # published: Qwen3's unk id (None) or 0
    assert tok.convert_tokens_to_ids(["<dna>", "no-such-token"]) == [BEGIN, 0]
    assert tok.convert_ids_to_tokens(151672) == "AAAAAA"
    assert tok.convert_ids_to_tokens([151672, 10**7, PAD]) == ["AAAAAA", "<oov>", "<|endoftext|>"]
    assert tok.convert_ids_to_tokens([151672, PAD], skip_special_tokens=True) == ["AAAAAA"]


def test_tensors_of_one_string(tok):
    ids = tok.encode("<dna>ACGTACGT")
    arr = tok("<dna>ACGTACGT", return_tensors="np")
    assert arr["input_ids"].shape == (3,) and arr["input_ids"].tolist() == ids  # published: via BatchEncoding
    pt = tok("<dna>ACGTACGT", return_tensors="pt", return_token_mask=True)
    assert pt["input_ids"].shape == (1, 3) and pt["token_mask"].tolist() == [[0, 6, 2]]


def test_ragged_numpy_batch_is_an_object_array(tok):
    arr = tok(BATCH, return_tensors="np")["input_ids"]
    assert arr.dtype == object and [row.tolist() for row in arr] == [tok.encode(t) for t in BATCH]


def test_call_returns_a_batch_encoding(tok):
    from transformers import BatchEncoding

    enc = tok(BATCH, padding=True, return_tensors="pt")
    assert isinstance(enc, BatchEncoding) and enc.input_ids.shape == (2, 4)


def test_add_special_tokens_is_ignored_with_a_warning(tok):
    with pytest.warns(UserWarning, match="add_special_tokens=True, ignoring"):
        assert tok("<dna>A", add_special_tokens=True)["input_ids"] == [BEGIN, 151672]


@pytest.mark.parametrize("kwargs,message", [
    ({"padding": "max-length"}, "padding='max-length'; expected one of True, False, None, 'longest'"),
    ({"max_length": -1}, "max_length=-1; expected a non-negative integer or None"),
    ({"return_tensors": "tf"}, "return_tensors='tf'; expected None, 'np' or 'pt'"),
])
def test_bad_call_arguments_are_named(tok, kwargs, message):
    with pytest.raises(TokenizerError, match=re.escape(message)):
        tok(BATCH, **kwargs)


# -- decode -------------------------------------------------------------------------------------

@pytest.mark.parametrize("ids,plain,skipped", [
    ([BEGIN, 151672, END], "<dna>AAAAAA</dna>", "AAAAAA"),
    ([BEGIN, 151672, OOV, 154402], "<dna>AAAAAA<oov>CCCCCC", "AAAAAA<oov>CCCCCC"),  # <oov> inside a block stays
    ([BEGIN, 151672, PAD, 154402, END], "<dna>AAAAAACCCCCC</dna>", "AAAAAACCCCCC"),  # non-DNA ids in a block drop
    ([151672, END, OOV], "AAAAAA</dna><oov>", "AAAAAA"),  # outside a block: specials drop only with skip
    ([155768], "<unused_0>", "<unused_0>"),
    ([BEGIN, BEGIN, 151672], "<dna><dna>AAAAAA", "<dna>AAAAAA"),
])
def test_decode_rules(tok, ids, plain, skipped):
    assert tok.decode(ids) == plain
    assert tok.decode(ids, skip_special_tokens=True) == skipped


def test_decode_text_and_pad(tok):
    ids = tok.encode("hello <dna>ACGTAC</dna> world") + [PAD]
    assert tok.decode(ids) == "hello <dna>ACGTAC</dna> world<|endoftext|>"
    assert tok.decode(ids, skip_special_tokens=True) == "hello ACGTAC world"


def test_batch_decode(tok):
    enc = tok(["<dna>ACGTAC", "hi"], padding=True, return_tensors="pt")
    assert tok.batch_decode(enc["input_ids"], skip_special_tokens=True) == ["ACGTAC", "hi"]


# -- construction from files --------------------------------------------------------------------

def test_from_checkpoint_matches_builtin(tok, carbon_tiny_checkpoint):
    ck = CarbonTokenizer.from_checkpoint(carbon_tiny_checkpoint)
    text = "x <vertebrate_mammalian><dna>ACGTNNacgt</dna> y"
    assert ck.encode(text) == tok.encode(text) and ck.vocab_size == 155776


def test_from_checkpoint_rejects_a_wrong_dna_config(tmp_path):
    (tmp_path / "dna_config.json").write_text('{"k": 3, "dna_start_id": 151669, "dna_vocab_size": 4107}')
    with pytest.raises(TokenizerError, match=r"k=3 is not supported.*k=6"):
        CarbonTokenizer.from_checkpoint(tmp_path)


def test_from_checkpoint_rejects_malformed_json(tmp_path):
    (tmp_path / "dna_config.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="dna_config.json: not valid JSON"):
        CarbonTokenizer.from_checkpoint(tmp_path)


def test_layout_rejects_missing_field():
    with pytest.raises(TokenizerError, match="missing field 'dna_start_id'"):
        DnaLayout.from_dna_config({"k": 6, "dna_vocab_size": 4107})


# -- the published tokenizer, when the user provides a real checkpoint ---------------------------

REMOTE_CORPUS = [
    "<dna>" + "ACGT" * 255,
    "<dna>acgtNNNNacgtRYKM</dna>",
    "<vertebrate_mammalian><protein_coding_region><dna>ATGGCCATTGTAATGGGCCGC",
    "The sequence <dna>TATAAA</dna> is a TATA box.",
    "ACGT</dna>GGGG<dna>CC",
    "<dna>  ACGTAC \n",
    "plain text only, no DNA",
]


@pytest.fixture(scope="module")
def remote_tokenizer(pytestconfig):
    path = pytestconfig.getoption("carbon_remote_tokenizer")
    if not path:
        pytest.skip("no real checkpoint given: pass --carbon-remote-tokenizer DIR (or set CARBON_REMOTE_TOKENIZER) "
                    "to compare the published HybridDNATokenizer with the builtin one")
    return load_remote_tokenizer(path)


@pytest.mark.parametrize("text", REMOTE_CORPUS)
def test_builtin_matches_remote(remote_tokenizer, text):
    policy = detect_case_policy(lambda s: remote_tokenizer.encode(s, add_special_tokens=False))
    builtin = CarbonTokenizer.builtin(case_policy=policy)
    assert builtin.encode(text) == list(remote_tokenizer.encode(text, add_special_tokens=False))
