"""What a measured host (machine/host.py) means for the emulation of a link profile.

Three decisions, each from the measured timer wake-up distribution rather than from a
constant of one machine:
  - the delay line's spin window (`EmulatorTuning`): the timer is armed `spin_lead_us`
    before a sparse release and the rest is spun; the lead covers the host's p99 wake-up;
  - tbf's bucket (`tbf_stall_s`): when tbf's watchdog wakes late, the tokens of the delay
    are kept only up to the bucket; the rest is rate lost for good. The bucket is sized so
    that the rate the measured wake-ups would cost stays a fifth of the 1 % tolerance;
  - a verdict per profile (`verdict`): can this host emulate it within the fidelity
    tolerances, and if not, why, in one line.
During a run, `delay_flags` and `rate_flags` (together `run_flags`) turn the run's own
monitor figures into the reasons a run is flagged (empty: the host was fit while it ran).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from machine.host import HostTiming
from links.profiles import TBF_MIN_BURST_PKTS, LinkProfile

# The delay element's lateness tolerance (fidelity: p99 ≤ 1 ms). A host qualifies when its
# timer wake-ups stay within half of it at p99: the run's own load (softirqs, the traffic's
# applications) comes on top of the calibration's.
LATE_P99_US = 1000
HOST_WAKEUP_P99_US = LATE_P99_US // 2
# Steal beyond this during a run is named as the cause of whatever went late.
STEAL_NOTABLE = 0.05
# tbf may lose at most this share of its rate to late wake-ups (the tolerance is 1 %).
TBF_RATE_LOSS = 0.002
# During a run: the wake-ups it saw would cost a tbf more than this (half the tolerance).
TBF_RUN_LOSS = 0.005
# A bucket larger than this share of the bottleneck's buffer would make the link burstier
# than the profile it emulates: the host is then unfit for tbf at that rate.
TBF_BUCKET_MAX_BUFFER_SHARE = 0.25
# The spin window: the lead covers the p99 wake-up plus this margin, within these bounds.
SPIN_MARGIN_US = 10
SPIN_LEAD_MIN_US, SPIN_LEAD_MAX_US = 20, 1000
SPIN_SLACK_US = 20              # the spin may run this much longer than the lead


@dataclass(frozen=True)
class EmulatorTuning:
    """The emulator's timing parameters, recorded in every run's meta.json."""
    source: str                 # 'measured' (from this host) or 'fixed' (the old constants)
    spin_lead_us: int
    spin_max_us: int
    host: HostTiming | None = None

    def as_record(self) -> dict:
        d = asdict(self)
        d.pop("host")
        return d

    def delayline_flags(self) -> list[str]:
        return ["--spin-lead-us", str(self.spin_lead_us), "--spin-max-us", str(self.spin_max_us)]

    def tbf_burst_bytes(self, profile: LinkProfile, direction: str) -> int:
        if self.host is None:
            return profile.tbf_burst_bytes(direction)
        return profile.tbf_burst_bytes(direction, stall_s=tbf_stall_s(self.host, profile, direction))


# The constants of the machine the emulator was first tuned on (timerfd 40–60 µs late,
# tbf bucket of 500 µs): selectable so a benchmark can run before and after side by side.
FIXED = EmulatorTuning(source="fixed", spin_lead_us=80, spin_max_us=100)


def tuning_for(host: HostTiming | None) -> EmulatorTuning:
    """The spin window from the measured p99 wake-up (FIXED when nothing was measured)."""
    if host is None or host.timer_wakeup_us.get("p99") is None:
        return FIXED
    lead = min(SPIN_LEAD_MAX_US, max(SPIN_LEAD_MIN_US, int(host.timer_wakeup_us["p99"]) + SPIN_MARGIN_US))
    return EmulatorTuning(source="measured", spin_lead_us=lead, spin_max_us=lead + SPIN_SLACK_US, host=host)


def tbf_rate_loss(histogram: list, frame_s: float, stall_s: float) -> float:
    """Share of tbf's rate that wake-ups distributed as `histogram` ([[µs, count], ...])
    would lose with a bucket that absorbs `stall_s`: each wake-up later than that loses
    the tokens of its excess. One wake-up per frame time: the worst case of a saturated
    queue with nothing else to trigger a dequeue."""
    total = sum(n for _, n in histogram)
    if total == 0:
        return 0.0
    excess_s = sum(n * max(0.0, us * 1e-6 - stall_s) for us, n in histogram)
    return excess_s / total / frame_s


def tbf_bucket_cap_frames(profile: LinkProfile, direction: str) -> int:
    """The largest bucket the emulated link tolerates: a quarter of its buffer (at least the
    minimum). A host that needs more is unfit for tbf at that rate (`verdict`)."""
    return max(TBF_MIN_BURST_PKTS, int(TBF_BUCKET_MAX_BUFFER_SHARE * profile.buffer_packets(direction)))


def tbf_stall_s(host: HostTiming, profile: LinkProfile, direction: str, capped: bool = True) -> float:
    """The smallest stall the bucket must absorb so that the measured wake-ups cost at most
    TBF_RATE_LOSS of the rate (searched over whole frames), within the link's cap unless
    `capped` is False (the verdict asks what the host would need)."""
    frame_s = profile.frame_bytes * 8 / profile.rate_bps(direction)
    hist = host.histogram or []
    low = TBF_MIN_BURST_PKTS - 1
    high = tbf_bucket_cap_frames(profile, direction) - 1 if capped else 100_000
    # The loss falls as the bucket grows: bisect for the smallest bucket that meets it.
    while low < high:
        mid = (low + high) // 2
        if tbf_rate_loss(hist, frame_s, mid * frame_s) > TBF_RATE_LOSS:
            low = mid + 1
        else:
            high = mid
    return low * frame_s


def tbf_bucket_frames(host: HostTiming | None, profile: LinkProfile, direction: str, capped: bool = True) -> int:
    """The bucket (frames) this host needs for `profile`, within the link's cap by default."""
    if host is None:
        return math.ceil(profile.tbf_burst_bytes(direction) / profile.frame_bytes)
    stall = tbf_stall_s(host, profile, direction, capped)
    return math.ceil(profile.tbf_burst_bytes(direction, stall_s=stall) / profile.frame_bytes)


@dataclass(frozen=True)
class ProfileVerdict:
    profile: str
    ok: bool
    reason: str                 # one line; empty when ok
    tbf_bucket_frames: dict     # per direction, as this host would size it

    def as_record(self) -> dict:
        return asdict(self)


def verdict(profile: LinkProfile, host: HostTiming) -> ProfileVerdict:
    """Can this host emulate `profile` within the fidelity tolerances?"""
    reasons = []
    p99 = host.timer_wakeup_us.get("p99") or 0
    steal = host.steal_fraction or 0.0
    if p99 > HOST_WAKEUP_P99_US:
        reasons.append(f"timer wake-ups p99 {p99} µs (> {HOST_WAKEUP_P99_US} µs, half the delay element's "
                       f"1 ms lateness tolerance), p99.9 {host.timer_wakeup_us.get('p999')} µs"
                       + (f", steal {100 * steal:.0f} %" if steal >= STEAL_NOTABLE else ""))
    buckets = {}
    if not profile.offload:
        for direction in ("down", "up"):
            frames = tbf_bucket_frames(host, profile, direction, capped=False)
            buckets[direction] = min(frames, tbf_bucket_cap_frames(profile, direction))
            if frames > tbf_bucket_cap_frames(profile, direction):
                reasons.append(f"tbf {direction} would need a {frames}-frame bucket to keep its rate within 1 % "
                               f"of wake-ups p99.9 {host.timer_wakeup_us.get('p999')} µs, max "
                               f"{host.timer_wakeup_us.get('max', 0) / 1000:.1f} ms (more than a quarter of the "
                               f"{profile.buffer_packets(direction)}-frame buffer)")
    return ProfileVerdict(profile=profile.name, ok=not reasons, reason="; ".join(reasons), tbf_bucket_frames=buckets)


def delay_flags(monitor: HostTiming | None, delay_stats: list[dict] | None = None, tail: bool = False) -> list[str]:
    """Why a run's delays and release times cannot be trusted: the host monitor's timer
    wake-ups during the run, and the delay element's own lateness. Empty: fit. `tail`: for
    a figure of the tail of a few frames (a p99 of one flow among several), also when the
    wake-ups' p99.9 exceeded the 1 ms tolerance."""
    flags = []
    if tail and monitor is not None and (monitor.timer_wakeup_us.get("p999") or 0) > LATE_P99_US:
        flags.append(f"host timer wake-ups p99.9 {monitor.timer_wakeup_us['p999']} µs during the run "
                     f"(> {LATE_P99_US} µs: a tail of a few frames is the host's)")
    if monitor is not None:
        p99 = monitor.timer_wakeup_us.get("p99") or 0
        steal = monitor.steal_fraction or 0.0
        # Steal alone flags nothing: it matters where it makes wake-ups or releases late.
        if p99 > HOST_WAKEUP_P99_US:
            flags.append(f"host timer wake-ups p99 {p99} µs during the run (> {HOST_WAKEUP_P99_US} µs)"
                         + (f", steal {100 * steal:.0f} %" if steal >= STEAL_NOTABLE else ""))
    late = max(((s.get("lateness_us") or {}).get("p99") or 0 for s in (delay_stats or [])), default=0)
    if late > LATE_P99_US:
        flags.append(f"delay lateness p99 {late / 1000:.2f} ms (> {LATE_P99_US / 1000:g} ms)"
                     f"{lateness_cause(monitor, delay_stats or [])}")
    return flags


# A delay lateness flag with this ending is the emulator's fault, not the host's: the tests
# fail on it rather than accept it as an unfit host.
LINE_ITSELF_LATE = "the delay line itself was late"


def lateness_cause(monitor: HostTiming | None, delay_stats: list[dict]) -> str:
    """Why the delay line's frames were late. The line measures, per frame, how much of its
    lateness came after the wait before its round ended (its own work: receiving, queueing,
    sending) and how late those waits ended (the host's wake-ups on the line's CPU), and the
    longest time it was kept off the CPU while spinning. Only a frame late by its own work
    is the line's fault; the rest is the host's, as the monitor beside it says. Own work is
    what the line's thread spent on its CPU: the time it was kept off it (preempted, or
    stolen by the hypervisor) within a round is counted as the host's (off_cpu_max_us)."""
    own_p99 = max(((s.get("own_lateness_us") or {}).get("p99") or 0 for s in delay_stats), default=0)
    line_p99 = max(((s.get("wakeup_us") or {}).get("p99") or 0 for s in delay_stats), default=0)
    stall = max((s.get("spin_stall_max_us") or 0 for s in delay_stats), default=0)
    send = max((s.get("send_call_max_us") or 0 for s in delay_stats), default=0)
    off_cpu = max((s.get("off_cpu_max_us") or 0 for s in delay_stats), default=0)
    own = (f"the line's own work p99 {own_p99} µs, its timer wake-ups p99 {line_p99} µs, longest stall "
           f"while spinning {stall / 1000:.1f} ms, longest send {send / 1000:.1f} ms, longest off its CPU "
           f"while working {off_cpu / 1000:.1f} ms")
    measured_own = any("own_lateness_us" in s for s in delay_stats)
    # The line's own CPU as the calibration would judge it: its timer wake-ups and stalls,
    # and the monitor's beside it. Own work is the line's fault only on a CPU that was fit.
    cpu_fit = (line_p99 <= HOST_WAKEUP_P99_US and stall <= LATE_P99_US
               and (monitor is None or (monitor.timer_wakeup_us.get("p99") or 0) <= HOST_WAKEUP_P99_US))
    if measured_own and own_p99 > LATE_P99_US and cpu_fit:
        return f" ({own}): {LINE_ITSELF_LATE}"
    if measured_own or not cpu_fit:
        host = f"; {monitor.describe()}" if monitor is not None else ""
        return f": the host woke or kept the line late ({own}{host})"
    if monitor is None:
        return ""
    if (monitor.timer_wakeup_us.get("p99") or 0) > HOST_WAKEUP_P99_US:
        return f": {monitor.describe()}"
    return f" while the host's own wake-ups were punctual ({monitor.describe()}): {LINE_ITSELF_LATE}"


def rate_flags(monitor: HostTiming | None, tbf: list[dict] | None = None) -> list[str]:
    """Why a run's tbf rates cannot be trusted: the rate the wake-ups measured during the run
    would cost each queue (`tbf`: applied settings with rate_bps and burst_bytes), beyond
    half the 1 % tolerance. Empty: fit."""
    flags = []
    if monitor is None or not monitor.histogram:
        return flags
    for q in tbf or []:
        frame = q.get("frame_bytes") or 1514
        frame_s = frame * 8 / q["rate_bps"]
        stall_s = max(0.0, q["burst_bytes"] / frame - 1) * frame_s
        loss = tbf_rate_loss(monitor.histogram, frame_s, stall_s)
        if loss > TBF_RUN_LOSS:
            flags.append(f"tbf {q.get('direction', '')} at {q['rate_bps'] / 1e6:g} Mbit/s would lose "
                         f"{100 * loss:.1f} % of its rate to the wake-ups measured during the run "
                         f"(bucket {q['burst_bytes'] // frame} frames; max wake-up "
                         f"{(monitor.timer_wakeup_us.get('max') or 0) / 1000:.1f} ms)")
    return flags


def run_flags(monitor: HostTiming | None, delay_stats: list[dict] | None = None,
              tbf: list[dict] | None = None) -> list[str]:
    """Every reason a run's timing cannot be trusted (delays and rates); empty: fit."""
    return delay_flags(monitor, delay_stats) + rate_flags(monitor, tbf)

