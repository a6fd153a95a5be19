"""A private PostgreSQL cluster for the tests: ``initdb`` into a temporary directory.

Debian's binaries (``/usr/lib/postgresql/*/bin``, or ``initdb`` on PATH); the
server listens on a free loopback port and a socket directory of its own, and
is stopped by its PID. As root, the binaries run as the ``postgres`` user
(``initdb`` refuses root). With no binaries the tests that need it skip,
unless ``HELIX_REQUIRE_POSTGRES=1`` (``.ci/run`` sets it after installing them).
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

__all__ = ["PostgresCluster", "postgres_bin"]


def postgres_bin() -> Path | None:
    """The directory of ``initdb`` and ``postgres`` (None if not installed)."""
    found = shutil.which("initdb")
    if found is not None:
        return Path(os.path.realpath(found)).parent
    for place in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if (Path(place) / "initdb").exists():
            return Path(place)
    return None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class PostgresCluster:
    """``start()`` a cluster in ``directory``; ``url`` names its ``postgres`` database."""

    def __init__(self, directory: Path, bin_dir: Path) -> None:
        self.directory = directory
        self.bin = bin_dir
        self.port = _free_port()
        self.url = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self._process: subprocess.Popen[bytes] | None = None
        self._user = "postgres" if os.geteuid() == 0 else None

    def _own(self, path: Path) -> None:
        if self._user is not None:
            entry = pwd.getpwnam(self._user)
            os.chown(path, entry.pw_uid, entry.pw_gid)

    def start(self, timeout: float = 60.0) -> None:
        """initdb, start the server and wait until it accepts connections."""
        data, sockets = self.directory / "data", self.directory / "sockets"
        for path in (self.directory, data, sockets):
            path.mkdir(exist_ok=True)
            self._own(path)
        log = self.directory / "postgres.log"
        log.touch()
        self._own(log)
        subprocess.run(
            [str(self.bin / "initdb"), "-D", str(data), "-U", "postgres", "--auth=trust", "-N"],
            check=True,
            capture_output=True,
            user=self._user,
            timeout=timeout,
        )
        with log.open("ab") as out:
            settings = ["fsync=off", "max_connections=200"]
            command = [str(self.bin / "postgres"), "-D", str(data), "-k", str(sockets)]
            command += ["-p", str(self.port), "-h", "127.0.0.1"]
            command += [arg for setting in settings for arg in ("-c", setting)]
            self._process = subprocess.Popen(
                command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                user=self._user,
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                raise RuntimeError(f"postgres exited: {log.read_text(errors='replace')[-2000:]}")
            ready = subprocess.run(
                [str(self.bin / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port)],
                capture_output=True,
            )
            if ready.returncode == 0:
                return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"postgres did not start: see {log}")

    def stop(self) -> None:
        """Stop the server by its PID (fast shutdown, then SIGKILL)."""
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        os.kill(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
