"""A third-party QUIC stack (hosts/stacks) as a variant's server and client: the stack's own
program on each end, its own congestion control and startup, nothing of startlab's in its
data path.

As with startlab's QUIC endpoints (implementations/quic.py), nothing is installed in the
namespace: the scheme is the program, so this part checks that the stack is installed at
its pinned version and says how the workload starts it (`endpoint_args`: the stack and
its controller, which hosts/workloads/competing_apps.StackApps reads back with
`stack_choice`). The kernel cannot see a QUIC connection, and these stacks report no
per-connection controller, so the sender declares transport 'stack': the run records the
controller its server was started with, and checks the first flight on the wire against
the first congestion window the server's own qlog gives.
"""
from __future__ import annotations

from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from hosts.stacks import STACKS, stack


class StackPart(Implementation):
    name = "stack"
    summary = "a third-party QUIC stack behind startlab's endpoint contract (hosts/stacks): its own startup"
    roles = ("server", "client")
    params = {
        "stack": Param("aioquic", "the stack, on both ends", choices=tuple(sorted(STACKS))),
        "cc": Param("default", "server: the stack's congestion control ('default': the stack's own default)"),
    }

    def unavailable(self, role: str, params: dict) -> str | None:
        try:
            controller(params)
        except ValueError as exc:
            return str(exc)
        return stack(params["stack"]).unavailable()

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        # The scheme is the program: check it is there now, not when the traffic starts.
        why = self.unavailable(role, params)
        if why:
            raise RuntimeError(why)

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        """Nothing to undo: the programs are processes the workload's session stops."""

    def endpoint_args(self, role: str, params: dict, ctx: InstallContext) -> list[str]:
        return ["--stack", params["stack"], "--cc", controller(params)]

    def declares(self, role, params, defaults) -> Declared | None:
        if role != "server":
            return None
        # The window is the stack's: checked against its own qlog in every run.
        return Declared(cc=(controller(params),), iw=None, transport="stack")


def controller(params: dict) -> str:
    """The congestion control the variant runs: its `cc`, or the stack's default."""
    s = stack(params["stack"])
    cc = s.default_cc if params["cc"] == "default" else params["cc"]
    s.check_cc(cc)
    return cc


def stack_choice(args: list[str]) -> tuple[str, str]:
    """(stack, controller) from endpoint_args' list."""
    given = dict(zip(args[::2], args[1::2]))
    return given["--stack"], given["--cc"]


IMPLEMENTATION = StackPart()
