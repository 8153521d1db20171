"""Link profiles (links/profiles.yaml) and the arithmetic derived from them.

One place for every figure that follows from a profile: bandwidth-delay product,
bottleneck buffer in packets and bytes, tbf burst, payload-limited goodput.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, asdict
from pathlib import Path

from config import yamlfile
from config.yamlfile import Fields
from links import delaytraces, traces
from machine.errors import UserError
from wire.blitzstart import TECHNOLOGIES
from wire.tcpip import ETH_HEADER, tcp_mss

PROFILES_FILE = Path(__file__).with_name("profiles.yaml")
TRACES_DIR = Path(__file__).with_name("traces")


# Limits that catch typos (a rate in bit/s written into a Mbit/s field) without
# forbidding odd but real links.
MAX_RATE_MBPS = 10_000
MAX_RTT_MS = 10_000
MAX_BUFFER_PKTS = 100_000
MAX_LOSS = 0.5

# tc tbf under-shapes with a burst of one MTU: when a packet must wait for tokens, the
# watchdog timer fires late and the tokens of that delay are lost beyond the bucket. How
# late depends on the host, so links/hostfit.py sizes the bucket from the measured
# wake-ups; TBF_SLACK_S is the fixed value of the machine the emulator was first tuned on
# (timers 40-60 us late: 2 frames at 50 Mbit/s gave 99.0 %, 3 frames 99.5-100 %), kept for
# comparison and for hosts that were not measured. Never fewer than TBF_MIN_BURST_PKTS.
TBF_SLACK_S = 500e-6
TBF_MIN_BURST_PKTS = 3
# With segmentation offloads on, a GSO frame carries up to 64 KiB of payload; tbf splits
# any packet larger than its bucket, so the bucket must hold a whole one (with headers).
TBF_GSO_BURST_BYTES = 96 * 1024


@dataclass(frozen=True)
class LinkProfile:
    name: str
    down_mbps: float
    up_mbps: float
    rtt_ms: float
    buffer_pkts: int | None = None
    buffer_ms: float | None = None
    mtu: int = 1500
    topology: str = "dumbbell"
    offload: bool = False     # GSO/TSO/GRO on: for rate ceilings, not packet-exact captures
    source: str = ""
    access: str = "unknown"   # access technology of the client side (Blitzstart's hint names it)
    # A trace of delivery opportunities per direction (links/traces.py) instead of a rate:
    # the file as given (relative: in links/traces/); the direction's rate is its mean.
    trace_down: str | None = None
    trace_up: str | None = None
    # Random (Bernoulli) loss of the frames entering each direction's bottleneck.
    loss_down: float = 0.0
    loss_up: float = 0.0
    # A delay that steps over time per direction (links/delaytraces.py), added to the fixed
    # one-way delay (rtt_ms / 2, then the path's minimum RTT): a LEO path's handovers.
    delay_trace_down: str | None = None
    delay_trace_up: str | None = None

    # -- derived figures ------------------------------------------------------------
    def rate_bps(self, direction: str) -> float:
        """Link-layer rate in bit/s of 'down' (server → client) or 'up'."""
        if direction not in ("down", "up"):
            raise ValueError(direction)
        return (self.down_mbps if direction == "down" else self.up_mbps) * 1e6

    def trace_path(self, direction: str) -> Path | None:
        """The trace that drains `direction`'s bottleneck, or None for a fixed rate."""
        name = {"down": self.trace_down, "up": self.trace_up}[direction]
        return None if name is None else trace_file(name)

    @property
    def is_trace(self) -> bool:
        return self.trace_down is not None or self.trace_up is not None

    def delay_trace_path(self, direction: str) -> Path | None:
        """The delay trace added to `direction`'s delay, or None for a fixed delay."""
        name = {"down": self.delay_trace_down, "up": self.delay_trace_up}[direction]
        return None if name is None else trace_file(name)

    @property
    def has_delay_trace(self) -> bool:
        return self.delay_trace_down is not None or self.delay_trace_up is not None

    @property
    def rtt_label(self) -> str:
        """The RTT as tables show it: the minimum, and whether a delay trace adds steps to it."""
        return f"{self.rtt_ms:g} + steps" if self.has_delay_trace else f"{self.rtt_ms:g}"

    def loss(self, direction: str) -> float:
        return {"down": self.loss_down, "up": self.loss_up}[direction]

    @property
    def needs_link_model(self) -> bool:
        """More than a fixed rate: only the delay line's queue emulates it."""
        return self.is_trace or self.has_delay_trace or bool(self.loss_down or self.loss_up)

    @property
    def frame_bytes(self) -> int:
        """Size of a full-MTU frame as tbf counts it."""
        return self.mtu + ETH_HEADER

    @property
    def mss(self) -> int:
        return tcp_mss(self.mtu)

    @property
    def rtt_s(self) -> float:
        return self.rtt_ms / 1000.0

    def bdp_bytes(self, direction: str = "down") -> float:
        return self.rate_bps(direction) * self.rtt_s / 8

    def bdp_packets(self, direction: str = "down") -> float:
        return self.bdp_bytes(direction) / self.frame_bytes

    def buffer_packets(self, direction: str = "down") -> int:
        """Bottleneck queue in full-size packets (at least one)."""
        if self.buffer_pkts is not None:
            return self.buffer_pkts
        seconds = (self.buffer_ms or 0.0) / 1000.0
        return max(1, round(self.rate_bps(direction) * seconds / 8 / self.frame_bytes))

    def buffer_bytes(self, direction: str = "down") -> int:
        """tbf `limit`: bytes that may wait for tokens."""
        return self.buffer_packets(direction) * self.frame_bytes

    def tbf_burst_bytes(self, direction: str = "down", stall_s: float | None = None) -> int:
        """tbf's bucket: whole frames that absorb a watchdog wake-up `stall_s` late (sized from
        the measured host by links/hostfit.py) plus the frame it releases; without one,
        the fixed TBF_SLACK_S of the machine the emulator was first tuned on."""
        if stall_s is None:
            packets = max(TBF_MIN_BURST_PKTS, math.ceil(self.rate_bps(direction) / 8 * TBF_SLACK_S / self.frame_bytes))
        else:
            frame_s = self.frame_bytes * 8 / self.rate_bps(direction)
            packets = max(TBF_MIN_BURST_PKTS, math.ceil(stall_s / frame_s - 1e-9) + 1)
        burst = packets * self.frame_bytes
        return max(burst, TBF_GSO_BURST_BYTES) if self.offload else burst

    def goodput_ideal_bps(self, direction: str = "down") -> float:
        """TCP payload rate of a saturated link: rate × MSS / (MSS + all headers)."""
        return self.rate_bps(direction) * self.mss / self.frame_bytes

    def one_way_delay_s(self, hops: int = 1) -> float:
        """Delay each of `hops` core delay elements adds per direction."""
        return self.rtt_s / 2 / hops

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(buffer_packets_down=self.buffer_packets("down"),
                 buffer_packets_up=self.buffer_packets("up"),
                 bdp_packets_down=round(self.bdp_packets("down"), 1))
        return d


def trace_file(name: str) -> Path:
    """A profile's trace: an absolute path as it is, a relative one in links/traces/."""
    path = Path(name)
    return path if path.is_absolute() else TRACES_DIR / path


def _rate_mbps(fields: Fields, direction: str, mtu: int) -> tuple[float, str | None]:
    """A direction's rate: `<direction>_mbps`, or the mean of `trace_<direction>`."""
    rate_key, trace_key = f"{direction}_mbps", f"trace_{direction}"
    if not fields.has(trace_key):
        if not fields.has(rate_key):
            raise fields.error(rate_key, f"missing: give {rate_key} (Mbit/s) or {trace_key} (a trace file)")
        return fields.number(rate_key, low=0.001, high=MAX_RATE_MBPS), None
    if fields.has(rate_key):
        raise fields.error(rate_key, f"give {rate_key} or {trace_key}, not both: a trace link's rate is its trace's")
    name = fields.text(trace_key)
    try:
        trace = traces.read(trace_file(name))
    except UserError as e:
        raise fields.error(trace_key, str(e)) from None
    return trace.mean_bps(mtu + ETH_HEADER) / 1e6, name


def _delay_trace(fields: Fields, direction: str) -> str | None:
    """`delay_trace_<direction>`, checked to be a readable delay trace."""
    key = f"delay_trace_{direction}"
    if not fields.has(key):
        return None
    name = fields.text(key)
    try:
        delaytraces.read(trace_file(name))
    except UserError as e:
        raise fields.error(key, str(e)) from None
    return name


def _parse(path: Path, name: str, fields: Fields) -> LinkProfile:
    fields.unknown({"down_mbps", "up_mbps", "trace_down", "trace_up", "loss_down", "loss_up", "rtt_ms",
                    "delay_trace_down", "delay_trace_up",
                    "buffer_pkts", "buffer_ms", "mtu", "topology", "offload", "source", "access"})
    mtu = int(fields.number("mtu", 1500, low=576, high=9000, integer=True))
    down, trace_down = _rate_mbps(fields, "down", mtu)
    up, trace_up = _rate_mbps(fields, "up", mtu)
    rtt = fields.number("rtt_ms", low=0.1, high=MAX_RTT_MS)
    if fields.has("buffer_pkts") == fields.has("buffer_ms"):
        raise fields.error("buffer_pkts", "give exactly one of buffer_pkts or buffer_ms")
    buffer_pkts = buffer_ms = None
    if fields.has("buffer_pkts"):
        buffer_pkts = int(fields.number("buffer_pkts", low=1, high=MAX_BUFFER_PKTS, integer=True))
    else:
        buffer_ms = fields.number("buffer_ms", low=0.1, high=MAX_RTT_MS)
    topology = fields.text("topology", "dumbbell", choices=["dumbbell", "chain"])
    return LinkProfile(name=name, down_mbps=down, up_mbps=up, rtt_ms=rtt, buffer_pkts=buffer_pkts,
                       buffer_ms=buffer_ms, mtu=mtu, topology=topology,
                       offload=fields.flag("offload", False), source=fields.text("source", ""),
                       access=fields.text("access", "unknown", choices=list(TECHNOLOGIES)),
                       trace_down=trace_down, trace_up=trace_up,
                       loss_down=fields.number("loss_down", 0.0, low=0.0, high=MAX_LOSS),
                       loss_up=fields.number("loss_up", 0.0, low=0.0, high=MAX_LOSS),
                       delay_trace_down=_delay_trace(fields, "down"), delay_trace_up=_delay_trace(fields, "up"))


def load_profiles(path: Path = PROFILES_FILE) -> dict[str, LinkProfile]:
    data = yamlfile.load(path)
    top = Fields(path, data, "")
    top.unknown({"format", "profiles"})
    table = top.sub("profiles")
    return {name: _parse(path, name, table.sub(name)) for name in table.data}


def get_profile(name: str) -> LinkProfile:
    """The named profile; an unknown name is an error listing the valid ones."""
    profiles = load_profiles()
    if name not in profiles:
        raise UserError(f"unknown profile '{name}' (choices: {', '.join(profiles)})")
    return profiles[name]
