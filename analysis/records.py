"""Load a campaign's finished runs as flat run records.

The analysis side works from result files only (never from emulation code), so a
campaign copied to a laptop can be re-analysed. This module is the one place that
knows the on-disk layout: ``campaign.json`` in the campaign directory and one
sub-directory per run holding ``meta.json`` and ``metrics.json``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional, TypedDict

from machine.errors import UserError

FORMAT = 1  # the result-file format version this module reads


class ShortFlow(TypedDict):
    fct_s: float
    bytes: int
    lost_pkts: int
    retx_pkts: int
    inflation: Optional[float]  # sent ÷ unique bytes; None when nothing was sent


class LongFlow(TypedDict):
    bytes: int
    retx_pkts: int
    lost_pkts: int


class Throughput(TypedDict):
    t: list[float]
    short_mbps: list[float]
    long_mbps: list[float]


class TimeSequence(TypedDict):
    t: list[float]  # s since the SYN
    seq: list[int]  # last byte of the segment, relative to the first data byte
    retx: list[int]  # 1 for a retransmission
    stride: int  # every stride-th segment kept (retransmissions always)


class RunRecord(TypedDict):
    """One finished run: its coordinates in the campaign matrix and its metrics."""

    run_id: str
    profile: str
    size_bytes: int
    variant: str
    rep: int
    rtt_s: float  # the profile's configured base RTT
    rate_bps: float  # the profile's configured downstream rate
    short: ShortFlow
    long: Optional[LongFlow]
    fairness_ratio: Optional[float]
    throughput: Throughput
    quickstart: Optional[dict[str, Any]]  # the flow's Quick-Start block; None in runs without one
    time_sequence: Optional[TimeSequence]
    mtu: int  # the profile's packet size, bytes
    server_iw: Optional[int]  # the variant's configured initial window on the server, segments
    sweep: dict[str, Any]  # the swept workload parameter of this run ({} without a sweep)
    link_use: Optional[dict[str, Any]]  # bottleneck bytes/packets/drops over the run, if recorded
    git_rev: Optional[str]  # provenance, shown in the report
    kernel: Optional[str]


def load_campaign(campaign_dir: Path | str) -> tuple[dict[str, Any], list[RunRecord]]:
    """Return (campaign.json contents, records of the finished runs).

    Runs whose meta status is not "done" or that have no metrics.json were
    interrupted and do not count. Sub-directories without meta.json (plots, logs)
    are not runs and are ignored.
    """
    root = Path(campaign_dir)
    campaign_file = root / "campaign.json"
    if not campaign_file.is_file():
        raise UserError(f"{root} is not a campaign directory (no campaign.json); "
                        "pass results/<scenario>/<campaign>")
    campaign = _read_json(campaign_file)
    _check_format(campaign, campaign_file)

    records: list[RunRecord] = []
    for run_dir in sorted(p for p in root.iterdir() if p.is_dir()):
        meta_file, metrics_file = run_dir / "meta.json", run_dir / "metrics.json"
        if not meta_file.is_file():
            continue
        meta = _read_json(meta_file)
        if meta.get("status") != "done" or not metrics_file.is_file():
            continue
        _check_format(meta, meta_file)
        metrics = _read_json(metrics_file)
        _check_format(metrics, metrics_file)
        records.append(_record(meta, metrics, run_dir))
    return campaign, records


def _record(meta: dict[str, Any], metrics: dict[str, Any], run_dir: Path) -> RunRecord:
    """Join a run's meta and metrics into one record; a missing key is a user-facing error."""
    try:
        params = meta["profile_params"]
        return RunRecord(
            run_id=str(meta["run_id"]),
            profile=str(meta["profile"]),
            size_bytes=int(meta["size_bytes"]),
            variant=str(meta["variant"]),
            rep=int(meta["rep"]),
            rtt_s=float(params["rtt_ms"]) / 1000.0,
            rate_bps=float(params["down_mbps"]) * 1e6,
            short=metrics["short"],
            long=metrics.get("long"),
            fairness_ratio=metrics.get("fairness_ratio"),
            throughput=metrics.get("throughput") or {"t": [], "short_mbps": [], "long_mbps": []},
            quickstart=metrics.get("quickstart"),
            time_sequence=metrics.get("time_sequence"),
            mtu=int(params.get("mtu") or 1500),
            server_iw=_server_iw(meta),
            sweep=dict(meta.get("sweep") or {}),
            link_use=meta.get("link_use"),
            git_rev=meta.get("git_rev"),
            kernel=meta.get("kernel"),
        )
    except (KeyError, TypeError, ValueError) as err:
        raise UserError(f"run {run_dir} has an incomplete meta.json/metrics.json "
                        f"({type(err).__name__}: {err}); re-run it or delete the directory") from err


def _server_iw(meta: dict[str, Any]) -> Optional[int]:
    """The initial window the variant configured on its server (None: the kernel default)."""
    server = ((meta.get("variant_definition") or {}).get("roles") or {}).get("server") or {}
    iw = server.get("iw")
    return int(iw) if iw else None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise UserError(f"cannot read {path}: {err}") from err
    if not isinstance(data, dict):
        raise UserError(f"{path} does not hold a JSON object")
    return data


def _check_format(data: dict[str, Any], path: Path) -> None:
    """Refuse files written in a format this code does not understand, rather than misread them."""
    if data.get("format") != FORMAT:
        raise UserError(f"{path} has format {data.get('format')!r}; this startlab reads format {FORMAT}")


def size_label(size_bytes: int) -> str:
    """Label a transfer size the way scenarios name it (70KB, 2MB), for titles and tables."""
    for unit, factor in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3),
                         ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size_bytes >= factor and size_bytes % factor == 0:
            return f"{size_bytes // factor}{unit}"
    return f"{size_bytes}B"
