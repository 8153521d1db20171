//! What the controller asks of either congestion control beneath it (cubic.rs, gquic.rs):
//! their windows, the start they are given, and the events both take alike. Only an
//! acknowledgement differs (Google QUIC's sender needs the bytes in flight before its batch,
//! startlab's CUBIC the smoothed RTT), so each keeps its own `on_ack`.

use std::time::{Duration, Instant};

/// What Rapid Start did in a connection (bytes): how much of slow start grew 3x and 2x,
/// and its first recovery: the window at the loss, the bytes acknowledged (of packets
/// sent before it) and declared lost during it, and the window it ended at.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct RapidRecord {
    pub acked_3x: u64,
    pub acked_2x: u64,
    pub pre_cwnd: u64,
    pub recovery_acked: u64,
    pub recovery_lost: u64,
    pub end_cwnd: Option<u64>,
}

/// A congestion control on byte windows of `mss`-byte datagrams.
pub trait CongestionControl {
    fn cwnd(&self) -> u64;
    /// `u64::MAX` until slow start ends.
    fn ssthresh(&self) -> u64;
    fn mss(&self) -> u64;
    /// Whether HyStart ended slow start (rather than a loss or a Blitzstart).
    fn hystart_exit(&self) -> bool;
    /// Entries into HyStart++'s Conservative Slow Start (0 where the sender has none).
    fn css_entries(&self) -> u64 {
        0
    }
    /// Congestion events that reduced the window.
    fn reductions(&self) -> u64;
    fn set_mss(&mut self, mss: u64);
    /// Blitzstart: congestion avoidance from `window` (ssthresh = cwnd).
    fn start_in_avoidance(&mut self, window: u64);
    /// A transmit batch went out; its last packet number.
    fn on_sent(&mut self, last_packet_number: u64);
    /// The least RTT sample of an acknowledgement batch.
    fn on_rtt_sample(&mut self, rtt: Duration);
    /// The end of an acknowledgement batch, with its largest acknowledged packet.
    fn on_end_acks(&mut self, largest_acked: Option<u64>);
    /// A loss of a packet sent at `sent` (`persistent`: quinn's persistent congestion).
    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool);
    /// The bytes that congestion event declared lost (after it; only Rapid Start counts them).
    fn on_lost_bytes(&mut self, _bytes: u64) {}
    /// Rapid Start's record, where the sender runs it.
    fn rapid_start(&self) -> Option<RapidRecord> {
        None
    }

    fn in_slow_start(&self) -> bool {
        self.cwnd() < self.ssthresh()
    }
}
