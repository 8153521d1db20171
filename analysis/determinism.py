"""Are two (or more) campaigns the same, run for run? The virtual clock's claim, checked.

For every run the campaigns share: the short flow's FCT (to the nanosecond the capture
keeps), its losses and retransmissions, the long flow's figures, and then every file of the
run byte for byte. Files that carry the wall clock of the machine that ran them are named
apart (WALL_CLOCK_FILES): on the virtual clock even those are the guest's, so they are
expected to match too, and a difference there is reported like any other. A meta.json is
compared without the fields the host adds as it unpacks a guest's run (results/export.
HOST_META: the cluster's job and node), which say where the run ran, not what it did.

`python -m analysis.determinism DIR_A DIR_B [DIR_C …]` prints the comparison; exit 1 when
a figure differs. Runs on the virtual clock from different bundles (run_clock.bundle: the
checkout's files the guest read) are not the same run, and the comparison says so first.
"""
from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from results import export, schema

FIGURES = (("short", "fct_s"), ("short", "lost_pkts"), ("short", "retx_pkts"), ("short", "bytes"),
           ("long", "lost_pkts"), ("long", "retx_pkts"), ("long", "bytes"))
WALL_CLOCK_FILES = ("meta.json",)


def _figure(metrics: dict, path: tuple[str, str]):
    part = metrics.get(path[0]) or {}
    return part.get(path[1]) if isinstance(part, dict) else None


def _digest(p: Path) -> str:
    if p.name == schema.META_FILE:
        doc = {k: v for k, v in json.loads(p.read_text()).items() if k not in export.HOST_META}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    return hashlib.sha256(p.read_bytes()).hexdigest()


@dataclass
class RunComparison:
    run_id: str
    figures: dict[str, list]                      # "short.fct_s" → one value per campaign
    differing_figures: list[str] = field(default_factory=list)
    differing_files: list[str] = field(default_factory=list)
    missing_files: list[str] = field(default_factory=list)
    bundles: list = field(default_factory=list)   # run_clock.bundle per campaign (None: real clock)
    # The guest's interrupt sources whose counts differ between the campaigns (virtual clock):
    # source -> one count per campaign. What reached a guest at a host-decided time shows here.
    interrupts: dict[str, list] = field(default_factory=dict)


def compare_run(run_dirs: list[Path]) -> RunComparison:
    metrics = [json.loads((d / schema.METRICS_FILE).read_text()) for d in run_dirs]
    figs = {f"{a}.{b}": [_figure(m, (a, b)) for m in metrics] for a, b in FIGURES}
    rc = RunComparison(run_dirs[0].name, figs)
    rc.bundles = [(json.loads((d / schema.META_FILE).read_text()).get("run_clock") or {}).get("bundle")
                  if (d / schema.META_FILE).is_file() else None for d in run_dirs]
    rc.differing_figures = [k for k, vals in figs.items() if len(set(map(repr, vals))) > 1]
    irqs = [(json.loads((d / schema.META_FILE).read_text()).get("guest_interrupts") or {})
            if (d / schema.META_FILE).is_file() else {} for d in run_dirs]
    rc.interrupts = {k: [i.get(k, 0) for i in irqs] for k in sorted(set().union(*irqs))
                     if len({i.get(k, 0) for i in irqs}) > 1}
    names = [sorted(str(p.relative_to(d)) for p in d.rglob("*") if p.is_file()) for d in run_dirs]
    common = set(names[0]).intersection(*names[1:])
    rc.missing_files = sorted(set().union(*names) - common)
    rc.differing_files = sorted(n for n in common if len({_digest(d / n) for d in run_dirs}) > 1)
    return rc


def compare(campaigns: list[Path]) -> list[RunComparison]:
    """One comparison per run finished in every campaign, in run-id order."""
    def done(c: Path) -> set[str]:
        return {d.name for d in c.iterdir() if d.is_dir() and (d / schema.METRICS_FILE).is_file()}
    shared = set.intersection(*(done(c) for c in campaigns))
    return [compare_run([c / r for c in campaigns]) for r in sorted(shared)]


def text(results: list[RunComparison], campaigns: list[Path]) -> str:
    lines = [f"{len(campaigns)} campaigns: " + ", ".join(map(str, campaigns))]
    for r in results:
        fct = r.figures["short.fct_s"]
        loss, retx = r.figures["short.lost_pkts"], r.figures["short.retx_pkts"]
        verdict = "same figures" if not r.differing_figures else "DIFFER: " + ", ".join(r.differing_figures)
        if len(set(r.bundles)) > 1:
            verdict = f"from different bundles ({' / '.join(map(str, r.bundles))}), not the same run; {verdict}"
        files = ("all files identical" if not r.differing_files and not r.missing_files else
                 f"files differ: {', '.join(r.differing_files[:6])}{' …' if len(r.differing_files) > 6 else ''}"
                 + (f"; missing in some: {', '.join(r.missing_files[:4])}" if r.missing_files else ""))
        lines.append(f"  {r.run_id}: FCT {' / '.join(f'{v * 1e3:.6f}' if v is not None else '-' for v in fct)} ms, "
                     f"loss {' / '.join(map(str, loss))}, retx {' / '.join(map(str, retx))}: {verdict}; {files}")
        if r.interrupts:
            lines.append("    the guest's interrupts differ: " + "; ".join(
                f"{k} {' / '.join(map(str, v))}" for k, v in r.interrupts.items()))
    same = sum(1 for r in results if not r.differing_figures)
    lines.append(f"{same} of {len(results)} runs with identical figures; "
                 f"{sum(1 for r in results if not r.differing_files and not r.missing_files)} identical file for file")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[-2], file=sys.stderr)
        return 2
    campaigns = [Path(a) for a in argv]
    results = compare(campaigns)
    print(text(results, campaigns))
    return 0 if results and all(not r.differing_figures for r in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
