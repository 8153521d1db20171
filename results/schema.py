"""The result format: file names, the format version, and upgrades of older formats.

Every result file (campaign.json, a run's meta.json and metrics.json) carries "format".
Files of an older format are upgraded when loaded, never refused, so a campaign written
years ago is re-analysed by today's code; a newer format than this code knows is refused
with a message, because guessing what a future field means could silently mislead.

Format history:
  1  (startlab ≤ cc46cbd) one workload, `competing`; no declared flows.
  2  workloads are plugins: campaign and meta name theirs; meta lists the run's flows with
     their declared and observed congestion control and initial window, and the emulator's
     figures over the run.
  3  meta carries the host check (`host_check`: the campaign's calibration and verdict, the
     host monitor over the run, the flags) and the emulator's tuning (`link.emulator_tuning`);
     the campaign keeps its calibration in host.json.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from config.sizes import parse_size
from machine.errors import UserError

FORMAT = 3
CAMPAIGN_FILE = "campaign.json"
META_FILE = "meta.json"
METRICS_FILE = "metrics.json"
ERROR_FILE = "error.txt"
PARTIAL_SUFFIX = ".partial"      # a run being written; never counts
FAILED_SUFFIX = ".failed"        # a run that failed; kept for inspection
NETWORKS_DIR = "networks"        # one directory per network built, with its emulator figures
GUESTS_DIR = "guests"            # on the virtual clock: one directory per run's guest, its log and statistics
SUMMARY_CSV, SUMMARY_JSON, FIGURES_CSV = "summary.csv", "summary.json", "figures.csv"
REPORT_HTML, REPORT_MD, PLOTS_DIR = "report.html", "report.md", "plots"

# The standard capture points of a run (topologies.network.Network.capture_points) and
# their files: the clients' uplink, and both sides of the downstream bottleneck queue.
CAPTURE_FILES = {"client": "cap-client.pcap", "bneck-in": "cap-bneck-in.pcap", "bneck-out": "cap-bneck-out.pcap"}
# Two-way workloads also capture what the clients send: at the servers' downlink and
# around the upstream bottleneck queue (Network.upstream_capture_points).
UPSTREAM_CAPTURE_FILES = {"server": "cap-server.pcap", "bneck-up-in": "cap-bneck-up-in.pcap",
                          "bneck-up-out": "cap-bneck-up-out.pcap"}

# Every key of a run's meta.json and what it holds: the one declaration of the record
# (scenarios/runner.py writes it, a test checks that it writes nothing undeclared, the docs
# list it). A workload may add keys of its own (`WorkloadResult.extra`), named in EXTRA_META.
META_FIELDS = {
    "format": "the result format (FORMAT)",
    "status": "captured (traffic ran) or done (analysed)",
    "run_id": "profile_size[_sweep]_variant_rNN",
    "scenario": "the scenario's name", "scenario_hash": "hash of the scenario file as run",
    "profile": "link profile", "size_bytes": "object size (None for unsized workloads)",
    "variant": "variant name", "rep": "repetition (1-based)",
    "variant_definition": "the variant's implementations and parameters per role",
    "profile_params": "the profile as declared, with its derived figures",
    "link": "what was applied: queues, delay backend, end-host defaults, emulator tuning",
    "path": "base RTT (and per-pair RTTs) measured before the runs, with the host's flags then",
    "workload": "workload name", "workload_params": "its parameters for this run",
    "spec": "the workload's own description of the run (ports, hosts, roles)",
    "app": "what the applications reported",
    "captures": "capture files and their counters", "router_counters": "counters the variant's router parts kept",
    "server_counters": "counters the variant's server parts kept (Quick-Start: requests and echoes, after idle too)",
    "queue_drops": "drops of each bottleneck queue over the run",
    "emulator": "the delay element's figures over the run (frames, drops, lateness)",
    "clock": "CLOCK_MONOTONIC and the wall clock read together (s): where a scheme's logged events (BPF's "
             "ktime) fall on the captures' time axis",
    "host_check": "calibration and verdict, host monitor over the run, flags",
    "run_clock": "the clock the run was emulated on: real, or virtual with its shift, seed, QEMU, machine, "
                 "kernel, image and bundle (the digest of the checkout's files the guest ran; machine/clock.py)",
    "guest_cpu": "virtual clock: the guest CPU over the run, in guest time: busy fraction, busy and total seconds",
    "guest_interrupts": "virtual clock: the interrupts the guest took over the run, by source (/proc/interrupts); "
                        "two boots of one run take the same, so a source that differs names what followed host time",
    "timings": "setup, traffic, stop and analysis times (s)", "flows": "declared and observed flows",
    "before_fetch": "what a variant's parts set as the fetch started, per node (a hint read from the trace)",
    "sweep": "{param: value} of a sweep point", "lane": "the lane's confinement (lanes only)",
    "finished": "UTC time the run finished",
    "git_rev": "startlab's revision", "kernel": "uname -r", "machine": "host name", "host": "the testbed's host name (a cluster node's)",
    "slurm": "a --slurm task's job, array task, node and restarts (absent elsewhere)",
    "cpus": "CPUs of the machine", "tools": "tool versions",
    "analysis_error": "why the analysis failed (the captures are kept)",
    "reused_from": "the campaign (its path, scenario and hash) this run was taken from by `run --reuse`",
}
EXTRA_META = {"link_use": "utilisation, drops and marks of the bottleneck over the run (competing: over the fetch)",
              "queue_run": "the bottleneck's drops (those of a full buffer apart) and marks over the whole run",
              "load_shaper": "the token bucket of a load generator"}

# A run's status in meta.json: "captured" once the traffic ran, "done" once analysed.
DONE, CAPTURED = "done", "captured"
LEGACY_WORKLOAD = "competing"    # the only workload of format 1


def _format_of(doc: dict[str, Any], path: Path) -> int:
    fmt = doc.get("format")
    if not isinstance(fmt, int) or fmt < 1:
        raise UserError(f"{path} has no valid format number ({fmt!r}); it is not a startlab result file")
    if fmt > FORMAT:
        raise UserError(f"{path} has format {fmt}, written by a newer startlab; this one reads formats 1 to {FORMAT}")
    return fmt


def upgrade_campaign(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """campaign.json in today's format (format 3 changed nothing in it)."""
    fmt = _format_of(doc, path)
    if fmt < FORMAT:
        doc = dict(doc)
    if fmt == 1:
        doc.setdefault("workload", LEGACY_WORKLOAD)
        doc.setdefault("workload_params", {})
        doc["sizes"] = [parse_size(s) for s in doc.get("sizes") or []]
    if fmt < FORMAT:
        doc["format"] = FORMAT
    return doc


def upgrade_meta(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run's meta.json in today's format."""
    fmt = _format_of(doc, path)
    if fmt < FORMAT:
        doc = dict(doc)
    if fmt == 1:
        doc.setdefault("workload", LEGACY_WORKLOAD)
        doc.setdefault("flows", [])          # format 1 declared none: nothing to verify
        doc.setdefault("emulator", None)
    if fmt <= 2:
        doc.setdefault("host_check", {})     # not measured then: no flags, no figures
    if fmt < FORMAT:
        doc["format"] = FORMAT
    return doc


def upgrade_metrics(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run's metrics.json in today's format (format 1 held the competing workload's
    metrics, whose shape formats 2 and 3 keep)."""
    if _format_of(doc, path) < FORMAT:
        doc = dict(doc)
        doc["format"] = FORMAT
    return doc
