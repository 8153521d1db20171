"""Did a run do what it declared? Checks of its flows and flags of its emulator.

Flows: each flow a workload declared carries what its sender's variant claims (congestion
control, initial window), what the kernel showed its sockets running (the session's
socket watch) and, from the captures, its first flight. A run whose flows differ from
their declaration fails: a result is only worth its setup.

Emulator: the delay element's own figures over the run (drops, lateness). A run is
flagged, not failed, when the element dropped anything or released frames more than
1 ms late at the 99th percentile: the summary counts such runs per cell.
"""
from __future__ import annotations

import re
from typing import Any

LATE_P99_US = 1000.0
# startlab's BPF congestion controls carry their instance's prefix: stl3f_blitz → blitz.
_INSTANCE_PREFIX = re.compile(r"^stl[0-9a-f]{2}_")


def cc_kind(name: str) -> str:
    return _INSTANCE_PREFIX.sub("", name)


def flow_checks(meta: dict[str, Any], metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """One check per declared flow: congestion control (kernel) and first flight (wire)."""
    out = []
    measured = metrics.get("flows") or {}
    for flow in meta.get("flows") or []:
        name = flow["name"]
        observed = [cc_kind(c) for c in flow.get("observed_cc") or []]
        declared = list(flow.get("declared_cc") or [])
        check: dict[str, Any] = {"flow": name, "declared_cc": declared, "observed_cc": observed,
                                 "cc_ok": bool(observed) and set(observed) <= set(declared)}
        got = measured.get(name) or {}
        # One connection's first flight, or each connection's where a flow is many (web users).
        flights = got.get("first_flights") or ([got["first_flight"]] if got.get("first_flight") else [])
        iw = flow.get("declared_iw")
        check["first_flight_segments"] = flights[0]["segments"] if len(flights) == 1 else None
        if iw is not None and flights:
            wrong = [f for f in flights if f["segments"] != min(int(iw), int(f["total_segments"]))]
            check.update(connections=len(flights), expected_segments=min(int(iw), int(flights[0]["total_segments"])),
                         iw_ok=not wrong, iw_wrong=len(wrong))
            if wrong:
                check["first_flight_segments"] = wrong[0]["segments"]
                check["expected_segments"] = min(int(iw), int(wrong[0]["total_segments"]))
        out.append(check)
    return out


def problems(checks: list[dict[str, Any]]) -> list[str]:
    """What differs from the declaration, one sentence each."""
    out = []
    for c in checks:
        if not c["cc_ok"]:
            seen = ", ".join(c["observed_cc"]) or "no connection seen"
            out.append(f"flow {c['flow']}: congestion control {seen} in the kernel, declared "
                       f"{' or '.join(c['declared_cc'])}")
        if c.get("iw_ok") is False:
            many = f" ({c['iw_wrong']} of {c['connections']} connections)" if c.get("connections", 1) > 1 else ""
            out.append(f"flow {c['flow']}: first flight {c['first_flight_segments']} segments on the wire, "
                       f"declared initial window gives {c['expected_segments']}{many}")
    return out


def failed_checks(metrics: dict[str, Any]) -> bool:
    """Did the run's recorded flow checks fail?"""
    return bool(problems(metrics.get("flow_checks") or []))


def emulator_flags(meta: dict[str, Any]) -> list[str]:
    """Why a run's emulator figures are doubtful (empty: they are not)."""
    out = []
    for element in meta.get("emulator") or []:
        where = element.get("core", "delay element")
        if element.get("drops"):
            out.append(f"{where} dropped {element['drops']} frames")
        p99 = (element.get("lateness_us") or {}).get("p99")
        if p99 is not None and p99 > LATE_P99_US:
            out.append(f"{where} released frames {p99 / 1000:.2f} ms late at p99")
    return out
