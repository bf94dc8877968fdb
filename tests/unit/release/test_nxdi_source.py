"""``carbon-harness nxdi-source VERSION`` (issue 50): a release's NxDI and neuronx-distributed sources put into
the cache from the Neuron pip repository's wheel or GitHub's tarball, here served from a loopback server
(no network); one line naming both sources and the override where neither answers; a local tree checked and
printed instead of fetched."""

from __future__ import annotations

import hashlib
import io
import json
import socket
import tarfile
import threading
import time
import urllib.error
import urllib.request
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness.backends.neuron.sources import source_roots
from harness.cli import main
from harness.release.nxdi_source import GITHUB_REFS, NXDI_SOURCE_ENV, releases
from tests.helpers import REPO

pytestmark = pytest.mark.unit

VENDOR = REPO.parent / "shared" / "vendor"  # this project's local tree (NxDI 0.9.0, NxD 0.18.0), where present
NXDI_REF = GITHUB_REFS[("neuronx-distributed-inference", "0.9.17334")]
NXD_REF = GITHUB_REFS[("neuronx-distributed", "0.18.27753")]


@pytest.fixture(autouse=True)
def no_override(monkeypatch):
    """CI sets CARBON_NXDI_SOURCE for nox: these tests decide it themselves."""
    monkeypatch.delenv(NXDI_SOURCE_ENV, raising=False)
    monkeypatch.delenv("CARBON_HARNESS_CACHE", raising=False)


def run(capsys, *argv: str) -> tuple[int, str, str]:
    try:
        rc = main(["nxdi-source", *argv])
    except SystemExit as exc:  # argparse's usage errors
        rc = exc.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def wheel(version: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as z:
        z.writestr("neuronx_distributed_inference/__init__.py", "")
        z.writestr("neuronx_distributed_inference/_version.py", f'__version__ = "{version}"\n')
        z.writestr(f"neuronx_distributed_inference-{version}.dist-info/METADATA",
                   "Requires-Dist: transformers==4.57.*\n")
        z.writestr("../escaped.py", "")  # a member outside the wheel's folder is never written
    return buffer.getvalue()


def tarball(top: str, version: str) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, text in {f"{top}/src/neuronx_distributed/__init__.py": "",
                           f"{top}/src/neuronx_distributed/_version.py": f'__version__ = "{version}"\n',
                           f"{top}/setup.py": "", f"{top}/LICENSE": "MIT-0", f"{top}/README.md": "not kept",
                           f"{top}/test/test_x.py": "not kept"}.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.fixture
def publisher():
    """A loopback server as Neuron publishes 2.29.0: NxDI's wheel on the pip index, NxD on GitHub only."""
    whl = wheel("0.9.17334")
    name = "neuronx_distributed_inference-0.9.17334+ced6ae4e-py3-none-any.whl"
    routes = {"/simple/neuronx-distributed-inference/":
              f'<html><body><a href="../../files/{name}#sha256={hashlib.sha256(whl).hexdigest()}">{name}</a>'
              f'<a href="../../files/x.whl">neuronx_distributed_inference-0.8.16251-py3-none-any.whl</a></body></html>'
              .encode(),
              f"/files/{name}": whl,
              f"/gh/neuronx-distributed/archive/{NXD_REF}.tar.gz": tarball(f"neuronx-distributed-{NXD_REF}", "0.18.0")}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            body = routes.get(self.path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    yield base, routes
    server.shutdown()
    server.server_close()


def test_the_releases_are_the_constraints_files_with_nxdi():
    known = releases()
    assert known["2.29.0"].nxdi.version == "0.9.17334" and known["2.29.0"].packages[1].version == "0.18.27753"
    assert known["2.31"].nxdi.version == "0.10.18399" and known["2.31"].nxdi.github_ref is None
    assert known["2.28.1"] is known["2.28"]  # sdk-2.28.txt names 2.28.0 and 2.28.1
    assert "2.31.15" not in known  # the tools' version on sdk-2.31.txt's first line is no release
    pins = {(p.name, p.version) for r in known.values() for p in r.packages}
    assert set(GITHUB_REFS) <= pins, f"GitHub refs of versions no release pins: {set(GITHUB_REFS) - pins}"


def test_an_unknown_release_names_the_accepted_ones(capsys):
    rc, out, err = run(capsys, "2.27")
    assert rc == 2 and not out
    assert "'2.27' is no Neuron SDK release" in err and "2.28, 2.28.0, 2.28.1, 2.29.0, 2.29.1" in err, err


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_unreachable_sources_fail_fast_in_one_line_naming_both_and_the_override(capsys, tmp_path):
    down = f"http://127.0.0.1:{closed_port()}"
    start = time.monotonic()
    rc, out, err = run(capsys, "2.29.0", "--cache-dir", str(tmp_path), "--pip-index", down, "--github", down)
    assert time.monotonic() - start < 5
    assert rc == 2 and not out
    lines = error_lines(err)
    assert len(lines) == 1, err
    assert f"{down}/neuronx-distributed-inference/" in lines[0]
    assert f"{down}/neuronx-distributed-inference/archive/{NXDI_REF}.tar.gz" in lines[0]
    assert "CARBON_NXDI_SOURCE=DIR or --nxdi-source DIR" in lines[0], lines[0]
    assert [p.name for p in (tmp_path / "nxdi-sources").iterdir() if not p.name.endswith(".lock")] == []


def test_the_published_urls_are_named_where_the_network_fails(capsys, tmp_path, monkeypatch):
    """The defaults, without touching the network: every request fails as on a host without DNS."""
    def no_dns(*args, **kwargs):
        raise urllib.error.URLError(socket.gaierror(-2, "Name or service not known"))

    monkeypatch.setattr(urllib.request, "urlopen", no_dns)
    rc, _, err = run(capsys, "2.31", "--cache-dir", str(tmp_path))
    line, = error_lines(err)
    assert rc == 2
    assert ("https://pip.repos.neuron.amazonaws.com/neuronx-distributed-inference/ (Name or service not known)"
            in line), line
    assert "https://github.com/aws-neuron/neuronx-distributed-inference (no 0.10.18399 sources published there)" in line


def test_a_release_is_fetched_from_pip_and_github_into_the_cache_then_reused(capsys, tmp_path, publisher):
    base, routes = publisher
    args = ("2.29.0", "--cache-dir", str(tmp_path), "--pip-index", f"{base}/simple", "--github", f"{base}/gh")
    rc, out, err = run(capsys, *args)
    assert rc == 0, err
    tree = Path(out.strip())
    assert tree == tmp_path / "nxdi-sources" / "2.29.0"
    nxdi, nxd = source_roots(tree)
    assert (nxdi / "neuronx_distributed_inference" / "_version.py").read_text() == '__version__ = "0.9.17334"\n'
    assert nxd == tree / "neuronx-distributed" / "src"
    nxd_tree = tree / "neuronx-distributed"
    assert (nxd_tree / "LICENSE").is_file() and not (nxd_tree / "README.md").exists()
    assert not (nxd_tree / "test").exists() and not list(tmp_path.rglob("escaped.py"))
    record = json.loads((tree / "SOURCE.json").read_text())["packages"]
    assert record["neuronx-distributed-inference"]["source"] == "pip"
    assert record["neuronx-distributed"] == {"version": "0.18.27753", "source": "github",
                                             "from": f"{base}/gh/neuronx-distributed/archive/{NXD_REF}.tar.gz",
                                             "sha256": hashlib.sha256(routes[f"/gh/neuronx-distributed/archive/"
                                                                             f"{NXD_REF}.tar.gz"]).hexdigest()}
    routes.clear()  # nothing published any more: the cached tree is used as it is
    rc, out, err = run(capsys, *args)
    assert rc == 0 and Path(out.strip()) == tree and "already in the cache" in err, err
    rc, out, err = run(capsys, *args, "--force")  # a forced fetch that fails keeps the cached tree
    assert rc == 2 and len(error_lines(err)) == 1 and (tree / "SOURCE.json").is_file(), err


def test_a_wheel_whose_hash_differs_from_the_index_is_refused(capsys, tmp_path, publisher):
    base, routes = publisher
    page = "/simple/neuronx-distributed-inference/"
    routes[page] = routes[page].replace(b"sha256=", b"sha256=0")
    rc, out, err = run(capsys, "2.29.0", "--cache-dir", str(tmp_path), "--pip-index", f"{base}/simple", "--github",
                       f"{base}/gh")
    *downloads, line = error_lines(err)  # the wheel's download was shown: that server answered
    assert rc == 2 and not out and len(downloads) == 1 and line.startswith("carbon-harness nxdi-source: error: ")
    assert "where the index says 0" in line and f"{base}/gh/neuronx-distributed-inference/archive" in line, line


@pytest.mark.skipif(not VENDOR.is_dir(),
                    reason="needs the NxDI 0.9.0 tree that nox reads beside the checkout (noxfile.py nxdi_source)")
@pytest.mark.parametrize("how", ["env", "option"])
def test_a_local_tree_is_checked_and_printed_instead_of_fetched(capsys, monkeypatch, tmp_path, how):
    if how == "env":
        monkeypatch.setenv(NXDI_SOURCE_ENV, str(VENDOR))
    option = ["--nxdi-source", str(VENDOR)] if how == "option" else []
    rc, out, err = run(capsys, "2.29.0", "--cache-dir", str(tmp_path), *option)
    assert rc == 0, err
    assert out.strip() == str(VENDOR.resolve())
    assert "neuronx-distributed-inference 0.9.0, neuronx-distributed 0.18.0" in err and "not fetched" in err, err
    assert not (tmp_path / "nxdi-sources").exists()
    rc, _, err = run(capsys, "2.28", "--nxdi-source", str(VENDOR))  # 0.9 is not 2.28's NxDI
    assert rc == 2 and "holds neuronx-distributed-inference 0.9.0, where Neuron SDK 2.28 publishes 0.8.16251" in err


@pytest.mark.parametrize("layout, message", [
    ({}, "holds no neuronx_distributed_inference package"),
    ({"neuronx-distributed-inference/src/neuronx_distributed_inference/__init__.py": ""},
     "holds neuronx_distributed_inference but no neuronx_distributed"),
])
def test_an_incomplete_local_tree_is_refused_naming_what_it_lacks(capsys, tmp_path, layout, message):
    for name, text in layout.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    rc, out, err = run(capsys, "2.29.0", "--nxdi-source", str(tmp_path))
    assert rc == 2 and not out and message in err and f"--nxdi-source {tmp_path}" in err, err
