"""``carbon-harness explain 'pasted error'``: the troubleshooting entry of an error, from any fragment of it.

It prints the entry's title, the message, what causes it, what to do, and its page and anchor
(docs/troubleshooting/<group>.md); it exits 1, naming the page, when no entry matches. The lookup
(``harness.core.troubleshooting``) reads the data file generated with the page, so it needs neither the
docs nor a checkout. ``-`` reads the error from standard input (a whole log tail pasted or piped in); the
id or anchor that an error line ends with (``docs/troubleshooting/<group>.md#<id>``) finds its entry too.
"""

from __future__ import annotations

import argparse
import sys

from harness.core.troubleshooting import PAGE, describe, find


def cmd_explain(args: argparse.Namespace) -> int:
    text = sys.stdin.read() if args.error == ["-"] else " ".join(args.error)
    entry = find(text)
    if entry is None:
        print(f"carbon-harness explain: no entry of {PAGE} matches {' '.join(text.split())[:120]!r}: search that "
              "page (or the docs site) for a few fixed words of the error; an error from Python or the OS is not "
              "the harness's own (CARBON_HARNESS_TRACEBACK=1 shows where it came from)", file=sys.stderr)
        return 1
    print(describe(entry))
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="the troubleshooting entry of an error: its cause, what to do, its anchor",
                       description=__doc__.splitlines()[0].replace("``", ""))
    p.add_argument("error", nargs="+", metavar="ERROR",
                   help="the error, or any part of it (quote it), an entry's anchor, or - to read it from stdin")
    p.set_defaults(func=cmd_explain)
