"""Did a run do what it declared? Checks of its flows and flags of its emulator.

Flows: each flow a workload declared carries what its sender's variant claims (congestion
control, initial window), what the kernel showed its sockets running (the session's
socket watch) and, from the captures, its first flight. A run whose flows differ from
their declaration fails: a result is only worth its setup.

A third-party QUIC stack's flow (observed_by "stack") reports no controller: the one its
server was started with is recorded, and its first flight is checked against the first
window of its server's qlog (or its sources', where it writes none) as below.

A QUIC flow (observed_by "endpoint") cannot be seen by the kernel: its congestion control
is the one its server reports per connection (Blitzstart only where the client's hint
arrived and was applied), and its analysis adds what the endpoints and the wire both
know: the first flight on the wire against the start window the server reports
(`window_ok`, within `tolerance_segments`), the hint the server received against the one
the client sent (`hint_ok`), and the datagrams and bytes the server counted against
those the capture before the queue saw (`sent_ok`: exact, one datagram per packet).

Emulator: the delay element's own figures over the run (drops, lateness) and the host
monitor's (timer wake-ups, steal). A run is flagged, not failed, when the element dropped
anything, released frames more than 1 ms late at the 99th percentile, or the host was
unfit while it ran: the summary counts such runs per cell.
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
    host = meta.get("host_check") or {}
    host_late = bool((host.get("flags_by_kind") or {}).get("delay"))
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
        check["observed_by"] = flow.get("observed_by", "kernel")
        # A flight a loss disturbed (a retransmitted handshake, part of it dropped at the queue)
        # says nothing about the initial window: counted, not checked.
        disturbed = [f for f in flights if f.get("disturbed")]
        if disturbed:
            check["iw_unchecked"] = len(disturbed)
        flights = [f for f in flights if not f.get("disturbed")]
        # A flight short of its window on a host that was late while the run went (its delay
        # flags) may be the sender's pacer woken late, not the window: flagged, not failed.
        # Never a long one, and never on a punctual host: there a short flight fails.
        if host_late:
            late = [f for f in flights if _short_flight(f, iw, got.get("reported_segments"))]
            if late:
                check["flight_short_on_late_host"] = len(late)
                flights = [f for f in flights if f not in late]
        if iw is not None and flights:
            wrong = [f for f in flights if not _flight_fits(f, int(iw))]
            check.update(connections=len(flights), expected_segments=min(int(iw), int(flights[0]["total_segments"])),
                         iw_ok=not wrong, iw_wrong=len(wrong))
            if wrong:
                check["first_flight_segments"] = wrong[0]["segments"]
                check["expected_segments"] = min(int(iw), int(wrong[0]["total_segments"]))
        if flow.get("declared_ecn"):
            # The end hosts asked for ECN: the flow's handshake on the wire must have set it up
            # (a workload whose analysis does not read it cannot pass this check).
            check.update(declared_ecn=True, ecn_ok=got.get("ecn") is True)
        check.update(endpoint_checks(got, late_ok=bool(check.get("flight_short_on_late_host"))))
        if check["observed_by"] in ("endpoint", "stack") and "window_ok" not in check \
                and "window_unchecked" not in check:
            # Never a silent pass: an endpoint flow's start is checked on the wire or fails.
            check.update(reported_segments=None, window_ok=False)
        out.append(check)
    return out


def _flight_fits(flight: dict[str, Any], window: int) -> bool:
    """Is a first flight the `window` (in segments) it should be, or the whole flow if that
    is smaller, within the flight's own counting tolerance (0 for TCP's exact segments)?
    Above it, also what acknowledgements of datagrams before the flight's data may have let
    out (a QUIC flight's `released_segments`)."""
    expected = min(window, int(flight["total_segments"]))
    tolerance = int(flight.get("tolerance_segments", 0))
    over = int(flight["segments"]) - expected
    return -tolerance <= over <= tolerance + int(flight.get("released_segments", 0))


def _short_flight(flight: dict[str, Any], iw: Any, reported: Any) -> bool:
    """Is the flight shorter than both its declared and its reported window allow?"""
    windows = [int(w) for w in (iw, reported) if w is not None]
    if not windows:
        return False
    expected = min(min(windows), int(flight["total_segments"]))
    return int(flight["segments"]) < expected - int(flight.get("tolerance_segments", 0))


def endpoint_checks(got: dict[str, Any], late_ok: bool = False) -> dict[str, Any]:
    """The checks of what a user-space endpoint reported against the wire, where the
    flow's analysis recorded both (QUIC); an empty dict otherwise. `late_ok`: the flight
    was short on a late host (flagged instead, see flow_checks): its window goes unchecked."""
    out: dict[str, Any] = {}
    flight = got.get("first_flight")
    if flight and flight.get("disturbed") and got.get("reported_segments") is not None:
        out.update(reported_segments=got["reported_segments"], window_unchecked=flight["disturbed"])
    elif late_ok and got.get("reported_segments") is not None:
        out.update(reported_segments=got["reported_segments"], window_unchecked="short flight on a late host")
    elif got.get("reported_segments") is not None and flight:
        window = int(got["reported_segments"])
        out.update(reported_segments=window, window_ok=_flight_fits(flight, window))
        sent = got.get("reported_flight_segments")
        if sent is not None:
            # The first acknowledgement ended the flight before its window was out: the wire
            # shows what the server says it sent by then, and that is no more than the window.
            tolerance = int(flight.get("tolerance_segments", 0))
            out.update(reported_flight_segments=int(sent), flight_ended_by=flight.get("ended_by"),
                       window_ok=_flight_fits(flight, int(sent)) and int(sent) <= window + tolerance)
    if got.get("hint_sent_kbps") is not None or got.get("hint_received_kbps") is not None:
        out.update(hint_sent_kbps=got.get("hint_sent_kbps"), hint_received_kbps=got.get("hint_received_kbps"),
                   hint_ok=got.get("hint_sent_kbps") == got.get("hint_received_kbps"))
    if got.get("sent_datagrams_endpoint") is not None:
        keys = ("sent_datagrams_wire", "sent_datagrams_endpoint", "sent_bytes_wire", "sent_bytes_endpoint")
        out.update({k: got.get(k) for k in keys})
        out["sent_ok"] = (got.get("sent_datagrams_wire") == got["sent_datagrams_endpoint"]
                          and got.get("sent_bytes_wire") == got.get("sent_bytes_endpoint"))
    return out


def problems(checks: list[dict[str, Any]]) -> list[str]:
    """What differs from the declaration, one sentence each."""
    out = []
    for c in checks:
        if not c["cc_ok"]:
            seen = ", ".join(c["observed_cc"]) or "no connection seen"
            where = "as its endpoint reports" if c.get("observed_by") == "endpoint" else "in the kernel"
            out.append(f"flow {c['flow']}: congestion control {seen} {where}, declared "
                       f"{' or '.join(c['declared_cc'])}")
        if c.get("iw_ok") is False:
            many = f" ({c['iw_wrong']} of {c['connections']} connections)" if c.get("connections", 1) > 1 else ""
            out.append(f"flow {c['flow']}: first flight {c['first_flight_segments']} segments on the wire, "
                       f"declared initial window gives {c['expected_segments']}{many}")
        if c.get("window_ok") is False and c.get("reported_segments") is None:
            out.append(f"flow {c['flow']}: no start window reported by its endpoint or no first flight on the "
                       "wire: its start cannot be checked")
        elif c.get("window_ok") is False and c.get("reported_flight_segments") is not None:
            out.append(f"flow {c['flow']}: first flight {c['first_flight_segments']} datagrams on the wire until "
                       f"the server's first acknowledgement ({c['flight_ended_by']}), the server reports "
                       f"{c['reported_flight_segments']} sent by then of a start window of {c['reported_segments']}")
        elif c.get("window_ok") is False:
            out.append(f"flow {c['flow']}: first flight {c['first_flight_segments']} datagrams on the wire, the "
                       f"server reports a start window of {c['reported_segments']}")
        if c.get("ecn_ok") is False:
            out.append(f"flow {c['flow']}: the end hosts ask for ECN, the handshake on the wire did not set it up")
        if c.get("hint_ok") is False:
            out.append(f"flow {c['flow']}: the client sent a hint of {c['hint_sent_kbps']} kbit/s, the server "
                       f"received {c['hint_received_kbps']}")
        if c.get("sent_ok") is False:
            out.append(f"flow {c['flow']}: the server counted {c['sent_datagrams_endpoint']} datagrams "
                       f"({c['sent_bytes_endpoint']} bytes) sent, the capture before the queue saw "
                       f"{c['sent_datagrams_wire']} ({c['sent_bytes_wire']} bytes)")
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
    # The host monitor's verdict over the run (steal, late timer wake-ups), recorded by the
    # run itself; the delay element's lateness above already covers its own share.
    for flag in (meta.get("host_check") or {}).get("flags") or []:
        if not flag.startswith("delay lateness"):
            out.append(flag)
    # The path's own check before the runs (per-pair base RTTs on an unfit host, run anyway).
    out += (meta.get("path") or {}).get("flags") or []
    return out
