"""Subcommands of run.py. Each one is a few lines that call the stage that does the work.

`analyze`, `report` and `compare` import only results/ and analysis/: they run without
root and without Mininet, on a campaign copied anywhere.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
from dataclasses import asdict
from pathlib import Path

from cli.output import emit_json, yes_no
from machine import clock
from machine.errors import UserError

# Commands that only read and write result files: no provisioning as root, no emulation.
RESULT_COMMANDS = ("analyze", "report", "compare")


def cmd_doctor(args) -> int:
    from machine.capabilities import doctor
    from hosts.stacks import STACKS
    from hosts.variants import VARIANTS
    if args.clock == "virtual":
        return doctor_virtual(args)
    if args.measure:
        raise UserError("--measure measures what the virtual clock carries: it needs --clock virtual")
    report = doctor()
    # Every variant of the catalogue, loaded into this kernel as a run would load it.
    variants = {name: v.unavailable() for name, v in VARIANTS.items()}
    # The third-party QUIC stacks, with the versions installed here (hosts/stacks).
    stacks = {name: {"version": s.version(), "reason": s.unavailable(), "controllers": list(s.controllers)}
              for name, s in STACKS.items()}
    host = None if args.no_host else doctor_host()
    if args.json:
        emit_json({**asdict(report), "host": host,
                   "variants": {n: {"available": why is None, "reason": why} for n, why in variants.items()},
                   "quic_stacks": {n: {"available": v["reason"] is None, **v} for n, v in stacks.items()}})
        return 0 if not report.problems else 1
    print(f"kernel           {report.kernel}")
    print("qdiscs           " + ", ".join(f"{k}: {yes_no(v)}" for k, v in report.qdiscs.items()))
    print(f"BTF              {yes_no(report.btf)} (/sys/kernel/btf/vmlinux)")
    print(f"BPF struct_ops   {yes_no(report.bpf_struct_ops)} (TCP congestion control in BPF)")
    print(f"cgroup v2        {report.cgroup2 or 'not mounted'}")
    print(f"bpffs            {report.bpffs or 'not mounted (startlab mounts it when needed)'}")
    print(f"OVS datapath     {yes_no(report.ovs_datapath)}")
    print("tools            " + ", ".join(f"{k} {v or 'MISSING'}" for k, v in report.tools.items()))
    print(f"delay backend    {report.delay_backend or 'NONE'}: {report.delay_reason}")
    print(f"switch           {report.switch}: {report.switch_reason}")
    ok = [n for n, why in variants.items() if why is None]
    print(f"variants         {len(ok)} of {len(variants)} load on this kernel"
          + (f": all but {', '.join(n for n in variants if n not in ok)}" if len(ok) < len(variants) else ""))
    for name, why in variants.items():
        print(f"  {name:<20} {'available' if why is None else 'UNAVAILABLE: ' + why}")
    print(f"QUIC stacks      {sum(v['reason'] is None for v in stacks.values())} of {len(stacks)} installed")
    for name, v in stacks.items():
        print(f"  {name:<20} " + (f"{v['version']} ({', '.join(v['controllers'])})" if v["reason"] is None
                                  else "UNAVAILABLE: " + v["reason"]))
    if host is not None:
        print(f"host timing      {host['summary']} (measured {host['calibration']['seconds']:.0f} s, "
              f"CPUs idle then busy)")
        print(f"emulator tuning  delay line timer lead {host['tuning']['spin_lead_us']} µs, spin up to "
              f"{host['tuning']['spin_max_us']} µs")
        for name, v in host["profiles"].items():
            print(f"  {name:<20} {'fit' if v['ok'] else 'UNFIT: ' + v['reason']}")
    for problem in report.problems:
        print(f"PROBLEM          {problem}")
    return 0 if not report.problems else 1


def doctor_virtual(args) -> int:
    """`doctor --clock virtual`: which profiles the virtual clock's guest carries, from the table
    kept beside the VM image; `--measure` fills it (a guest boot per profile)."""
    from cli.virtual import doctor_virtual as table_of
    from machine.vm import capacity
    measure = [m for m in (args.measure or "").split(",") if m]
    out = table_of(args.kernel, measure, progress=lambda m: print(m, file=sys.stderr))
    if args.json:
        emit_json(out)
        return 0
    rows = out["profiles"]
    print(f"virtual clock    kernel {out['kernel']}, image {out['image'] or 'not built yet'}: "
          f"{sum(1 for e in rows.values() if e and e['ok'])} of {len(rows)} profiles carried, "
          f"{sum(1 for e in rows.values() if not e)} not measured")
    for name, entry in rows.items():
        print(capacity.line(name, entry))
    missing = [n for n, e in rows.items() if not e]
    if missing:
        print(f"measure them with: ./run.py doctor --clock virtual --measure {','.join(missing)} "
              "(a guest boot each, 1-10 min per profile)")
    return 0


def doctor_host() -> dict:
    """doctor's `host` section: the calibration's figures, the tuning it gives, and for every
    profile whether this host can emulate it within the fidelity tolerances (and why not)."""
    from machine.host import calibrate
    from links.hostfit import tuning_for, verdict
    from links.profiles import load_profiles
    timing = calibrate()
    verdicts = {name: verdict(p, timing).as_record() for name, p in load_profiles().items()}
    brief = timing.brief()
    return {"timer_wakeup_us": brief["timer_wakeup_us"], "steal_fraction": brief["steal_fraction"],
            "cpus": brief["cpus"], "clocksource": brief["clocksource"], "calibration": brief,
            "summary": timing.describe(), "tuning": tuning_for(timing).as_record(), "profiles": verdicts}


def cmd_fidelity(args) -> int:
    if args.clock == "virtual":
        from cli.virtual import fidelity_virtual
        result = fidelity_virtual(args)
        if args.json:
            emit_json(result)
        else:
            from scenarios.emulator_check import print_result
            print_result(result)
        return 0 if result.get("ok") else 1
    from scenarios.emulator_check import measure, print_result
    from links.profiles import get_profile
    from links.shapers import from_cli
    from links.shapers import default_for
    from machine.capabilities import require_root
    from links.hostfit import FIXED
    require_root()
    profile = get_profile(args.profile)
    shaper = from_cli(args.shaper) if args.shaper else default_for([profile])
    cpu0 = clock.cpu_times()
    if profile.is_trace:
        from scenarios.trace_fidelity import measure_trace, print_trace_result
        result = _guest_cpu_over(measure_trace(profile, delay_backend=args.delay_backend, shaper=shaper,
                                               tuning=FIXED if args.tuning == "fixed" else None), cpu0)
        if args.json:
            emit_json(result)
        else:
            print_trace_result(result)
        return 0 if result["ok"] else 1
    try:
        result = _guest_cpu_over(measure(profile, delay_backend=args.delay_backend, pings=args.pings, shaper=shaper,
                                         tuning=FIXED if args.tuning == "fixed" else None), cpu0)
    except RuntimeError as exc:
        # A witness that failed outright (pings unanswered, a stream that died) is a verdict
        # on this host or emulator, with its reason: never a traceback without JSON.
        result = {"profile": profile.name, "ok": False, "error": str(exc), "checks": {},
                  "explanation": f"the check could not be completed: {exc}"}
        if args.json:
            emit_json(result)
        else:
            print(f"profile {profile.name}\n  NOT ok: {result['explanation']}")
        return 1
    if args.json:
        emit_json(result)
    else:
        print_result(result)
    return 0 if result["ok"] else 1


def _guest_cpu_over(result: dict, cpu0: tuple[int, int]) -> dict:
    """In the virtual clock's guest, a fidelity result gets the guest CPU's busy fraction over
    the whole check (in guest time); a saturated CPU fails it, the same way on every host."""
    if clock.is_virtual():
        result["guest_cpu"] = clock.guest_cpu(cpu0, clock.cpu_times())
        saturated = clock.saturation_flags(result["guest_cpu"]["busy_fraction"])
        if saturated:
            result["ok"] = False
            result["explanation"] = "; ".join(filter(None, [result.get("explanation"), *saturated]))
    return result


def cmd_list(args) -> int:
    from analysis.tables import text_table
    if args.what == "profiles":
        from links.profiles import load_profiles
        profiles = load_profiles()
        if args.json:
            emit_json({name: p.as_dict() for name, p in profiles.items()})
            return 0
        def rate(p, direction: str) -> str:
            mbps = p.rate_bps(direction) / 1e6
            return f"{mbps:.4g} (trace)" if p.trace_path(direction) else f"{mbps:g}"
        rows = [[p.name, p.topology, rate(p, "down"), rate(p, "up"), p.rtt_label,
                 p.buffer_packets("down"), f"{p.bdp_packets('down'):.0f}", p.mtu, p.source]
                for p in profiles.values()]
        print(text_table(["profile", "topology", "down Mbit/s", "up Mbit/s", "RTT ms",
                          "buffer pkts", "BDP pkts", "MTU", "source"], rows))
        return 0
    if args.what == "scenarios":
        from scenarios.spec import list_scenarios
        items = list_scenarios()
        if args.json:
            emit_json(items)
            return 0
        print(text_table(["scenario", "file", "workload", "runs", "description"],
                         [[s["name"], s["path"], s["workload"], s["runs"], s["description"]] for s in items]))
        return 0
    if args.what == "workloads":
        from hosts.workloads import registry
        items = registry()
        if args.json:
            emit_json({name: {"summary": w.summary, "sized": w.sized,
                              "params": {k: p.describe() for k, p in w.params.items()}} for name, w in items.items()})
            return 0
        for name, w in items.items():
            print(f"{name}: {w.summary}")
            for key, p in w.params.items():
                print(f"    {key}: {p.describe()}")
        return 0
    from hosts.variants import VARIANTS
    if args.json:
        emit_json({name: v.describe() for name, v in VARIANTS.items()})
        return 0
    print(text_table(["variant", "what"], [[name, v.describe()["summary"]] for name, v in VARIANTS.items()]))
    return 0


def cmd_docs(args) -> int:
    from cli import docs
    if args.check:
        stale = docs.stale()
        for path in stale:
            print(f"{path.relative_to(docs.ROOT)}: out of date (run: ./run.py docs)", file=sys.stderr)
        return 1 if stale else 0
    for path in docs.write():
        print(f"wrote {path.relative_to(docs.ROOT)}")
    return 0


def cmd_clean(args) -> int:
    from machine.cleanup import clean
    removed = clean(force=args.force)
    if args.json:
        emit_json({"removed": removed})
    elif removed:
        print("removed:\n  " + "\n  ".join(removed))
    else:
        print("nothing of startlab's to remove")
    return 0


def cmd_slurm_local(args) -> int:
    """A one-node Slurm cluster of startlab's own until Ctrl-C, to try `run --slurm` here."""
    import signal
    from machine.capabilities import require_root
    from machine.slurm import LocalCluster
    require_root()
    with LocalCluster(args.cpus) as cluster:
        print(f"startlab: a one-node Slurm cluster is up (node {cluster.node}, {cluster.cpus} CPUs). In another "
              f"shell:\n  export SLURM_CONF={cluster.conf}\n  sinfo; sudo -E ./run.py run scenarios/smoke.yaml "
              "--slurm\nCtrl-C here cancels its jobs and removes it.", flush=True)
        try:
            signal.pause()
        except KeyboardInterrupt:
            print("startlab: stopping the cluster …", file=sys.stderr)
    return 0


def cmd_kernels(args) -> int:
    """Debian's stock kernels in VMs: a kernel × check matrix (cli/kernels.py)."""
    from cli import kernels
    from machine.capabilities import require_root
    from machine.vm.image import parse_kernels
    require_root()
    wanted = parse_kernels(args.kernels)
    results = kernels.run_matrix(wanted, args.checks.split(",") if args.checks else None, args.accel,
                                 args.mirror, Path(args.keep) if args.keep else None, args.timeout_s,
                                 progress=lambda m: print(m, file=sys.stderr, flush=True), clock=args.clock)
    if args.json:
        emit_json(kernels.as_json(results))
    else:
        print(kernels.matrix_text(results))
    return 0 if kernels.passed(results) else 1


def cmd_vagrant(args) -> int:
    """`vagrant up` (libvirt) on startlab's own box, the demo inside, `vagrant destroy`."""
    import shutil
    import tempfile
    from machine.capabilities import require_root
    from machine.vm import vagrant
    require_root()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="startlab-scratch-vagrant-"))
    try:
        report = vagrant.run(args.accel, args.cpus, args.memory_mb, work, args.timeout_s, args.inside or vagrant.DEMO,
                             progress=lambda m: print(m, file=sys.stderr, flush=True))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        emit_json(vagrant.as_json(report))
    else:
        if report.demo_output:
            print(report.demo_output.rstrip())
        print(vagrant.text(report))
    return 0 if report.ok else 1


def finish(campaign_dir: Path, as_json: bool, stats: dict | None) -> int:
    """Write the report of a campaign and print its table (or the figures as JSON)."""
    from analysis.report import format_table, write_report
    from analysis.runs import workload_analysis
    from results import schema
    from results.campaign import Campaign
    from results.store import read_json_or_none
    from scenarios.progress import fmt_duration
    rows = write_report(campaign_dir)
    summary = read_json_or_none(campaign_dir / schema.SUMMARY_JSON) or {}
    if as_json:
        # Per variant: its rows of summary.csv (the tidy table, as written).
        per_variant: dict[str, list] = {}
        for row in summary.get("rows", []):
            per_variant.setdefault(row["variant"], []).append(row)
        figures = {"campaign": str(campaign_dir), "summary_csv": str(campaign_dir / schema.SUMMARY_CSV),
                   "figures_csv": str(campaign_dir / schema.FIGURES_CSV),
                   "summary_json": str(campaign_dir / schema.SUMMARY_JSON),
                   "report": str(campaign_dir / schema.REPORT_HTML),
                   "baseline": summary.get("campaign", {}).get("baseline"), "variants": per_variant,
                   "failed_runs": [{"run": r, "error": e} for r, e in Campaign.open(campaign_dir).failed_runs()]}
        if stats is not None:
            figures["run_stats"] = stats
        print(json.dumps(figures, indent=2, default=str))
    else:
        workload = Campaign.open(campaign_dir).record.get("workload", schema.LEGACY_WORKLOAD)
        print(format_table(rows, workload_analysis(workload)))
        if stats:
            print(f"\n{stats['runs'] - stats['skipped'] - len(stats['failed'])} runs done, "
                  f"{stats['skipped']} already done, {len(stats['failed'])} failed, "
                  f"wall {fmt_duration(stats['wall_s'])}")
            for failure in stats["failed"]:
                print(f"  failed: {failure['run']}: {failure['error'][:200]}")
        print(f"report: {campaign_dir / schema.REPORT_HTML}")
    return 1 if stats and stats["failed"] else 0


def cmd_run(args) -> int:
    from machine.cpuset import own_cpus
    from results.store import write_json
    from scenarios.lanes import LANES_DIR, choose_lanes, read_run_list, run_campaign_in_lanes
    from scenarios.runner import refuse_unavailable, run_campaign
    from scenarios.spec import apply_overrides, load_scenario
    sc = apply_overrides(load_scenario(args.scenario), args.profiles, args.sizes, args.variants, args.reps)
    out = Path(args.out) if args.out else None
    only = read_run_list(Path(args.only)) if args.only else None
    args.clock = args.clock or (clock.VIRTUAL if args.slurm else clock.REAL)
    if args.task is not None:                  # one task of a --slurm array, on its node
        if out is None or only is None:
            raise UserError("--task is a task of run --slurm and needs its --out and --only")
        return _run_slurm_task(args, sc, out, only)
    if args.node_dir is not None and not (args.slurm and os.path.isabs(args.node_dir)):
        raise UserError("--node-dir is the nodes' own storage for run --slurm: an absolute path, with --slurm")
    if args.slurm:
        return _run_on_slurm(args, sc, out, only)
    if args.clock == "virtual":
        from cli.virtual import run_campaign_virtual
        if args.lanes != "1" or args.reuse or args.only:
            raise UserError("--clock virtual runs each run in a guest of its own, as many at once as the CPUs: "
                            "without --lanes, --reuse or --only")
        path, stats = run_campaign_virtual(args, sc, out)
        return finish(path, args.json, stats)
    if args.lane is not None:                  # one worker of `--lanes`: run, report to the parent
        if out is None:
            raise UserError("--lane is a worker of --lanes and needs its --out")
        campaign, stats = run_campaign(sc, out, args.delay_backend, only, lane=args.lane)
        write_json(campaign.path / LANES_DIR / f"lane-{args.lane}.stats.json", {**stats, "cpus": own_cpus()})
        return 0
    lanes = choose_lanes(args.lanes, len(own_cpus()), args.force)
    from machine.capabilities import require_root
    from scenarios.hostcheck import check_host
    require_root()
    refuse_unavailable(sc)             # what this kernel cannot run, before the 6 s calibration
    if args.reuse:
        from scenarios.reuse import adopt
        from scenarios.runner import open_campaign, select_runs
        campaign = open_campaign(sc, out)
        out = campaign.path
        reused = adopt(sc, campaign, select_runs(sc, only), [Path(d) for d in args.reuse])
        print(f"startlab: {reused.describe()}", file=sys.stderr)
    # Before any network, once per campaign; the virtual clock's timers need no calibration.
    host_rec = None if clock.is_virtual() else check_host(sc.profiles, args.unfit_host)
    if host_rec and host_rec["forced"]:
        print(f"startlab: running on a host unfit for {', '.join(host_rec['unfit_profiles'])} "
              "(--unfit-host): every run is flagged", file=sys.stderr)
    if lanes == 1:
        campaign, stats = run_campaign(sc, out, args.delay_backend, only, host_rec=host_rec)
        if clock.is_virtual():          # in the guest: the host writes the report
            return _export_from_guest(campaign.path, stats)
    else:
        campaign, stats = run_campaign_in_lanes(sc, out, args.delay_backend, lanes,
                                                [str(sc.path.resolve()), *_overrides(args)], only, host_rec)
    return finish(campaign.path, args.json, stats)


def _run_on_slurm(args, sc, out: Path | None, only: set[str] | None) -> int:
    """`run --slurm`: the unfinished runs as an array job on the cluster (scenarios/slurm.py)."""
    import shlex
    from scenarios.runner import open_campaign, select_runs
    from scenarios.slurm import Submission, run_campaign_on_slurm
    if args.lanes != "1" or args.reuse:
        raise UserError("--slurm deals the runs over the cluster's nodes itself: without --lanes or --reuse")
    if args.batch < 1 or (args.lanes_per_node is not None and args.lanes_per_node < 1):
        raise UserError("--batch and --lanes-per-node: at least 1")
    worker = [*_overrides(args), "--delay-backend", args.delay_backend,
              *(["--kernel", args.kernel] if args.clock == clock.VIRTUAL else []),
              *(["--seed", str(args.seed)] if args.seed is not None else []),
              *(["--unfit-host"] if args.unfit_host else [])]
    sub = Submission(clock=args.clock, scenario=sc.path, worker_args=worker, partition=args.partition,
                     lanes_per_node=args.lanes_per_node, batch=args.batch,
                     extra=tuple(shlex.split(args.slurm_args or "")), node_dir=args.node_dir)
    if args.clock == clock.VIRTUAL and os.geteuid() == 0:
        # The image and the guest's BPF objects once, here, before tasks boot guests at
        # once from this machine's cache (a node without them builds its own).
        from cli.virtual import prepare
        prepare(args.kernel, lambda m: print(m, file=sys.stderr))
    campaign = open_campaign(sc, out)
    stats = run_campaign_on_slurm(campaign, select_runs(sc, only), sub)
    rc = finish(campaign.path, args.json, stats)
    return rc or (1 if stats.get("unfinished") else 0)


def _run_slurm_task(args, sc, out: Path, only: set[str]) -> int:
    """One array task of `run --slurm` on its node: its batch into the shared campaign, and
    its stats beside the batch."""
    from machine.cpuset import own_cpus
    from results.store import write_json
    from scenarios.slurm import SLURM_DIR
    if args.clock == clock.VIRTUAL:
        from cli.virtual import run_campaign_virtual
        path, stats = run_campaign_virtual(args, sc, out, only=only, files_dest=out / SLURM_DIR / f"task-{args.task}")
    else:
        from machine.capabilities import require_root
        from machine.cleanup import clean
        from scenarios.hostcheck import check_node
        from scenarios.runner import open_campaign, run_campaign
        from scenarios.slurm import node_calibration
        require_root()
        # A task killed outright (its node failed, or it outlived KillWait) could not tear down:
        # what it left on this node goes first (only what no live process of ours holds).
        left = clean()
        if left:
            print("startlab: removed what an earlier startlab process left on this node:\n  " + "\n  ".join(left),
                  file=sys.stderr)
        # This node's timing goes into its runs only: the campaign's host.json is the submitter's.
        # The campaign first: on a node's own storage (--node-dir) the first task creates it,
        # and the node's calibration is kept in it.
        out = open_campaign(sc, out).path
        host_rec = check_node(sc.profiles, args.unfit_host, node_calibration(out))
        campaign, stats = run_campaign(sc, out, args.delay_backend, only, host_rec=host_rec, shared=True)
        path = campaign.path
    write_json(Path(path) / SLURM_DIR / f"task-{args.task}.stats.json", {**stats, "cpus": own_cpus()})
    return 0


def _export_from_guest(campaign_dir: Path, stats: dict) -> int:
    """The end of a campaign in a guest on the virtual clock: its stats and runs go to the
    host, which writes the report."""
    from results.store import write_json
    from scenarios.runner import export_campaign
    write_json(campaign_dir / "guest-stats.json", stats)
    export_campaign(campaign_dir)
    return 0


def _nightly_entry_in_guest(args, config) -> int:
    """`nightly --entry NAME --out DIR`, which only the virtual clock's guest runs: the
    entry's campaign, exported for the host, which compares the nights."""
    from scenarios.lanes import read_run_list
    from scenarios.runner import run_campaign
    if not clock.is_virtual() or args.out is None:
        raise UserError("--entry is the virtual clock's guest's part of nightly --clock virtual")
    entry = next((e for e in config.entries if e.name == args.entry), None)
    if entry is None:
        raise UserError(f"no scenario {args.entry!r} in {config.path}; choose from: "
                        f"{', '.join(e.name for e in config.entries)}")
    only = read_run_list(Path(args.only)) if args.only else None
    campaign, stats = run_campaign(entry.scenario, Path(args.out), args.delay_backend, only)
    return _export_from_guest(campaign.path, stats)


def _overrides(args) -> list[str]:
    """The scenario overrides of `run` as command-line options (for its workers)."""
    return [f"--{k}={v}" for k, v in (("profiles", args.profiles), ("sizes", args.sizes),
                                      ("variants", args.variants), ("reps", args.reps)) if v is not None]


def cmd_fleet_up(args) -> int:
    """A Slurm cluster on the inventory's hosts (machine/cluster.py), for run --slurm."""
    from machine.capabilities import require_root
    from machine.cluster import up
    from machine.slurm import PARTITION
    require_root()                      # the cluster's key is kept in /var/lib/startlab
    p = up(Path(args.inventory), args.name, not args.provisioned,
           progress=lambda m: print(f"startlab: {m}", file=sys.stderr))
    print(f"startlab: Slurm cluster {p.name} is up: controller {p.nodes[p.controller].name}, "
          f"{len(p.nodes)} nodes, {sum(n.cpus for n in p.nodes.values())} CPUs, partition {PARTITION}. On any "
          "of its hosts, with this checkout at the same path:\n  sudo ./run.py run SCENARIO --slurm")
    return 0


def cmd_analyze(args) -> int:
    from analysis.runs import analyze_campaign
    campaign, errors = analyze_campaign(args.dir)
    for err in errors:
        print(f"startlab: {err}", file=sys.stderr)
    return finish(campaign.path, args.json, None) or (1 if errors else 0)


def cmd_report(args) -> int:
    from results import schema
    from results.campaign import Campaign
    from results.store import write_atomically
    path = Campaign.open(args.dir).path
    code = finish(path, args.json, None)
    if args.paper_figures:
        # The figures beside the papers, for the paper pages (docs/papers/figures).
        written = sorted((path / schema.PLOTS_DIR).glob("paper-*.png"))
        if not written:
            print("startlab: no paper figure is declared for this campaign's scenario "
                  "(analysis/paper_values/*.yaml)", file=sys.stderr)
            return code or 2
        out = Path(args.paper_figures)
        out.mkdir(parents=True, exist_ok=True)
        for plot in written:
            target = out / plot.name.removeprefix("paper-")
            write_atomically(target, plot.read_bytes())
            print(f"paper figure: {target}", file=sys.stderr)
    return code


def cmd_compare(args) -> int:
    from analysis.compare import compare_campaigns
    return compare_campaigns(Path(args.old), Path(args.new), args.json)


def cmd_nightly(args) -> int:
    """One night of the configured scenarios; 1 when a cell regressed, 3 when nothing
    regressed but a scenario or run failed (the night is incomplete), 4 when the host check
    found this host unfit (nothing ran), else 0."""
    from analysis.report import format_value, size_text
    from scenarios.nightly import run_night
    from scenarios.nightly_config import load_nightly_config
    if not args.once:
        raise UserError("nightly runs one night per call, scheduled by a systemd timer or cron "
                        "(playbooks/nightly.yml): pass --once")
    config = load_nightly_config(args.config, args.root)
    if args.entry is not None:                 # in the guest: one entry's campaign of the night
        return _nightly_entry_in_guest(args, config)
    runner = None
    if args.clock == "virtual":
        from cli.virtual import nightly_runner
        runner = nightly_runner(args, config.path)
    outcome = run_night(config, delay_backend=args.delay_backend, runner=runner)
    if outcome.host_unfit:
        if args.json:
            print(outcome.regressions_file.read_text(), end="")
        print(f"startlab: host unfit tonight, nothing ran: {outcome.host_unfit}\nhistory: {outcome.index}",
              file=sys.stderr)
        return 4
    if args.json:
        print(outcome.regressions_file.read_text(), end="")
    else:
        for v in outcome.verdicts:
            against = f"against {v['previous']}" if v["previous"] else "(first night)"
            print(f"{v['scenario']}: night {v['night']} {against}: {len(v['rows'])} cells compared, "
                  f"{len(v['regressions'])} regressed" + (f"; {v['note']}" if v["note"] and v["previous"] else ""))
        print(f"history: {outcome.index}\nregressions: {outcome.regressions_file}")
    for r in outcome.regressions:
        cell = " ".join(x for x in (r["profile"], size_text(r["size_bytes"]), r["variant"], r["sweep"] or "") if x)
        print(f"startlab: regressed: {r['scenario']} {cell}: {r['label']} "
              f"{format_value(r['previous']['mean'], r['unit'])} → {format_value(r['current']['mean'], r['unit'])} "
              f"(nights {r['nights'][0]} → {r['nights'][1]})", file=sys.stderr)
    for f in outcome.failures:
        where = f"{f['scenario']} {f['night']}" + (f" run {f['run']}" if f.get("run") else "")
        print(f"startlab: failed: {where}: {f['error'][:300]}", file=sys.stderr)
    if outcome.regressions:
        return 1
    return 3 if outcome.failures else 0


def cmd_demo(args) -> int:
    """The README's main job: the embedded smoke scenario, its table and report."""
    from machine.capabilities import require_root
    from scenarios.hostcheck import check_host
    from scenarios.runner import ROOT, run_campaign
    from scenarios.spec import load_scenario
    require_root()
    sc = load_scenario(ROOT / "scenarios" / "smoke.yaml")
    if args.clock == "virtual":
        import time
        from cli.virtual import run_campaign_virtual
        t0 = time.monotonic()
        for name in ("profiles", "sizes", "variants", "reps"):
            setattr(args, name, None)
        args.delay_backend = "auto"
        path, stats = run_campaign_virtual(args, sc, None)
        rc = finish(path, args.json, stats)
        print(f"demo on the virtual clock: {time.monotonic() - t0:.0f} s wall", file=sys.stderr)
        return rc
    host_rec = check_host(sc.profiles, allow_unfit=True)     # the demo runs anyway, flagged
    if host_rec["forced"]:
        print(f"startlab: this host is unfit for {', '.join(host_rec['unfit_profiles'])} right now "
              f"({host_rec['verdicts'][host_rec['unfit_profiles'][0]]['reason']}): the runs are flagged",
              file=sys.stderr)
    campaign, stats = run_campaign(sc, None, host_rec=host_rec)
    return finish(campaign.path, args.json, stats)


def _clock_options(p: argparse.ArgumentParser, default: str | None = clock.REAL) -> None:
    """--clock and what the virtual clock's guest takes (docs/emulation.md#the-virtual-clock)."""
    p.add_argument("--clock", default=default, choices=clock.CHOICES,
                   help="real: emulate on this host in real time (default" + ("" if default else "; virtual with --slurm")
                        + "); virtual: in a stock-kernel guest under QEMU's instruction-counted time, the same "
                        "figures however busy the host")
    p.add_argument("--seed", type=int, help="virtual clock: the guest's seed (default: the scenario's; 1 for fidelity)")
    p.add_argument("--kernel", default="6.1", help="virtual clock: the guest's stock kernel, 6.1 or 6.12 (default 6.1)")
    p.add_argument("--timeout-s", type=float, default=6 * 3600, help="virtual clock: wall-time bound of each guest")


def build_parser() -> argparse.ArgumentParser:
    from links import shapers
    from links.delay import BACKEND_CHOICES
    from scenarios.slurm import DEFAULT_BATCH
    parser = argparse.ArgumentParser(prog="run.py", description=(
        "startlab: race TCP startup schemes over emulated access networks (Mininet)."))
    parser.add_argument("-v", "--verbose", action="store_true", help="log details to stderr")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("doctor", help="kernel and tool capabilities, the backends startlab will use, and "
                                      "whether this host can emulate each profile (a 6 s timing calibration)")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--no-host", action="store_true", help="skip the host timing calibration")
    _clock_options(p)
    p.add_argument("--measure", metavar="PROFILES",
                   help="with --clock virtual: run these profiles' fidelity checks in a guest first "
                        "(comma-separated) and keep the verdicts beside the VM image")
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("fidelity", help="build a profile's network and check its rate, delay, queue and losses")
    p.add_argument("profile", metavar="PROFILE", help="link profile (see: run.py list profiles)")
    p.add_argument("--delay-backend", default="auto", choices=BACKEND_CHOICES,
                   help="delay element in the core (default auto: startlab's delay line on every kernel; "
                        "netem: the kernel's sch_netem, where present)")
    p.add_argument("--pings", type=int, default=200, help="idle RTT samples (default 200, at least 100)")
    p.add_argument("--shaper", choices=shapers.cli_choices(),
                   help="how the bottleneck queues: tc tbf (default) or the delay line's own queue [with a policy] "
                        "(the default for a trace link)")
    _clock_options(p)
    p.add_argument("--tuning", default="measured", choices=["measured", "fixed"],
                   help="the emulator's timing parameters: from this host's calibration (default) or the old "
                        "fixed constants (80 µs timer lead, 500 µs tbf bucket), for comparison")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(func=cmd_fidelity)

    p = sub.add_parser("list", help="list profiles, scenarios, variants or workloads")
    p.add_argument("what", choices=["profiles", "scenarios", "variants", "workloads"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("run", help="run a scenario: emulate, capture, analyse, report")
    p.add_argument("scenario", metavar="SCENARIO", help="scenario YAML file (see: run.py list scenarios)")
    p.add_argument("--profiles", help="comma-separated subset of the scenario's profiles")
    p.add_argument("--sizes", help="comma-separated object sizes, e.g. 70KB,2MB")
    p.add_argument("--variants", help="comma-separated subset of the scenario's variants")
    p.add_argument("--reps", type=int, help="repetitions per (profile, size, variant)")
    p.add_argument("--out", help="campaign directory (default campaigns/<scenario>/<timestamp>); "
                                 "an existing one is resumed: finished runs are skipped")
    p.add_argument("--delay-backend", default="auto", choices=BACKEND_CHOICES)
    p.add_argument("--lanes", default="1", metavar="N|auto",
                   help="run N testbeds at once, each confined to its own CPUs (auto: one per 2 CPUs)")
    p.add_argument("--force", action="store_true", help="allow more lanes than 2 CPUs each (fidelity suffers)")
    p.add_argument("--unfit-host", action="store_true",
                   help="run even where the host calibration finds this host unfit for a profile "
                        "(every run is flagged with the reason)")
    p.add_argument("--only", metavar="FILE", help="run only the run ids listed in FILE (one per line)")
    p.add_argument("--reuse", metavar="DIR", action="append", default=[],
                   help="take the runs another campaign finished with the same declaration (profile, size, "
                        "variant, workload parameters, repetition, shaper) instead of running them; repeatable")
    p.add_argument("--lane", type=int, help=argparse.SUPPRESS)      # a worker of --lanes
    p.add_argument("--slurm", action="store_true",
                   help="submit the unfinished runs to the Slurm cluster this machine is a client of, as an "
                        "array job (docs/operations.md#on-a-cluster); --clock virtual unless told otherwise")
    p.add_argument("--partition", help="--slurm: the partition (default: the cluster's)")
    p.add_argument("--lanes-per-node", type=int, metavar="N",
                   help="--slurm: tasks per node, each with its share of the node's CPUs (default: 2 CPUs a "
                        "task on the real clock, 1 on the virtual clock)")
    p.add_argument("--batch", type=int, default=DEFAULT_BATCH, metavar="N",
                   help=f"--slurm: runs per array task (default {DEFAULT_BATCH})")
    p.add_argument("--slurm-args", metavar="'…'", help="--slurm: further sbatch options, as one string")
    p.add_argument("--node-dir", metavar="DIR",
                   help="--slurm: each task writes its runs under DIR on its node (node-local storage, for a "
                        "campaign directory the nodes do not share); they are staged back through srun after "
                        "the array (default: the nodes write into the campaign directory itself)")
    p.add_argument("--task", type=int, help=argparse.SUPPRESS)      # a task of --slurm
    p.add_argument("--json", action="store_true", help="print the summary path and per-variant figures as JSON")
    _clock_options(p, default=None)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("fleet", help="a Slurm cluster on an Ansible inventory's hosts (then run --slurm)")
    fleet = p.add_subparsers(dest="fleet_command", required=True, metavar="FLEET_COMMAND")
    p = fleet.add_parser("up", help="a Slurm cluster on the inventory's hosts, for run --slurm "
                                    "(docs/operations.md#on-a-cluster)")
    p.add_argument("-i", "--inventory", required=True,
                   help="Ansible inventory; the group slurm_controller names the controller (default: the first host)")
    p.add_argument("--name", default="startlab", help="the cluster's name (default startlab)")
    p.add_argument("--provisioned", action="store_true",
                   help="the hosts are provisioned startlab testbeds already: skip playbooks/site.yml")
    p.set_defaults(func=cmd_fleet_up)

    p = sub.add_parser("analyze", help="re-analyse a campaign's captures (no emulation, no root)")
    p.add_argument("dir", metavar="DIR", help="campaign directory")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser("report", help="write summary and report.html of an analysed campaign (no root)")
    p.add_argument("dir", metavar="DIR")
    p.add_argument("--json", action="store_true")
    p.add_argument("--paper-figures", metavar="OUT_DIR",
                   help="also write the campaign's figures beside its paper into OUT_DIR as <name>.png "
                        "(the paper pages use docs/papers/figures)")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="compare two campaigns' summaries (e.g. last night vs tonight; no root)")
    p.add_argument("old", metavar="OLD_DIR")
    p.add_argument("new", metavar="NEW_DIR")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("nightly", help="run the nightly scenarios once, compare with the previous night, "
                                       "write the history page and regressions.json")
    p.add_argument("--once", action="store_true", help="run one night now (a timer or cron schedules the nights)")
    p.add_argument("--config", help="nightly configuration (default config/nightly.yaml)")
    p.add_argument("--root", help="results root, instead of the configuration's (<root>/<scenario>/<night>)")
    p.add_argument("--delay-backend", default="auto", choices=BACKEND_CHOICES)
    p.add_argument("--json", action="store_true", help="print regressions.json")
    _clock_options(p)
    # The virtual clock's guest: one entry's campaign into --out, only the runs in --only.
    p.add_argument("--entry", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--only", help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_nightly)

    p = sub.add_parser("docs", help="regenerate the reference pages in docs/reference from the code")
    p.add_argument("--check", action="store_true", help="only say which pages are out of date (exit 1 if any)")
    p.set_defaults(func=cmd_docs)

    p = sub.add_parser("slurm-local", help="a one-node Slurm cluster on this machine until Ctrl-C, "
                                           "to try run --slurm (docs/operations.md#on-a-cluster)")
    p.add_argument("--cpus", type=int, help="the node's CPUs (default: this process's)")
    p.set_defaults(func=cmd_slurm_local)

    p = sub.add_parser("clean", help="remove what startlab created (and nothing else)")
    p.add_argument("--force", action="store_true",
                   help="also remove instances whose owner process is still running")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_clean)

    p = sub.add_parser("kernels", help="run startlab's checks on Debian's stock kernels, each in a VM "
                                       "(image built from Debian's packages and cached)")
    p.add_argument("--kernels", default="6.1,6.12", help="comma-separated: 6.1 (Debian 12), 6.12 (Debian 13, "
                                                         "12's backports); default both")
    p.add_argument("--checks", help="comma-separated subset: doctor, smoke, variants, clean (default all)")
    p.add_argument("--clock", default="real", choices=clock.CHOICES,
                   help="virtual: every guest under QEMU's instruction-counted time, its timing judged")
    p.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"],
                   help="KVM, software emulation, or auto: KVM if a guest boots with it (default)")
    p.add_argument("--mirror", help="Debian mirror to build the image from (default: the host's apt sources)")
    p.add_argument("--keep", metavar="DIR", help="keep each guest's logs and results in DIR")
    p.add_argument("--timeout-s", type=float, default=3600, help="per kernel (default 3600)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_kernels)

    p = sub.add_parser("vagrant", help="`vagrant up` with libvirt on startlab's own box (built from the VM image, "
                                       "no download), the demo inside, then `vagrant destroy`")
    p.add_argument("--accel", default="auto", choices=["auto", "kvm", "tcg"],
                   help="KVM, software emulation, or auto: KVM if a guest boots with it (default)")
    p.add_argument("--cpus", type=int, default=2, help="the VM's CPUs (default 2)")
    p.add_argument("--memory-mb", type=int, default=4096, help="the VM's memory (default 4096)")
    p.add_argument("--keep", metavar="DIR", help="keep Vagrant's log and the demo's output in DIR")
    p.add_argument("--inside", metavar="CMD", help="what runs in the VM (default: the demo)")
    p.add_argument("--timeout-s", type=float, default=3600, help="for each of `vagrant up` and the demo")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_vagrant)

    p = sub.add_parser("demo", help="a small comparison on the embedded smoke scenario")
    p.add_argument("--json", action="store_true")
    _clock_options(p)
    p.set_defaults(func=cmd_demo)
    return parser


def _terminate_on_sigterm() -> None:
    """SIGTERM unwinds like Ctrl-C, so every `with Network(...)` tears down."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)


def main(argv: list[str]) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    _terminate_on_sigterm()
    try:
        return args.func(args)
    except UserError as exc:
        print(f"startlab: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", 2)
    except KeyboardInterrupt:
        print("startlab: interrupted; everything it created was removed", file=sys.stderr)
        return 130
    except BrokenPipeError:          # output piped into `head` and the like
        sys.stderr.close()
        return 0
