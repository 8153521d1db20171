"""The native extractor end to end: synthetic pcaps in, exact columns out."""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from analysis import packets
from machine.errors import UserError
from pcapcraft import (ACK, FIN, LINKTYPE_LINUX_SLL, MSS, SYN, Conversation, Packet, PcapWriter, frame,
                       write_pcap)


@pytest.fixture(autouse=True)
def _extractor_built() -> None:
    if not packets.EXTRACTOR.is_file():
        pytest.fail(f"{packets.EXTRACTOR} missing: build it with "
                    "`cargo build --release -p startlab-pcapcols`")


def _ip(addr: str) -> int:
    return int(ipaddress.IPv4Address(addr))


def _sample() -> list[Packet]:
    """Two interleaved connections; the second is seen from its SYN-ACK only."""
    a = Conversation("10.0.0.1", 40001, "10.0.1.1", 80, client_isn=7, server_isn=900)
    b = Conversation("10.0.0.1", 40002, "10.0.1.2", 5201)
    return [
        a.syn(1.000001),
        b.synack(1.000500),
        a.synack(1.010002),
        a.from_client(1.020003, 0, 120, ipid=11, flags=ACK | 0x08),
        a.from_server(1.030004, 0, MSS, ipid=22),
        b.from_server(1.030100, 0, 500, ipid=5),
        a.from_server(1.030005, MSS, 1000, ipid=23, flags=ACK | FIN),
    ]


def _check_columns(pk: packets.Packets, sent: list[Packet]) -> None:
    sent = sorted(sent, key=lambda p: p.ts)
    assert len(pk) == len(sent)
    assert np.allclose(pk["ts"], [p.ts for p in sent], rtol=0, atol=1e-7)
    assert pk["src"].tolist() == [_ip(p.src) for p in sent]
    assert pk["dst"].tolist() == [_ip(p.dst) for p in sent]
    for name in ("sport", "dport", "seq", "ack", "flags", "win", "payload", "ipid"):
        assert pk[name].tolist() == [getattr(p, name) for p in sent], name


def test_columns_match_what_was_written(tmp_path: Path) -> None:
    sent = _sample()
    write_pcap(tmp_path / "x.pcap", sent)
    cap = packets.load(tmp_path / "x.pcap")
    _check_columns(cap.packets, sent)
    ordered = sorted(sent, key=lambda p: p.ts)
    # Connection a appears first; b's initiator is the client although its first packet came from the server.
    assert cap.packets["conn"].tolist() == [0 if p.sport in (40001, 80) and p.dport in (40001, 80) else 1
                                            for p in ordered]
    assert cap.packets["dir"].tolist() == [0 if p.src == "10.0.0.1" else 1 for p in ordered]
    c = cap.conns
    assert c["sport"].tolist() == [40001, 40002] and c["dport"].tolist() == [80, 5201]
    assert c["syn_ts"][0] == pytest.approx(1.000001, abs=1e-7) and np.isnan(c["syn_ts"][1])
    assert c["unique_bytes"].tolist() == [[120, MSS + 1000], [0, 500]]
    assert c["data_pkts"].tolist() == [[1, 2], [0, 1]]
    assert c["pkts"].tolist() == [[2, 3], [0, 2]]
    assert cap.packets.meta["tcp_packets"] == len(sent)
    assert cap.packets.meta["connections"] == 2


@pytest.mark.parametrize("options", [
    {"big_endian": True},
    {"nanosecond": True},
    {"big_endian": True, "nanosecond": True},
    {"linktype": LINKTYPE_LINUX_SLL},
])
def test_byte_orders_timestamp_units_and_sll(tmp_path: Path, options: dict) -> None:
    sent = _sample()
    write_pcap(tmp_path / "x.pcap", sent, **options)
    _check_columns(packets.load(tmp_path / "x.pcap").packets, sent)


def test_retransmissions_and_unique_bytes(tmp_path: Path) -> None:
    c = Conversation("10.0.0.1", 40000, "10.0.1.1", 80)
    segs = [(0, MSS), (MSS, MSS), (3 * MSS, MSS)]        # a hole at [MSS*2, MSS*3)
    segs += [(2 * MSS, MSS)]                              # hole filled: late, not a retransmission
    segs += [(MSS, MSS)]                                  # full retransmission
    segs += [(3 * MSS + 100, MSS)]                        # partial: 100 new bytes past the end
    retx_expected = [0, 0, 0, 0, 1, 1]
    new_expected = [MSS, MSS, MSS, MSS, 0, 100]
    sent = [c.syn(0.5)] + [c.from_server(1 + i / 1000, off, n, ipid=i) for i, (off, n) in enumerate(segs)]
    write_pcap(tmp_path / "x.pcap", sent)
    cap = packets.load(tmp_path / "x.pcap")
    data = cap.packets["payload"] > 0
    assert cap.packets["retx"][data].tolist() == retx_expected
    assert cap.packets["newbytes"][data].tolist() == new_expected
    assert cap.conns["unique_bytes"][0, 1] == sum(new_expected) == 4 * MSS + 100
    assert cap.conns["total_bytes"][0, 1] == sum(n for _, n in segs)
    assert cap.conns["retx_pkts"][0, 1] == sum(retx_expected)


def test_sequence_wrap(tmp_path: Path) -> None:
    c = Conversation("10.0.0.1", 40000, "10.0.1.1", 80, server_isn=2**32 - 5 * MSS)
    n = 10
    sent = [c.synack(0.9)] + [c.from_server(1 + i / 1000, i * MSS, MSS, ipid=i) for i in range(n)]
    # Retransmit one segment from before and one from after the wrap.
    sent += [c.from_server(1.1, 2 * MSS, MSS, ipid=100), c.from_server(1.2, 8 * MSS, MSS, ipid=101)]
    write_pcap(tmp_path / "x.pcap", sent)
    cap = packets.load(tmp_path / "x.pcap")
    assert (cap.packets["seq"][1:n + 1] < 2**31).any()  # the wrap really happened
    assert cap.conns["unique_bytes"][0, 1] == n * MSS
    assert cap.conns["retx_pkts"][0, 1] == 2
    assert cap.packets["retx"].tolist() == [0] * (n + 1) + [1, 1]


def test_non_tcp_and_short_records_are_counted(tmp_path: Path) -> None:
    c = Conversation("10.0.0.1", 40000, "10.0.1.1", 80)
    tcp = frame(c.syn(1.0))
    udp = bytearray(tcp)
    udp[14 + 9] = 17
    arp = tcp[:12] + b"\x08\x06" + bytes(28)
    with open(tmp_path / "x.pcap", "wb") as f:
        w = PcapWriter(f)
        w.record(1.0, tcp)
        w.record(1.1, bytes(udp))
        w.record(1.2, arp)
        w.record(1.3, tcp[:30])  # snapped inside the IP header
    meta = packets.load(tmp_path / "x.pcap").packets.meta
    assert (meta["records"], meta["tcp_packets"], meta["skipped_not_tcp"], meta["skipped_short"]) == (4, 1, 2, 1)


def test_record_cut_at_end_is_counted_not_fatal(tmp_path: Path) -> None:
    sent = _sample()
    write_pcap(tmp_path / "x.pcap", sent)
    data = (tmp_path / "x.pcap").read_bytes()
    (tmp_path / "x.pcap").write_bytes(data[:-20])  # tcpdump killed mid-write
    cap = packets.load(tmp_path / "x.pcap")
    assert len(cap.packets) == len(sent) - 1
    assert cap.packets.meta["truncated_records"] == 1


def _cli(pcap: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(packets.EXTRACTOR), str(pcap), str(out)], capture_output=True, text=True)


def test_unknown_link_type_is_an_error(tmp_path: Path) -> None:
    write_pcap(tmp_path / "x.pcap", _sample(), linktype=1)
    data = bytearray((tmp_path / "x.pcap").read_bytes())
    data[20:24] = (105).to_bytes(4, "little")  # IEEE 802.11
    (tmp_path / "x.pcap").write_bytes(bytes(data))
    proc = _cli(tmp_path / "x.pcap", tmp_path / "out")
    assert proc.returncode == 1
    assert proc.stderr.count("\n") == 1 and "unsupported link type 105" in proc.stderr
    with pytest.raises(UserError, match="unsupported link type 105"):
        packets.load(tmp_path / "x.pcap")


@pytest.mark.parametrize("content, message", [
    (b"\xd4\xc3\xb2\xa1\x02\x00", "truncated pcap header"),
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "not a pcap file"),
    (b"\x0a\x0d\x0d\x0a" + bytes(40), "pcapng"),
])
def test_corrupt_files_are_errors(tmp_path: Path, content: bytes, message: str) -> None:
    (tmp_path / "x.pcap").write_bytes(content)
    proc = _cli(tmp_path / "x.pcap", tmp_path / "out")
    assert proc.returncode == 1 and message in proc.stderr and proc.stderr.count("\n") == 1
    with pytest.raises(UserError, match=message):
        packets.load(tmp_path / "x.pcap")
    assert not (tmp_path / "x.cols").exists()


def test_absurd_record_length_is_an_error(tmp_path: Path) -> None:
    with open(tmp_path / "x.pcap", "wb") as f:
        PcapWriter(f)
        f.write((0).to_bytes(4, "little") * 2 + (10**9).to_bytes(4, "little") * 2)
    with pytest.raises(UserError, match="corrupt pcap"):
        packets.load(tmp_path / "x.pcap")


def test_missing_capture_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="nope.pcap"):
        packets.load(tmp_path / "nope.pcap")


def test_cache_reused_until_capture_changes(tmp_path: Path) -> None:
    pcap = tmp_path / "x.pcap"
    write_pcap(pcap, _sample())
    packets.load(pcap)
    meta = tmp_path / "x.cols" / "meta.json"
    first = meta.stat().st_mtime_ns
    # Mark the cache with a recognisable mtime, still newer than the capture.
    os.utime(meta, ns=(first - 10**9, first - 10**9 + 1))
    os.utime(pcap, ns=(first - 2 * 10**9, first - 2 * 10**9))
    packets.load(pcap)
    assert meta.stat().st_mtime_ns == first - 10**9 + 1  # cache newer than capture: reused
    write_pcap(pcap, _sample()[:3])
    assert len(packets.load(pcap).packets) == 3  # capture rewritten: extracted again
    assert [p.name for p in tmp_path.iterdir() if ".tmp-" in p.name] == []


def test_cache_redone_when_extractor_is_newer(tmp_path: Path) -> None:
    pcap = tmp_path / "x.pcap"
    write_pcap(pcap, _sample())
    extractor = tmp_path / "startlab-pcapcols"
    shutil.copy2(packets.EXTRACTOR, extractor)
    cols = packets.extract(pcap, extractor)
    meta = cols / "meta.json"
    stamp = meta.stat().st_mtime_ns
    # A marker in the cache tells whether it was redone (the new cache replaces the directory;
    # comparing mtimes would not: two extractions within one clock tick share a timestamp).
    marker = cols / "from-the-first-extraction"
    marker.touch()
    os.utime(extractor, ns=(stamp + 10**9, stamp + 10**9))  # e.g. a rebuilt, fixed extractor
    packets.extract(pcap, extractor)
    assert meta.is_file() and not marker.exists()
