"""The history's stores: a SQLite file, and a real PostgreSQL server that the suite starts from the
system's binaries (initdb, pg_ctl) in a temporary directory on loopback, at a free port, stopped when
the session ends. Every store test runs against both."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from harness.core.ports import free_port

PG_BINARIES = ("initdb", "pg_ctl", "postgres")
NOBODY = 65534  # initdb refuses to run as root: the server runs as nobody there


def pg_bin() -> Path | None:
    """The directory of the server's binaries: on PATH, else Debian's and Ubuntu's newest
    /usr/lib/postgresql/VERSION/bin (the package puts them there, off PATH; GitHub's runners have one)."""
    found = shutil.which("pg_ctl")
    if found:
        return Path(found).parent
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name)
                      if p.parent.name.isdigit() else 0)
    return versions[-1] if versions else None


def pg_command(args: list[str]) -> list[str]:
    args = [str(pg_bin() / args[0]), *args[1:]]
    if os.geteuid() != 0:
        return args
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *args]


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """``postgresql+psycopg://carbon@127.0.0.1:PORT`` (trust auth on loopback only)."""
    where = pg_bin()
    missing = [b for b in PG_BINARIES if where is None or not (where / b).is_file()]
    if missing:
        pytest.skip(f"no PostgreSQL server binaries ({', '.join(missing)}) on PATH or under /usr/lib/postgresql: "
                    "apt-get install postgresql to run the history tests against PostgreSQL")
    pytest.importorskip("psycopg", reason="PostgreSQL needs psycopg: pip install -e '.[history]'")
    # not under pytest's basetemp: as root that is private to root, and the server runs as nobody
    base = Path(tempfile.mkdtemp(prefix="carbon-history-pg-"))
    if os.geteuid() == 0:
        os.chown(base, NOBODY, NOBODY)
    data, port = base / "data", free_port()

    def run(args: list[str], timeout: int) -> None:
        done = subprocess.run(pg_command(args), capture_output=True, text=True, timeout=timeout)
        if done.returncode:
            raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")

    try:
        run(["initdb", "-D", str(data), "-U", "carbon", "--auth=trust", "-E", "UTF8", "--no-sync"], 120)
        run(["pg_ctl", "-D", str(data), "-l", str(base / "server.log"), "-w", "-t", "60", "-o",
             f"-h 127.0.0.1 -p {port} -k {base} -F", "start"], 90)
        try:
            yield f"postgresql+psycopg://carbon@127.0.0.1:{port}"
        finally:
            run(["pg_ctl", "-D", str(data), "-m", "fast", "-w", "stop"], 60)
    finally:
        shutil.rmtree(base, ignore_errors=True)


_databases = itertools.count()


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A fresh, empty store: a SQLite file, or a new database on the suite's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.sqlite'}"
    import sqlalchemy as sa

    server = request.getfixturevalue("postgres_server")
    name = f"history_{os.getpid()}_{next(_databases)}"
    engine = sa.create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    return f"{server}/{name}"


@pytest.fixture
def sqlite_url(tmp_path) -> str:
    return f"sqlite:///{tmp_path / 'history.sqlite'}"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path
