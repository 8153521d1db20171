"""How punctually this host runs the emulator: measured, never assumed.

The delay line and tbf release packets on timers. How late a timer wakes depends on the
host — timer interrupt delivery in a VM, CPU steal by the hypervisor, other load — and
the same kind of machine differs from day to day. So startlab measures it:

  - `calibrate()`: once per campaign (and by `doctor`), before any network is built. The
    delay line's own binary (`startlab-delayline probe`) arms the delay line's timer the
    same way, at the same real-time priority, on every CPU, while a SCHED_IDLE thread keeps
    each CPU busy: a hypervisor takes time (steal) only from vCPUs that want to run, so an
    idle host would measure nothing. /proc/stat gives the steal over the same window.
  - `HostMonitor`: during each run, the same probe every millisecond without load (the run
    is the load), and the steal over the run. Cheap: two wake-ups per millisecond.

What the figures mean for a link profile (tuning and verdicts) is decided in
`links/hostfit.py`; this module only measures.
"""
from __future__ import annotations

import json
import signal
import subprocess
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from machine import binaries
from machine.errors import UserError

CALIBRATION_S = 6.0           # 3 s idle + 3 s busy at 0.5 ms on 2 CPUs: 24,000 wake-ups, p99.9 from 24
CALIBRATION_INTERVAL_US = 500
MONITOR_INTERVAL_US = 1000
# The delay line's threads run SCHED_RR at this priority (links/delay.py starts it);
# the probe measures at the same priority so that it sees what the delay line sees.
DELAYLINE_RT_PRIORITY = 10
PROBE_READY_S = 5.0


@dataclass
class HostTiming:
    """Timer wake-up lateness and CPU steal over one measured window."""
    timer_wakeup_us: dict             # p50, p99, p999, max (µs)
    steal_fraction: float | None      # steal ÷ all CPU time of the window (None: not reported)
    cpus: int
    seconds: float
    samples: int
    interval_us: int
    rt_priority: int
    loaded: bool                      # measured with every CPU kept busy (calibration)
    clocksource: str | None = None
    phases: dict | None = None        # the calibration's idle and busy halves, each's figures
    histogram: list = field(default_factory=list, repr=False)   # [[µs, count], ...]

    def as_record(self) -> dict:
        """What a run's meta.json keeps (the histogram too: the tuning is derived from it)."""
        return asdict(self)

    @classmethod
    def from_record(cls, d: dict) -> "HostTiming":
        return cls(**{k: d.get(k) for k in cls.__dataclass_fields__ if k in d})

    def brief(self) -> dict:
        """The figures without the histogram (for reports and per-run records)."""
        record = self.as_record()
        record.pop("histogram", None)
        return record

    def describe(self) -> str:
        """One line for people: 'timer wake-ups p50 77 µs, p99 110 µs, p99.9 440 µs, steal 9 %'."""
        t = self.timer_wakeup_us
        steal = "" if self.steal_fraction is None else f", steal {100 * self.steal_fraction:.0f} %"
        return (f"timer wake-ups p50 {t.get('p50')} µs, p99 {t.get('p99')} µs, p99.9 {t.get('p999')} µs, "
                f"max {t.get('max', 0):.0f} µs{steal}")


def cpu_times() -> tuple[int, int]:
    """(steal, total) jiffies over all CPUs from /proc/stat."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    values = [int(x) for x in fields]
    # user nice system idle iowait irq softirq steal guest guest_nice; guest time is
    # already counted in user/nice, so it is left out of the total.
    total = sum(values[:8])
    steal = values[7] if len(values) > 7 else 0
    return steal, total


def steal_between(before: tuple[int, int], after: tuple[int, int]) -> float | None:
    total = after[1] - before[1]
    if total <= 0:
        return None
    return (after[0] - before[0]) / total


def clocksource() -> str | None:
    try:
        return Path("/sys/devices/system/clocksource/clocksource0/current_clocksource").read_text().strip()
    except OSError:
        return None


def _probe_binary() -> Path:
    found = binaries.delayline()
    if found is None:
        raise UserError(f"the host probe (startlab-delayline) is not built; {binaries.BUILD_HINT}")
    return found


def probe_command(seconds: float, interval_us: int, *, load: bool, rt_priority: int = DELAYLINE_RT_PRIORITY,
                  hog: tuple[int, int] | None = None, out: Path | None = None,
                  cpus: list[int] | None = None) -> list[str]:
    return [str(_probe_binary()), "probe", "--seconds", f"{seconds:g}", "--interval-us", str(interval_us),
            "--rt-priority", str(rt_priority), *(["--load"] if load else []),
            *(["--hog", f"{hog[0]},{hog[1]}"] if hog else []),
            *(["--cpus", ",".join(map(str, cpus))] if cpus else []),
            *(["--out", str(out)] if out else [])]


def _timing(raw: dict, steal: float | None, loaded: bool) -> HostTiming:
    return HostTiming(timer_wakeup_us=raw["lateness_us"], steal_fraction=steal, cpus=len(raw["cpus"]),
                      seconds=raw["seconds"], samples=raw["samples"], interval_us=raw["interval_us"],
                      rt_priority=raw["rt_priority"], loaded=loaded, clocksource=clocksource(),
                      histogram=raw["histogram"])


def _probe(seconds: float, load: bool, rt_priority: int) -> tuple[dict, float | None]:
    before = cpu_times()
    proc = subprocess.run(probe_command(seconds, CALIBRATION_INTERVAL_US, load=load, rt_priority=rt_priority),
                          capture_output=True, text=True, timeout=seconds + 30)
    after = cpu_times()
    if proc.returncode != 0:
        raise RuntimeError(f"the host probe failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return json.loads(proc.stdout.split("ready", 1)[-1]), steal_between(before, after)


def quantiles(histogram: list) -> dict:
    """p50, p99, p999 (µs, nearest rank over whole-µs buckets) and max of [[µs, count], ...]."""
    ordered = sorted((int(us), int(n)) for us, n in histogram)
    total = sum(n for _, n in ordered)
    out: dict = {}
    for key, q in (("p50", 0.5), ("p99", 0.99), ("p999", 0.999)):
        rank, seen, out[key] = max(1, -(-int(q * total * 1000) // 1000)), 0, None
        for us, n in ordered:
            seen += n
            if seen >= rank:
                out[key] = us
                break
    return out


def calibrate(seconds: float = CALIBRATION_S, *, rt_priority: int = DELAYLINE_RT_PRIORITY) -> HostTiming:
    """Measure timer wake-up lateness and steal (see the module doc): half the time with the
    CPUs idle — an idle vCPU wakes from its halt state later — and half with every CPU
    kept busy, where a hypervisor's steal shows. A run's CPUs are in both states; the
    histograms are merged, the steal is the busy half's."""
    idle, _ = _probe(seconds / 2, False, rt_priority)
    busy, steal = _probe(seconds / 2, True, rt_priority)
    merged: dict[int, int] = {}
    for us, n in idle["histogram"] + busy["histogram"]:
        merged[us] = merged.get(us, 0) + n
    histogram = sorted([us, n] for us, n in merged.items())
    figures = quantiles(histogram)
    figures["max"] = max(idle["lateness_us"]["max"], busy["lateness_us"]["max"])
    raw = {**busy, "histogram": histogram, "lateness_us": figures, "samples": idle["samples"] + busy["samples"],
           "seconds": idle["seconds"] + busy["seconds"]}
    timing = _timing(raw, steal, loaded=True)
    timing.phases = {"idle": idle["lateness_us"], "busy": busy["lateness_us"]}
    return timing


class HostMonitor:
    """The probe and steal over one run, started before and stopped after it.

    `instance` (a machine.registry.Instance) records the probe's PID, so a run that dies
    leaves nothing `run.py clean` cannot find. `hog` makes the host unfit on purpose
    (tests): a SCHED_FIFO thread per CPU busy RUN µs of every PERIOD µs.
    """

    def __init__(self, workdir: Path, instance=None, *, hog: tuple[int, int] | None = None,
                 interval_us: int = MONITOR_INTERVAL_US) -> None:
        self.out = Path(workdir) / "host-monitor.json"
        self.instance = instance
        self.hog = hog
        self.interval_us = interval_us
        self.proc: subprocess.Popen | None = None
        self.before: tuple[int, int] | None = None
        self.generation = 0

    def start(self) -> "HostMonitor":
        self.out.parent.mkdir(parents=True, exist_ok=True)
        self.out.unlink(missing_ok=True)
        self.proc = subprocess.Popen(probe_command(0, self.interval_us, load=False, hog=self.hog, out=self.out),
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)
        if self.instance is not None:
            self.instance.add_process(self.proc.pid, "host monitor")
        assert self.proc.stdout is not None
        deadline = time.monotonic() + PROBE_READY_S
        line = b""
        while time.monotonic() < deadline and line.strip() != b"ready":
            line = self.proc.stdout.readline()
            if not line:
                break
        if line.strip() != b"ready":
            err = self.proc.stderr.read().decode(errors="replace") if self.proc.stderr else ""
            self.proc.kill()
            self.proc.wait()
            raise RuntimeError(f"the host monitor did not start: {err.strip() or 'no message'}")
        self.before = cpu_times()
        self.generation = 0
        return self

    def snapshot(self, timeout_s: float = 5.0) -> dict:
        """Cumulative figures so far (SIGUSR1): {'raw': the probe's document, 'cpu': /proc/stat}.
        `interval(a, b)` turns two into a run's HostTiming."""
        if self.proc is None or self.proc.poll() is not None:
            raise RuntimeError("the host monitor is not running")
        wanted = self.generation + 1
        self.proc.send_signal(signal.SIGUSR1)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                raw = json.loads(self.out.read_text())
            except (OSError, ValueError):
                raw = {}
            if raw.get("generation", 0) >= wanted:
                self.generation = raw["generation"]
                return {"raw": raw, "cpu": cpu_times()}
            time.sleep(0.005)
        raise RuntimeError(f"the host monitor gave no snapshot within {timeout_s:g} s")

    def stop(self) -> HostTiming | None:
        """The window's figures; None if the monitor was never started."""
        if self.proc is None or self.before is None:
            return None
        after = cpu_times()
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        finally:
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream:
                    stream.close()
        self.proc = None
        if not self.out.exists():
            return None
        raw = json.loads(self.out.read_text())
        return _timing(raw, steal_between(self.before, after), loaded=False)


def interval(before: dict, after: dict) -> HostTiming:
    """The host's figures between two monitor snapshots (a run's window)."""
    h0 = {int(us): int(n) for us, n in before["raw"]["histogram"]}
    hist = []
    for us, n in after["raw"]["histogram"]:
        d = int(n) - h0.get(int(us), 0)
        if d > 0:
            hist.append([int(us), d])
    figures = quantiles(hist)
    figures["max"] = hist[-1][0] if hist else None
    raw = {**after["raw"], "histogram": hist, "lateness_us": figures,
           "samples": sum(n for _, n in hist), "seconds": after["raw"]["seconds"] - before["raw"]["seconds"]}
    return _timing(raw, steal_between(before["cpu"], after["cpu"]), loaded=False)



_current: HostTiming | None = None


def current() -> HostTiming:
    """This process's calibration: measured at first use (CALIBRATION_S), then reused, so a
    campaign, a fidelity check or a test session calibrates once, before its networks."""
    global _current
    if _current is None:
        _current = calibrate()
    return _current


def use(timing: HostTiming) -> None:
    """Adopt a calibration measured elsewhere (a campaign's, for its lane workers)."""
    global _current
    _current = timing
