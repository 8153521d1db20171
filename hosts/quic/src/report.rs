//! JSON figures both binaries print.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use quinn::ConnectionStats;
use serde_json::{json, Map, Value};

pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// quinn's per-connection counters of this endpoint.
///
/// QUIC never resends a packet: the frames of a packet declared lost go out again in new
/// packets. quinn counts packets declared lost but not the frames it resends, so
/// `retransmitted_packets`/`_bytes` are the packets (and their bytes) declared lost,
/// whose data was sent again; a loss declared spuriously still costs a resend.
pub fn connection_stats(s: &ConnectionStats) -> Map<String, Value> {
    let v = json!({
        "sent_packets": s.path.sent_packets,
        "sent_datagrams": s.udp_tx.datagrams,
        "sent_bytes": s.udp_tx.bytes,
        "sent_ios": s.udp_tx.ios,
        "received_datagrams": s.udp_rx.datagrams,
        "received_bytes": s.udp_rx.bytes,
        "received_ios": s.udp_rx.ios,
        "lost_packets": s.path.lost_packets,
        "lost_bytes": s.path.lost_bytes,
        "retransmitted_packets": s.path.lost_packets,
        "retransmitted_bytes": s.path.lost_bytes,
        "congestion_events": s.path.congestion_events,
        "stream_frames_sent": s.frame_tx.stream,
        "ack_frames_sent": s.frame_tx.acks,
        "srtt_ms": ms(s.path.rtt),
        "min_rtt_ms": ms(s.path.min_rtt),
        "mtu": s.path.current_mtu,
    });
    match v {
        Value::Object(m) => m,
        _ => unreachable!(),
    }
}
