"""A throw-away PostgreSQL server (Debian's postgresql) on a Unix socket, for gradebook tests.

As root the server runs as the ``postgres`` user, which Debian's package creates; its data and
socket live in a temporary folder that is removed afterwards. Where PostgreSQL is not installed
the test is skipped with the command that installs it.
"""
from __future__ import annotations

import glob
import os
import pwd
import secrets
import shutil
import subprocess
import tempfile
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import free_port


def _binaries() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


@contextmanager
def postgres_server(tcp: bool = False):
    """Yields a function that makes a new, empty database and returns its URL; its ``stop`` and ``start`` stop
    the server and start it again. With ``tcp`` the server also listens on 127.0.0.1 (its ``port``), where a
    role must give its password, as on a real database server; its ``as_postgres`` is the environment and user
    an administrator's ``sudo -u postgres`` would give a client program."""
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
        done = subprocess.run([str(bin_dir / "initdb"), "-D", str(data), "--auth-local=trust",
                               "--auth-host=scram-sha-256", "-U", "postgres", "--no-sync", "-E", "UTF8"],
                              capture_output=True, text=True, env=env, cwd=base, **run_as)
        if done.returncode != 0:
            pytest.skip(f"initdb could not make a PostgreSQL cluster here: {done.stderr.strip()[-300:]}")
        port = free_port() if tcp else 5432
        listen = "127.0.0.1" if tcp else ""
        options = f"-k {base} -p {port} -c listen_addresses='{listen}' -c fsync=off -c max_connections=50"
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
            return f"postgresql://postgres@/{name}?host={base}&port={port}"

        def pg_ctl(*args: str) -> None:
            subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data), *args], capture_output=True, text=True,
                           env=env, cwd=base, check=True, **run_as)

        # an outage: the server stopped (its connections ended) and started again
        new_database.stop = lambda: pg_ctl("-m", "fast", "-w", "stop")
        new_database.start = lambda: pg_ctl("-o", options, "-l", str(log), "-w", "start")
        new_database.port = port
        new_database.as_postgres = {"env": dict(env, PGHOST=str(base), PGPORT=str(port),
                                                PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"), **run_as}
        yield new_database
    finally:
        if data.exists():
            subprocess.run([str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True,
                           env=env, cwd=base, **run_as)
        shutil.rmtree(base, ignore_errors=True)


def readme_set_up(new_database, home: Path) -> tuple[dict[str, str], str]:
    """Follows the README's PostgreSQL set-up, its own lines, against this server: a role with a password, a
    database that role owns, the password in ``home``'s ``.pgpass``. Returns the variables the set-up exports
    (GRADEBOOK_URL) and the password. Only the server's name and port are changed: ``dbhost`` is this
    server's TCP address, and ``sudo -u postgres`` runs the program as the postgres user on its socket."""
    from course.layout import REPO

    readme = (REPO / "README.md").read_text()
    section = readme.split("### A PostgreSQL gradebook", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    password = secrets.token_urlsafe(12)
    address = f"127.0.0.1:{new_database.port}"
    lines = [line for line in block.splitlines()
             if line.strip() and not line.lstrip().startswith("#") and "autograder" not in line]
    script = "\n".join(lines).replace("dbhost:5432", address).replace("@dbhost/", f"@{address}/")
    admin = "runuser -u postgres -- env PGHOST=$PGHOST_ADMIN PGPORT=$PGPORT PATH=$PATH "
    script = script.replace("PASSWORD", password).replace("sudo -u postgres ", admin)
    assert "dbhost" not in script and "createuser" in script and ".pgpass" in script, script
    as_postgres = new_database.as_postgres["env"]
    env = dict(os.environ, HOME=str(home), PGHOST_ADMIN=as_postgres["PGHOST"], PGPORT=as_postgres["PGPORT"],
               PATH=as_postgres["PATH"])
    os.chmod(as_postgres["PGHOST"], 0o755)
    # createuser --pwprompt reads the password twice from its terminal, or from stdin where it has none
    done = subprocess.run(["bash", "-euo", "pipefail", "-c", script + "\nenv -0"], input=f"{password}\n{password}\n",
                          capture_output=True, text=True, env=env, cwd=home, start_new_session=True, timeout=60)
    assert done.returncode == 0, f"the README's PostgreSQL set-up failed:\n{script}\n{done.stderr}"
    exported = dict(item.split("=", 1) for item in done.stdout.split("\0") if "=" in item)
    return {name: exported[name] for name in ("GRADEBOOK_URL",)}, password
