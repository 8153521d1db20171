"""The one interface every startup scheme implements (Pantheon-style wrappers).

A scheme is installed per host role: 'server' (the sender of the flow under test),
'client' (its receiver) and 'router' (every router on the path). A variant names one
implementation and its parameters per role; comparing N variants is a loop over them.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path

from config.params import Param, resolve
from hosts.bpf import loader
from machine import kmod, registry
from topologies.endhosts import EndHostDefaults

ROLES = ("server", "client", "router")

__all__ = ["ROLES", "Param", "InstallContext", "Declared", "Implementation"]


@dataclass
class InstallContext:
    """What an implementation may need to know about the path it is installed on."""
    gateway: str | None = None         # the node's default gateway (for route attributes)
    peer_net: str | None = None        # the other side's subnet
    rate_bps: float = 0.0              # the profile's bottleneck rate (for hints)
    rtt_s: float = 0.0
    profile: str = ""                  # the link profile's name
    access: str = "unknown"            # the profile's access technology (what a hint names)
    mtu: int = 1500                    # the path's IP MTU (a user-space endpoint sizes datagrams by it)
    instance: object = None            # the registry entry that records what we change
    defaults: EndHostDefaults = field(default_factory=EndHostDefaults)   # what to put back
    # On a trace link: the downstream bottleneck's trace against the host's clock
    # (links.traces.TraceClock), for hints taken from the trace; None at a fixed rate.
    trace_clock: object = None


@dataclass(frozen=True)
class Declared:
    """What a sender with this part claims its connections run, checked against the kernel
    (congestion control) and the wire (first flight) in every run.

    cc: acceptable congestion control names; a startlab BPF one by its kind ('blitz'),
        the instance prefix left out. iw: the initial window in segments, or None where the
        scheme sizes its first flight itself (Jump Start, Blitzstart, approved Quick-Start):
        its wire tests check that, a run records it.
    transport: 'tcp' (the kernel's: its sockets are read with sock_diag during the run) or
        'quic' (a user-space endpoint: the kernel cannot see its congestion control, so the
        run checks what the endpoint itself reports, and the workload must run that
        endpoint rather than a TCP application).
    """
    cc: tuple[str, ...]
    iw: int | None
    transport: str = "tcp"


class Implementation(ABC):
    """One scheme's part for some roles. Stateless: state lives in the node and `remove` undoes it."""

    name: str = ""
    summary: str = ""
    roles: tuple[str, ...] = ()
    params: dict[str, Param] = {}

    def resolve(self, given: dict) -> dict:
        """Defaults filled in; unknown names raise KeyError, bad values ValueError."""
        return resolve(self.params, given)

    @abstractmethod
    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        """Put this scheme's part for `role` into `node` (a Mininet host)."""

    @abstractmethod
    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        """Take everything `install` put into `node` away again."""

    def kernel_objects(self, role: str, params: dict) -> list[Path]:
        """The BPF objects this part loads into the kernel (none: it uses only what any
        kernel has)."""
        return []

    def kernel_modules(self, role: str, params: dict) -> list[str]:
        """startlab's kernel modules this part loads (machine/kmod.py; none: BPF does all)."""
        return []

    def unavailable(self, role: str, params: dict) -> str | None:
        """Why this kernel cannot run this part (None: it can). Probed, not assumed from a
        version: its kernel modules are loaded and its BPF objects built and loaded as a run
        would (a kfunc resolves only with its module in), so the reason is the module
        loader's, the verifier's or the kernel's own (a helper or struct_ops member it lacks)."""
        modules = self.kernel_modules(role, params)
        if not modules:
            return loader.unloadable(self.kernel_objects(role, params))
        probe = registry.new_instance()
        try:
            for name in modules:
                kmod.load(probe, name)
            return loader.unloadable(self.kernel_objects(role, params))
        except kmod.KmodError as exc:
            return f"needs the kernel module {name}: {exc}"
        finally:
            probe.remove_all()

    def declares(self, role: str, params: dict, defaults: EndHostDefaults) -> Declared | None:
        """What connections sent from a node with this part run (None: not a sender part)."""
        return None

    def endpoint_args(self, role: str, params: dict, ctx: InstallContext) -> list[str] | None:
        """Command-line arguments of the user-space endpoint this part configures for `role`
        (a QUIC server or client); None where the scheme lives in the kernel and any
        application carries it."""
        return None

    def before_fetch(self, node, role: str, params: dict, ctx: InstallContext) -> dict | None:
        """Called just before the flow under test starts, for a part that takes something
        from the moment (a hint of the rate the trace offers next). Returns what it set, for
        the run's record (None: nothing)."""
        return None

    def counters(self, node, role: str, params: dict, ctx: InstallContext) -> dict | None:
        """What this scheme's part in `node` counted so far (None: it keeps no counters).
        Read before `remove`, which takes the counters away with the rest."""
        return None
