"""A campaign sharded over an Ansible inventory: `run.py fleet run SCENARIO -i INVENTORY`.

Ansible does the spreading (playbooks/fleet.yml): it provisions each host with the same
site.yml, runs the host's share in its own lanes and fetches what finished. This module
plans the rounds and merges. Round 1 deals the unfinished runs over all hosts (per
profile, in the scenario's seeded order, as lanes are dealt). A host whose shard failed or
that could not be reached is dropped, and the runs it did not finish are dealt over the
remaining hosts in the next round. Every fetched run is merged into the one campaign
directory here only if it is complete and not there yet, so no run counts twice and a
finished run is never redone; each run's meta.json names the host it ran on.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from machine.errors import UserError
from machine.provenance import git_revision
from results import schema
from results.campaign import Campaign
from results.store import read_json_or_none
from scenarios.lanes import deal_runs
from scenarios.progress import Progress, fmt_duration
from scenarios.runner import ROOT, open_campaign
from scenarios.spec import Scenario

FLEET_DIR = "fleet"              # inside the campaign: per round the run lists, Ansible's log, the packs
PLAYBOOK = ROOT / "playbooks" / "fleet.yml"
MAX_ROUNDS = 3
SHARD_TIMEOUT_S = 24 * 3600


@dataclass
class RoundOutcome:
    round: int
    hosts: dict[str, int]                       # host → runs assigned
    merged: dict[str, int] = field(default_factory=dict)
    failed_hosts: dict[str, str] = field(default_factory=dict)
    wall_s: float = 0.0
    shard_s: dict[str, float] = field(default_factory=dict)   # host → its shard's own run time


def inventory_hosts(inventory: Path) -> list[str]:
    """The inventory's hosts, as Ansible reads it (any inventory format or plugin)."""
    if not inventory.exists():
        raise UserError(f"{inventory}: no such inventory file")
    res = subprocess.run(["ansible-inventory", "-i", str(inventory), "--list"], capture_output=True, text=True)
    if res.returncode != 0:
        raise UserError(f"{inventory}: ansible-inventory cannot read it: {res.stderr.strip()[-500:]}")
    hosts = sorted(json.loads(res.stdout).get("_meta", {}).get("hostvars", {}))
    if not hosts:
        raise UserError(f"{inventory}: no hosts in it")
    return hosts


def code_bundle(dest: Path) -> Path:
    """The project's files as the controller has them (tracked and new, not ignored)."""
    files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                           capture_output=True, check=True).stdout.split(b"\0")
    with tarfile.open(dest, "w:gz") as tar:
        for name in filter(None, files):
            path = ROOT / name.decode()
            if path.is_file():
                tar.add(path, arcname=name.decode())
    return dest


def merge_pack(campaign: Campaign, pack: Path, expected: set[str]) -> tuple[int, dict]:
    """Merge one host's fetched pack; returns (runs merged, the shard's outcome record).

    The pack is unpacked into a staging directory inside the campaign (the same file
    system), and each complete run that is not in the campaign yet is renamed into place:
    it appears whole or not at all, and nothing is copied twice."""
    staging = Path(tempfile.mkdtemp(prefix=".merging-", dir=campaign.path))
    try:
        with tarfile.open(pack) as tar:
            for member in tar.getmembers():        # a pack holds plain files under its own names
                if member.name.startswith("/") or ".." in Path(member.name).parts or not (
                        member.isfile() or member.isdir()):
                    raise UserError(f"{pack}: unexpected member {member.name}")
            tar.extractall(staging)
        status = next(staging.glob("round-*.status.json"), None)
        outcome = json.loads(status.read_text()) if status else {"failed": True, "msg": "no outcome in the pack"}
        shard = staging / "campaign"
        record = read_json_or_none(shard / schema.CAMPAIGN_FILE)
        if record is None:
            return 0, outcome
        if record.get("scenario_hash") != campaign.record.get("scenario_hash"):
            raise UserError(f"{pack}: the shard ran another scenario or code (hash "
                            f"{record.get('scenario_hash')} ≠ {campaign.record.get('scenario_hash')})")
        merged = 0
        for run_dir in sorted(p for p in shard.iterdir() if p.is_dir()):
            name = run_dir.name
            if name in expected and not campaign.is_done(name):
                meta = read_json_or_none(run_dir / schema.META_FILE) or {}
                if meta.get("status") == schema.DONE and (run_dir / schema.METRICS_FILE).is_file():
                    shutil.rmtree(campaign.path / name, ignore_errors=True)     # an unfinished leftover
                    run_dir.rename(campaign.path / name)
                    shutil.rmtree(campaign.path / f"{name}{schema.FAILED_SUFFIX}", ignore_errors=True)
                    merged += 1
            elif name.endswith(schema.FAILED_SUFFIX) and name[:-len(schema.FAILED_SUFFIX)] in expected:
                if not campaign.is_done(name[:-len(schema.FAILED_SUFFIX)]):
                    shutil.rmtree(campaign.path / name, ignore_errors=True)
                    run_dir.rename(campaign.path / name)
        networks = shard / schema.NETWORKS_DIR
        for net in networks.iterdir() if networks.is_dir() else []:
            target = campaign.path / schema.NETWORKS_DIR / net.name
            if not target.exists():
                target.parent.mkdir(parents=True, exist_ok=True)
                net.rename(target)
        return merged, outcome
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def run_fleet(sc: Scenario, scenario_file: Path, overrides: list[str], inventory: Path, lanes_per_host: str,
              out: Path | None, delay_backend: str = "auto", force: bool = False) -> tuple[Campaign, dict]:
    campaign = open_campaign(sc, out)
    campaign.clear_partials()
    for stale in campaign.path.glob(".merging-*"):        # an interrupted merge
        shutil.rmtree(stale)
    runs = sc.runs()
    ids = {r.run_id for r in runs}
    hosts = inventory_hosts(inventory)
    fleet_dir = campaign.path / FLEET_DIR
    fleet_dir.mkdir(exist_ok=True)
    bundle = code_bundle(fleet_dir / "code.tar.gz")
    good, rounds, t0 = list(hosts), [], time.monotonic()
    skipped = sum(campaign.is_done(i) for i in ids)
    for number in range(1, MAX_ROUNDS + 1):
        todo = [r for r in runs if not campaign.is_done(r.run_id)
                and not (campaign.path / f"{r.run_id}{schema.FAILED_SUFFIX}").exists()]
        if not todo or not good:
            break
        shares = dict(zip(good, deal_runs(todo, len(good))))
        active = {h: s for h, s in shares.items() if s}
        round_dir = fleet_dir / f"round-{number}"
        for host, share in active.items():          # what playbooks/fleet.yml copies to the host
            inputs = round_dir / "inputs" / host
            inputs.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(scenario_file, inputs / "scenario.yaml")
            (inputs / f"round-{number}.runs").write_text("".join(f"{r.run_id}\n" for r in share))
        outcome = RoundOutcome(number, {h: len(s) for h, s in active.items()})
        print(f"fleet round {number}: {len(todo)} runs over {', '.join(f'{h} ({n})' for h, n in outcome.hosts.items())}",
              file=sys.stderr)
        t = time.monotonic()
        watch = RoundWatch(inventory, sorted(active), f"{sc.name}-{sc.hash}", number,
                           Progress(len(ids), sum(campaign.is_done(i) for i in ids)))
        watch.start()
        try:
            _play(inventory, sorted(active), round_dir, number, {
                "fleet_campaign_id": f"{sc.name}-{sc.hash}", "fleet_round": number, "fleet_bundle": str(bundle),
                "fleet_inputs_dir": str(round_dir / "inputs"), "fleet_fetch_dir": str(round_dir / "fetched"), "fleet_lanes": lanes_per_host, "fleet_force": force,
                "fleet_overrides": overrides, "fleet_delay_backend": delay_backend,
                "fleet_git_rev": git_revision() or "", "fleet_timeout_s": SHARD_TIMEOUT_S,
                "fleet_controller_root": str(ROOT)})
        finally:
            watch.stop()
        outcome.wall_s = time.monotonic() - t
        for host, share in active.items():
            pack = round_dir / "fetched" / f"{host}.tar"
            if not pack.is_file():
                outcome.failed_hosts[host] = "unreachable or nothing fetched (see ansible.log)"
                continue
            merged, shard = merge_pack(campaign, pack, {r.run_id for r in share})
            pack.unlink()                        # what counted of it is in the campaign now
            outcome.merged[host] = merged
            outcome.shard_s[host] = _shard_seconds(shard)
            if shard.get("failed"):
                outcome.failed_hosts[host] = f"shard exit {shard.get('rc')}: {str(shard.get('msg', ''))[-300:]}"
        for host, why in outcome.failed_hosts.items():
            good.remove(host)
            print(f"fleet: {host} failed ({why.strip()}); its unfinished runs go to the other hosts", file=sys.stderr)
        rounds.append(outcome)
    failed_hosts = {h: w for o in rounds for h, w in o.failed_hosts.items()}
    if failed_hosts:
        _clean(inventory, sorted(failed_hosts), fleet_dir)
    missing = [i for i in sorted(ids) if not campaign.is_done(i)
               and not (campaign.path / f"{i}{schema.FAILED_SUFFIX}").exists()]
    failed = [{"run": r, "error": e} for r, e in campaign.failed_runs()]
    if missing:
        failed += [{"run": i, "error": "not run: no host left to run it"} for i in missing]
    stats = {"runs": len(ids), "skipped": skipped, "failed": failed, "wall_s": time.monotonic() - t0,
             "hosts": hosts, "failed_hosts": failed_hosts,
             "rounds": [o.__dict__ for o in rounds]}
    (fleet_dir / "fleet.json").write_text(json.dumps(stats, indent=1, default=str))
    print(f"fleet: {len(ids) - len(missing)}/{len(ids)} runs in the campaign after {len(rounds)} round(s), "
          f"wall {fmt_duration(stats['wall_s'])}", file=sys.stderr)
    return campaign, stats


class RoundWatch(threading.Thread):
    """Progress with an ETA while a round runs: every POLL_S, one ad-hoc Ansible call counts
    each host's finished runs of this round (light: the hosts are busy emulating)."""
    POLL_S = 30.0

    def __init__(self, inventory: Path, hosts: list[str], campaign_id: str, number: int, progress: Progress):
        super().__init__(daemon=True)
        self.inventory, self.hosts, self.number, self.progress = inventory, hosts, number, progress
        self.campaign_id = campaign_id
        self.halt = threading.Event()

    def run(self) -> None:
        shard = "{{ startlab_workdir | default('/var/tmp/startlab-fleet') }}/" + self.campaign_id
        count = (f"cd {shard}/campaign 2>/dev/null || {{ echo 0; exit 0; }}; n=0; "
                 f"for r in $(cat ../round-{self.number}.runs 2>/dev/null); do "
                 "[ -f \"$r/metrics.json\" ] && n=$((n+1)); done; echo $n")
        while not self.halt.wait(self.POLL_S):
            res = subprocess.run(["ansible", "-i", str(self.inventory), ",".join(self.hosts), "-o", "-b",
                                  "-m", "ansible.builtin.shell", "-a", count], capture_output=True, text=True,
                                 env=_ansible_env())
            done = 0
            for line in res.stdout.splitlines():
                last = line.rsplit(" ", 1)[-1]
                done += int(last) if " | CHANGED | " in line and last.isdigit() else 0
            if self.halt.is_set():
                break
            self.progress.set_done(done)
            self.progress.show(f"round {self.number} on {len(self.hosts)} hosts")

    def stop(self) -> None:
        self.halt.set()
        self.join()
        self.progress.close()


def _shard_seconds(shard: dict) -> float | None:
    """The shard command's own run time on its host (Ansible's start and end stamps)."""
    try:
        fmt = "%Y-%m-%d %H:%M:%S.%f"
        return (datetime.strptime(shard["end"], fmt) - datetime.strptime(shard["start"], fmt)).total_seconds()
    except (KeyError, TypeError, ValueError):
        return None


def _play(inventory: Path, hosts: list[str], round_dir: Path, number: int, extra: dict) -> int:
    """One round of playbooks/fleet.yml over `hosts`; Ansible's output goes to the round's log."""
    (round_dir / "fetched").mkdir(exist_ok=True)
    vars_file = round_dir / "vars.json"
    vars_file.write_text(json.dumps(extra, indent=1))
    with open(round_dir / "ansible.log", "w") as log:
        proc = subprocess.run(["ansible-playbook", "-i", str(inventory), str(PLAYBOOK), "--limit", ",".join(hosts),
                               "-e", f"@{vars_file}"], stdout=log, stderr=subprocess.STDOUT,
                              env=_ansible_env())
    return proc.returncode


def _clean(inventory: Path, hosts: list[str], fleet_dir: Path) -> None:
    """`run.py clean` on hosts whose shard failed, where they can still be reached: a
    killed shard leaves its network behind (its owner is dead, so clean may remove it)."""
    with open(fleet_dir / "clean.log", "w") as log:
        subprocess.run(["ansible", "-i", str(inventory), ",".join(hosts), "-b", "-e", f"fleet_controller_root={ROOT}",
                        "-m", "ansible.builtin.shell",
                        "-a", "cd {{ startlab_root | default(startlab_workdir | default('/var/tmp/startlab-fleet')"
                              " + '/src') }} && STARTLAB_NO_REEXEC=1 .venv/bin/python run.py clean"],
                       stdout=log, stderr=subprocess.STDOUT, env=_ansible_env())


def _ansible_env() -> dict:
    # pipelining: modules run over stdin, no temporary files per task (a second or so each)
    return {**os.environ, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_PIPELINING": "True",
            "ANSIBLE_RETRY_FILES_ENABLED": "False"}
