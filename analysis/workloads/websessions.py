"""Analysis of the web sessions workload (Quick-Start §4–6, Figs. 4, 5, 6 and 8).

Per direction, from the captures around its bottleneck queue (forward: bneck-in/out, the
queue next to the servers; reverse: bneck-up-in/out): the data segments of that
direction's flows that reached the queue and those that never left it (matched per
transmission), per 1-second interval and per run — the aggregate drop rate — and the wire
bits that left it, over rate × the run's duration — the utilisation. Per connection, found
in the capture next to its requester by the client's address and port (the capture and the
client's log match one to one, or the analysis fails): duration from its SYN to its last
new byte (the SYN exchange included, as the paper's Fig. 6), size, segments lost; for the
forward sessions also its Quick-Start exchange (requested, approved by RFC 4782's sender
check, from the small handshake captures) and, if approved, its Quick-Start phase — data
sent before the first ACK of data came back — and whether the queue dropped any of it (a
Quick-Start failure, as the paper counts them); the bytes of all Quick-Start phases over
the run's duration are the "QS bandwidth" of Fig. 4.

The paper's figures are about the forward traffic ("the traffic from the web servers
connected to R1"); the reverse direction is recorded beside it. With a half-Quick-Start run
(`variant_fraction`), drop rates are also kept per group of servers ("under" the variant,
"other").
"""
from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any, Optional

import numpy as np
from matplotlib.figure import Figure

from analysis import flows, plots, stats, summary
from analysis.packets import Capture, load
from analysis.workloads.base import (Compared, Plot, Row, WorkloadAnalysis, compare_metric,
                                     describe_metric)
from analysis.workloads.web_handshakes import Handshake, read_client_side, read_server_side
from machine.errors import UserError
from results.campaign import RunRecord
from results.schema import CAPTURE_FILES, UPSTREAM_CAPTURE_FILES
from wire.tcpip import ETH_HEADER, TCPIP_HEADERS, run_mss

INTERVAL_S = 1.0
POINTS = {"down": (CAPTURE_FILES["client"], CAPTURE_FILES["bneck-in"], CAPTURE_FILES["bneck-out"]),
          "up": (UPSTREAM_CAPTURE_FILES["server"], UPSTREAM_CAPTURE_FILES["bneck-up-in"],
                 UPSTREAM_CAPTURE_FILES["bneck-up-out"])}


def _ip(x: str) -> int:
    return int(ipaddress.IPv4Address(x))


def _handshake_of(shakes: dict[tuple[int, int], list[Handshake]], ip: int, port: int, syn: float) -> Optional[Handshake]:
    """The first handshake of ip:port whose SYN-ACK arrived after the connection's SYN."""
    for h in shakes.get((ip, port), []):
        if h.arrived_ts >= syn:
            return h
    return None


def last_new_byte_times(pk, n_conns: int) -> np.ndarray:
    """Per connection: arrival of the last packet of the responder's direction with new bytes."""
    m = (pk["dir"] == 1) & (pk["newbytes"] > 0)
    out = np.full(n_conns, np.nan)
    np.fmax.at(out, pk["conn"][m], pk["ts"][m])
    return out


def direction_metrics(run_dir: Path, d: str, spec: dict, mss: int) -> dict[str, Any]:
    near, b_in, b_out = (load(Path(run_dir) / f) for f in POINTS[d])
    port = int(spec["server_port"])
    pairs = {k: v for k, v in spec["pairs"].items() if (v["group"] == "reverse") == (d == "up")}
    senders = {_ip(v["sender_ip"]): v["group"] for v in pairs.values()}
    t0, dur = float(spec["start_at"]), float(spec["duration_s"])
    lo, hi = spec.get("ftp_data_ports") or (0, -1)

    def data_of(cap: Capture) -> np.ndarray:
        """Data segments the direction's servers sent: HTTP replies and FTP data."""
        pk = cap.packets
        served = (pk["sport"] == port) | ((pk["sport"] >= lo) & (pk["sport"] <= hi))
        return served & (pk["payload"] > 0) & np.isin(pk["src"], list(senders))
    m_in, m_out = data_of(b_in), data_of(b_out)
    lost = flows.transmissions_lost(b_in.packets, m_in, b_out.packets, m_out)
    pin, pout = b_in.packets, b_out.packets
    edges = t0 + np.arange(0.0, dur + INTERVAL_S, INTERVAL_S)
    arrived_iv = np.histogram(pin["ts"][m_in], edges)[0]
    lost_iv = np.histogram(pin["ts"][m_in][lost], edges)[0]
    wire = (pout["payload"][m_out] + TCPIP_HEADERS + ETH_HEADER) * 8
    out_iv = np.histogram(pout["ts"][m_out], edges, weights=wire)[0]
    rate = float(spec["rate_bps"][d])
    groups = {}
    for g in sorted(set(senders.values())):
        gm = np.isin(pin["src"][m_in], [ip for ip, x in senders.items() if x == g])
        groups[g] = {"arrived_pkts": int(gm.sum()), "lost_pkts": int((lost & gm).sum()),
                     "drop_rate": float((lost & gm).sum() / gm.sum()) if gm.any() else None}
    # Per connection at bneck-in: segments lost, the first flight (= a Quick-Start phase),
    # whether the queue dropped any of it, and whether a loss disturbed it.
    n_in = len(b_in.conns)
    conn_in = pin["conn"][m_in]
    lost_by_conn = np.bincount(conn_in[lost], minlength=n_in)
    t_ack = flows.first_ack_times(pin, n_in)
    in_flight = pin["ts"][m_in] < t_ack[conn_in]
    new = pin["retx"][m_in] == 0
    segs = np.ceil(pin["payload"][m_in] / max(1, mss))
    flight_segs = np.bincount(conn_in[in_flight & new], weights=segs[in_flight & new], minlength=n_in).astype(int)
    flight_bytes = np.bincount(conn_in[in_flight & new], weights=pin["payload"][m_in][in_flight & new], minlength=n_in)
    flight_lost = np.bincount(conn_in[in_flight & lost], minlength=n_in)
    total_segs = np.bincount(conn_in[new], weights=segs[new], minlength=n_in).astype(int)
    disturbed = flows.flight_disturbances(pin, m_in, lost, n_in)
    last = last_new_byte_times(near.packets, len(near.conns))
    near_ix, in_ix = flows.ConnIndex(near.conns), flows.ConnIndex(b_in.conns)
    shakes: dict[tuple[int, int], list[Handshake]] = {}
    if d == "down":
        hs = spec["handshake_captures"]
        _, by_isn = read_client_side(Path(run_dir) / hs["client"], port)
        read_server_side(Path(run_dir) / hs["bneck-in"], port, by_isn)
        for h in sorted(by_isn.values(), key=lambda h: h.arrived_ts):
            shakes.setdefault((h.client, h.client_port), []).append(h)
    conns, flights, qs_bytes = [], [], 0
    for f in spec["fetches"]:
        if f["direction"] != d or f["cut"]:
            continue
        req, lport = _ip(spec["pairs"][str(f["pair"])]["requester_ip"]), int(f["local_port"])
        c = near_ix.find(req, lport, float(f["started"]))
        if c is None:
            raise UserError(f"{run_dir}: fetch {f} is not in {POINTS[d][0]}")
        syn = float(near.conns["syn_ts"][c])
        got = int(near.conns["unique_bytes"][c, 1]) - int(f.get("head_bytes", 0))    # HTTP: less the headers
        if got != int(f["size_bytes"]):
            raise UserError(f"{run_dir}: a {f['size_bytes']}-byte object delivered {got} bytes in the capture ({f})")
        i = in_ix.find(req, lport, syn)
        row = {"pair": f["pair"], "group": f["group"], "kind": f.get("kind", "http"), "size_bytes": got,
               "duration_s": float(last[c]) - syn, "lost_pkts": int(lost_by_conn[i]) if i is not None else None}
        if i is not None:
            flight = {"segments": int(flight_segs[i]), "bytes": int(flight_bytes[i]),
                      "total_segments": int(total_segs[i])}
            # A flight a loss disturbed says nothing about the initial window (flows.first_flight_disturbed).
            why = flows.DISTURBANCES[disturbed[i]]
            flights.append((f["group"], {**flight, "disturbed": why} if why else flight))
        # Quick-Start is read for the HTTP connections (the handshake captures hold port 80 only).
        h = _handshake_of(shakes, req, lport, syn) if d == "down" and row["kind"] == "http" else None
        if h is not None:
            qs = h.figures()
            row.update(qs_requested=qs["requested"], qs_approved=qs["approved"])
            if qs["approved"] and i is not None:
                row.update(qs_pkts=int(flight_segs[i]), qs_failure=bool(flight_lost[i] > 0))
                qs_bytes += int(flight_bytes[i])
        conns.append(row)
    arrived, dropped = int(m_in.sum()), int(lost.sum())
    req_ = [c for c in conns if c.get("qs_requested")]
    appr = [c for c in req_ if c.get("qs_approved")]
    delivered = sum(c["size_bytes"] for c in conns)
    return {"connections": conns, "count": len(conns),
            "cut": sum(1 for f in spec["fetches"] if f["direction"] == d and f["cut"]),
            "arrived_pkts": arrived, "lost_pkts": dropped, "drop_rate": dropped / arrived if arrived else 0.0,
            "utilisation": float(out_iv.sum() / (rate * dur)),
            "intervals": {"utilisation": (out_iv / (rate * INTERVAL_S)).round(4).tolist(),
                          "drop_rate": np.where(arrived_iv > 0, lost_iv / np.maximum(arrived_iv, 1), 0).round(5).tolist()},
            "groups": groups,
            "duration_mean_s": stats.mean([c["duration_s"] for c in conns]) if conns else None,
            "qs_requested": len(req_), "qs_approved": len(appr),
            "qs_approved_fraction": len(appr) / len(req_) if req_ else None,
            "qs_failures": sum(1 for c in appr if c.get("qs_failure")),
            "qs_failure_fraction": sum(1 for c in appr if c.get("qs_failure")) / len(appr) if appr else None,
            "qs_bandwidth_bps": qs_bytes * 8 / dur,
            # Figs. 10-11: the share of the delivered bytes sent under an approved rate
            "qs_bytes_fraction": qs_bytes / delivered if delivered else None,
            "first_flights": flights}


def run_metrics(run_dir: Path, spec: dict, mss: int) -> dict[str, Any]:
    dirs = sorted({f["direction"] for f in spec["fetches"]})
    per = {d: direction_metrics(run_dir, d, spec, mss) for d in dirs}
    fwd = per["down"]
    return {"directions": {d: {k: v for k, v in m.items() if k not in ("first_flights",)} for d, m in per.items()},
            "utilisation": fwd["utilisation"], "drop_rate": fwd["drop_rate"],
            "duration_mean_s": fwd["duration_mean_s"], "qs_approved_fraction": fwd["qs_approved_fraction"],
            "qs_failure_fraction": fwd["qs_failure_fraction"], "qs_bandwidth_bps": fwd["qs_bandwidth_bps"],
            "qs_bytes_fraction": fwd["qs_bytes_fraction"],
            "flows": {g: {"first_flights": [fl for x, fl in flights]}
                      for g, flights in _by_group([f for m in per.values() for f in m["first_flights"]]).items()}}


def _by_group(flights: list[tuple[str, dict]]) -> dict[str, list[tuple[str, dict]]]:
    out: dict[str, list[tuple[str, dict]]] = {}
    for g, fl in flights:
        out.setdefault(g, []).append((g, fl))
    return out


UTIL = Compared(column="utilisation", name="utilisation", label="utilisation", unit="",
                get=lambda r: r.metrics["utilisation"], higher_is_better=True)
DROPS = Compared(column="drop_rate", name="drop_rate", label="drop rate", unit="", get=lambda r: r.metrics["drop_rate"])
COLUMNS = [*(m.col(k) for m in (UTIL, DROPS) for k in ("mean", "median", "ci_low", "ci_high")),
           "duration_mean_s", "connections_mean", "cut_mean", "qs_approved_fraction_mean",
           "qs_failure_fraction_mean", "qs_bandwidth_mean_bps", "qs_bytes_fraction_mean", "drop_rate_under_mean",
           "drop_rate_other_mean",
           "utilisation_up_mean", "drop_rate_up_mean",
           *(m.col(k) for m in (UTIL, DROPS) for k in ("diff", "diff_ci_low", "diff_ci_high", "ratio", "significant")),
           *(f"{m.column}_{k}" for m in (UTIL, DROPS) for k in ("paired_diff", "paired_ci_low", "paired_ci_high")),
           "anova_utilisation_p", "rtt_s", "rate_bps", "sweep_param", "sweep_value"]


def _paired(m: Compared, runs: list[RunRecord], base: list[RunRecord]) -> Row:
    """The difference against the baseline paired by repetition: every variant replays the
    same sessions at one repetition (plan() is seeded by it), so the pairs differ only by
    the scheme."""
    d = stats.paired_difference({r.rep: m.get(r) for r in runs}, {r.rep: m.get(r) for r in base})
    ci = d.ci if d else None
    return {f"{m.column}_paired_diff": d.diff if d else None, f"{m.column}_paired_ci_low": ci[0] if ci else None,
            f"{m.column}_paired_ci_high": ci[1] if ci else None}


def _paired_text(row: Row) -> str:
    """'+0.1 [−0.3, +0.5] pt, +0.50 [−1.2, +2.2] pt' (percentage points), '' for the baseline."""
    out = []
    for m in (UTIL, DROPS):
        d, lo, hi = (row.get(f"{m.column}_{k}") for k in ("paired_diff", "paired_ci_low", "paired_ci_high"))
        if d is None:
            return ""
        out.append(f"{100 * d:+.2f}" + (f" [{100 * lo:+.2f}, {100 * hi:+.2f}]" if lo is not None else "") + " pt")
    return ", ".join(out)


def _mean(xs: list) -> Optional[float]:
    xs = [x for x in xs if x is not None]
    return stats.mean(xs) if xs else None


class WebSessionsAnalysis(WorkloadAnalysis):
    name = "websessions"
    columns = COLUMNS
    compared = (UTIL, DROPS)
    display_headers = ["profile", "variant", "runs", "load", "utilisation", "drop rate", "QS approved", "QS failures",
                       "QS bandwidth", "bytes under QS", "connections", "duration mean", "Δ drop rate vs baseline",
                       "paired Δ utilisation, Δ drop rate (95 %)"]

    def run_metrics(self, run_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
        return run_metrics(run_dir, meta["spec"], run_mss(meta))

    def describe(self, runs: list[RunRecord]) -> Row:
        fwd = [r.metrics["directions"]["down"] for r in runs]
        up = [r.metrics["directions"]["up"] for r in runs if "up" in r.metrics["directions"]]
        return {**describe_metric(UTIL, runs), **describe_metric(DROPS, runs),
                "duration_mean_s": _mean([m["duration_mean_s"] for m in fwd]),
                "connections_mean": _mean([m["count"] for m in fwd]), "cut_mean": _mean([m["cut"] for m in fwd]),
                "qs_approved_fraction_mean": _mean([m["qs_approved_fraction"] for m in fwd]),
                "qs_failure_fraction_mean": _mean([m["qs_failure_fraction"] for m in fwd]),
                "qs_bandwidth_mean_bps": _mean([m["qs_bandwidth_bps"] for m in fwd]),
                "qs_bytes_fraction_mean": _mean([m.get("qs_bytes_fraction") for m in fwd]),
                "drop_rate_under_mean": _mean([(m["groups"].get("under") or {}).get("drop_rate") for m in fwd]),
                "drop_rate_other_mean": _mean([(m["groups"].get("other") or {}).get("drop_rate") for m in fwd]),
                "utilisation_up_mean": _mean([m["utilisation"] for m in up]),
                "drop_rate_up_mean": _mean([m["drop_rate"] for m in up])}

    def compare(self, runs: list[RunRecord], base: list[RunRecord]) -> Row:
        return {**compare_metric(UTIL, runs, base), **compare_metric(DROPS, runs, base),
                **_paired(UTIL, runs, base), **_paired(DROPS, runs, base)}

    def display(self, row: Row) -> list[str]:
        from analysis.report import cell_label, change_text

        def pct(x: Optional[float], fmt: str = ".1%") -> str:
            return "–" if x is None else format(x, fmt)
        load = "" if row.get("sweep_value") is None else f"{row['sweep_param']} {row['sweep_value']:g}"
        return [cell_label(row), row["variant"], str(row["runs"]), load, pct(row["utilisation_mean"]),
                pct(row["drop_rate_mean"], ".2%"), pct(row["qs_approved_fraction_mean"]),
                pct(row["qs_failure_fraction_mean"], ".2%"),
                "–" if row["qs_bandwidth_mean_bps"] is None else f"{row['qs_bandwidth_mean_bps'] / 1e3:.0f} kbit/s",
                pct(row.get("qs_bytes_fraction_mean")),
                "–" if row["connections_mean"] is None else f"{row['connections_mean']:.0f}",
                "–" if row["duration_mean_s"] is None else f"{row['duration_mean_s']:.2f} s", change_text(row, DROPS),
                _paired_text(row)]

    def plots(self, out: Path, campaign: dict[str, Any], records: list[RunRecord], rows: list[Row],
              colours: dict[str, str]) -> list[Plot]:
        result = []
        for profile in dict.fromkeys(p for p, _ in summary.ordered_cells(campaign, records)):
            mine = [r for r in records if r.profile == profile]
            stem = plots.file_stem(profile)
            if any(r.sweep_value is not None for r in mine):
                path = out / f"websessions_load_{stem}.png"
                plots.save(_load_figure(profile, mine, colours), path)
                result.append(Plot("websessions_load", profile, None, path,
                                   "Against the swept load (Quick-Start Figs. 4, 5, 8): utilisation, aggregate drop "
                                   "rate, approved fraction of the Quick-Start requests and Quick-Start failures, "
                                   "forward traffic, mean over the runs with its 95 % interval."))
            path = out / f"websessions_perconn_{stem}.png"
            plots.save(_perconn_figure(profile, mine, colours), path)
            result.append(Plot("websessions_perconn", profile, None, path,
                               "Per connection (Quick-Start Fig. 6): duration (SYN included) against size, every "
                               "forward connection of every run, per variant."))
        return result


def _load_figure(profile: str, runs: list[RunRecord], colours: dict[str, str]) -> Figure:
    fig = Figure(figsize=(12, 8), layout="constrained")
    axes = fig.subplots(2, 2).ravel()
    keys = [("utilisation", "link utilisation, QS bandwidth (%)", 100.0), ("drop_rate", "aggregate drop rate (%)", 100.0),
            ("qs_approved_fraction", "QS requests approved, bytes under QS (%)", 100.0),
            ("qs_failure_fraction", "QS failures (% of approved)", 100.0)]
    param = next(iter(runs[0].sweep), "load")
    for v in [v for v in colours if any(r.variant == v for r in runs)]:
        for ax, (key, label, scale) in zip(axes, keys):
            plots.sweep_line(ax, runs, v, colours[v], lambda r, k=key: r.metrics.get(k), scale=scale)
        # Fig. 4's "QS bandwidth": what the packets sent under an approved rate carried, of the link.
        plots.sweep_line(axes[0], runs, v, colours[v], _qs_share, scale=100.0, label=f"{v}: QS bandwidth",
                         linestyle="--")
        # Figs. 10-11: the share of the delivered bytes sent under an approved rate.
        plots.sweep_line(axes[2], runs, v, colours[v], lambda r: r.metrics.get("qs_bytes_fraction"), scale=100.0,
                         label=f"{v}: bytes under QS", linestyle="-.")
        # A mixed variant (Fig. 5's half): the drop rates of its two halves, dashed and dotted.
        for g, style in (("under", "--"), ("other", ":")):
            if any(g in r.metrics["directions"]["down"]["groups"] and "other" in r.metrics["directions"]["down"]["groups"]
                   for r in runs if r.variant == v):
                plots.sweep_line(axes[1], runs, v, colours[v], lambda r, g=g: _group_drop_rate(r, g), scale=100.0,
                                 label=f"{v}: {'its variant' if g == 'under' else 'the other'} half", linestyle=style)
    for ax, (_, label, _) in zip(axes, keys):
        ax.set_xlabel(param)
        ax.set_ylabel(label)
        # Shares: a t interval over a few heavy-tailed runs reaches past 0 and 100 %.
        ax.set_ylim(0, 100 if ax in (axes[0], axes[2]) else None)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(f"{profile}: web sessions under load", fontsize=11)
    return fig


def _qs_share(r: RunRecord) -> Optional[float]:
    """The forward Quick-Start bandwidth as a share of the link; None where nothing requested."""
    down = r.metrics["directions"]["down"]
    return down["qs_bandwidth_bps"] / r.rate_bps if down.get("qs_requested") else None


def _group_drop_rate(r: RunRecord, group: str) -> Optional[float]:
    return (r.metrics["directions"]["down"]["groups"].get(group) or {}).get("drop_rate")


def _perconn_figure(profile: str, runs: list[RunRecord], colours: dict[str, str]) -> Figure:
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.subplots()
    for v in [v for v in colours if any(r.variant == v for r in runs)]:
        pts = [(c["size_bytes"], c["duration_s"]) for r in runs if r.variant == v
               for c in r.metrics["directions"]["down"]["connections"]]
        if pts:
            x, y = np.array(pts).T
            ax.scatter(x, y, s=4, alpha=0.4, color=colours[v], label=v)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("connection size (bytes)")
    ax.set_ylabel("connection duration, SYN included (s)")
    ax.set_title(f"{profile}: per-connection duration", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, markerscale=3)
    return fig


ANALYSIS = WebSessionsAnalysis()
