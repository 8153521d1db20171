"""The kernel's CUBIC as a startlab congestion control (bpf_cubic.bpf.c, beside this
module): the base on which the slow-start schemes vary only the start, and HyStart turned
off per connection.

* `hystart: true` (congestion control `cubic`): CUBIC's every callback as the kernel has it
  (its kfuncs), HyStart included. It exists to be compared with the kernel's own `cubic`:
  a scheme built on this base differs from the kernel's CUBIC only where it says so.
* `hystart: false` (`hsoff`): the same with HyStart off for this connection only (the
  kernel's `hystart` switch is a module parameter for the whole machine): slow start ends
  only with a loss or ECN.

Server only: accepted sockets get the congestion control from the sock_ops program
(SERVER_CC); the initial window is the route's, `iw`.
"""
from __future__ import annotations

from hosts.bpf import loader
from hosts.implementations.base import Declared, Implementation, InstallContext, Param
from hosts.implementations.linux_tcp import LinuxTcp

CCS = loader.congestion_controls(__file__)


def kind(params: dict) -> str:
    return "cubic" if params["hystart"] else "hsoff"


class BpfCubic(Implementation):
    name = "bpf-cubic"
    summary = "the kernel's CUBIC as a BPF congestion control, with HyStart or with HyStart off per connection"
    roles = ("server",)
    params = {
        "iw": Param(10, "initial window (segments)", low=1, high=100, integer=True),
        "hystart": Param(True, "HyStart's exits from slow start (ACK train, delay increase); false: only a "
                               "loss or ECN ends slow start"),
    }

    def kernel_objects(self, role: str, params: dict) -> list:
        return [CCS.object, loader.SOCKOPS_OBJECT]

    def install(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        LinuxTcp().install(node, role, LinuxTcp().resolve({"cc": "cubic", "iw": params["iw"]}), ctx)
        loader.set_node(ctx.instance, node, loader.NodeConfig(flags=loader.SERVER_CC,
                                                              cc=CCS.name(ctx.instance, kind(params))))

    def remove(self, node, role: str, params: dict, ctx: InstallContext) -> None:
        loader.clear_node(ctx.instance, node)
        LinuxTcp().remove(node, role, LinuxTcp().resolve({"cc": "cubic"}), ctx)

    def declares(self, role, params, defaults) -> Declared | None:
        return Declared(cc=(kind(params),), iw=params["iw"]) if role == "server" else None


IMPLEMENTATION = BpfCubic()
