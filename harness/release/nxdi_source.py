"""``carbon-harness nxdi-source VERSION``: the NxDI (neuronx-distributed-inference) and neuronx-distributed
sources of a Neuron SDK release, in the harness cache, fetched from where Neuron publishes them.

The releases are those with NxD Inference in ``ci/constraints/sdk-*.txt`` (each names its exact NxDI and NxD
versions; a file named for a minor line, ``sdk-2.28.txt``, also stands for the patch releases its first
line names). Each package comes from the Neuron pip repository (its wheel of exactly that version) or,
failing that, the public GitHub repository at that version's tag or commit (``GITHUB_REFS``; the 0.10
releases' sources are on the pip repository only). The tree lands in ``CACHE/nxdi-sources/RELEASE``
laid out as ``--carbon-nxdi-source`` reads it (``neuronx-distributed-inference/src``,
``neuronx-distributed/src``), built in a temporary directory beside it and renamed into place under a
lock, with ``SOURCE.json`` saying where each package came from. The command prints the tree's path on
stdout (``export CARBON_NXDI_SOURCE=$(carbon-harness nxdi-source 2.29.0)``), its progress on stderr.

A local tree given instead (``CARBON_NXDI_SOURCE`` or ``--nxdi-source DIR``) is checked, never copied:
both packages there, and their major.minor that of the release's pins. Where neither source can be
reached, the command fails in one line naming both and the override.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import re
import shutil
import sys
from pathlib import Path

from harness.backends.neuron.artifacts import package_version
from harness.backends.neuron.sources import NXD_PACKAGE, NXDI_PACKAGE, NeuronImportError, source_roots
from harness.core.paths import REPO_ROOT
from harness.core.storage import atomic_dir, exclusive_lock, is_complete, remove_stale_partials
from harness.release.nxdi_fetch import GITHUB, PIP_INDEX, TIMEOUT_S, FetchError, Package, from_github, from_pip

NXDI_SOURCE_ENV = "CARBON_NXDI_SOURCE"  # the same variable the pytest plugin reads (harness.plugin.hooks)
CACHE_DIR_ENV = "CARBON_HARNESS_CACHE"  # likewise
CONSTRAINTS_DIR = REPO_ROOT / "ci" / "constraints"
CACHE_SUBDIR = "nxdi-sources"
NAMES = {"neuronx-distributed-inference": NXDI_PACKAGE, "neuronx-distributed": NXD_PACKAGE}
# Where each version's sources are public on GitHub (github.com/aws-neuron/<name>), read from the repositories'
# history (2026-11-27): NxDI tags stop at v0.7.14366 (2.27) and NxD's at v2.28.0, so later ones are commits.
# 0.9.17334: ef2731e ("sync code base to release-2.29-v2", 2026-05-01), the 2.29 sources that generate; the
# first 2.29 publication, c63afe0, cannot (an undefined tensor_capture_hook). NxDI 0.10 and NxD 0.19 (SDK 2.30,
# 2.31) are not on GitHub.
GITHUB_REFS = {
    ("neuronx-distributed-inference", "0.8.16251"): "cd3abf30558fe1a14dadfb1397c2118e3fcfcc11",
    ("neuronx-distributed-inference", "0.9.17334"): "ef2731ef8c5764953d23f95f0a8b736bcc5bc8d4",
    ("neuronx-distributed", "0.17.26814"): "v2.28.0",
    ("neuronx-distributed", "0.18.27753"): "fbac349b61a3adbb123c2983835af692840ff62f",
}
OVERRIDE = (f"give a local tree instead: {NXDI_SOURCE_ENV}=DIR or --nxdi-source DIR (pytest: --carbon-nxdi-source DIR; "
            "release-check: --baseline-nxdi-source / --candidate-nxdi-source DIR)")


class NxdiSourceError(ValueError):
    """The release's sources cannot be had as asked; the message says why and what would do."""


@dataclasses.dataclass(frozen=True)
class Release:
    name: str  # as its constraints file names it: 2.28, 2.29.0
    constraints: Path
    packages: tuple[Package, ...]  # NxDI first, then NxD

    @property
    def nxdi(self) -> Package:
        return self.packages[0]


def releases(constraints_dir: Path = CONSTRAINTS_DIR) -> dict[str, Release]:
    """Every release a VERSION may name (patch aliases included) -> its Release."""
    found: dict[str, Release] = {}
    for path in sorted(constraints_dir.glob("sdk-*.txt")):
        text = path.read_text()
        pins = dict(re.findall(r"^(neuronx-distributed-inference|neuronx-distributed)==(\S+)", text, re.M))
        if set(pins) != set(NAMES):
            continue  # a release without NxD Inference
        name = path.stem[len("sdk-"):]
        packages = tuple(Package(n, NAMES[n], pins[n], GITHUB_REFS.get((n, pins[n]))) for n in NAMES)
        release = Release(name, path, packages)
        found[name] = release
        if name.count(".") == 1:  # sdk-2.28.txt: the patch releases its first line names share its packages
            # "Neuron SDK 2.28.0 and 2.28.1 (...)" names two; a tools version (2.31.15.0) is none
            first = text.splitlines()[0] if text else ""
            for alias in re.findall(rf"(?<![\w.-]){re.escape(name)}\.\d+(?![\w.])", first):
                found.setdefault(alias, release)
    return found


def accepted(known: dict[str, Release]) -> str:
    return ", ".join(sorted(known, key=lambda v: [int(p) for p in v.split(".")]))


def parse_release(value: str) -> Release:
    known = releases()
    if not known:
        raise argparse.ArgumentTypeError(f"no release with NxD Inference in {CONSTRAINTS_DIR}/sdk-*.txt: this "
                                         "command reads the checkout's ci/constraints (install the harness with "
                                         "pip install -e)")
    if value not in known:
        raise argparse.ArgumentTypeError(f"{value!r} is no Neuron SDK release with NxD Inference that this harness "
                                         f"knows: give one of {accepted(known)} (ci/constraints/sdk-*.txt)")
    return dataclasses.replace(known[value], name=value)  # an alias keeps its name: 2.28.1 goes to nxdi-sources/2.28.1


def major_minor(version: str | None) -> tuple[str, ...] | None:
    return tuple(version.split(".")[:2]) if version else None


def check_tree(tree: Path, release: Release, what: str) -> dict[str, str]:
    """Both packages in ``tree`` where ``--carbon-nxdi-source`` looks for them, each of the release's
    major.minor where its ``_version.py`` says: their versions (``unknown`` where none is declared)."""
    try:
        nxdi_root, nxd_root = source_roots(tree)
    except NeuronImportError as exc:
        raise NxdiSourceError(str(exc).replace("--carbon-nxdi-source", what)) from None
    if nxd_root is None:
        raise NxdiSourceError(f"{what} {tree} holds {NXDI_PACKAGE} but no {NXD_PACKAGE} (NxDI imports it): put a "
                              "neuronx-distributed/ checkout beside neuronx-distributed-inference/")
    versions = {}
    for package, root in zip(release.packages, (nxdi_root, nxd_root)):
        version = package_version(root / package.module)
        if version and major_minor(version) != major_minor(package.version):
            raise NxdiSourceError(f"{what} {tree} holds {package.name} {version}, where Neuron SDK {release.name} "
                                  f"publishes {package.version}: give that release's tree")
        versions[package.name] = version or "unknown"
    return versions


def fetch_into(tmp: Path, release: Release, index: str, github: str, timeout_s: float) -> None:
    """Each package from the pip repository, else GitHub, into ``tmp``; one line naming both where neither
    delivers."""
    record = {"release": release.name, "constraints": release.constraints.name,
              "fetched": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"), "packages": {}}
    for package in release.packages:
        dest = tmp / package.name
        failures = []
        for source, fetch in (("pip", lambda: from_pip(package, index, dest, timeout_s)),
                              ("github", lambda: from_github(package, github, dest, timeout_s))):
            try:
                record["packages"][package.name] = {"version": package.version, "source": source, **fetch()}
                break
            except FetchError as exc:
                failures.append(str(exc))
                shutil.rmtree(dest, ignore_errors=True)  # a partial extraction must not mix with the next source's
        else:
            raise NxdiSourceError(f"cannot fetch {package.name} {package.version} of Neuron SDK {release.name} from "
                                  f"the Neuron pip repository or GitHub: {'; '.join(failures)}; {OVERRIDE}")
    (tmp / "SOURCE.json").write_text(json.dumps(record, indent=2) + "\n")
    check_tree(tmp, release, "the fetched tree")


def cmd_nxdi_source(args: argparse.Namespace) -> int:
    release: Release = args.version
    local = args.nxdi_source or os.environ.get(NXDI_SOURCE_ENV)
    if local:
        what = "--nxdi-source" if args.nxdi_source else NXDI_SOURCE_ENV
        tree = Path(local).expanduser().resolve()
        versions = check_tree(tree, release, what)
        print(f"nxdi-source {release.name}: the local tree of {what}, not fetched: "
              + ", ".join(f"{name} {v}" for name, v in versions.items())
              + f" (Neuron SDK {release.name} publishes {release.nxdi.version} / {release.packages[1].version})",
              file=sys.stderr)
        print(tree)
        return 0
    cache = Path(args.cache_dir or os.environ.get(CACHE_DIR_ENV) or "~/.cache/carbon-harness").expanduser()
    dest = cache / CACHE_SUBDIR / release.name
    built = False
    with exclusive_lock(dest, busy=f"another nxdi-source is putting {release.name} into {dest}"):
        remove_stale_partials(dest)
        if args.force or not cached(dest, release):
            with atomic_dir(dest, replace=True) as tmp:  # the old tree stays until the new one is whole
                fetch_into(tmp, release, args.pip_index, args.github, args.timeout)
            built = True
    said = json.loads((dest / "SOURCE.json").read_text())["packages"]
    print(f"nxdi-source {release.name}: {'fetched' if built else 'already in the cache'}: "
          + ", ".join(f"{name} {p['version']} from {p['from']}" for name, p in said.items()), file=sys.stderr)
    print(dest)
    return 0


def cached(dest: Path, release: Release) -> bool:
    """A whole tree of the release at ``dest`` (one an interrupted or other fetch left is fetched again)."""
    if not (is_complete(dest) and (dest / "SOURCE.json").is_file()):
        return False
    try:
        check_tree(dest, release, "the cached tree")
    except NxdiSourceError as exc:
        print(f"nxdi-source {release.name}: fetching again: {exc}", file=sys.stderr)
        return False
    return True


def parse_timeout(value: str) -> float:
    try:
        seconds = float(value)
    except ValueError:
        seconds = 0.0
    if not 0 < seconds <= 600:
        raise argparse.ArgumentTypeError(f"{value!r}: give seconds, more than 0 and at most 600")
    return seconds


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("nxdi-source", help="put a Neuron SDK release's NxDI and neuronx-distributed sources in the "
                                           "cache (from the Neuron pip repository or GitHub) and print where")
    p.add_argument("version", type=parse_release, metavar="VERSION",
                   help="a Neuron SDK release with NxD Inference, as ci/constraints/sdk-*.txt names it (2.29.0)")
    p.add_argument("--nxdi-source", metavar="DIR", help=f"a local tree to check instead of fetching (env: "
                                                        f"{NXDI_SOURCE_ENV})")
    p.add_argument("--cache-dir", metavar="DIR", help=f"the harness cache (env: {CACHE_DIR_ENV}; default "
                                                      "~/.cache/carbon-harness): the tree goes to nxdi-sources/VERSION")
    p.add_argument("--force", action="store_true", help="fetch again over a cached tree")
    p.add_argument("--pip-index", default=PIP_INDEX, metavar="URL",
                   help=f"the Neuron pip repository, or a mirror of it (default {PIP_INDEX})")
    p.add_argument("--github", default=GITHUB, metavar="URL", help=f"where the repositories are (default {GITHUB})")
    p.add_argument("--timeout", type=parse_timeout, default=TIMEOUT_S, metavar="S",
                   help=f"seconds a connection or a read may stall (default {TIMEOUT_S:g})")
    p.set_defaults(func=cmd_nxdi_source)
