"""The stacks whose adapters are Rust programs written here (hosts/stacks/rust, a workspace
of its own that provisioning builds): each pins its stack's crate exactly in its Cargo.toml."""
from __future__ import annotations

import re
from pathlib import Path

from hosts.stacks.contract import Adapter, Start
from machine.binaries import REPO

WORKSPACE = Path(__file__).with_name("rust")
RELEASE = REPO / "target" / "stacks-rust" / "release"


class RustAdapter(Adapter):
    crate_dir: str                       # the adapter's crate in the workspace
    stack_crate: str                     # the stack's crate, pinned `=x.y.z` there

    def binary(self) -> Path:
        return RELEASE / f"startlab-{self.crate_dir}"

    def program(self) -> list[str]:
        return [str(self.binary())]

    def pin(self) -> str:
        text = (WORKSPACE / self.crate_dir / "Cargo.toml").read_text()
        m = re.search(rf'^{re.escape(self.stack_crate)} = {{ version = "=([^"]+)"', text, re.M)
        if m is None:
            raise RuntimeError(f"{WORKSPACE / self.crate_dir}/Cargo.toml pins no exact {self.stack_crate}")
        return m.group(1)

    @property
    def pinned_in(self) -> str:
        return f"hosts/stacks/rust/{self.crate_dir}/Cargo.toml"


class CfQuiche(RustAdapter):
    name = "cfquiche"
    summary = ("Cloudflare's quiche (Rust; not Google's QUICHE): CUBIC with HyStart++ by default, Reno or BBRv2; "
               "10 datagrams of 1200 bytes, paced only under BBRv2")
    controllers = ("cubic", "reno", "bbr2")
    default_cc = "cubic"
    rounds_paced = False
    qlog_serialisation = "JSON-SEQ"
    # Main schema -12 (whose quic-12 events it declares) fixes the media type in its prose.
    qlog_deviations = ("serialization_format is 'JSON-SEQ', not application/qlog+json-seq",)
    crate_dir, stack_crate = "cfquiche", "quiche"

    def start(self, cc: str) -> Start:
        self.check_cc(cc)
        # quiche 0.30 paces only in its gcongestion recovery, which runs BBRv2 ("bbr2"); the
        # legacy recovery that runs CUBIC and Reno gives every packet `now` as its send time.
        return Start(iw_bytes=10 * 1200, datagram_bytes=1200, paced=cc == "bbr2",
                     source="quiche src/lib.rs Config: initial_congestion_window_packets 10 of "
                            "max_send_udp_payload_size (1200); src/recovery/congestion/recovery.rs "
                            "get_packet_send_time returns now (CUBIC, Reno), gcongestion's pacer (BBRv2)")


class S2nQuic(RustAdapter):
    name = "s2n"
    summary = "AWS's s2n-quic (Rust): CUBIC by default or BBRv2; RFC 9002's window of 1200-byte datagrams, paced; no qlog"
    controllers = ("cubic", "bbr")
    default_cc = "cubic"
    rounds_paced = False
    qlog_serialisation = ""
    writes_qlog = False
    client_trusts_cert = True
    crate_dir, stack_crate = "s2n", "s2n-quic"

    def start(self, cc: str) -> Start:
        self.check_cc(cc)
        return Start(iw_bytes=min(10 * 1200, max(14720, 2 * 1200)), datagram_bytes=1200, paced=True,
                     source="s2n-quic-core src/recovery/cubic.rs initial_window: RFC 9002's min(10 x size, "
                            "max(14720, 2 x size)) of the 1200-byte datagrams it starts with")
