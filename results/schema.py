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
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from config.sizes import parse_size
from machine.errors import UserError

FORMAT = 2
CAMPAIGN_FILE = "campaign.json"
META_FILE = "meta.json"
METRICS_FILE = "metrics.json"
ERROR_FILE = "error.txt"
PARTIAL_SUFFIX = ".partial"      # a run being written; never counts
FAILED_SUFFIX = ".failed"        # a run that failed; kept for inspection
NETWORKS_DIR = "networks"        # one directory per network built, with its emulator figures
SUMMARY_CSV, SUMMARY_JSON = "summary.csv", "summary.json"
REPORT_HTML, REPORT_MD, PLOTS_DIR = "report.html", "report.md", "plots"

# The standard capture points of a run (topologies.network.Network.capture_points) and
# their files: the clients' uplink, and both sides of the downstream bottleneck queue.
CAPTURE_FILES = {"client": "cap-client.pcap", "bneck-in": "cap-bneck-in.pcap", "bneck-out": "cap-bneck-out.pcap"}
# Two-way workloads also capture what the clients send: at the servers' downlink and
# around the upstream bottleneck queue (Network.upstream_capture_points).
UPSTREAM_CAPTURE_FILES = {"server": "cap-server.pcap", "bneck-up-in": "cap-bneck-up-in.pcap",
                          "bneck-up-out": "cap-bneck-up-out.pcap"}

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
    """campaign.json in today's format."""
    if _format_of(doc, path) == 1:
        doc = dict(doc)
        doc.setdefault("workload", LEGACY_WORKLOAD)
        doc.setdefault("workload_params", {})
        doc["sizes"] = [parse_size(s) for s in doc.get("sizes") or []]
        doc["format"] = 2
    return doc


def upgrade_meta(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run's meta.json in today's format."""
    if _format_of(doc, path) == 1:
        doc = dict(doc)
        doc.setdefault("workload", LEGACY_WORKLOAD)
        doc.setdefault("flows", [])          # format 1 declared none: nothing to verify
        doc.setdefault("emulator", None)
        doc["format"] = 2
    return doc


def upgrade_metrics(doc: dict[str, Any], path: Path) -> dict[str, Any]:
    """A run's metrics.json in today's format (format 1 held the competing workload's
    metrics, whose shape format 2 keeps)."""
    if _format_of(doc, path) == 1:
        doc = dict(doc)
        doc["format"] = 2
    return doc
