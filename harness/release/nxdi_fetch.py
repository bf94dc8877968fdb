"""Fetching one NxDI-family package's sources from where Neuron publishes them, for
``carbon-harness nxdi-source`` (``harness.release.nxdi_source``): the Neuron pip repository's wheel of
the exact version (a PEP 503 simple index: ``{index}/{name}/``), or the public GitHub repository's tarball
at the release's tag or commit. Every request has a short timeout, so a host that cannot reach either
fails in seconds; what is fetched is written into a directory the caller renames into place.
"""

from __future__ import annotations

import hashlib
import html.parser
import io
import re
import shutil
import sys
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urldefrag, urljoin

PIP_INDEX = "https://pip.repos.neuron.amazonaws.com"
GITHUB = "https://github.com/aws-neuron"
TIMEOUT_S = 10.0  # per connection and per read: an unreachable host fails fast, a slow one is not cut off
CHUNK = 1 << 16
KEEP_FROM_GITHUB = ("src", "setup.py", "LICENSE", "LICENSE.txt", "NOTICE", "NOTICE.txt")  # as ../shared/vendor keeps


class FetchError(OSError):
    """One source could not deliver the package; the message says where and why, briefly."""


@dataclass(frozen=True)
class Package:
    """One package of a release: its distribution name, import name, pinned version, GitHub ref."""

    name: str  # neuronx-distributed-inference
    module: str  # neuronx_distributed_inference
    version: str  # the release's pin, as ci/constraints names it
    github_ref: str | None  # the tag or commit of that version on GitHub; None: not published there

    def index_url(self, index: str) -> str:
        return f"{index.rstrip('/')}/{self.name}/"

    def github_url(self, github: str) -> str | None:
        return f"{github.rstrip('/')}/{self.name}/archive/{self.github_ref}.tar.gz" if self.github_ref else None


def brief(exc: BaseException) -> str:
    """A network error in a few words (``Name or service not known``, ``HTTP 404``, ``timed out``)."""
    if isinstance(exc, urllib.error.HTTPError):
        return f"HTTP {exc.code}"
    reason = getattr(exc, "reason", None)
    if reason is not None:
        return str(getattr(reason, "strerror", None) or reason)
    return str(exc) or type(exc).__name__


def download(url: str, timeout_s: float, label: str | None = None) -> bytes:
    """The body at ``url``; with a ``label``, a line on stderr once the server answers and progress for a body
    of more than a megabyte (nothing is printed for a host that cannot be reached)."""
    request = urllib.request.Request(url, headers={"User-Agent": "carbon-harness nxdi-source"})
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            total = int(response.headers.get("Content-Length") or 0)
            if label:
                print(f"  {label}: {url}", file=sys.stderr, flush=True)
            buffer = io.BytesIO()
            done, shown = 0, time.monotonic()
            while True:
                chunk = response.read(CHUNK)
                if not chunk:
                    break
                buffer.write(chunk)
                done += len(chunk)
                if label and time.monotonic() - shown > 1.0 and done > 1 << 20:
                    progress(label, done, total)
                    shown = time.monotonic()
    except (urllib.error.URLError, OSError, ValueError) as exc:  # ValueError: a malformed URL
        raise FetchError(f"{url} ({brief(exc)})") from None
    if label and done > 1 << 20:
        progress(label, done, total, final=True)
    return buffer.getvalue()


def progress(label: str, done: int, total: int, final: bool = False) -> None:
    of = f" of {total / 1e6:.1f}" if total else ""
    end = "\n" if final or not sys.stderr.isatty() else "\r"
    print(f"  {label}: {done / 1e6:.1f}{of} MB", end=end, file=sys.stderr, flush=True)


class _Links(html.parser.HTMLParser):
    """The ``<a href>`` targets of a PEP 503 page, with their text (the file name)."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")

    def handle_data(self, data: str) -> None:
        if self._href is not None and data.strip():
            self.links.append((self._href, data.strip()))
            self._href = None


def wheel_link(page: str, base: str, package: Package) -> tuple[str, str | None] | None:
    """The wheel of exactly ``package.version`` on an index page (a local version label such as
    ``+ced6ae4e`` allowed; a pure-Python wheel preferred): its URL and the sha256 the index gives."""
    parser = _Links()
    parser.feed(page)
    stem = re.escape(package.module)
    wanted = re.compile(rf"^{stem}-{re.escape(package.version)}(?:\+[A-Za-z0-9.]+)?-[^/]*\.whl$", re.I)
    found = [(href, name) for href, name in parser.links if wanted.match(name)]
    if not found:
        return None
    href, _ = sorted(found, key=lambda link: not link[1].endswith("-none-any.whl"))[0]
    url, fragment = urldefrag(urljoin(base, href))
    digest = fragment.split("=", 1)[1] if fragment.startswith("sha256=") else None
    return url, digest


def safe_member(name: str) -> PurePosixPath | None:
    """An archive member's path, or None for one that would land outside its directory."""
    path = PurePosixPath(name)
    return None if path.is_absolute() or ".." in path.parts else path


def from_pip(package: Package, index: str, dest: Path, timeout_s: float) -> dict[str, str]:
    """The wheel's package into ``dest/src/{module}`` (its ``.dist-info`` beside ``src``, for the record)."""
    page_url = package.index_url(index)
    page = download(page_url, timeout_s).decode("utf-8", "replace")
    link = wheel_link(page, page_url, package)
    if link is None:
        raise FetchError(f"{page_url} (no wheel of {package.version})")
    url, digest = link
    body = download(url, timeout_s, PurePosixPath(url).name)
    sha256 = hashlib.sha256(body).hexdigest()
    if digest and sha256 != digest:
        raise FetchError(f"{url} (sha256 {sha256}, where the index says {digest})")
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as wheel:
            for member in wheel.infolist():
                path = safe_member(member.filename)
                if path is None or member.is_dir() or not path.parts:
                    continue
                top = path.parts[0]
                if top == package.module:
                    target = dest / "src" / path
                elif top.endswith(".dist-info"):
                    target = dest / path
                else:
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(wheel.read(member))
    except zipfile.BadZipFile:
        raise FetchError(f"{url} (not a wheel: a zip file was expected)") from None
    return {"from": url, "sha256": sha256}


def from_github(package: Package, github: str, dest: Path, timeout_s: float) -> dict[str, str]:
    """The repository's ``src/``, ``setup.py`` and licence files at the release's ref into ``dest``."""
    url = package.github_url(github)
    if url is None:
        raise FetchError(f"{github.rstrip('/')}/{package.name} (no {package.version} sources published there)")
    body = download(url, timeout_s, f"{package.name} {package.github_ref[:12]}")
    try:
        with tarfile.open(fileobj=io.BytesIO(body), mode="r:gz") as tar:
            for member in tar.getmembers():
                path = safe_member(member.name)
                if path is None or len(path.parts) < 2 or not member.isfile() or path.parts[1] not in KEEP_FROM_GITHUB:
                    continue  # the top folder is the repository at the ref; links and devices are never written
                target = dest / PurePosixPath(*path.parts[1:])
                target.parent.mkdir(parents=True, exist_ok=True)
                with tar.extractfile(member) as source, open(target, "wb") as out:
                    shutil.copyfileobj(source, out)
    except (tarfile.TarError, EOFError, zlib.error) as exc:
        raise FetchError(f"{url} (not a readable tarball: {exc})") from None
    return {"from": url, "sha256": hashlib.sha256(body).hexdigest()}
