"""How a bottleneck link shapes: one queue per direction of every router–core–router hop.

A Shaper puts the queue on the path and says where its packets can be seen arriving and
leaving (so a run captures both sides and counts every drop exactly), and reads the
queue's counters. Each kind is a module of this package defining `SHAPER` (its class, which
carries its `name`): tc tbf (tbf.py), the delay line's own queue (delayline.py). The
scenario parser, `fidelity --shaper` and the docs find them here; adding a kind is adding
its module, and the network builder is left alone.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from config.plugins import collect
from links.profiles import LinkProfile
from machine.errors import UserError

if TYPE_CHECKING:        # the path's names are the network builder's, handed to install()
    from topologies.names import PathNames


@dataclass(frozen=True)
class Queue:
    """One bottleneck queue as installed: where, which direction, with what settings, and
    the (node, interface) pairs where its arriving and departing packets pass."""
    node: str
    intf: str
    direction: str              # 'down' (server → client) or 'up'
    hop: int                    # router k → core k → router k+1
    settings: dict = field(hash=False)
    before: tuple[str, str] = ("", "")
    after: tuple[str, str] = ("", "")

    def as_dict(self) -> dict:
        return {**self.settings, "node": self.node, "intf": self.intf, "direction": self.direction,
                "hop": self.hop, "shaper": self.settings.get("shaper")}


class Shaper(ABC):
    """Puts a profile's bottleneck queue on a hop and reads its counters."""
    name: str = ""
    delay_backend: str | None = None      # the delay element it needs, if it lives there
    # Can drain a trace link (links/traces.py) and lose frames at random, not only shape a rate.
    full_link_model: bool = False

    def delay_options(self, hop: int) -> dict:
        """Keyword options for the delay element of `hop` (a queue that lives inside it)."""
        return {}

    def describe(self) -> dict:
        return {"kind": self.name}

    def lone_frame_delay_s(self, queue: Queue, frame_bytes: int) -> float:
        """How long a frame of `frame_bytes` that finds the queue idle spends in it (a base
        RTT's ping). A token bucket with a frame's tokens sends it at once: the wire time of
        a real link is not emulated (measured: t1-50ms's pings 0.36 ms above the configured
        RTT with tbf, where 1.05 ms of wire time would have shown)."""
        return 0.0

    # -- how a user names it: a scenario's `shaper:` section and the command line's --shaper
    @classmethod
    def from_fields(cls, fields) -> "Shaper":
        """The shaper a scenario's `shaper:` section (config.yamlfile.Fields) declares."""
        fields.unknown({"kind"})
        return cls()

    @classmethod
    def cli_forms(cls) -> list[str]:
        """The spellings `--shaper` accepts for this kind."""
        return [cls.name]

    @classmethod
    def from_cli(cls, text: str) -> "Shaper":
        return cls()

    @abstractmethod
    def install(self, net, names: PathNames, profile: LinkProfile, hop: int, direction: str) -> Queue:
        """Shape `direction` of hop `hop` to the profile's rate and buffer."""

    @abstractmethod
    def counters(self, net, queue: Queue) -> dict[str, int]:
        """{'sent_bytes', 'sent_pkts', 'dropped'} of the queue so far (link-layer bytes)."""

    def set_rate(self, net, queue: Queue, rate_bps: float, burst_bytes: int, buffer_pkts: int) -> None:
        """Change the queue's rate (and its burst, sized for that rate) and buffer (full-size
        frames) during a run: a path that changed between two connections. A shaper that
        cannot says why."""
        raise UserError(f"the {self.name} shaper cannot change its rate during a run; "
                        f"choose one that can: {', '.join(k for k, c in registry().items() if c.set_rate is not Shaper.set_rate)}")




def registry() -> dict[str, type[Shaper]]:
    """Every shaper kind, by name."""
    return collect(__name__, "SHAPER")


def cli_choices() -> list[str]:
    return [form for cls in registry().values() for form in cls.cli_forms()]


def from_cli(text: str) -> Shaper:
    """The shaper `--shaper TEXT` names (TEXT is one of cli_choices())."""
    return registry()[text.partition(":")[0]].from_cli(text)


def default_for(profiles: list[LinkProfile]) -> Shaper:
    """The shaper used where none is named: tc tbf, or the delay line's queue where a
    profile needs more than a fixed rate (a trace link, random loss)."""
    from links.shapers.delayline import DelayLineQueue
    from links.shapers.tbf import Tbf
    return DelayLineQueue() if any(p.needs_link_model for p in profiles) else Tbf()


def refusal(shaper: Shaper, profile: LinkProfile) -> str | None:
    """Why `shaper` cannot shape `profile`, or None."""
    if profile.needs_link_model and not shaper.full_link_model:
        what = "a trace link" if profile.is_trace else "a lossy link"
        return (f"profile {profile.name} is {what} and the {shaper.name} shaper knows only a fixed rate: "
                "use the delay line's queue (shaper kind delayline, --shaper delayline)")
    return None
