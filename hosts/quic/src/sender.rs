//! What the controller asks of either congestion control beneath it (cubic.rs, gquic.rs):
//! their windows, the start they are given, and the events both take alike. Only an
//! acknowledgement differs (Google QUIC's sender needs the bytes in flight before its batch,
//! startlab's CUBIC the smoothed RTT), so each keeps its own `on_ack`.

use std::time::{Duration, Instant};

/// A congestion control on byte windows of `mss`-byte datagrams.
pub trait CongestionControl {
    fn cwnd(&self) -> u64;
    /// `u64::MAX` until slow start ends.
    fn ssthresh(&self) -> u64;
    fn mss(&self) -> u64;
    /// Whether HyStart ended slow start (rather than a loss or a Blitzstart).
    fn hystart_exit(&self) -> bool;
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

    fn in_slow_start(&self) -> bool {
        self.cwnd() < self.ssthresh()
    }
}
