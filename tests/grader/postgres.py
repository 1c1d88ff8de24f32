"""A throw-away PostgreSQL server (Debian's postgresql) on a Unix socket, for gradebook tests.

As root the server runs as the ``postgres`` user, which Debian's package creates; its data and
socket live in a temporary folder that is removed afterwards. Where PostgreSQL is not installed
the test is skipped with the command that installs it.
"""
from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@contextmanager
def postgres_server():
    """Yields a function that makes a new, empty database and returns its URL; its ``stop`` and ``start`` stop
    the server and start it again."""
    bin_dir = _binaries()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (apt-get install postgresql; `make setup` installs it when run as root)")
    user = None
    if os.geteuid() == 0:
        try:
            user = pwd.getpwnam("postgres")
        except KeyError:
            pytest.skip("PostgreSQL refuses to run as root and there is no postgres user to run it as")
    base = Path(tempfile.mkdtemp(prefix="gradebook-pg-"))
    os.chmod(base, 0o755)
    if user is not None:
        os.chown(base, user.pw_uid, user.pw_gid)
    data, log = base / "data", base / "server.log"
    run_as = {"user": user.pw_uid, "group": user.pw_gid, "extra_groups": []} if user else {}
    env = dict(os.environ, LC_ALL="C.UTF-8")
    try:
        done = subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync",
                               "-E", "UTF8"], capture_output=True, text=True, env=env, cwd=base, **run_as)
        if done.returncode != 0:
            pytest.skip(f"initdb could not make a PostgreSQL cluster here: {done.stderr.strip()[-300:]}")
        options = f"-k {base} -c listen_addresses='' -c fsync=off -c max_connections=50"
        done = subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(log), "-w", "start"],
                              capture_output=True, text=True, env=env, cwd=base, **run_as)
        if done.returncode != 0:
            pytest.skip(f"the PostgreSQL server did not start: {done.stdout + done.stderr}"[-400:])
        made = []

        def new_database() -> str:
            import psycopg

            name = f"grades{len(made)}"
            with psycopg.connect(host=str(base), user="postgres", dbname="postgres", autocommit=True) as conn:
                conn.execute(f"CREATE DATABASE {name}")
            made.append(name)
            return f"postgresql://postgres@/{name}?host={base}"

        def pg_ctl(*args: str) -> None:
            subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data), *args], capture_output=True, text=True,
                           env=env, cwd=base, check=True, **run_as)

        # an outage: the server stopped (its connections ended) and started again
        new_database.stop = lambda: pg_ctl("-m", "fast", "-w", "stop")
        new_database.start = lambda: pg_ctl("-o", options, "-l", str(log), "-w", "start")
        yield new_database
    finally:
        if data.exists():
            subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True,
                           env=env, cwd=base, **run_as)
        shutil.rmtree(base, ignore_errors=True)
