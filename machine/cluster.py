"""`run.py fleet up -i INVENTORY`: a Slurm cluster on an Ansible inventory's hosts, for
`run --slurm` (scenarios/slurm.py).

Ansible provisions; Slurm schedules. This module reads the inventory and the hosts' facts
(cores, host names, addresses, whether systemd runs), writes the cluster's slurm.conf with
machine/slurm.config, the one place that writes one, and hands it to playbooks/cluster.yml,
which installs Slurm's packages on every host (site.yml has made each a testbed), puts the
configuration and munge's key in place and starts the daemons. The controller is the
inventory's first host of the group `slurm_controller`, else its first host; every host is a
node.

The key is made here once per cluster and kept in CLUSTERS_DIR, so running `fleet up` again
(a host added, one replaced) keeps the cluster's credentials.
"""
from __future__ import annotations

import json
import os
import secrets
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from machine import binaries, slurm
from machine.errors import UserError

PLAYBOOK = binaries.REPO / "playbooks" / "cluster.yml"
SITE = binaries.REPO / "playbooks" / "site.yml"
SHARE_TOKEN = binaries.REPO / ".cluster-token"       # written, read on every host, removed
CLUSTERS_DIR = Path("/var/lib/startlab/clusters")
CONTROLLER_GROUP = "slurm_controller"
UP_TIMEOUT_S = 120.0


@dataclass
class Inventory:
    hosts: list[str]
    groups: dict[str, list[str]]
    hostvars: dict[str, dict]


@dataclass
class Plan:
    """The cluster an inventory gives: its controller's inventory name, and each host's node."""
    name: str
    controller: str
    nodes: dict[str, slurm.Node]          # inventory name → node
    cgroups: bool                         # every host runs systemd

    @property
    def config(self) -> str:
        return slurm.config(self.name, self.nodes[self.controller], list(self.nodes.values()),
                            slurm.SYSTEM_LAYOUT, cgroups=self.cgroups)


def ansible_env() -> dict[str, str]:
    # pipelining: modules run over stdin, no temporary files per task
    return {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOST_KEY_CHECKING": "False",
            "ANSIBLE_PIPELINING": "True", "ANSIBLE_RETRY_FILES_ENABLED": "False"}


def read_inventory(path: Path) -> Inventory:
    """The inventory as Ansible reads it (any format or plugin)."""
    if not path.exists():
        raise UserError(f"{path}: no such inventory file")
    r = subprocess.run(["ansible-inventory", "-i", str(path), "--list"], capture_output=True, text=True,
                       env=ansible_env())
    if r.returncode != 0:
        raise UserError(f"{path}: ansible-inventory cannot read it: {r.stderr.strip()[-500:]}")
    data = json.loads(r.stdout)
    hostvars = data.get("_meta", {}).get("hostvars", {})
    groups = {g: v.get("hosts", []) for g, v in data.items() if g != "_meta" and isinstance(v, dict)}
    hosts = sorted(hostvars) or sorted({h for hs in groups.values() for h in hs})
    if not hosts:
        raise UserError(f"{path}: no hosts in it")
    return Inventory(hosts, groups, hostvars)


def plan(inv: Inventory, facts: dict[str, dict], name: str) -> Plan:
    """The cluster from the inventory and each host's facts (`ansible -m setup`)."""
    missing = [h for h in inv.hosts if h not in facts]
    if missing:
        raise UserError(f"no facts from {', '.join(missing)}: unreachable? (ansible -m ping -i … {missing[0]})")
    nodes = {}
    for host in inv.hosts:
        f = facts[host]
        addr = (inv.hostvars.get(host, {}).get("ansible_host")
                or f.get("ansible_default_ipv4", {}).get("address"))
        if not addr:
            raise UserError(f"{host}: no address (set ansible_host in the inventory)")
        short = f.get("ansible_hostname") or host.split(".")[0]
        nodes[host] = slurm.Node(short, short, addr, int(f.get("ansible_processor_vcpus") or 1))
    names = [n.name for n in nodes.values()]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"hosts share the host name {', '.join(twice)}: slurmd finds its node by it")
    controllers = [h for h in inv.groups.get(CONTROLLER_GROUP, []) if h in nodes]
    systemd = all(facts[h].get("ansible_service_mgr") == "systemd" for h in inv.hosts)
    return Plan(name, controllers[0] if controllers else inv.hosts[0], nodes, systemd)


def gather_facts(inventory: Path, work: Path) -> dict[str, dict]:
    """Each reachable host's facts: CPUs, host name, addresses, service manager."""
    tree = work / "facts"
    subprocess.run(["ansible", "-i", str(inventory), "all", "-m", "ansible.builtin.setup",
                    "-a", "gather_subset=!all,!min,hardware,network,service_mgr", "--tree", str(tree)],
                   capture_output=True, text=True, env=ansible_env())
    facts = {}
    for f in tree.glob("*") if tree.is_dir() else []:
        data = json.loads(f.read_text())
        if "ansible_facts" in data:
            facts[f.name] = data["ansible_facts"]
    return facts


def munge_key(name: str) -> Path:
    """The cluster's munge key, made once (mungekey, from munge's package)."""
    key = CLUSTERS_DIR / name / "munge.key"
    if not key.is_file():
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True)
    return key


def _adhoc(inventory: Path, hosts: str, command: str) -> dict[str, str]:
    """One command on `hosts` (as root): each host's output, for those that answered."""
    r = subprocess.run(["ansible", "-i", str(inventory), hosts, "-b", "-o", "-m", "ansible.builtin.command",
                        "-a", command], capture_output=True, text=True, env=ansible_env())
    out = {}
    for line in r.stdout.splitlines():
        # One line per host with -o: "HOST | CHANGED | rc=0 | (stdout) OUTPUT"; a command
        # that ran is CHANGED, one that failed or a host unreachable is not.
        host, _, rest = line.partition(" | ")
        status, _, rest = rest.partition(" | ")
        if status == "CHANGED" and "(stdout)" in rest:
            out[host.strip()] = rest.split("(stdout)", 1)[1].strip().replace("\\n", "\n")
    return out


def check_shared_checkout(inventory: Path, hosts: list[str]) -> None:
    """Every host must see this checkout at its path: run --slurm's tasks run it there and
    write into its campaigns (a shared filesystem, as clusters have)."""
    token = secrets.token_hex(8)
    SHARE_TOKEN.write_text(token)
    try:
        seen = _adhoc(inventory, "all", f"cat {SHARE_TOKEN}")
    finally:
        SHARE_TOKEN.unlink(missing_ok=True)
    blind = [h for h in hosts if seen.get(h) != token]
    if blind:
        raise UserError(f"{', '.join(blind)} do not see this checkout at {binaries.REPO}: a cluster's nodes run "
                        "startlab from a filesystem they all mount at the same path (NFS, say), and write "
                        "their runs into it")


def provision(inventory: Path, p: Plan, log: Path) -> None:
    """site.yml on every host: the controller's first (it builds the shared checkout), then
    the others at once (theirs is the machine-wide part; the checkout is up to date)."""
    for limit in (p.controller, f"all:!{p.controller}"):
        with open(log, "a") as out:
            r = subprocess.run(["ansible-playbook", "-i", str(inventory), str(SITE), "--limit", limit],
                               stdout=out, stderr=subprocess.STDOUT, env=ansible_env())
        if r.returncode != 0:
            _failed("site.yml", log)


def _failed(what: str, log: Path) -> None:
    tail = log.read_text(errors="replace").strip().splitlines()[-15:]
    raise UserError(f"playbooks/{what} failed (its log: {log}):\n  " + "\n  ".join(tail))


def up(inventory: Path, name: str = "startlab", provision_hosts: bool = True, progress=print) -> Plan:
    """Stand the cluster up (or bring it in line with the inventory); returns its plan once
    every node answers idle. `provision_hosts` False: the hosts are startlab testbeds already."""
    inv = read_inventory(inventory)
    check_shared_checkout(inventory, inv.hosts)
    with tempfile.TemporaryDirectory(prefix="startlab-cluster-") as tmp:
        work = Path(tmp)
        progress(f"facts of {len(inv.hosts)} hosts …")
        p = plan(inv, gather_facts(inventory, work), name)
        key = munge_key(name)
        log = key.parent / "ansible.log"
        log.write_text("")
        if provision_hosts:
            progress("provisioning every host (playbooks/site.yml) …")
            provision(inventory, p, log)
        extra = {"slurm_conf": p.config, "cgroup_conf": slurm.cgroup_config() if p.cgroups else "",
                 "munge_key": str(key), "slurm_controller": p.controller}
        (work / "vars.json").write_text(json.dumps(extra))
        progress(f"playbooks/cluster.yml: controller {p.controller}, nodes "
                 f"{', '.join(f'{n.name} ({n.cpus} CPUs)' for n in p.nodes.values())} …")
        with open(log, "a") as out:
            r = subprocess.run(["ansible-playbook", "-i", str(inventory), str(PLAYBOOK), "-e", f"@{work / 'vars.json'}"],
                               stdout=out, stderr=subprocess.STDOUT, env=ansible_env())
        if r.returncode != 0:
            _failed("cluster.yml", log)
    wait_idle(inventory, p)
    return p


def node_states(inventory: Path, controller: str) -> dict[str, str]:
    """sinfo's state of each node, asked on the controller."""
    out = _adhoc(inventory, controller, "sinfo -h -N -o '%N %t'").get(controller, "")
    return {parts[0]: parts[1] for parts in (line.split() for line in out.splitlines()) if len(parts) == 2}


def wait_idle(inventory: Path, p: Plan) -> None:
    deadline = time.monotonic() + UP_TIMEOUT_S
    states: dict[str, str] = {}
    while time.monotonic() < deadline:
        states = node_states(inventory, p.controller)
        if all(states.get(n.name) in ("idle", "mix", "alloc") for n in p.nodes.values()):
            return
        time.sleep(2.0)
    raise UserError(f"the cluster's nodes did not come up within {UP_TIMEOUT_S:.0f} s: "
                    + ", ".join(f"{n.name} {states.get(n.name, 'unknown')}" for n in p.nodes.values()))
