"""``carbon-harness``: the command line around the library (checkpoints, plans, reports, gates).

Each sub-command parses its options with small ``parse_*`` functions passed as argparse
``type=``, so bad input fails at the command line with one clear message and exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from harness.spec import MODELS, SpecError, get_model


def parse_model(value: str) -> str:
    try:
        return get_model(value).name
    except SpecError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def parse_nonneg_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if n < 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be >= 0")
    return n


def cmd_checkpoint(args: argparse.Namespace) -> int:
    from harness.checkpoint import write_checkpoint

    write_checkpoint(args.model, args.out, seed=args.seed, config_only=args.config_only, force=args.force)
    print(args.out)
    return 0


def cmd_golden(args: argparse.Namespace) -> int:
    from harness.backends.hf import HFEngine
    from harness.checkpoint import cached_checkpoint
    from harness.golden import GOLDEN_TOKENS, write_golden
    from harness.spec import RunShape
    from harness.tokenizer import CarbonTokenizer

    checkpoint = cached_checkpoint(args.model, args.cache_dir.expanduser(), seed=args.seed)
    shape = RunShape("golden", batch_size=1, max_context_length=256, seq_len=256 + GOLDEN_TOKENS,
                     max_new_tokens=GOLDEN_TOKENS)
    engine = HFEngine(checkpoint, shape, args.model, device="cpu", dtype="fp32")
    print(write_golden(engine, CarbonTokenizer.from_checkpoint(checkpoint), args.out))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="carbon-harness", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("checkpoint", help="write a synthetic Carbon checkpoint (real architecture, seeded weights)")
    p.add_argument("--model", required=True, type=parse_model, help=f"one of: {', '.join(MODELS)}")
    p.add_argument("--out", required=True, type=Path, help="directory to create (must be empty or absent)")
    p.add_argument("--seed", type=parse_nonneg_int, default=0)
    p.add_argument("--config-only", action="store_true", help="write everything but the weights")
    p.add_argument("--force", action="store_true", help="replace a non-empty --out")
    p.set_defaults(func=cmd_checkpoint)

    p = sub.add_parser("golden", help="regenerate golden outputs (fp32 CPU greedy tokens of the DNA suite)")
    p.add_argument("--model", default="carbon-tiny", type=parse_model)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--seed", type=parse_nonneg_int, default=0)
    p.add_argument("--cache-dir", type=Path, default=Path("~/.cache/carbon-harness"))
    p.set_defaults(func=cmd_golden)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, OSError) as exc:
        print(f"carbon-harness {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
