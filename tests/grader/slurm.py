"""A throw-away one-node Slurm cluster on this machine (Debian's slurm-wlm), for the batch example's test.

munged (as the munge user, with the key Debian's package made), slurmctld and slurmd (as root) run with a
configuration, state and sockets of their own in a temporary folder, on ports of their own, and are stopped
afterwards. Where Slurm is not installed, or the test is not root (slurmd must be), the test is skipped with
the reason and the command that installs it.
"""
from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import free_port

BINARIES = ("munged", "slurmctld", "slurmd", "sbatch", "sinfo")
KEY = Path("/etc/munge/munge.key")



@contextmanager
def slurm_cluster(cpus: int = 2, memory_mb: int = 16000):
    """Yields the environment (SLURM_CONF) under which sbatch, squeue and sinfo reach the cluster."""
    missing = [b for b in BINARIES if shutil.which(b) is None and not Path("/usr/sbin", b).exists()]
    if missing:
        pytest.skip(f"Slurm is not installed ({', '.join(missing)} missing): apt-get install slurm-wlm "
                    "(`make setup` installs it when run as root)")
    if os.geteuid() != 0:
        pytest.skip("slurmd runs jobs as their users, so it must run as root")
    try:
        munge = pwd.getpwnam("munge")
    except KeyError:
        pytest.skip("there is no munge user to run munged as (apt-get install munge)")
    if not KEY.exists():
        pytest.skip(f"munge has no key ({KEY}): apt-get install munge makes one")
    base = Path(tempfile.mkdtemp(prefix="course-slurm-"))
    base.chmod(0o755)
    (base / "munge").mkdir(mode=0o755)
    os.chown(base / "munge", munge.pw_uid, munge.pw_gid)
    for folder in ("state", "spool"):
        (base / folder).mkdir()
    host = socket.gethostname().split(".")[0]
    conf = base / "slurm.conf"
    conf.write_text("\n".join([
        "ClusterName=course", f"SlurmctldHost={host}", f"SlurmctldPort={free_port()}", f"SlurmdPort={free_port()}",
        "SlurmUser=root", "AuthType=auth/munge", f"AuthInfo=socket={base}/munge/munge.socket", "CredType=cred/munge",
        f"StateSaveLocation={base}/state", f"SlurmdSpoolDir={base}/spool",
        f"SlurmctldPidFile={base}/slurmctld.pid", f"SlurmdPidFile={base}/slurmd.pid",
        f"SlurmctldLogFile={base}/slurmctld.log", f"SlurmdLogFile={base}/slurmd.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU_Memory", "SchedulerType=sched/backfill", "ReturnToService=2", "MpiDefault=none",
        "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        f"NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        "PartitionName=course Nodes=ALL Default=YES MaxTime=INFINITE State=UP", ""]))
    env = dict(os.environ, SLURM_CONF=str(conf))
    started = []
    try:
        munged = ["munged", f"--socket={base}/munge/munge.socket", f"--pid-file={base}/munge/munged.pid",
                  f"--log-file={base}/munge/munged.log", f"--seed-file={base}/munge/seed", f"--key-file={KEY}"]
        subprocess.run(munged, check=True, capture_output=True, user=munge.pw_uid, group=munge.pw_gid,
                       extra_groups=[])
        started.append(base / "munge" / "munged.pid")
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([daemon, "-f", str(conf)], check=True, capture_output=True, env=env)
            started.append(base / f"{daemon}.pid")
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            shown = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True, env=env)
            if shown.stdout.strip() == "idle":
                break
            time.sleep(0.5)
        else:
            pytest.skip("the one-node Slurm cluster did not come up: " + (base / "slurmctld.log").read_text()[-400:])
        yield env
    finally:
        subprocess.run(["scontrol", "shutdown"], capture_output=True, env=env)
        for pid_file in reversed(started):
            try:
                os.kill(int(pid_file.read_text().split()[0]), 15)
            except (OSError, ValueError):
                pass
        time.sleep(0.5)
        shutil.rmtree(base, ignore_errors=True)


def wait_for(job: str, env: dict[str, str], timeout: float = 900) -> list[str]:
    """The final state of each task of a job (COMPLETED, FAILED, ...), once none is pending or running.
    (``sbatch --wait`` polls every few seconds; this asks twice a second.)"""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        shown = subprocess.run(["scontrol", "-o", "show", "job", job], capture_output=True, text=True, env=env)
        states = [word.split("=", 1)[1] for line in shown.stdout.splitlines() for word in line.split()
                  if word.startswith("JobState=")]
        if states and not {"PENDING", "RUNNING", "CONFIGURING", "COMPLETING"} & set(states):
            return states
        time.sleep(0.5)
    raise TimeoutError(f"Slurm job {job} did not finish within {timeout} s")
