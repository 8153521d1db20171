"""Root integration: `run.py fleet up` stands up a real Slurm cluster on a one-host inventory
(this machine, `ansible_connection=local`), through playbooks/cluster.yml and Debian's own
services, and a job runs on it.

The cluster is a system's cluster (/etc/slurm, /etc/munge, /var/lib/slurm, the packaged
init scripts), so the test gives it a system of its own: a mount namespace in which /etc,
/var/lib, /var/log and /run are overlays whose writes land in the test's directory, and a
network namespace with only loopback. Nothing it writes or starts reaches the machine, and
every process in that mount namespace is ended by PID at the end.
"""
from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT  # noqa: E402
from leftovers import assert_nothing_left  # noqa: E402
from machine import registry

pytestmark = [pytest.mark.root]

ISOLATED = r"""
set -eu
w=$1
readlink /proc/self/ns/mnt > "$w/mntns"
for d in etc var/lib var/log run; do
  n=$(echo "$d" | tr / -)
  mkdir -p "$w/$n-upper" "$w/$n-work"
  mount -t overlay overlay -o "lowerdir=/$d,upperdir=$w/$n-upper,workdir=$w/$n-work" "/$d"
done
ip link set lo up
# Slurm's daemons resolve their listening address with AI_ADDRCONFIG, which finds nothing
# where loopback is the only interface: a veth pair inside the namespace, one end addressed.
ip link add v0 type veth peer name v1
ip addr add 10.254.0.1/24 dev v0
ip link set v0 up
ip link set v1 up
cd "$ROOT"
.venv/bin/python run.py fleet up -i "$w/inventory.ini" --provisioned --name stltest
sinfo -h -N -o '%N %t %c' > "$w/sinfo.txt"
sbatch --wait -o "$w/job.out" --wrap 'echo "ran on $(hostname -s)"' > "$w/sbatch.txt"
for s in slurmd slurmctld munge; do service "$s" stop; done
"""


def in_namespace(mntns: str) -> list[int]:
    """Processes whose mount namespace is the test's."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if os.readlink(entry / "ns" / "mnt") == mntns:
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


def test_fleet_up_stands_up_a_cluster_on_an_inventory_and_a_job_runs_on_it(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("needs root (run the suite with sudo)")
    missing = [t for t in ("unshare", "ansible-playbook", "slurmctld", "slurmd", "munged", "sbatch")
               if shutil.which(t) is None]
    assert not missing, f"provisioning installs {missing}"
    assert_nothing_left()
    host = socket.gethostname().split(".")[0]
    (tmp_path / "inventory.ini").write_text(
        "[all]\nnode1 ansible_connection=local ansible_host=127.0.0.1 ansible_python_interpreter=/usr/bin/python3\n")
    inst = registry.new_instance()
    proc = subprocess.Popen(["unshare", "--mount", "--net", "--propagation", "private", "--fork",
                             "sh", "-c", ISOLATED, "isolated", str(tmp_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "ROOT": str(ROOT), "STARTLAB_NO_REEXEC": "1"})
    inst.add_process(proc.pid, "fleet up in a namespace of its own")
    mntns = None
    try:
        out, _ = proc.communicate(timeout=600)
        mntns = (tmp_path / "mntns").read_text().strip() if (tmp_path / "mntns").is_file() else None
        assert proc.returncode == 0, out[-3000:]
        assert f"Slurm cluster stltest is up: controller {host}, 1 nodes" in out, out[-2000:]
        states = (tmp_path / "sinfo.txt").read_text().split()
        assert states[0] == host and states[1] in ("idle", "mix", "alloc") and int(states[2]) >= 1, states
        assert (tmp_path / "job.out").read_text().strip() == f"ran on {host}"
        # What the playbook put in place, read back from the namespace's overlay.
        conf = (tmp_path / "etc-upper" / "slurm" / "slurm.conf").read_text()
        assert f"NodeName={host} NodeHostname={host} NodeAddr=127.0.0.1" in conf
        assert "ProctrackType=proctrack/linuxproc" in conf          # no systemd here
        key = tmp_path / "etc-upper" / "munge" / "munge.key"
        assert key.stat().st_mode & 0o777 == 0o400
        assert key.read_bytes() == (tmp_path / "var-lib-upper" / "startlab" / "clusters" / "stltest"
                                    / "munge.key").read_bytes()
        time.sleep(1.0)
        left = in_namespace(mntns) if mntns else []
        assert left == [], f"still running in the test's namespace: {left}"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for pid in in_namespace(mntns) if mntns else []:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        inst.remove_all()
    assert_nothing_left()
