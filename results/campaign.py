"""A campaign directory: campaign.json, one directory per run, and the run records.

    <campaign>/campaign.json          what runs (scenario, matrix, workload, variants)
    <campaign>/<run_id>/meta.json     what a run did (coordinates, applied parameters,
                                      declared and observed flows, provenance, timings)
    <campaign>/<run_id>/metrics.json  what the analysis made of its captures
    <campaign>/<run_id>.partial/      a run being written: renamed when complete
    <campaign>/<run_id>.failed/       a run that failed, with error.txt
    <campaign>/networks/              per network built: its emulator figures

This module is the one place that knows the layout; the runner writes through it, the
analysis reads through it.
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Optional

from machine.errors import UserError
from results import schema
from results.store import read_json, read_json_or_none, write_atomically, write_json


@dataclass
class RunRecord:
    """One finished run: its coordinates in the campaign's matrix, its meta and metrics."""
    run_id: str
    profile: str
    size_bytes: Optional[int]          # None for workloads without object sizes
    variant: str
    rep: int
    sweep: dict[str, Any]              # {parameter: value} of a swept workload parameter, or {}
    rtt_s: float                       # the profile's configured base RTT
    rate_bps: float                    # the profile's configured downstream rate
    mtu: int
    meta: dict[str, Any] = field(repr=False)
    metrics: dict[str, Any] = field(repr=False)

    @property
    def sweep_value(self) -> Optional[float]:
        return next(iter(self.sweep.values()), None) if self.sweep else None

    @property
    def cell(self) -> tuple[str, Optional[int], Optional[float], str]:
        """(profile, size, sweep value, variant): the summary's grouping of runs."""
        return self.profile, self.size_bytes, self.sweep_value, self.variant


def record_of(meta: dict[str, Any], metrics: dict[str, Any], run_dir: Path) -> RunRecord:
    """Join a run's meta and metrics; a missing key is a user-facing error."""
    try:
        params = meta["profile_params"]
        size = meta.get("size_bytes")
        return RunRecord(
            run_id=str(meta["run_id"]), profile=str(meta["profile"]),
            size_bytes=int(size) if size is not None else None, variant=str(meta["variant"]),
            rep=int(meta["rep"]), sweep=dict(meta.get("sweep") or {}),
            rtt_s=float(params["rtt_ms"]) / 1000.0, rate_bps=float(params["down_mbps"]) * 1e6,
            mtu=int(params.get("mtu") or 1500), meta=meta, metrics=metrics)
    except (KeyError, TypeError, ValueError) as err:
        raise UserError(f"run {run_dir} has an incomplete meta.json/metrics.json "
                        f"({type(err).__name__}: {err}); re-run it or delete the directory") from err


class Campaign:
    """A campaign directory, for writing runs into it and reading them back."""

    def __init__(self, path: Path, record: dict[str, Any]):
        # Absolute: the runs' files are handed to applications in the emulated hosts (a
        # web server's document root), which do not share this process's working directory.
        self.path = Path(path).absolute()
        self.record = record

    # -- opening -----------------------------------------------------------------------
    @classmethod
    def open(cls, path: Path | str) -> "Campaign":
        """An existing campaign (its campaign.json upgraded to today's format)."""
        root = Path(path)
        file = root / schema.CAMPAIGN_FILE
        if not file.is_file():
            raise UserError(f"{root} is not a campaign directory (no {schema.CAMPAIGN_FILE}); "
                            "pass campaigns/<scenario>/<campaign>")
        return cls(root, schema.upgrade_campaign(read_json(file), file))

    @classmethod
    def create_or_resume(cls, path: Path, record: dict[str, Any], identity: str = "scenario_hash") -> "Campaign":
        """Create the directory with `record`, or resume it if it holds the same campaign
        (the same `identity` value); anything else there is refused, not overwritten."""
        path = Path(path)
        existing = read_json_or_none(path / schema.CAMPAIGN_FILE)
        if existing is not None:
            if existing.get(identity) != record.get(identity):
                raise UserError(f"{path} holds a campaign of a different scenario or options "
                                f"({identity} {existing.get(identity)} ≠ {record.get(identity)}); "
                                "choose another --out")
            return cls.open(path)
        if path.exists() and any(path.iterdir()):
            raise UserError(f"{path} exists and is not a startlab campaign; choose another --out")
        path.mkdir(parents=True, exist_ok=True)
        write_json(path / schema.CAMPAIGN_FILE, record)
        return cls(path, record)

    # -- writing runs --------------------------------------------------------------------
    def run_dir(self, run_id: str) -> Path:
        return self.path / run_id

    def is_done(self, run_id: str) -> bool:
        meta = read_json_or_none(self.run_dir(run_id) / schema.META_FILE)
        return bool(meta) and meta.get("status") == schema.DONE

    def clear_partials(self) -> None:
        """Remove what interrupted runs left: they never count and are run again."""
        for stale in self.path.glob(f"*{schema.PARTIAL_SUFFIX}"):
            shutil.rmtree(stale)

    def start_run(self, run_id: str) -> Path:
        """A fresh `<run>.partial/` to write a run into (older attempts removed)."""
        partial = self.path / f"{run_id}{schema.PARTIAL_SUFFIX}"
        for stale in (partial, self.run_dir(run_id), self.path / f"{run_id}{schema.FAILED_SUFFIX}"):
            if stale.exists():
                shutil.rmtree(stale)
        partial.mkdir(parents=True)
        return partial

    def finish_run(self, run_id: str) -> Path:
        """Rename the complete `<run>.partial/` into place: from now on the run counts."""
        final = self.run_dir(run_id)
        os.rename(self.path / f"{run_id}{schema.PARTIAL_SUFFIX}", final)
        return final

    def fail_run(self, run_id: str, error: str) -> Path:
        """Keep what a failed run wrote as `<run>.failed/` with its error, for inspection."""
        partial = self.path / f"{run_id}{schema.PARTIAL_SUFFIX}"
        failed = self.path / f"{run_id}{schema.FAILED_SUFFIX}"
        if failed.exists():
            shutil.rmtree(failed)
        if partial.exists():
            os.rename(partial, failed)
        failed.mkdir(exist_ok=True)
        write_atomically(failed / schema.ERROR_FILE, error.rstrip() + "\n")
        return failed

    def write_meta(self, run_dir: Path, meta: dict[str, Any]) -> None:
        write_json(Path(run_dir) / schema.META_FILE, meta)

    def write_metrics(self, run_dir: Path, metrics: dict[str, Any]) -> None:
        write_json(Path(run_dir) / schema.METRICS_FILE, {"format": schema.FORMAT, **metrics})

    def write_network(self, name: str, figures: dict[str, Any]) -> None:
        write_json(self.path / schema.NETWORKS_DIR / name / "network.json", figures)

    # -- reading runs --------------------------------------------------------------------
    def captured_runs(self) -> Iterator[tuple[Path, dict[str, Any]]]:
        """(run directory, upgraded meta) of every run whose traffic completed, analysed or
        not; partial and failed runs are not among them."""
        for run_dir in sorted(p for p in self.path.iterdir() if p.is_dir()):
            if run_dir.name.endswith((schema.PARTIAL_SUFFIX, schema.FAILED_SUFFIX)):
                continue
            file = run_dir / schema.META_FILE
            if not file.is_file():
                continue                     # plots/, networks/ and the like
            meta = schema.upgrade_meta(read_json(file), file)
            if meta.get("status") in (schema.DONE, schema.CAPTURED):
                yield run_dir, meta

    def records(self) -> list[RunRecord]:
        """The finished (analysed) runs. Runs interrupted before their metrics were written
        do not count."""
        out = []
        for run_dir, meta in self.captured_runs():
            metrics_file = run_dir / schema.METRICS_FILE
            if meta.get("status") != schema.DONE or not metrics_file.is_file():
                continue
            metrics = schema.upgrade_metrics(read_json(metrics_file), metrics_file)
            out.append(record_of(meta, metrics, run_dir))
        return out

    def failed_runs(self) -> list[tuple[str, str]]:
        """(run id, first line of its error) of every failed run."""
        out = []
        for failed in sorted(self.path.glob(f"*{schema.FAILED_SUFFIX}")):
            text = (failed / schema.ERROR_FILE).read_text() if (failed / schema.ERROR_FILE).is_file() else ""
            out.append((failed.name[:-len(schema.FAILED_SUFFIX)], text.strip().splitlines()[0] if text.strip() else ""))
        return out


def load_campaign(path: Path | str) -> tuple[dict[str, Any], list[RunRecord]]:
    """(campaign record, finished runs) of a campaign directory."""
    campaign = Campaign.open(path)
    return campaign.record, campaign.records()
