"""A real PostgreSQL server for the tests: Debian's `postgresql` package (`make test` installs it as root), started
by a fixture on a free loopback port in a temp dir, stopped at the end of the run.

`initdb` and `postgres` refuse to run as root: as root, the server runs as the `postgres` user in a dir it owns.
Without the binaries (not root, and the package absent) the tests that use it skip, saying why.

    postgres         (session) the running `PostgresServer`: `stop()`, `start()`, `restart()`, `kill()`
    postgres_uri     (module)  a fresh database on it: `postgresql+psycopg://postgres@127.0.0.1:<port>/<db>`

A test that stops the server starts it again before it ends (the next module's fixture needs it running).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server_process import free_port

SUPERUSER = "postgres"


def find_bin_dir() -> Path | None:
    """The newest /usr/lib/postgresql/<major>/bin holding initdb and postgres (or both on PATH)."""
    dirs = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda d: int(Path(d).parent.name), reverse=True)
    for found in dirs:
        if (Path(found) / "initdb").exists() and (Path(found) / "postgres").exists():
            return Path(found)
    initdb = shutil.which("initdb")
    return Path(initdb).parent if initdb and shutil.which("postgres") else None


def unavailable_reason() -> str | None:
    """Why no PostgreSQL can run here, or None when one can."""
    if find_bin_dir() is None:
        return "PostgreSQL is not installed (as root, `make test` installs Debian's postgresql package)"
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run PostgreSQL as"
    return None


class PostgresServer:
    """One PostgreSQL cluster in its own dir on 127.0.0.1:<port>, TCP only (no Unix socket)."""

    def __init__(self, root: Path, *, fsync: bool = False) -> None:
        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise RuntimeError("PostgreSQL is not installed")
        self.bin_dir = bin_dir
        self.root = root
        self.data = root / "data"
        self.log_path = root / "postgres.log"
        self.port = free_port()
        self.fsync = fsync
        self.proc: subprocess.Popen[bytes] | None = None
        self._user = "postgres" if os.geteuid() == 0 else None  # initdb and postgres refuse root
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(root, entry.pw_uid, entry.pw_gid)
        self._run(
            [
                str(bin_dir / "initdb"),
                "-D",
                str(self.data),
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--no-locale",
                "-E",
                "UTF8",
            ]
        )

    def _run(self, args: list[str]) -> None:
        done = subprocess.run(args, user=self._user, capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(f"{args[0]} failed: {done.stdout}{done.stderr}")

    def uri(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://{SUPERUSER}@127.0.0.1:{self.port}/{database}"

    def dsn(self, database: str = "postgres") -> str:
        """The libpq form of `uri` (psycopg.connect)."""
        return f"host=127.0.0.1 port={self.port} user={SUPERUSER} dbname={database} connect_timeout=5"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, timeout: float = 60) -> PostgresServer:
        if self.running:
            return self
        settings = {
            "listen_addresses": "127.0.0.1",
            "port": str(self.port),
            "unix_socket_directories": "",
            "fsync": "on" if self.fsync else "off",  # off: a test run survives the server's death, not the host's
            "full_page_writes": "on" if self.fsync else "off",
            "max_connections": "200",
            "shared_buffers": "32MB",
        }
        args = [str(self.bin_dir / "postgres"), "-D", str(self.data)]
        for name, value in settings.items():
            args += ["-c", f"{name}={value}"]
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            args, user=self._user, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"postgres exited with {self.proc.returncode}:\n{self.log_text()[-3000:]}")
            if self.accepts_connections():
                return self
            time.sleep(0.1)
        self.kill()
        raise RuntimeError(f"postgres did not start:\n{self.log_text()[-3000:]}")

    def accepts_connections(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.dsn(), connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def stop(self, mode: str = "fast", timeout: float = 60) -> None:
        """Shut the server down: `fast` (SIGINT: roll back open transactions, close connections) or `immediate`
        (SIGQUIT: no checkpoint; crash recovery at the next start)."""
        if self.proc is None:
            return
        sig = {"smart": signal.SIGTERM, "fast": signal.SIGINT, "immediate": signal.SIGQUIT}[mode]
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        self.proc = None

    def kill(self) -> None:
        """SIGKILL the server's whole process group (postmaster and backends)."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=30)
        self.proc = None

    def restart(self, mode: str = "fast") -> None:
        self.stop(mode)
        self.start()

    def create_database(self, name: str | None = None) -> str:
        """CREATE DATABASE (a copy of template1: milliseconds); returns its SQLAlchemy URI."""
        import psycopg

        name = name or f"t_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.dsn(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.uri(name)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)


def start_postgres(*, fsync: bool = False) -> PostgresServer:
    """A started server in a fresh dir under the system temp dir (pytest's own is root-only: postgres could not
    enter it). The caller closes it."""
    root = Path(tempfile.mkdtemp(prefix="sl-postgres-"))
    try:
        return PostgresServer(root, fsync=fsync).start()
    except BaseException:
        shutil.rmtree(root, ignore_errors=True)
        raise


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    server = start_postgres()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture(scope="module")
def postgres_uri(postgres: PostgresServer) -> str:
    """A fresh database on the run's server, for one test module."""
    if not postgres.running:  # a test before stopped it and failed before starting it again
        postgres.start()
    return postgres.create_database()
