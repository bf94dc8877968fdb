"""Scoring inputs: a reference window (one FASTA record) and single-nucleotide variants (a small
VCF-like TSV), parsed and checked against each other before anything runs.

Plain files and a tiny parser on purpose: a window is one record and a variant five columns, so a
parser library would add a dependency and no safety. Every check fails naming the variant (its id
and line) and what would be accepted, because a mis-keyed ref allele silently scores the wrong base.

Formats::

    >chr17:43044295-43044594          (samtools-style chrom:start-end, 1-based inclusive; or just >name)
    ACGT...                           (any line wrapping; A/C/G/T only, either case)

    #chrom  pos       ref  alt  id    (tab-separated; lines starting with # are skipped)
    chr17   43044300  G    A    rs1   (pos is 1-based, as in VCF)
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.core.paths import FIXTURES_DIR
from harness.core.storage import atomic_write_text

BASES = "ACGT"
K = 6
TSV_COLUMNS = ("chrom", "pos", "ref", "alt", "id")
_HEADER = re.compile(r"^(?P<chrom>[^\s:]+):(?P<start>\d[\d,]*)-(?P<end>\d[\d,]*)$")


class VariantError(ValueError):
    """A window or variant that cannot be scored; the message names it and what is accepted."""


@dataclass(frozen=True)
class Window:
    """A reference sequence and where it sits: ``start`` is the 1-based position of its first base."""

    chrom: str
    start: int
    sequence: str

    @property
    def end(self) -> int:
        """1-based inclusive position of the last base."""
        return self.start + len(self.sequence) - 1

    @property
    def scored_bp(self) -> int:
        """Bases the model scores: all of them. The bases of a trailing partial 6-mer are scored from
        the marginals predicted for that 6-mer (from the 6-mers before it, so the tokenizer's A padding
        plays no part), as the published FNS token mask counts them (r real bases of a padded 6-mer);
        the padding itself is never scored."""
        return len(self.sequence)

    @property
    def whole_kmers(self) -> int:
        """6-mers fed to the model after ``<dna>``: the trailing partial one is predicted, never fed."""
        return len(self.sequence) // K

    @property
    def predicted_kmers(self) -> int:
        """6-mers whose marginals are read: the whole ones and a trailing partial one."""
        return -(-len(self.sequence) // K)

    def offset(self, pos: int) -> int:
        return pos - self.start

    def __len__(self) -> int:
        return len(self.sequence)


@dataclass(frozen=True)
class Variant:
    """A single-nucleotide variant; ``line`` is where it was read (0 when built in code)."""

    chrom: str
    pos: int
    ref: str
    alt: str
    id: str
    line: int = 0

    @property
    def label(self) -> str:
        where = f" (line {self.line})" if self.line else ""
        return f"variant {self.id!r} {self.chrom}:{self.pos} {self.ref}>{self.alt}{where}"


def check_bases(sequence: str, what: str) -> str:
    """Upper-cased ``sequence``, or an error naming the first non-ACGT character and its position."""
    seq = sequence.upper()
    for i, ch in enumerate(seq):
        if ch not in BASES:
            raise VariantError(f"{what}: non-ACGT character {ch!r} at position {i + 1}; only A, C, G, T can be scored")
    return seq


def parse_fasta(text: str, source: str = "FASTA") -> Window:
    """One record: ``>chrom:start-end`` (or ``>name``, taken as starting at 1) and its sequence."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(";")]
    if not lines or not lines[0].startswith(">"):
        raise VariantError(f"{source}: a FASTA window starts with a '>' header line")
    headers = [i for i, ln in enumerate(lines) if ln.startswith(">")]
    if len(headers) > 1:
        raise VariantError(f"{source}: holds {len(headers)} records; a window is exactly one")
    name = lines[0][1:].split()[0] if lines[0][1:].split() else ""
    if not name:
        raise VariantError(f"{source}: the header has no name; expected >chrom:start-end or >name")
    sequence = check_bases("".join(lines[1:]), f"{source} ({name})")
    if not sequence:
        raise VariantError(f"{source} ({name}): the record has no sequence")
    m = _HEADER.match(name)
    if not m:
        return Window(name, 1, sequence)
    start, end = int(m["start"].replace(",", "")), int(m["end"].replace(",", ""))
    if start < 1 or end - start + 1 != len(sequence):
        raise VariantError(f"{source}: header {name} spans {end - start + 1} bp but the record holds "
                           f"{len(sequence)} bp")
    return Window(m["chrom"], start, sequence)


def read_fasta(path: str | Path) -> Window:
    path = Path(path)
    try:
        return parse_fasta(path.read_text(), str(path))
    except FileNotFoundError:
        raise VariantError(f"FASTA window {path} does not exist") from None


def parse_variants(text: str, source: str = "variants") -> list[Variant]:
    """Rows of ``chrom pos ref alt id`` (tabs or spaces); the row's shape is checked here, its fit
    to a window by :func:`check_variants`."""
    out: list[Variant] = []
    seen: dict[str, int] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split()
        where = f"{source}: line {n}"
        if len(fields) != len(TSV_COLUMNS):
            raise VariantError(f"{where}: {len(fields)} columns; expected {len(TSV_COLUMNS)} "
                               f"({', '.join(TSV_COLUMNS)})")
        chrom, pos, ref, alt, vid = fields
        try:
            position = int(pos)
        except ValueError:
            raise VariantError(f"{where} (id {vid!r}): pos {pos!r} is not an integer") from None
        if position < 1:
            raise VariantError(f"{where} (id {vid!r}): pos {position} must be >= 1 (positions are 1-based)")
        if vid in seen:
            raise VariantError(f"{where}: id {vid!r} repeats line {seen[vid]}; ids must be unique")
        seen[vid] = n
        out.append(Variant(chrom, position, ref.upper(), alt.upper(), vid, n))
    return out


def read_variants(path: str | Path) -> list[Variant]:
    path = Path(path)
    try:
        return parse_variants(path.read_text(), str(path))
    except FileNotFoundError:
        raise VariantError(f"variants file {path} does not exist") from None


def check_variant(window: Window, v: Variant) -> None:
    """A single-nucleotide variant the window can score, or an error naming it."""
    for allele, name in ((v.ref, "ref"), (v.alt, "alt")):
        if len(allele) != 1 or allele not in BASES:
            raise VariantError(f"{v.label}: {name} allele {allele!r} is not one of A, C, G, T "
                               "(only single-nucleotide variants are scored)")
    if v.ref == v.alt:
        raise VariantError(f"{v.label}: alt equals ref; a variant must change the base")
    if v.chrom != window.chrom:
        raise VariantError(f"{v.label}: chromosome {v.chrom!r} is not the window's {window.chrom!r}")
    last = window.start + window.scored_bp - 1
    if not window.start <= v.pos <= last:
        raise VariantError(f"{v.label}: outside the scored window {window.chrom}:{window.start}-{last}")
    base = window.sequence[window.offset(v.pos)]
    if base != v.ref:
        raise VariantError(f"{v.label}: ref allele {v.ref!r} does not match the window's base {base!r} at "
                           f"{window.chrom}:{v.pos}")


def check_variants(window: Window, variants: Iterable[Variant]) -> list[Variant]:
    out = list(variants)
    if not out:
        raise VariantError("no variants to score")
    for v in out:
        check_variant(window, v)
    return out


def mutate(window: Window, v: Variant) -> str:
    """The window's sequence with the variant's alt allele in place."""
    i = window.offset(v.pos)
    return window.sequence[:i] + v.alt + window.sequence[i + 1:]


def saturation_variants(window: Window, first: int | None = None, last: int | None = None) -> list[Variant]:
    """Saturation mutagenesis: all three alts at every position in ``[first, last]`` (1-based,
    inclusive; default the whole scored window), ids ``chrom:pos:ref>alt``."""
    first = window.start if first is None else first
    last = window.start + window.scored_bp - 1 if last is None else last
    if first > last:
        raise VariantError(f"saturation range {first}-{last} is empty")
    out = []
    for pos in range(first, last + 1):
        if not window.start <= pos < window.start + window.scored_bp:
            raise VariantError(f"saturation position {window.chrom}:{pos} is outside the scored window "
                               f"{window.chrom}:{window.start}-{window.start + window.scored_bp - 1}")
        ref = window.sequence[window.offset(pos)]
        out += [Variant(window.chrom, pos, ref, alt, f"{window.chrom}:{pos}:{ref}>{alt}")
                for alt in BASES if alt != ref]
    return out


# ---------------------------------------------------------------------------------------------
# The synthetic set shipped in fixtures/scoring/ (regenerated byte for byte by a unit test)
# ---------------------------------------------------------------------------------------------

FIXTURE_DIR = FIXTURES_DIR / "scoring"
FIXTURE_CHROM, FIXTURE_START, FIXTURE_BP, FIXTURE_VARIANTS, FIXTURE_SEED = "synthetic1", 10001, 120, 15, 0


def synthetic_window(bp: int = FIXTURE_BP, seed: int = FIXTURE_SEED, chrom: str = FIXTURE_CHROM,
                     start: int = FIXTURE_START) -> Window:
    rng = np.random.Generator(np.random.PCG64([seed, 11]))
    return Window(chrom, start, "".join(np.array(list(BASES))[rng.integers(0, 4, size=bp)]))


def synthetic_variants(window: Window, count: int = FIXTURE_VARIANTS, seed: int = FIXTURE_SEED) -> list[Variant]:
    """``count`` distinct positions across the scored window, one alt each, sorted by position."""
    rng = np.random.Generator(np.random.PCG64([seed, 12]))
    offsets = np.sort(rng.choice(window.scored_bp, size=count, replace=False))
    out = []
    for i, off in enumerate(offsets.tolist()):
        ref = window.sequence[off]
        alts = [b for b in BASES if b != ref]
        out.append(Variant(window.chrom, window.start + off, ref, alts[int(rng.integers(0, 3))], f"syn{i + 1:03d}"))
    return out


def format_fasta(window: Window, width: int = 60) -> str:
    body = "\n".join(window.sequence[i:i + width] for i in range(0, len(window), width))
    return f">{window.chrom}:{window.start}-{window.end}\n{body}\n"


def format_variants(variants: Sequence[Variant]) -> str:
    rows = ["#" + "\t".join(TSV_COLUMNS)]
    rows += [f"{v.chrom}\t{v.pos}\t{v.ref}\t{v.alt}\t{v.id}" for v in variants]
    return "\n".join(rows) + "\n"


def write_fixture(directory: str | Path = FIXTURE_DIR) -> tuple[Path, Path]:
    """Write ``window.fa`` and ``variants.tsv`` (atomically); deterministic for the constants above."""
    directory = Path(directory)
    window = synthetic_window()
    fa = atomic_write_text(directory / "window.fa", format_fasta(window))
    tsv = atomic_write_text(directory / "variants.tsv", format_variants(synthetic_variants(window)))
    return fa, tsv


if __name__ == "__main__":
    for written in write_fixture():
        print(written)
