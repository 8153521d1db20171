"""The readers of tests/test_quic_hint_wire.py on known input: the request header's layout
(the same bytes as request.rs's layout test) and tshark's JSON, in the shapes tshark 4.0
gives it (one occurrence a value, several a list; a short header's fields in a subtree)."""
from __future__ import annotations

import struct

import pytest

from hosts.quic.quic_decrypt import FINISHED, parse_tshark_json
from wire.quic_request import QuicRequest, decode_request


def test_request_layout():
    data = b"STLQ\x01\x01\x06\x00" + bytes([0, 0, 0, 0, 0, 0, 1, 2]) + bytes([0x0A, 0x0B, 0x0C, 0x0D])
    assert decode_request(data) == QuicRequest(size=0x0102, hint_kbps=0x0A0B0C0D, tech=6)
    assert decode_request(b"STLQ\x01\x00\x00\x00" + struct.pack("!QI", 70_000, 0)) == \
        QuicRequest(size=70_000, hint_kbps=None, tech=None)


@pytest.mark.parametrize("data", [
    b"XTLQ\x01\x00\x00\x00" + bytes(12),           # magic
    b"STLQ\x09\x00\x00\x00" + bytes(12),           # version
    b"STLQ\x01\x01\x02\x00" + bytes(12),           # hint flag with 0 kbit/s
    b"STLQ\x01\x00\x00\x00" + bytes(11),           # short
])
def test_request_rejects(data):
    with pytest.raises(ValueError):
        decode_request(data)


def entry(number: int, ts: str, src: str, sport: int, quic) -> dict:
    dst, dport = ("10.78.0.1", 4433) if sport != 4433 else ("10.78.0.2", 50000)
    return {"_source": {"layers": {
        "frame": {"frame.number": str(number), "frame.time_epoch": ts},
        "ip": {"ip.src": src, "ip.dst": dst},
        "udp": {"udp.srcport": str(sport), "udp.dstport": str(dport)},
        "quic": quic}}}


def test_parse_tshark_json():
    finished = [
        {"quic.header_form": "1", "quic.long.packet_type": "0", "quic.packet_number": "1",
         "quic.frame": {"quic.frame_type": "3"}},
        {"quic.header_form": "1", "quic.long.packet_type": "2", "quic.packet_number": "0",
         "quic.frame": [{"quic.frame_type": "3"},
                        {"quic.frame_type": "6", "tls": {"tls.handshake": {"tls.handshake.type": "20"}}},
                        {"quic.frame_type": "0"}]},
    ]
    request = {"quic.short": {"quic.header_form": "0", "quic.packet_number": "1"},
               "quic.frame": {"quic.frame_type": "11", "quic.stream.stream_id": "0",
                              "quic.stream_data": "53:54:4c:51:01:01:02:00:00:00:00:00:00:04:93:e0:00:00:c3:50"}}
    response = {"quic.short": {"quic.header_form": "0", "quic.packet_number": "7"},
                "quic.frame": {"quic.frame_type": "14", "quic.stream.stream_id": "0",
                               "quic.stream.offset": "1444", "quic.stream_data": "00:01"}}
    undecrypted = {"quic.short": {"quic.header_form": "0"}}
    out = parse_tshark_json([
        entry(4, "100.000100", "10.78.0.2", 50000, finished),
        entry(6, "100.000160", "10.78.0.2", 50000, request),
        entry(9, "100.000500", "10.78.0.1", 4433, response),
        entry(10, "100.000600", "10.78.0.1", 4433, undecrypted),
    ])
    assert [d.number for d in out] == [4, 6, 9, 10]
    fin = out[0]
    assert [p.kind for p in fin.packets] == ["initial", "handshake"]
    assert fin.packets[1].handshake == (FINISHED,) and fin.has_finished()
    assert fin.packets[1].frame_types == (3, 6, 0) and not fin.streams()
    [req] = out[1].streams()
    assert out[1].packets[0].kind == "1rtt" and out[1].packets[0].number == 1
    assert (req.stream_id, req.offset, req.fin) == (0, 0, True)
    assert decode_request(req.data) == QuicRequest(300_000, 50_000, 2)
    [resp] = out[2].streams()
    assert (resp.offset, resp.data, resp.fin) == (1444, b"\x00\x01", False)
    assert out[2].src == "10.78.0.1" and out[2].dport == 50000
    assert not out[3].packets[0].decrypted and out[3].packets[0].number is None
