"""Where the Blitzstart hint travels over QUIC, shown on the wire (root): the README's
"Where the hint travels" checked against a decrypted capture of one Blitzstart fetch.

Path: server — delay line (50 ms RTT) — tbf 50 Mbit/s — client (hosts/quic/quic_net.py).
The client logs its TLS secrets (`--keylog`), tcpdump captures whole frames at both end
hosts' interfaces, and tshark decrypts them (hosts/quic/quic_decrypt.py). The request
header's layout is hosts/quic/src/request.rs's, read by wire/quic_request.py.
"""
from __future__ import annotations

import json

import pytest

from hosts.quic.quic_decrypt import TSHARK, QuicDatagram, decrypt
from hosts.quic.quic_net import CLIENT_IP
from quicpath import RATE_BPS, RTT_MS, quic_path
from wire.blitzstart import TECHNOLOGIES
from wire.quic_request import LEN, QuicRequest, decode_request

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]

HINT_KBPS = 50_000
TECH = "dsl"
SIZE_BYTES = 300_000
NEW_CONNECTION_ID = 0x18
ACKS = {0x02, 0x03}            # ACK, ACK with ECN counts (RFC 9000 §19.3)
STREAM = 0                     # the client's first bidirectional stream: the request's


@pytest.fixture
def path():
    yield from quic_path(missing=None if TSHARK else
                         "tshark is not installed (it decrypts the capture; playbooks/site.yml installs it)")


def carries_request(d: QuicDatagram) -> bool:
    return any(s.stream_id == STREAM and s.offset == 0 for s in d.streams())


def check_wire(at_client: list[QuicDatagram], at_server: list[QuicDatagram], claim) -> dict:
    """The README's claims on the decrypted captures at the client's and the server's
    interface; what the wire showed, for the log."""
    sent = [d for d in at_client if d.src == CLIENT_IP]
    assert sent and all(p.decrypted for d in sent for p in d.packets), "the key log did not decrypt the client"

    # The request: the client's first stream data, stream 0 from offset 0, all 20 bytes of
    # the header in one STREAM frame that also ends the stream.
    request = next(d for d in sent if d.streams())
    assert carries_request(request)
    [frame] = request.streams()
    assert (frame.stream_id, frame.offset, len(frame.data), frame.fin) == (STREAM, 0, LEN, True)
    assert decode_request(frame.data) == QuicRequest(SIZE_BYTES, HINT_KBPS, TECHNOLOGIES[TECH])

    # In a 1-RTT (short-header) packet, a datagram of its own ...
    assert [p.kind for p in request.packets] == ["1rtt"]
    # ... right behind the datagram with the client's handshake Finished (its Handshake
    # packet, coalesced with the Initial that acknowledges the server's): between the two
    # the client sends only its new connection IDs, in its first 1-RTT packet — with an
    # acknowledgement when a 1-RTT packet of the server's was already decrypted by then
    # (its own new connection IDs arrive in the same flight as its Finished).
    finished = next(d for d in sent if d.has_finished())
    assert [p.kind for p in finished.packets if p.handshake] == ["handshake"]
    assert finished.number < request.number
    between = [p for d in sent if finished.number < d.number < request.number for p in d.packets]
    assert between and all(p.kind == "1rtt" for p in between)
    types = {t for p in between for t in p.frame_types}
    assert NEW_CONNECTION_ID in types and types <= {NEW_CONNECTION_ID, *ACKS}, types
    first_1rtt = next(p for d in sent for p in d.packets if p.kind == "1rtt")
    assert first_1rtt is between[0]
    # ... in the same flight: nothing from the server arrives in between, and it leaves
    # well within the round trip the Finished starts.
    assert not [d for d in at_client if d.src != CLIENT_IP and finished.number < d.number < request.number]
    gap_s = request.ts - finished.ts
    assert 0 <= gap_s, gap_s
    claim("the request within half an RTT of the Finished", gap_s < 0.5 * RTT_MS / 1e3, f"{gap_s * 1e3:.2f} ms")

    # At the server: the request arrives before the response's first STREAM data leaves.
    arrived = next(d for d in at_server if d.src == CLIENT_IP and carries_request(d))
    response = next(d for d in at_server if d.src != CLIENT_IP and any(s.stream_id == STREAM for s in d.streams()))
    assert response.streams()[0].offset == 0
    assert arrived.ts < response.ts
    fin_arrived = next(d for d in at_server if d.src == CLIENT_IP and d.has_finished())
    assert fin_arrived.ts <= arrived.ts

    return {
        "finished_datagram": [(p.kind, p.number, p.frame_types) for p in finished.packets],
        "between": [(p.kind, p.number, p.frame_types) for p in between],
        "request_packet": [(p.kind, p.number, p.frame_types) for p in request.packets],
        "request_bytes": frame.data.hex(),
        "request_after_finished_us": round(gap_s * 1e6, 1),
        "at_server_request_after_finished_us": round((arrived.ts - fin_arrived.ts) * 1e6, 1),
        "at_server_response_after_request_us": round((response.ts - arrived.ts) * 1e6, 1),
    }


def test_hint_is_on_the_wire_where_the_readme_says(path):
    net = path
    keys = net.workdir / "client.keys"
    stats = net.workdir / "server.jsonl"
    server = net.start_server(["--cc", "blitz"], stats, net.workdir / "server.log")
    # Whole frames (-s 0): tshark must authenticate a packet to decrypt it.
    at_server_cap = net.start_capture(net.server, net.server_intf, net.workdir / "server.pcap", snap=0)
    at_client_cap = net.start_capture(net.client, net.client_intf, net.workdir / "client.pcap", snap=0)
    try:
        result = net.fetch(str(SIZE_BYTES), ["--hint-kbps", str(HINT_KBPS), "--tech", TECH,
                                             "--keylog", str(keys), "--verify"])
    finally:
        net.stop_capture(at_client_cap)
        net.stop_capture(at_server_cap)
        net.stop(server)
    assert result["ok"] and result["bytes"] == SIZE_BYTES
    summary = check_wire(decrypt(net.workdir / "client.pcap", keys), decrypt(net.workdir / "server.pcap", keys),
                         net.timing.add)

    # And the server took the hint from it.
    line = json.loads(stats.read_text().splitlines()[-1])
    assert line["hint_applied"] and line["hint_kbps"] == HINT_KBPS and line["hint_tech"] == TECH
    print(json.dumps(summary))
