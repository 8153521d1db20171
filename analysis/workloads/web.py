"""Analysis of the web workload: object download times per model and HTTP mode, connections,
Quick-Start per connection, the bottleneck's utilisation and drop rate (Scharf Figs. 12-14).

Per run (metrics.json), for each model and HTTP mode the run replayed ("combos", keyed
`model.mode`): every page's object download time (web_pages.py: the SYN or document
request to the last byte of the last embedded file, at the clients' uplink) with its
user, page index, bytes and objects; per connection its duration, bytes, calls, first
flight and Quick-Start handshake (requested, approved, rate); SYNs per object and the
most requests in flight on a connection (the HTTP mode's pattern); the bottleneck queue's
utilisation and drop rate over the replay (its counters), the segments lost between the
two captures around it, and retransmissions. `flows.web.first_flights` holds one first
flight per connection for the run's flow check (the first reply bounds what a first
flight may carry).

Per summary cell (profile, users, variant): pages pooled over the cell's runs, per model
and mode the mean download time with its 95 % Student-t interval over pages, and against
the baseline the difference with a 95 % Welch interval over pages. Pages of two variants
at the same repetition are the same pages (the sessions depend on seed and repetition
only), so slow start and Quick-Start are also compared page by page (paired), in the
figures and the Quick-Start table.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Optional

import numpy as np
from scipy import stats as sps

from analysis import flows, stats
from analysis.packets import load
from analysis.workloads import web_plots
from analysis.workloads.base import Compared, Plot, Row, Section, WorkloadAnalysis
from analysis.workloads.web_handshakes import read_client_side, read_server_side
from analysis.workloads.web_pages import (Calls, calls_of, completion_times, conn_table, dropped_between,
                                          first_flights, in_flight, match_conns, pages_of, place_calls,
                                          reply_offsets, server_segment_keys, web_conns)
from machine.errors import UserError
from results.campaign import RunRecord
from results.schema import CAPTURE_FILES
from wire.httperf_log import HTTP_MODES, WEB_MODELS, parse_files
from wire.tcpip import run_mss

COMBOS = [(m, h) for m in WEB_MODELS for h in HTTP_MODES]


def combo_key(model: str, mode: str) -> str:
    return f"{model}.{mode}"


def column_prefix(model: str, mode: str) -> str:
    return "dl_" + f"{model}_{mode}".replace("-", "_")


def _round(xs, digits: int = 6) -> list:
    return [None if x is None or (isinstance(x, float) and math.isnan(x)) else round(float(x), digits) for x in xs]


def _quantiles_ms(xs: np.ndarray) -> dict:
    xs = xs[np.isfinite(xs)]
    if not len(xs):
        return {}
    return {"p50": round(float(np.median(xs)) * 1e3, 3), "p99": round(float(np.percentile(xs, 99)) * 1e3, 3),
            "max": round(float(np.max(np.abs(xs))) * 1e3, 3)}


# --- one run -------------------------------------------------------------------------------------

def run_metrics(run_dir: Path, spec: dict, mss: int) -> dict:
    run_dir = Path(run_dir)
    port = int(spec["server_port"])
    combos = spec["combos"]
    windows = np.array([c["t_start"] for c in combos])
    origin = float(windows.min()) - 1.0
    reports = [(i, h["ip"], parse_files(run_dir / h["log"], run_dir / h["err"]))
               for i, c in enumerate(combos) for h in c["hosts"]]
    calls = calls_of(reports)
    client, b_in, b_out = (load(run_dir / CAPTURE_FILES[k]) for k in ("client", "bneck-in", "bneck-out"))
    requests, shakes = read_client_side(run_dir / spec["handshake_captures"]["client"], port)
    read_server_side(run_dir / spec["handshake_captures"]["bneck-in"], port, shakes)

    cc = web_conns(client, port)
    conn_of, req_ts = place_calls(calls, cc, requests, windows, origin)
    offset, rank = reply_offsets(calls, conn_of)
    reply_end = completion_times(client, cc, conn_of, offset, origin)
    pages = pages_of(calls, conn_of, req_ts, rank, reply_end, cc)
    flight_of_call = in_flight(calls, conn_of, reply_end, origin)
    bc = web_conns(b_in, port)
    to_b = match_conns(cc, bc, origin)
    seg_b, byt_b, rep_b = first_flights(b_in, bc, mss)
    flights = tuple(np.where(to_b >= 0, x[np.maximum(to_b, 0)], 0) for x in (seg_b, byt_b, rep_b))
    conns = conn_table(client, cc, calls, conn_of, flights, shakes)
    lost = dropped_between(server_segment_keys(b_in, port), server_segment_keys(b_out, port), windows)
    retx_b = b_in.conns["retx_pkts"][:, 1]
    conn_retx = np.where(to_b[conns.pos] >= 0, retx_b[bc.index[np.maximum(to_b[conns.pos], 0)]], 0)
    if not pages.complete.any():
        raise UserError(f"{run_dir}: no page was loaded completely")

    out: dict[str, Any] = {"combos": {}}
    for i, c in enumerate(combos):
        out["combos"][c["key"]] = combo_metrics(i, c, calls, conn_of, pages, conns, flight_of_call,
                                                int(lost[i]), int(conn_retx[conns.combo == i].sum()))
    # A flight a loss disturbed says nothing about the initial window (flows.first_flight_disturbed).
    served_in, served_out = ((x.packets["sport"] == port) & (x.packets["payload"] > 0) for x in (b_in, b_out))
    codes = flows.flight_disturbances(b_in.packets, served_in, flows.transmissions_lost(
        b_in.packets, served_in, b_out.packets, served_out), len(b_in.conns))
    code_of = np.where(to_b[conns.pos] >= 0, codes[bc.index[np.maximum(to_b[conns.pos], 0)]], 0)
    flights_list = [{"segments": int(s), "bytes": int(b), "total_segments": int(t),
                     **({"disturbed": flows.DISTURBANCES[c]} if c else {})}
                    for s, b, t, c in zip(conns.flight_segments, conns.flight_bytes, conns.reply_segments, code_of)
                    if t > 0]
    done = pages.complete
    dl = pages.download_s[done]
    out.update({
        "flows": {"web": {"first_flights": flights_list}},
        "pages": int(done.sum()), "download_mean_s": float(np.mean(dl)),
        "lost_pkts": int(lost.sum()), "retx_pkts": int(conn_retx.sum()),
        "connections": int(len(conns.pos)),
        "calls_unplaced": int(((conn_of < 0) & calls.ok).sum()),
    })
    return out


def combo_metrics(i: int, c: dict, calls: Calls, conn_of: np.ndarray, pages, conns, flight_of_call: np.ndarray,
                  lost: int, retx: int) -> dict:
    """The figures of one model and HTTP mode of a run."""
    pm = pages.combo == i
    done = pm & pages.complete
    dl = pages.download_s[done]
    ci = stats.mean_ci(dl) if len(dl) else None
    mine = calls.combo == i
    placed = mine & (conn_of >= 0)
    cm = conns.combo == i
    qs = [q for q, m in zip(conns.qs, cm) if m]
    requested = sum(1 for q in qs if q.get("requested"))
    approved = [q for q in qs if q.get("approved")]
    per_conn = np.bincount(conn_of[placed]) if placed.any() else np.zeros(0, dtype=np.int64)
    use = c.get("link_use") or {}
    seconds = max(1e-9, c["t_end"] - c["t_start"])
    return {
        "model": c["model"], "mode": c["mode"], "stopped": bool(c.get("stopped")),
        "pages": int(done.sum()), "pages_logged": int(pm.sum()), "pages_scheduled": c.get("pages_scheduled"),
        "pages_unfinished": int((pm & ~pages.complete).sum()),
        "download_mean_s": float(np.mean(dl)) if len(dl) else None,
        "download_median_s": float(np.median(dl)) if len(dl) else None,
        "download_sd_s": float(np.std(dl, ddof=1)) if len(dl) > 1 else None,
        "download_ci_s": list(ci) if ci else None,
        "download_s": _round(dl), "page_start_s": _round(pages.start[done] - c["t_start"]),
        "page_user": pages.user[done].tolist(), "page_index": pages.page[done].tolist(),
        "page_bytes": pages.bytes[done].tolist(), "page_objects": pages.objects[done].tolist(),
        "log_minus_capture_end": _quantiles_ms(pages.log_end[done] - pages.end[done]),
        "objects": int(mine.sum()), "connections": int(cm.sum()),
        "syns_per_object": float(cm.sum() / mine.sum()) if mine.any() else None,
        "requests_per_connection_max": int(per_conn.max()) if len(per_conn) else 0,
        "in_flight_max": int(flight_of_call[mine].max()) if mine.any() else 0,
        "conn_duration_s": _round(conns.duration[cm]), "conn_bytes": conns.bytes[cm].tolist(),
        "conn_calls": conns.calls[cm].tolist(),
        "conn_qs": [2 if q.get("approved") else 1 if q.get("requested") else 0 for q in qs],
        "qs_requested": requested, "qs_approved": len(approved),
        "qs_approval_ratio": len(approved) / requested if requested else None,
        "qs_approved_bps_mean": float(np.mean([q["approved_bps"] for q in approved])) if approved else None,
        "utilisation": use.get("utilisation"), "drop_rate": use.get("drop_rate"),
        "queue_drops": use.get("dropped_pkts"), "lost_pkts": lost, "retx_pkts": retx,
        "offered_bps": 8 * float(calls.reply_bytes[mine].sum()) / seconds,
        "seconds": seconds,
    }


# --- the summary ---------------------------------------------------------------------------------

def _combo_pages(runs: list[RunRecord], key: str) -> np.ndarray:
    return np.array([x for r in runs for x in (r.metrics.get("combos", {}).get(key) or {}).get("download_s", [])],
                    dtype=float)


def _run_mean(r: RunRecord, key: str) -> float:
    got = (r.metrics.get("combos", {}).get(key) or {}).get("download_mean_s")
    return float("nan") if got is None else float(got)


DL = Compared(column="dl", name="download_mean_s", label="download time", unit="s",
              get=lambda r: r.metrics["download_mean_s"], rtt_floor=True, figure_name="download",
              samples="pages")
PER_COMBO = tuple(Compared(column=column_prefix(m, h), name=f"download_{combo_key(m, h)}_s",
                           label=f"{m} {h}", unit="s", get=lambda r, k=combo_key(m, h): _run_mean(r, k),
                           rtt_floor=True, figure_name="download", model=m, mode=h,
                           samples=f"{column_prefix(m, h)}_pages") for m, h in COMBOS)
COMPARED_KINDS = ("mean", "median", "ci_low", "ci_high", "diff", "diff_ci_low", "diff_ci_high", "ratio",
                  "significant", "within_one_rtt")
COMBO_KINDS = ("pages", "mean", "median", "ci_low", "ci_high", "sd", "qs_approval", "utilisation", "drop_rate",
               "diff", "diff_ci_low", "diff_ci_high", "ratio", "significant", "within_one_rtt")


def _combo_col(m: Compared, kind: str) -> str:
    """A per-model-and-mode summary column: a compared figure's own, or one of ours."""
    return m.col(kind) if kind in COMPARED_KINDS else f"{m.column}_{kind}" + ("_s" if kind == "sd" else "")


COLUMNS = ["users", "kind", "cc", "pages", *(DL.col(k) for k in ("mean", "median", "ci_low", "ci_high")),
           "utilisation_mean", "drop_rate_mean", "qs_approval_ratio", "loss_mean_pkts", "retx_mean_pkts",
           *(DL.col(k) for k in ("diff", "diff_ci_low", "diff_ci_high", "ratio", "significant", "within_one_rtt")),
           *(_combo_col(m, k) for m in PER_COMBO for k in COMBO_KINDS),
           "anova_dl_p", "rtt_s", "rate_bps", "sweep_param", "sweep_value"]


def variant_kind(r: RunRecord) -> tuple[str, Optional[str], Optional[int]]:
    """("QS" or "SS", the sender's congestion control, its initial window) from the variant's
    definition: Quick-Start variants name their base congestion control."""
    server = ((r.meta.get("variant_definition") or {}).get("roles") or {}).get("server") or {}
    if server.get("impl") == "quickstart":
        return "QS", server.get("base_cc"), server.get("iw")
    return "SS", server.get("cc"), server.get("iw")


def pooled(xs: np.ndarray) -> dict:
    """Mean, median, SD and the 95 % Student-t interval of the mean over pages."""
    if not len(xs):
        return {"pages": 0, "mean": None, "median": None, "sd": None, "ci": None}
    return {"pages": int(len(xs)), "mean": float(np.mean(xs)), "median": float(np.median(xs)),
            "sd": float(np.std(xs, ddof=1)) if len(xs) > 1 else None, "ci": stats.mean_ci(xs)}


def welch_from_summary(a: tuple[float, float, int], b: tuple[float, float, int]
                       ) -> Optional[tuple[float, float, float]]:
    """(a − b, 95 % Welch interval) from (mean, sd, n) of two samples; None without spread."""
    (ma, sa, na), (mb, sb, nb) = a, b
    if na < 2 or nb < 2 or sa is None or sb is None:
        return None
    va, vb = sa * sa / na, sb * sb / nb
    if va + vb == 0:
        return ma - mb, ma - mb, ma - mb
    df = (va + vb) ** 2 / (va * va / (na - 1) + vb * vb / (nb - 1))
    half = float(sps.t.ppf(0.975, df)) * math.sqrt(va + vb)
    return ma - mb, ma - mb - half, ma - mb + half


class WebAnalysis(WorkloadAnalysis):
    name = "web"
    columns = COLUMNS
    compared = (DL,)
    per_mode = PER_COMBO
    display_headers = ["profile", "variant", "runs", "pages", "download mean", "95% CI", "utilisation",
                       "QS approved", "loss", "Δdownload vs baseline"]

    def run_metrics(self, run_dir: Path, meta: dict[str, Any]) -> dict[str, Any]:
        mss = run_mss(meta)
        return run_metrics(run_dir, meta["spec"], mss)

    def describe(self, runs: list[RunRecord]) -> Row:
        kind, cc, _ = variant_kind(runs[0])
        all_pages = np.concatenate([_combo_pages(runs, combo_key(m, h)) for m, h in COMBOS])
        p = pooled(all_pages)
        row: Row = {"users": runs[0].meta.get("spec", {}).get("users"), "kind": kind, "cc": cc,
                    "pages": p["pages"], DL.col("mean"): p["mean"], DL.col("median"): p["median"],
                    DL.col("ci_low"): p["ci"][0] if p["ci"] else None,
                    DL.col("ci_high"): p["ci"][1] if p["ci"] else None,
                    "loss_mean_pkts": stats.mean([r.metrics["lost_pkts"] for r in runs]),
                    "retx_mean_pkts": stats.mean([r.metrics["retx_pkts"] for r in runs])}
        utils, drops, req, app = [], [], 0, 0
        for (m, h), metric in zip(COMBOS, PER_COMBO):
            blocks = [b for r in runs if (b := r.metrics.get("combos", {}).get(combo_key(m, h)))]
            if not blocks:
                continue
            q = pooled(_combo_pages(runs, combo_key(m, h)))
            r_req = sum(b["qs_requested"] for b in blocks)
            r_app = sum(b["qs_approved"] for b in blocks)
            req, app = req + r_req, app + r_app
            u = [b["utilisation"] for b in blocks if b.get("utilisation") is not None]
            d = [b["drop_rate"] for b in blocks if b.get("drop_rate") is not None]
            utils += u
            drops += d
            row.update({_combo_col(metric, "pages"): q["pages"], _combo_col(metric, "mean"): q["mean"],
                        _combo_col(metric, "median"): q["median"], _combo_col(metric, "sd"): q["sd"],
                        _combo_col(metric, "ci_low"): q["ci"][0] if q["ci"] else None,
                        _combo_col(metric, "ci_high"): q["ci"][1] if q["ci"] else None,
                        _combo_col(metric, "qs_approval"): r_app / r_req if r_req else None,
                        _combo_col(metric, "utilisation"): stats.mean(u) if u else None,
                        _combo_col(metric, "drop_rate"): stats.mean(d) if d else None})
        row.update(utilisation_mean=stats.mean(utils) if utils else None,
                   drop_rate_mean=stats.mean(drops) if drops else None,
                   qs_approval_ratio=app / req if req else None)
        return row

    def compare(self, runs: list[RunRecord], base: list[RunRecord]) -> Row:
        """Against the baseline's pages at the same cell: Welch over pages per model and mode,
        and over all pages (the runs' means go into the ANOVA and `run.py compare`)."""
        out: Row = {}
        pairs = [(DL, np.concatenate([_combo_pages(runs, combo_key(m, h)) for m, h in COMBOS]),
                  np.concatenate([_combo_pages(base, combo_key(m, h)) for m, h in COMBOS]))]
        pairs += [(metric, _combo_pages(runs, combo_key(m, h)), _combo_pages(base, combo_key(m, h)))
                  for (m, h), metric in zip(COMBOS, PER_COMBO)]
        for metric, xs, bs in pairs:
            if not len(xs) or not len(bs):
                continue
            d = stats.welch_difference(xs, bs)
            out.update({metric.col("diff"): d.diff, metric.col("diff_ci_low"): d.ci[0] if d.ci else None,
                        metric.col("diff_ci_high"): d.ci[1] if d.ci else None,
                        metric.col("ratio"): stats.ratio_of_means(xs, bs), metric.col("significant"): d.significant,
                        metric.col("within_one_rtt"): stats.within_one_rtt(d.diff, runs[0].rtt_s)})
        return out

    def display(self, row: Row) -> list[str]:
        from analysis.report import cell_label, change_text, format_seconds
        ci = "" if row[DL.col("ci_low")] is None else \
            f"{format_seconds(row[DL.col('ci_low')])} – {format_seconds(row[DL.col('ci_high')])}"
        mean = "–" if row[DL.col("mean")] is None else format_seconds(row[DL.col("mean")])
        util = "–" if row["utilisation_mean"] is None else f"{row['utilisation_mean']:.1%}"
        qs = "–" if row["qs_approval_ratio"] is None else f"{row['qs_approval_ratio']:.0%}"
        change = change_text(row, DL) if row.get(DL.col("diff")) is not None else ""
        return [cell_label(row), row["variant"], str(row["runs"]), str(row["pages"]), mean, ci, util, qs,
                f"{row['loss_mean_pkts']:.1f}", change]

    def plots(self, out: Path, campaign: dict[str, Any], records: list[RunRecord], rows: list[Row],
              colours: dict[str, str]) -> list[Plot]:
        return web_plots.all_plots(out, campaign, records, colours)

    def sections(self, rows: list[Row]) -> list[Section]:
        return [per_combo_section(rows), qs_vs_ss_section(rows)]


def _fmt_s(x: Optional[float]) -> str:
    from analysis.report import format_seconds
    return "–" if x is None else format_seconds(x)


def _fmt_ci(lo: Optional[float], hi: Optional[float]) -> str:
    return "" if lo is None else f"{_fmt_s(lo)} – {_fmt_s(hi)}"


def _fmt_share(x: Optional[float]) -> str:
    return "–" if x is None else f"{x:.0%}"


def per_combo_section(rows: list[Row]) -> Section:
    from analysis.report import cell_label
    table = []
    for row in rows:
        for (m, h), metric in zip(COMBOS, PER_COMBO):
            if not row.get(_combo_col(metric, "pages")):
                continue
            mean, lo, hi = (row[_combo_col(metric, k)] for k in ("mean", "ci_low", "ci_high"))
            half = None if lo is None or not mean else (hi - lo) / 2 / mean
            table.append([cell_label(row), row["variant"], f"{m} {h}", str(row[_combo_col(metric, "pages")]),
                          _fmt_s(mean), _fmt_ci(lo, hi), "–" if half is None else f"±{half:.0%}",
                          _fmt_s(row[_combo_col(metric, "median")]), _fmt_share(row[_combo_col(metric, "qs_approval")]),
                          _fmt_share(row[_combo_col(metric, "utilisation")]),
                          "–" if row[_combo_col(metric, "drop_rate")] is None
                          else f"{row[_combo_col(metric, 'drop_rate')]:.2%}"])
    return Section("Object download time per model and HTTP mode",
                   ["profile", "variant", "model, mode", "pages", "mean", "95% CI", "CI half-width", "median",
                    "QS approved", "utilisation", "drop rate"], table,
                   "Object download time: a page's base document and embedded files, from the SYN (or the "
                   "document's request on a persistent connection) to the last byte of the last file, at the "
                   "clients' uplink. Mean and 95 % Student-t interval over the pages of the cell's runs; QS "
                   "approved: connections whose Quick-Start request the sender accepted ÷ connections that "
                   "requested; utilisation and drop rate of the bottleneck queue over the replay.")


def qs_vs_ss_section(rows: list[Row]) -> Section:
    """Quick-Start against slow start with the same congestion control (Fig. 12's comparison)."""
    from analysis.report import cell_label, format_seconds
    table = []
    ss = {(cell_label(r), r["cc"]): r for r in rows if r.get("kind") == "SS"}
    for row in rows:
        if row.get("kind") != "QS" or (cell_label(row), row["cc"]) not in ss:
            continue
        base = ss[(cell_label(row), row["cc"])]
        for (m, h), metric in zip(COMBOS, PER_COMBO):
            a = [row.get(_combo_col(metric, k)) for k in ("mean", "sd", "pages")]
            b = [base.get(_combo_col(metric, k)) for k in ("mean", "sd", "pages")]
            if not a[2] or not b[2]:
                continue
            w = welch_from_summary(tuple(a), tuple(b))
            verdict = "–" if w is None else "QS faster" if w[2] < 0 else "QS slower" if w[1] > 0 else \
                "no significant difference"
            table.append([cell_label(row), f"{base['variant']} → {row['variant']}", f"{m} {h}",
                          _fmt_s(b[0]), _fmt_s(a[0]), "–" if w is None else format_seconds(w[0], signed=True),
                          "" if w is None else _fmt_ci(w[1], w[2]), verdict])
    return Section("Quick-Start against slow start (Fig. 12)",
                   ["profile", "SS → QS", "model, mode", "SS mean", "QS mean", "QS − SS", "95% CI", "verdict"],
                   table, "Same profile, users and congestion control; 95 % Welch interval of the difference of "
                          "the mean download times over pages. The figures pair the same pages of both "
                          "variants (paired interval), which is narrower.")


ANALYSIS = WebAnalysis()
