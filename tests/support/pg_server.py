"""A real PostgreSQL server for the production-instance tests (Debian's postgresql package binaries).

`PostgresServer` runs `initdb` into a private temp folder and `pg_ctl start` on a free 127.0.0.1 port
(unix socket in the same folder), with password authentication for the `dagster` role. As root (the CI
container) the server runs as the `postgres` system user, since PostgreSQL refuses to run as root.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from benchmarks.s3_server import free_ports

BIN_DIRS = ("/usr/local/bin", "/usr/lib/postgresql/15/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/17/bin")


def pg_binary(name: str) -> str | None:
    for folder in BIN_DIRS:
        candidate = Path(folder, name)
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


class PostgresServer:
    def __init__(self) -> None:
        self.password = secrets.token_urlsafe(16)
        self.user = "dagster"
        self.database = "dagster"
        self.port = free_ports(1)[0]
        self.workdir = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
        self.data = self.workdir / "data"

    def _as_owner(self, args: list[str]) -> list[str]:
        return ["runuser", "-u", "postgres", "--", *args] if os.geteuid() == 0 else args

    def start(self) -> PostgresServer:
        initdb, pg_ctl = pg_binary("initdb"), pg_binary("pg_ctl")
        if not initdb or not pg_ctl:
            raise RuntimeError("PostgreSQL binaries not found: apt-get install postgresql (make test-all does)")
        os.chmod(self.workdir, 0o755)
        pwfile = self.workdir / "pw"
        pwfile.write_text(self.password + "\n")
        if os.geteuid() == 0:
            shutil.chown(self.workdir, "postgres")
            shutil.chown(pwfile, "postgres")
        subprocess.run(
            self._as_owner([initdb, "-D", str(self.data), "-U", self.user, f"--pwfile={pwfile}", "-A", "scram-sha-256", "-E", "UTF8", "--no-sync"]),
            check=True,
            capture_output=True,
        )
        options = f"-p {self.port} -k {self.workdir} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=100"
        subprocess.run(
            self._as_owner([pg_ctl, "-D", str(self.data), "-o", options, "-l", str(self.workdir / "log"), "-w", "-t", "60", "start"]),
            check=True,
            capture_output=True,
        )
        import psycopg2

        deadline = time.monotonic() + 30
        while True:
            try:
                connection = psycopg2.connect(host="127.0.0.1", port=self.port, user=self.user, password=self.password, dbname="postgres")
                break
            except psycopg2.OperationalError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        connection.autocommit = True
        connection.cursor().execute(f"CREATE DATABASE {self.database}")
        connection.close()
        return self

    def env(self) -> dict[str, str]:
        """The variables deploy/dagster.yaml reads."""
        return {
            "DAGSTER_PG_HOST": "127.0.0.1",
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_DB": self.database,
            "DAGSTER_PG_USERNAME": self.user,
            "DAGSTER_PG_PASSWORD": self.password,
        }

    def stop(self) -> None:
        pg_ctl = pg_binary("pg_ctl")
        if pg_ctl and self.data.exists():
            subprocess.run(self._as_owner([pg_ctl, "-D", str(self.data), "-m", "fast", "-w", "stop"]), capture_output=True)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> PostgresServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
