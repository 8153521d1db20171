"""Results from the nodes' own storage, back into the campaign: `run --slurm --node-dir DIR`.

Where the campaign directory is not on a filesystem every node sees, each array task writes
its runs under DIR on its node (`node_root`). After the array, the submitting command fetches
them through Slurm itself, with `srun --nodelist=NODE tar c` (Slurm forwards a step's output
to the command that started it, so no other path between the machines is needed; Debian ships
no `sgather`), and merges them: complete runs only (a run is renamed into place when whole, and
`.partial` directories are not fetched), and never one the campaign already holds.

Which nodes may hold runs is written in the campaign before they can (`slurm/nodes.json`), so
a command killed before staging, or a node that could not be reached, leaves nothing behind
for good: the next command on the campaign stages from those nodes first.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from machine import slurm
from results import schema
from results.campaign import Campaign
from results.store import read_json_or_none, write_json

NODES_FILE = "nodes.json"        # in the campaign's slurm/: the nodes whose storage may hold its runs
CAMPAIGN = "campaign"            # in a node's root: the task's campaign (beside the tasks' files, slurm/)
STAGE_TIMEOUT_S = 3600


def node_root(node_dir: str, campaign: Campaign) -> str:
    """The campaign's directory on a node's storage: one per campaign, the same every command,
    so a later command finds what an earlier one left. It holds the tasks' own campaign
    (`CAMPAIGN`) and their logs, batches and scenario (slurm/)."""
    key = hashlib.sha256(str(campaign.path).encode()).hexdigest()[:12]
    return f"{node_dir.rstrip('/')}/startlab-{campaign.path.name}-{key}"


def _nodes_file(campaign: Campaign, slurm_dir: str) -> Path:
    return campaign.path / slurm_dir / NODES_FILE


def pending(campaign: Campaign, slurm_dir: str) -> dict[str, str]:
    """{node: its root} of the nodes that may still hold runs of this campaign."""
    return dict((read_json_or_none(_nodes_file(campaign, slurm_dir)) or {}).get("nodes", {}))


def remember(campaign: Campaign, slurm_dir: str, nodes: dict[str, str]) -> None:
    """Add `nodes` ({node: root}) to those to stage from, before they hold anything."""
    known = pending(campaign, slurm_dir)
    if set(nodes.items()) - set(known.items()):
        write_json(_nodes_file(campaign, slurm_dir), {"nodes": {**known, **nodes}})


def _forget(campaign: Campaign, slurm_dir: str, node: str) -> None:
    known = pending(campaign, slurm_dir)
    known.pop(node, None)
    write_json(_nodes_file(campaign, slurm_dir), {"nodes": known})


def _on_node(node: str) -> list[str]:
    """srun's options for one step on `node`, outside any allocation of ours."""
    return ["srun", f"--nodelist={node}", "--nodes=1", "--ntasks=1", "--job-name=startlab-stage", "--quiet"]


def fetch(client: slurm.Client, node: str, root: str, into: Path) -> None:
    """Unpack `root` from `node` into `into` (complete runs only: no `.partial`), streamed."""
    script = (f"cd {_quote(root)} 2>/dev/null || exit 0; "
              f"exec tar -c --exclude='*{schema.PARTIAL_SUFFIX}' .")
    proc = client.popen([*_on_node(node), "sh", "-c", script])
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for member in tar:
                name = Path(member.name)
                if member.issym() or member.islnk() or name.is_absolute() or ".." in name.parts:
                    raise RuntimeError(f"refused member {member.name!r}")
                tar.extract(member, into)
    except tarfile.ReadError:
        pass                                    # nothing there: an empty stream
    finally:
        rc = proc.wait(timeout=STAGE_TIMEOUT_S)
        err = proc.stderr.read().decode(errors="replace").strip() if proc.stderr else ""
    if rc != 0:
        raise RuntimeError(f"srun on {node} failed (exit {rc}): {err[-300:]}")


def merge(campaign: Campaign, staged: Path, slurm_dir: str) -> tuple[int, int]:
    """Move the complete runs of a node's `staged` campaign (`CAMPAIGN`) into the campaign, and
    the tasks' files (`slurm_dir`: logs, batches, stats) into its slurm/; returns (runs
    merged, runs the campaign already held)."""
    merged = held = 0
    for files in (staged / slurm_dir, staged / CAMPAIGN / slurm_dir):
        for p in sorted(files.iterdir()) if files.is_dir() else ():
            if p.name != NODES_FILE:
                _replace(p, campaign.path / slurm_dir / p.name)
    node_campaign = staged / CAMPAIGN
    for path in sorted(node_campaign.iterdir()) if node_campaign.is_dir() else ():
        if path.name == schema.NETWORKS_DIR:
            for p in path.iterdir():
                _replace(p, campaign.path / schema.NETWORKS_DIR / p.name)
        elif path.name.endswith(schema.FAILED_SUFFIX):
            run_id = path.name[:-len(schema.FAILED_SUFFIX)]
            if not campaign.is_done(run_id):
                _replace(path, campaign.path / path.name)
        elif (path / schema.META_FILE).is_file():
            if campaign.is_done(path.name):
                held += 1
                continue
            shutil.rmtree(campaign.path / f"{path.name}{schema.FAILED_SUFFIX}", ignore_errors=True)
            _replace(path, campaign.run_dir(path.name))
            merged += 1
    return merged, held


def stage(campaign: Campaign, client: slurm.Client, slurm_dir: str, say=print) -> list[str]:
    """Fetch, merge and remove the runs of every node that may hold some; returns the
    nodes that could not be reached (their runs stay there for the next command)."""
    missed = []
    for node, root in sorted(pending(campaign, slurm_dir).items()):
        into = campaign.path / slurm_dir / f"staging-{node}{schema.PARTIAL_SUFFIX}"
        shutil.rmtree(into, ignore_errors=True)
        into.mkdir(parents=True)
        try:
            fetch(client, node, root, into)
            merged, held = merge(campaign, into, slurm_dir)
        except (RuntimeError, OSError, subprocess.TimeoutExpired, tarfile.TarError) as exc:
            say(f"startlab: could not stage the runs on node {node} ({exc}); they stay in {root} "
                "there, and the same command stages them later")
            missed.append(node)
            continue
        finally:
            shutil.rmtree(into, ignore_errors=True)
        say(f"startlab: staged {merged} runs from node {node}"
            + (f" ({held} the campaign already held, left out)" if held else ""))
        removal = client.popen([*_on_node(node), "rm", "-rf", "--", root])
        if removal.wait(timeout=STAGE_TIMEOUT_S) == 0:
            _forget(campaign, slurm_dir, node)
        else:                                   # staged again next time: what is held is left out
            say(f"startlab: could not remove {root} on node {node}: "
                f"{removal.stderr.read().decode(errors='replace').strip()[-300:]}")
    return missed


def _replace(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.is_dir():
        shutil.rmtree(dest)
    os.replace(src, dest)


def _quote(s: str) -> str:
    return "'" + s.replace("'", "'\\''") + "'"
