"""A local PostgreSQL server for the read model: Debian's binaries, data under ``var/``, loopback only, stopped by PID.

initdb and postgres refuse to run as root, so under root the server runs as Debian's ``postgres`` system user
(created by the ``postgresql`` package) and its directories are handed to that user. Clients connect over TCP to
127.0.0.1 with a generated password (``<directory>/password``, mode 0600; scram-sha-256); the unix socket lives
under ``<directory>/socket`` so the server touches nothing outside its directory.
"""

from __future__ import annotations

import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from app.errors import SetupError
from app.run.pidfile import alive, running_pid
from app.settings import Settings

USER = "arbiter"        # the superuser initdb creates
DATABASE = "arbiter"    # the database the read model lives in


def bin_dir() -> Path:
    """Return the newest ``/usr/lib/postgresql/<major>/bin`` holding ``initdb`` and ``postgres``, or say what is missing."""
    found: list[tuple[int, Path]] = []
    for d in Path("/usr/lib/postgresql").glob("*/bin"):
        if d.parent.name.isdigit() and (d / "initdb").exists() and (d / "postgres").exists():
            found.append((int(d.parent.name), d))
    if not found:
        raise SetupError("PostgreSQL's server binaries were not found under /usr/lib/postgresql/<version>/bin "
                         "(apt-get install postgresql; ./dev does it when it runs as root)")
    return max(found)[1]


def _run_as() -> pwd.struct_passwd | None:
    """The user the server runs as: None (ourselves) unless we are root, then Debian's ``postgres``."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError as e:
        raise SetupError("running as root, PostgreSQL needs an unprivileged user: the 'postgres' user that "
                         "Debian's postgresql package creates was not found") from e


@dataclass
class LocalPostgres:
    """One PostgreSQL cluster under ``directory`` (``data/``, ``socket/``, ``password``, ``server.log``, pidfile)."""

    directory: Path
    port: int = 5433

    @classmethod
    def from_settings(cls, settings: Settings) -> LocalPostgres:
        return cls(settings.postgres_dir_path, settings.postgres_port)

    @property
    def pidfile(self) -> Path:
        return self.directory / "postgres.pid"

    @property
    def logfile(self) -> Path:
        return self.directory / "server.log"

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def password_file(self) -> Path:
        return self.directory / "password"

    def conninfo(self, dbname: str = DATABASE) -> str:
        """A libpq connection string for ``dbname`` on this server (TCP to 127.0.0.1, the generated password)."""
        password = self.password_file.read_text().strip()
        return f"host=127.0.0.1 port={self.port} user={USER} password={password} dbname={dbname} connect_timeout=5"

    def running_pid(self) -> int | None:
        """The PID in the pidfile if that process is alive, else None (a stale pidfile is removed)."""
        return running_pid(self.pidfile)

    def _chown(self, path: Path, user: pwd.struct_passwd | None) -> None:
        if user is not None:
            os.chown(path, user.pw_uid, user.pw_gid)

    def _init(self, binaries: Path, user: pwd.struct_passwd | None) -> None:
        """Create the cluster once: initdb with a generated superuser password, then the read model's database."""
        self.directory.mkdir(parents=True, exist_ok=True)
        if not self.password_file.exists():
            self.password_file.write_text(secrets.token_urlsafe(24) + "\n")
            self.password_file.chmod(0o600)
        pwfile = self.directory / ".initdb-pw"  # readable by the server's user only for initdb's moment
        pwfile.write_text(self.password_file.read_text())
        pwfile.chmod(0o600)
        self._chown(pwfile, user)
        shutil.rmtree(self.data, ignore_errors=True)  # a half-done initdb from an interrupted start
        self.data.mkdir(mode=0o700)
        self._chown(self.data, user)
        try:
            res = subprocess.run(  # noqa: S603
                [str(binaries / "initdb"), "-D", str(self.data), "-U", USER, f"--pwfile={pwfile}",
                 "--auth-host=scram-sha-256", "--auth-local=scram-sha-256", "-E", "UTF8", "--locale=C.UTF-8"],
                capture_output=True, text=True, check=False, cwd=self.directory,
                user=user.pw_uid if user else None, group=user.pw_gid if user else None, extra_groups=[] if user else None)
        finally:
            pwfile.unlink(missing_ok=True)
        if res.returncode != 0:
            raise SetupError(f"initdb failed ({res.returncode}): {res.stdout}{res.stderr}")

    def start(self, timeout: float = 60.0) -> int:
        """Initialise on first use, start the server on 127.0.0.1:``port``, wait until it answers; return its PID."""
        pid = self.running_pid()
        if pid is not None:
            self.wait_ready(timeout)
            return pid
        binaries = bin_dir()
        user = _run_as()
        self.directory.mkdir(parents=True, exist_ok=True)
        if user is not None:
            self.directory.chmod(0o755)  # the server's user must reach its data and socket directories
            _check_reachable(self.directory, user)
        if not (self.data / "PG_VERSION").exists():
            self._init(binaries, user)
        socket_dir = self.directory / "socket"
        socket_dir.mkdir(exist_ok=True)
        self._chown(socket_dir, user)
        log = open(self.logfile, "ab")  # noqa: SIM115 - handed to the server process
        self._chown(self.logfile, user)
        with log:
            proc = subprocess.Popen(  # noqa: S603
                [str(binaries / "postgres"), "-D", str(self.data), "-p", str(self.port),
                 "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={socket_dir}",
                 "-c", "max_connections=200", "-c", "shared_buffers=128MB", "-c", "logging_collector=off"],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                cwd=self.directory, user=user.pw_uid if user else None, group=user.pw_gid if user else None,
                extra_groups=[] if user else None)
        self.pidfile.write_text(str(proc.pid))
        try:
            self.wait_ready(timeout, proc)
            self._ensure_database()
        except BaseException:
            self.stop()
            raise
        return proc.pid

    def _connect(self, dbname: str, timeout: float = 5.0):  # noqa: ANN202 - a psycopg connection
        import psycopg

        return psycopg.connect(self.conninfo(dbname), autocommit=True, connect_timeout=max(1, int(timeout)))

    def wait_ready(self, timeout: float, proc: subprocess.Popen[bytes] | None = None) -> None:
        """Block until the server accepts a connection."""
        import psycopg

        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise SetupError(f"PostgreSQL exited with {proc.returncode}; see {self.logfile}")
            try:
                with self._connect("postgres", 2):
                    return
            except psycopg.OperationalError as e:
                last = str(e).strip().splitlines()[0] if str(e).strip() else repr(e)
            time.sleep(0.2)
        raise SetupError(f"PostgreSQL on 127.0.0.1:{self.port} did not answer within {timeout:.0f}s ({last})")

    def _ensure_database(self) -> None:
        from psycopg import sql

        with self._connect("postgres") as conn:
            if conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (DATABASE,)).fetchone() is None:
                conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(DATABASE)))

    def create_database(self, name: str) -> str:
        """Create database ``name`` (tests give each test its own); return its connection string."""
        from psycopg import sql

        with self._connect("postgres") as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.conninfo(name)

    def drop_database(self, name: str) -> None:
        """Drop database ``name``, disconnecting whoever still uses it."""
        from psycopg import sql

        with self._connect("postgres") as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the server by the PID in its pidfile: SIGINT (fast shutdown), then SIGQUIT after ``timeout``."""
        pid = self.running_pid()
        if pid is None:
            return False
        os.kill(pid, signal.SIGINT)
        deadline = time.monotonic() + timeout
        while alive(pid):
            if time.monotonic() >= deadline:
                os.kill(pid, signal.SIGQUIT)  # immediate shutdown; the next start recovers from the WAL
                deadline = time.monotonic() + timeout
            time.sleep(0.1)
        self.pidfile.unlink(missing_ok=True)
        return True


def _check_reachable(directory: Path, user: pwd.struct_passwd) -> None:
    """Refuse clearly when a parent of ``directory`` cannot be traversed by the server's user (initdb would
    fail with a bare "Permission denied")."""
    for parent in directory.resolve().parents:
        st = parent.stat()
        if st.st_mode & 0o001 or (st.st_uid == user.pw_uid and st.st_mode & 0o100) \
                or (st.st_gid == user.pw_gid and st.st_mode & 0o010):
            continue
        raise SetupError(f"{parent} (mode {oct(st.st_mode & 0o777)}) cannot be entered by the '{user.pw_name}' user "
                         f"PostgreSQL runs as under root; set ARBITER_POSTGRES_DIR to a directory it can reach")
