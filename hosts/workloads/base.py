"""The one interface every workload implements: the traffic of a run, as a plugin.

A workload declares its parameters (with defaults and ranges, validated by the scenario
parser with file, line and field), the end hosts it needs, and `run`, which drives the
applications of one run inside a RunSession (hosts/session.py). The session owns
everything around it — host roles, variant install and removal, servers, captures, the
socket watch, counters and teardown — so a workload module holds only its traffic.
Its analysis lives in analysis/workloads/<name>.py; each package's registry() finds them
by the module's WORKLOAD / ANALYSIS object, under the workload's name.
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from config.params import Param


class WorkloadError(RuntimeError):
    """A run whose traffic did not happen as declared: the run fails, the campaign goes on."""


SEED_STRIDE = 1000                   # seeds of successive repetitions of a seeded workload


def repetition_seed(seed: int, rep: int) -> int:
    """The seed of repetition `rep` (1-based): every repetition draws anew, while two
    variants at one repetition draw the same (their difference is paired)."""
    return seed + SEED_STRIDE * (rep - 1)


def read_report(path: Path, what: str) -> dict:
    """An application's JSON report; a missing or broken one fails the run."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise WorkloadError(f"{path.name}: no report from the {what} ({exc})") from None


@dataclass(frozen=True)
class HostNeeds:
    """How many client/server pairs the dumbbell needs for a workload, and optionally a base
    RTT per (client index, server index) pair (1-based; pairs not listed keep the profile's
    RTT). The network applies them in the core, never on an end host."""
    pairs: int = 2
    rtts_ms: Optional[dict[tuple[int, int], float]] = None


@dataclass
class WorkloadResult:
    """What a run produced, for its meta.json: `spec` is what the workload's analysis needs
    to find its flows in the captures (ports, sizes); `app` what the applications
    reported; `extra` further figures the workload measured (counters, link use)."""
    spec: dict[str, Any]
    app: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


class Workload(ABC):
    """One kind of traffic. Stateless: a run's state lives in its session."""

    name: str = ""
    summary: str = ""
    params: dict[str, Param] = {}
    sized: bool = True               # runs take an object size from the scenario's `sizes`
    mixes: bool = False              # can give a variant's `mix` share of its senders, the rest `mix.other`
    reads_ecn: bool = False          # its analysis reads each flow's ECN handshake and CE marks from the wire

    def hosts(self, params: dict) -> HostNeeds:
        """End hosts this workload needs with these parameters."""
        return HostNeeds()

    def check(self, params: dict) -> Optional[tuple[str, str]]:
        """A problem across parameters as (field, message), None if they fit together."""
        return None

    def check_variant(self, params: dict, variant, param: Optional[str] = None) -> Optional[str]:
        """What is wrong with running `variant` (a hosts.variants.Variant) in this workload with
        these parameters — as a variant under test, or as the value of the workload parameter
        `param` — None if nothing. The scenario parser asks before any run starts."""
        return None

    def traffic_s(self, timings: dict[str, float]) -> float:
        """Seconds of a run's timings that were traffic (the rest is overhead)."""
        return sum(v for k, v in timings.items() if k.startswith("traffic_"))

    @abstractmethod
    def run(self, session, params: dict, size_bytes: Optional[int]) -> WorkloadResult:
        """Run the traffic of one run in `session` (a hosts.session.RunSession)."""
