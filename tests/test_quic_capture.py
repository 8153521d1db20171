"""The UDP capture reader and first-flight summary the QUIC checks use, on crafted pcaps."""
from __future__ import annotations

import struct

import pytest

from hosts.quic.quic_net import first_flight, read_udp_pcap
from machine.errors import UserError

SERVER, CLIENT = "10.78.0.1", "10.78.0.2"


def udp_frame(src: str, dst: str, sport: int, dport: int, payload: int, long_header: bool,
              vlan: bool = False) -> bytes:
    ip_src = bytes(int(x) for x in src.split("."))
    ip_dst = bytes(int(x) for x in dst.split("."))
    first = 0xC0 if long_header else 0x40
    body = bytes([first]) + bytes(min(payload, 90) - 1)
    udp = struct.pack("!HHHH", sport, dport, 8 + payload, 0) + body
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + 8 + payload, 1, 0, 64, 17, 0, ip_src, ip_dst) + udp
    eth = b"\x02" * 6 + b"\x04" * 6 + ((b"\x81\x00\x00\x01" if vlan else b"") + b"\x08\x00")
    return eth + ip


def write_pcap(path, frames: list[tuple[float, bytes]], nanos: bool = False, big_endian: bool = False) -> None:
    o = ">" if big_endian else "<"
    magic = 0xA1B23C4D if nanos else 0xA1B2C3D4
    out = [struct.pack(o + "IHHiIII", magic, 2, 4, 0, 0, 128, 1)]
    for ts, frame in frames:
        sec = int(ts)
        frac = round((ts - sec) * (1e9 if nanos else 1e6))
        out.append(struct.pack(o + "IIII", sec, frac, len(frame), len(frame)) + frame)
    path.write_bytes(b"".join(out))


@pytest.mark.parametrize("nanos,big_endian", [(False, False), (True, False), (True, True)])
def test_reads_udp_datagrams(tmp_path, nanos, big_endian):
    frames = [(100.0, udp_frame(SERVER, CLIENT, 4433, 5000, 1200, True)),
              (100.5, udp_frame(CLIENT, SERVER, 5000, 4433, 40, False, vlan=True))]
    p = tmp_path / "c.pcap"
    write_pcap(p, frames, nanos, big_endian)
    d = read_udp_pcap(p)
    assert [(x.src, x.dst, x.sport, x.dport, x.length, x.long_header) for x in d] == [
        (SERVER, CLIENT, 4433, 5000, 1200, True), (CLIENT, SERVER, 5000, 4433, 40, False)]
    assert d[1].ts - d[0].ts == pytest.approx(0.5, abs=1e-6)


def test_rejects_non_pcap(tmp_path):
    p = tmp_path / "x.pcap"
    p.write_bytes(b"\x0a\x0d\x0d\x0a" + bytes(40))    # pcapng
    with pytest.raises(UserError, match="x.pcap: not a classic pcap file"):
        read_udp_pcap(p)


def test_first_flight_burst_pacing_and_end(tmp_path):
    rtt = 0.050
    t0 = 10.0
    frames = [(t0 - 0.06, udp_frame(SERVER, CLIENT, 4433, 5000, 1200, True)),     # handshake
              (t0 - 0.0001, udp_frame(SERVER, CLIENT, 4433, 5000, 60, False))]    # small 1-RTT
    times = [t0 + i * 1e-6 for i in range(10)] + [t0 + 0.008 + i * 1e-6 for i in range(10)] \
        + [t0 + 0.016 + i * 1e-6 for i in range(5)]
    frames += [(t, udp_frame(SERVER, CLIENT, 4433, 5000, 1472, False)) for t in times]
    # The client's delayed ack of a handshake-time packet lands inside the flight; the
    # first ack of data one RTT after the flight began.
    frames.append((t0 + 0.024, udp_frame(CLIENT, SERVER, 5000, 4433, 40, False)))
    frames.append((t0 + rtt + 0.0001, udp_frame(CLIENT, SERVER, 5000, 4433, 40, False)))
    frames.append((t0 + rtt + 0.0002, udp_frame(SERVER, CLIENT, 4433, 5000, 1472, False)))
    frames.sort()
    p = tmp_path / "f.pcap"
    write_pcap(p, frames, nanos=True)
    f = first_flight(read_udp_pcap(p), SERVER, 1472, rtt)
    assert f["datagrams"] == 25
    assert f["bytes"] == 25 * 1472
    assert f["initial_burst"] == 10
    assert f["initial_burst_span_us"] == pytest.approx(9, abs=0.5)
    assert f["span_ms"] == pytest.approx(16.004, abs=0.01)
    assert f["first_ack_ms"] == pytest.approx(50.1, abs=0.01)
    assert f["release_ms"] == [0.0, 8.0, 16.0]
