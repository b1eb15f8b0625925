"""Real services for the reliability tests, started by the tests themselves (never assumed):
a PostgreSQL server from Debian's packages on loopback, and an MLflow tracking server.

PostgreSQL: if its binaries are missing and we are root, they are installed with apt-get (CI's
fresh machine); initdb runs as the ``postgres`` user when we are root (PostgreSQL refuses root).
"""
from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

PG_USER, PG_PASSWORD, PG_DB = "autotune", "pw-Zq81-secret", "autotune"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pg_bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def ensure_postgres_installed() -> Path:
    b = pg_bin()
    if b is None and os.geteuid() == 0 and shutil.which("apt-get"):
        env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-qq", "postgresql"], check=True, env=env, capture_output=True)
        b = pg_bin()
    if b is None:
        raise RuntimeError("PostgreSQL binaries not found (/usr/lib/postgresql/*/bin) and cannot install them: "
                           "run `apt-get install postgresql` or run the tests as root")
    return b


class Postgres:
    """One throw-away PostgreSQL cluster; ``url`` carries the password (the secrets test checks
    it never leaks)."""

    def __init__(self, base: Path):
        self.bin = ensure_postgres_installed()
        self.base = base
        self.data = base / "pgdata"
        self.port = free_port()
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        base.mkdir(parents=True, exist_ok=True)
        pw = base / "pw"
        pw.write_text(PG_PASSWORD + "\n")
        if self.as_postgres:
            shutil.chown(base, "postgres")
            shutil.chown(pw, "postgres")
        self._run(str(self.bin / "initdb"), "-D", str(self.data), "-U", PG_USER, f"--pwfile={pw}",
                  "--auth=scram-sha-256", "-E", "UTF8")
        self.start()
        self._run(str(self.bin / "createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", PG_USER, PG_DB,
                  env={"PGPASSWORD": PG_PASSWORD})
        self.url = f"postgresql://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{self.port}/{PG_DB}"

    def _run(self, *args, env=None):
        r = subprocess.run([*self.as_postgres, *args], capture_output=True, text=True,
                           env=dict(os.environ, **(env or {})), cwd="/tmp")
        if r.returncode:
            raise RuntimeError(f"{args[0]} failed: {r.stderr[-500:]}")
        return r

    def start(self):
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-w", "-l", str(self.base / "log"), "-o",
                  f"-p {self.port} -k {self.base} -c listen_addresses=127.0.0.1 -c max_connections=200 -c fsync=off",
                  "start")

    def stop(self, mode: str = "immediate"):
        self._run(str(self.bin / "pg_ctl"), "-D", str(self.data), "-m", mode, "-w", "stop")

    def close(self):
        try:
            self.stop("fast")
        except RuntimeError:
            pass


class MlflowServer:
    """``mlflow server`` on loopback with a SQLite backend store."""

    def __init__(self, base: Path):
        base.mkdir(parents=True, exist_ok=True)
        self.base, self.port = base, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None
        self.start()

    def start(self, timeout_s: float = 90):
        mlflow = str(Path(sys.executable).with_name("mlflow"))
        self.proc = subprocess.Popen(
            [mlflow, "server", "--host", "127.0.0.1", "--port", str(self.port), "--workers", "1",
             "--backend-store-uri", f"sqlite:///{self.base / 'mlflow.db'}",
             "--default-artifact-root", str(self.base / "artifacts")],
            stdout=subprocess.DEVNULL, stderr=open(self.base / "server.log", "ab"), start_new_session=True)
        deadline = time.time() + timeout_s
        import urllib.request
        while time.time() < deadline:
            try:
                urllib.request.urlopen(self.url + "/health", timeout=2)
                return
            except OSError:
                if self.proc.poll() is not None:
                    break
                time.sleep(0.5)
        raise RuntimeError("mlflow server did not start: " + (self.base / "server.log").read_text()[-1000:])

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait()
