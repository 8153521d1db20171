"""UDP datagram columns of the native extractor and QUIC loss matching between two
capture points, on synthetic pcaps with a 128-byte snap (no root)."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from analysis import flows, packets
from pcapcraft import Conversation, Datagram, write_pcap

SERVER, CLIENT, OTHER = "10.78.0.1", "10.78.0.2", "10.78.0.3"
DCID = bytes(range(0xA0, 0xA8))


@pytest.fixture(autouse=True)
def _extractor_built() -> None:
    if not packets.EXTRACTOR.is_file():
        pytest.fail(f"{packets.EXTRACTOR} missing: build it with "
                    "`cargo build --release -p startlab-pcapcols`")


def _ip(addr: str) -> int:
    return int(ipaddress.IPv4Address(addr))


def quic(ts: float, src: str, dst: str, sport: int, dport: int, pn: int, length: int = 1252,
         long_header: bool = False, ipid: int = 0) -> Datagram:
    """A QUIC-like datagram: header byte, connection ID, then the packet number."""
    first = 0xC3 if long_header else 0x43
    return Datagram(ts, src, dst, sport, dport, length, bytes([first]) + DCID + pn.to_bytes(4, "big"), ipid=ipid)


def routed(d: Datagram, delay: float) -> Datagram:
    """The datagram one hop later: TTL, IP ID and ECN bits (hence checksums) rewritten."""
    return replace(d, ts=d.ts + delay, ttl=d.ttl - 1, ipid=d.ipid + 1000, tos=d.tos | 0x01)


def test_datagram_columns_next_to_unchanged_tcp(tmp_path: Path) -> None:
    tcp = Conversation(CLIENT, 40000, SERVER, 80)
    sent = [
        quic(1.0, CLIENT, SERVER, 50000, 4433, 0, length=1200, long_header=True),
        tcp.syn(1.001),
        quic(1.002, SERVER, CLIENT, 4433, 50000, 1, length=1452),   # 128-byte snap keeps 86 bytes
        replace(quic(1.003, SERVER, CLIENT, 4433, 50000, 2, length=40), tos=0x02),
        tcp.synack(1.004),
        Datagram(1.005, CLIENT, SERVER, 50000, 4433, 0),            # empty payload
    ]
    write_pcap(tmp_path / "x.pcap", sent, snaplen=128)
    cap = packets.load(tmp_path / "x.pcap")
    dg = cap.datagrams
    udp = [p for p in sent if isinstance(p, Datagram)]
    assert len(dg) == 4
    assert np.allclose(dg["ts"], [d.ts for d in udp], rtol=0, atol=1e-7)
    assert dg["src"].tolist() == [_ip(d.src) for d in udp]
    assert dg["dst"].tolist() == [_ip(d.dst) for d in udp]
    assert dg["sport"].tolist() == [d.sport for d in udp]
    assert dg["dport"].tolist() == [d.dport for d in udp]
    assert dg["ulen"].tolist() == [8 + d.length for d in udp]
    assert dg["qlong"].tolist() == [1, 0, 0, 0]
    assert dg["tos"].tolist() == [0, 0, 2, 0]
    assert dg["hash"].dtype == np.uint64 and len(set(dg["hash"].tolist())) == 4
    # The TCP table holds only the TCP packets, now with their TOS byte.
    assert cap.packets["flags"].tolist() == [0x02, 0x12] and cap.packets["tos"].tolist() == [0, 0]
    meta = cap.packets.meta
    assert meta["format_version"] == packets.FORMAT_VERSION == 2
    assert (meta["tcp_packets"], meta["skipped_not_tcp"], meta["udp_datagrams"]) == (2, 4, 4)


def test_same_datagram_same_hash_at_both_capture_points(tmp_path: Path) -> None:
    before = [quic(1 + i / 100, SERVER, CLIENT, 4433, 50000, i, ipid=i) for i in range(5)]
    write_pcap(tmp_path / "in.pcap", before)
    write_pcap(tmp_path / "out.pcap", [routed(d, 0.002) for d in before])
    a, b = packets.load(tmp_path / "in.pcap").datagrams, packets.load(tmp_path / "out.pcap").datagrams
    assert a["hash"].tolist() == b["hash"].tolist()
    assert b["tos"].tolist() == [1] * 5  # the rewritten ECN bits are kept as a column, not hashed


def test_loss_matching_finds_exactly_the_dropped_datagrams(tmp_path: Path) -> None:
    down = [quic(1 + i / 1000, SERVER, CLIENT, 4433, 50000, i, ipid=i) for i in range(20)]
    acks = [quic(1.0005 + i / 500, CLIENT, SERVER, 50000, 4433, i, length=40) for i in range(5)]
    other = [quic(1.0002 + i / 1000, SERVER, OTHER, 4433, 50001, i) for i in range(8)]
    dropped = {down[6], down[13]}
    before = down + acks + other
    after = [routed(d, 0.003) for d in before if d not in dropped]
    write_pcap(tmp_path / "cap-bneck-in.pcap", before, snaplen=128)
    write_pcap(tmp_path / "cap-bneck-out.pcap", after, snaplen=128)
    cap_in = packets.load(tmp_path / "cap-bneck-in.pcap").datagrams
    cap_out = packets.load(tmp_path / "cap-bneck-out.pcap").datagrams

    loss = flows.datagrams_lost(cap_in, cap_out)

    down_key = (_ip(SERVER), _ip(CLIENT), 4433, 50000)
    assert set(loss) == {down_key, (_ip(CLIENT), _ip(SERVER), 50000, 4433), (_ip(SERVER), _ip(OTHER), 4433, 50001)}
    assert {k: (v.sent, v.count) for k, v in loss.items()} == {
        down_key: (20, 2),
        (_ip(CLIENT), _ip(SERVER), 50000, 4433): (5, 0),
        (_ip(SERVER), _ip(OTHER), 4433, 50001): (8, 0),
    }
    lost_ts = cap_in["ts"][loss[down_key].lost]
    assert np.allclose(lost_ts, sorted(d.ts for d in dropped), rtol=0, atol=1e-7)
