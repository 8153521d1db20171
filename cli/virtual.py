"""`--clock virtual`: a command's emulation in a guest on the virtual clock (machine/vm/icount.py).

The host prepares (the image, the guest kernel's BPF objects, a bundle of this checkout with
the job), boots a fresh guest for every run of a campaign (one for a fidelity check, a
kernel's cells or a group of tests), and unpacks each run a guest exports as it arrives, so
a killed guest loses no finished run. What needs no emulation (the summary, the report) is done on the
host afterwards, where the CPU is not the guest's.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

from machine.errors import UserError
from machine.vm import icount
from machine.vm import image as vm_image
from results import export, schema
from scenarios.stats import add_stats, new_stats

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_KERNEL = "6.1"
GUEST_CAMPAIGN = "/run/startlab-campaign"
# The guest's interpreter and run.py: the checkout's, at its host path in the bundle.
PY, RUN = shlex.quote(str(ROOT / ".venv" / "bin" / "python")), shlex.quote(str(ROOT / "run.py"))


class Importer:
    """Unpacks the guest's export stream into `dest` as records complete. A run's meta.json
    gets the cluster task's ids there (machine/provenance.py): the guest does not see them,
    so that its inputs, and with them its runs, are the same on a cluster as here."""

    def __init__(self, stream: Path, dest: Path, files_dest: Path):
        from machine.provenance import slurm_task
        self.stream, self.dest, self.files_dest, self.offset, self.names = stream, dest, files_dest, 0, []
        self.meta_extra = {"slurm": slurm_task()} if slurm_task() else None

    def poll(self) -> list[str]:
        recs, self.offset = export.records(self.stream, self.offset)
        for name, data in recs:
            export.unpack(name, data, self.files_dest if name == export.CAMPAIGN_FILES else self.dest,
                          self.meta_extra)
            self.names.append(name)
        return [n for n, _ in recs]


_PREPARING = threading.Lock()


def prepare(kernel_name: str, progress) -> tuple[vm_image.Image, vm_image.Kernel, Path]:
    """The image, the kernel and the host-built BPF objects for it (each cached). One caller
    at a time: guests booted side by side share what it builds."""
    kernel = vm_image.parse_kernels(kernel_name)[0]
    with _PREPARING:
        if os.geteuid() == 0:
            img = vm_image.ensure_image(list(vm_image.KERNELS.values()), None, progress)
        else:                        # QEMU's TCG needs no root; building an image does
            img = vm_image.user_image(progress)
        return img, kernel, icount.guest_bpf(img, kernel, ROOT, progress)


def _progress_line(log: Path) -> str:
    text = log.read_text(errors="replace") if log.is_file() else ""
    lines = [ln.strip() for ln in text.replace("\r", "\n").splitlines() if ln.strip()]
    return lines[-1][:160] if lines else "booting"


def run_in_guest(job: str, seed: int, kernel_name: str, dest: Path, timeout_s: float,
                 progress=print, files_dest: Path | None = None,
                 stop: threading.Event | None = None) -> tuple[icount.VirtualBoot, dict]:
    """Boot one guest on the virtual clock with `job` (sh, run in the checkout), unpacking
    what it exports into `dest`; the campaign's own files and the guest's log go to
    `files_dest` (default `dest`: a cluster's tasks share `dest` and keep theirs apart).
    Raises UserError when the guest did not finish its job (`stop` ends it at once)."""
    img, kernel, bpf = prepare(kernel_name, progress)
    files_dest = files_dest or dest
    for d in (dest, files_dest):
        d.mkdir(parents=True, exist_ok=True)
    # Named by this process, so `run.py clean` removes it if this process dies first.
    with tempfile.TemporaryDirectory(prefix=f".virtual-{os.getpid()}-", dir=img.dir) as tmp:
        work = Path(tmp)
        clock = icount.clock_record(img, kernel, seed)
        bundle, clock = icount.make_bundle(ROOT, work, f"cd {shlex.quote(str(ROOT))}\n{job}", clock, bpf)
        importer = Importer(work / "job" / "runs.stream", dest, files_dest)

        def watch(elapsed: float) -> None:
            got = importer.poll()
            progress(f"  virtual clock, {elapsed / 60:.1f} min wall: {_progress_line(work / 'job' / 'job.log')}"
                     + (f" (received {', '.join(got)})" if got else ""))

        progress(f"virtual clock: kernel {clock['kernel']}, shift {clock['shift']}, seed {seed}, "
                 f"QEMU {clock['qemu']}; booting …")
        b = icount.boot(img, kernel, bundle, ROOT, work / "job", seed, timeout_s, watch, stop=stop)
        importer.poll()
        export.merge_campaign_files(files_dest)
        log_copy = files_dest / "guest.log"
        if b.log.is_file():
            shutil.copy(b.log, log_copy)
        if b.rc is None:
            raise UserError(f"the guest on the virtual clock did not finish its job: {b.why} (its log: {log_copy})")
        progress(f"virtual clock: {b.guest_s} guest s in {b.wall_s:.0f} s wall"
                 + (f" ({b.wall_s / b.guest_s:.1f}×)" if b.guest_s else ""))
        return b, clock


def run_args(args) -> list[str]:
    """The guest's `run.py run` selections (profiles, sizes, variants, repetitions)."""
    argv = []
    for flag in ("profiles", "sizes", "variants"):
        if getattr(args, flag):
            argv += [f"--{flag}", getattr(args, flag)]
    if args.reps is not None:
        argv += ["--reps", str(args.reps)]
    return argv


def _in_checkout(path: Path, what: str) -> Path:
    """`path`, resolved; an error unless the guest sees it (the checkout is all it sees)."""
    path = path.resolve()
    if not path.is_relative_to(ROOT):
        raise UserError(f"{path}: on the virtual clock {what} must be inside the checkout ({ROOT}), "
                        "which is what the guest sees")
    return path


def run_job(selection: list[str], run_id: str, delay_backend: str) -> str:
    """The job of one run's guest: the command's selection and the run, nothing of the other
    runs of the campaign or the batch, so that its guest is the same whoever asks for it."""
    only = "/run/startlab-only.txt"
    # --delay-backend auto is the guest kernel's netem there (links/delay.py)
    return (f"printf '%s\\n' {shlex.quote(run_id)} > {only}\n"
            f"{PY} {RUN} {' '.join(map(shlex.quote, selection))} "
            f"--out {GUEST_CAMPAIGN} --only {only} --delay-backend {delay_backend}\n")


def run_campaign_virtual(args, sc, out: Path | None, selection: list[str] | None = None,
                         only: set[str] | None = None, files_dest: Path | None = None) -> tuple[Path, dict]:
    """`run SCENARIO --clock virtual`: each run of the campaign (or of `only`) in a guest of
    its own, booted fresh, icount.guests_at_once() side by side; returns (campaign, stats).

    A fresh boot is the fixed state before every run: a run's figures then depend on the
    checkout, the command's selection, the run and its seed, and not on which runs went
    before it in the same guest (two runs of one guest start from different states: the
    instance's name, the guest's uptime) nor on how a cluster batched them. The guest's
    seed is the run's own (icount.run_seed), so repetitions differ. `selection` is the
    guest's run.py command that names the campaign's scenario (default: `run SCENARIO` with
    the command line's overrides; nightly names its entry instead). Each guest's log and
    stats stay in `files_dest`/guests/RUN (a cluster's task has its own `files_dest`)."""
    from scenarios.progress import Progress
    from scenarios.runner import MAX_CONSECUTIVE_FAILURES, open_campaign, select_runs
    vm_image.parse_kernels(args.kernel)          # a bad name before any directory is made
    if selection is None:
        selection = ["run", str(_in_checkout(Path(sc.path), "a scenario")), *run_args(args)]
    campaign = open_campaign(sc, out)
    runs = select_runs(sc, only)
    todo = [r.run_id for r in runs if not campaign.is_done(r.run_id)]
    stats = new_stats(len(runs), len(todo))
    if not todo:
        return campaign.path, stats
    files_dest = files_dest or campaign.path
    seed = args.seed if args.seed is not None else sc.seed
    prepare(args.kernel, lambda m: print(m, file=sys.stderr))     # once, before the guests share it
    at_once = min(len(todo), icount.guests_at_once())
    print(f"virtual clock: {len(todo)} runs, each in a fresh guest, {at_once} at a time "
          f"(kernel {args.kernel}, seed {seed})", file=sys.stderr)

    stopping = threading.Event()      # set when the command is interrupted: its guests stop at once

    def one(run_id: str) -> tuple[str, icount.VirtualBoot, Path]:
        own = files_dest / schema.GUESTS_DIR / run_id
        shutil.rmtree(own, ignore_errors=True)
        b, _ = run_in_guest(run_job(selection, run_id, args.delay_backend), icount.run_seed(seed, run_id),
                            args.kernel, campaign.path, args.timeout_s, progress=lambda m: None, files_dest=own,
                            stop=stopping)
        return run_id, b, own

    progress = Progress(len(runs), len(runs) - len(todo))
    guest_s = boot_wall_s = 0.0
    in_a_row = 0
    t0 = time.monotonic()
    with ThreadPoolExecutor(max_workers=at_once) as pool:
        pending = [pool.submit(one, r) for r in todo]
        try:
            for done in as_completed(pending):
                run_id, b, own = done.result()
                failed = _merge_guest(own, run_id, files_dest, stats)
                in_a_row = in_a_row + 1 if failed else 0
                if in_a_row >= MAX_CONSECUTIVE_FAILURES:
                    raise UserError(f"{in_a_row} runs in a row failed; last: {stats['failed'][-1]['error']}")
                guest_s += b.guest_s or 0.0
                boot_wall_s += b.boot_s or 0.0
                progress.advance()
                progress.show(f"{run_id} ({b.guest_s} guest s in {b.wall_s:.0f} s wall)")
        except BaseException:
            stopping.set()                       # the running guests, within half a second
            pool.shutdown(cancel_futures=True)   # and those not started
            raise
        finally:
            progress.close()
    stats["wall_s"] = time.monotonic() - t0
    stats["virtual_clock"] = {"guests": len(todo), "at_once": at_once, "guest_s": round(guest_s, 2),
                              "boot_wall_s": round(boot_wall_s, 1), "wall_s": round(stats["wall_s"], 1)}
    return campaign.path, stats


def _merge_guest(own: Path, run_id: str, files_dest: Path, stats: dict) -> bool:
    """One run's guest, finished: its statistics added to the campaign's, its network's
    record moved to the campaign's networks/ under the run's name (every fresh guest names
    its network alike), its log and stats kept in `own`. True when its run failed."""
    stats_file = own / "guest-stats.json"
    if not stats_file.is_file():
        tail = (own / "guest.log").read_text(errors="replace").strip().splitlines()[-12:]
        raise UserError(f"the guest of {run_id} exited before its campaign's end:\n  " + "\n  ".join(tail))
    got = json.loads(stats_file.read_text())
    add_stats(stats, got)
    nets = own / schema.NETWORKS_DIR
    for i, net in enumerate(sorted(nets.iterdir()) if nets.is_dir() else []):
        target = files_dest / schema.NETWORKS_DIR / (run_id if i == 0 else f"{run_id}-{i}")
        shutil.rmtree(target, ignore_errors=True)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(net, target)
    shutil.rmtree(nets, ignore_errors=True)
    for f in own.iterdir():              # the campaign's record, as the guest wrote it
        if f.is_file() and f.name not in ("guest-stats.json", "guest.log"):
            os.replace(f, files_dest / f.name)
    return bool(got.get("failed"))


def nightly_runner(args, config_path: Path):
    """`nightly --clock virtual`: each run of the night's scenarios in a fresh guest, which
    runs the entry of the same nightly configuration (its inline variants included)."""
    config = _in_checkout(Path(config_path), "the nightly configuration")

    def run(entry, night: Path) -> tuple[Path, dict]:
        return run_campaign_virtual(args, entry.scenario, night,
                                    ["nightly", "--once", "--config", str(config), "--entry", entry.name])
    return run


def fidelity_virtual(args) -> dict:
    """`fidelity PROFILE --clock virtual`: the check in a guest; its JSON result."""
    # --delay-backend auto is the guest kernel's netem there (links/delay.py)
    job = (f"mkdir -p /run/fidelity\n"
           f"{PY} {RUN} fidelity {shlex.quote(args.profile)} --json --pings {args.pings} "
           f"--delay-backend {args.delay_backend} > /run/fidelity/result.json\n"
           f"rc=$?\n{PY} -m results.export /run/fidelity fidelity\nexit $rc\n")
    with tempfile.TemporaryDirectory(prefix="startlab-fidelity-") as tmp:
        dest = Path(tmp)
        b, clock = run_in_guest(job, args.seed if args.seed is not None else 1, args.kernel, dest, args.timeout_s,
                                progress=lambda m: print(m, file=sys.stderr))
        path = dest / "fidelity" / "result.json"
        if not path.is_file() or not path.read_text().strip():
            raise UserError(f"the guest's fidelity check printed nothing (exit {b.rc}); its log: "
                            f"{(dest / 'guest.log').read_text(errors='replace')[-600:]}")
        result = json.loads(path.read_text())
    result["clock"] = {"clock": "virtual", **clock, "guest_s": b.guest_s, "wall_s": b.wall_s}
    return result


def pytest_in_guest(tests: list[str], dest: Path, seed: int = 1, kernel: str = DEFAULT_KERNEL,
                    timeout_s: float = 3600.0, progress=print,
                    stop: threading.Event | None = None) -> tuple[icount.VirtualBoot, Path]:
    """pytest on `tests` (paths in the checkout) in one guest on the virtual clock, the tests
    marked `virtual_clock` only. Their JUnit XML, output and exit code come back in
    `dest/pytest/` (junit.xml, output.txt, rc), which is returned with the boot; `stop` ends
    the guest at once (run_in_guest raises)."""
    paths = " ".join(shlex.quote(t) for t in tests)
    # Verbose, and through the log port as well, so that the host's progress line names the
    # test the guest is at.
    job = ("mkdir -p /run/pytest\n"
           f"{{ {PY} -m pytest -v -rfE --durations=15 -p no:cacheprovider -m virtual_clock {paths} "
           "--junitxml=/run/pytest/junit.xml; echo $? > /run/pytest/rc; } 2>&1 | tee /run/pytest/output.txt\n"
           f"{PY} -m results.export /run/pytest pytest\n")
    b, _ = run_in_guest(job, seed, kernel, dest, timeout_s, progress, stop=stop)
    return b, dest / "pytest"


def doctor_virtual(kernel_name: str, measure: list[str], progress=print) -> dict:
    """`doctor --clock virtual`: per profile, whether the guest carries it unflagged and at
    what wall-time cost (machine/vm/capacity.py's table, kept beside the image). The profiles
    in `measure` get their fidelity check in a guest first, one boot each, and are stored."""
    import time
    from types import SimpleNamespace
    from links.profiles import load_profiles
    from machine.provenance import git_revision
    from machine.vm import capacity
    kernel = vm_image.parse_kernels(kernel_name)[0]
    names = list(load_profiles())
    unknown = [m for m in measure if m not in names]
    if unknown:
        raise UserError(f"unknown profile {', '.join(unknown)}; choose from: {', '.join(names)}")
    image_dir = None
    rev, t0 = git_revision() or "unknown", time.monotonic()
    for i, name in enumerate(measure):
        done = time.monotonic() - t0
        eta = f", about {done / i * (len(measure) - i) / 60:.0f} min left" if i else ""
        progress(f"[{i + 1}/{len(measure)}] fidelity {name} --clock virtual{eta}")
        result = fidelity_virtual(SimpleNamespace(profile=name, delay_backend="auto", pings=200, seed=1,
                                                  kernel=kernel.name, timeout_s=3600.0))
        # Beside the image the guest booted (the cache may hold several).
        image_dir = vm_image.CACHE_DIR / result["clock"]["image"]
        capacity.store(image_dir, kernel.name, name, capacity.record(result, rev))
    if image_dir is None:                   # doctor reads without building an image
        newest = vm_image.newest_image(vm_image.CACHE_DIR)
        image_dir = newest.dir if newest else None
    table = capacity.load(image_dir, kernel.name) if image_dir else {}
    return {"kernel": kernel.name, "image": image_dir.name if image_dir else None,
            "profiles": {n: table.get(n) for n in names}}
