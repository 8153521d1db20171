"""The one interface every startup scheme implements (Pantheon-style wrappers).

A scheme is installed per host role: 'server' (the sender of the flow under test),
'client' (its receiver) and 'router' (every router on the path). A variant names one
implementation and its parameters per role; comparing N variants is a loop over them.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

ROLES = ("server", "client", "router")


@dataclass
class Param:
    """A parameter with its default and accepted values (for validation and `list variants`)."""
    default: object
    help: str
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None

    def check(self, value) -> str | None:
        """None if `value` is acceptable, else what is wrong with it."""
        if self.choices is not None:
            return None if value in self.choices else f"'{value}' is not one of: {', '.join(map(str, self.choices))}"
        if isinstance(self.default, bool):
            return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
        if isinstance(self.default, (int, float)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"expected a number, got {value!r}"
            if self.low is not None and value < self.low:
                return f"{value} is below the minimum {self.low}"
            if self.high is not None and value > self.high:
                return f"{value} is above the maximum {self.high}"
        return None


@dataclass
class InstallContext:
    """What an implementation may need to know about the path it is installed on."""
    gateway: str | None = None         # the node's default gateway (for route attributes)
    peer_net: str | None = None        # the other side's subnet
    rate_bps: float = 0.0              # the profile's bottleneck rate (for hints)
    rtt_s: float = 0.0
    instance: object = None            # the registry entry that records what we change
    extra: dict = field(default_factory=dict)


class Implementation(ABC):
    """One scheme's part for some roles. Stateless: state lives in the node and `remove` undoes it."""

    name: str = ""
    summary: str = ""
    roles: tuple[str, ...] = ()
    params: dict[str, Param] = {}

    def resolve(self, given: dict) -> dict:
        """Defaults filled in; unknown names raise KeyError, bad values ValueError."""
        for key in given:
            if key not in self.params:
                raise KeyError(key)
        out = {k: p.default for k, p in self.params.items()}
        for key, value in given.items():
            problem = self.params[key].check(value)
            if problem:
                raise ValueError(f"{key}: {problem}")
            out[key] = value
        return out

    @abstractmethod
    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        """Put this scheme's part for `role` into `node` (a Mininet host)."""

    @abstractmethod
    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        """Take everything `install` put into `node` away again."""

    def counters(self, node, role: str, params: dict, ctx: InstallContext) -> dict | None:
        """What this scheme's part in `node` counted so far (None: it keeps no counters).
        Read before `remove`, which takes the counters away with the rest."""
        return None
