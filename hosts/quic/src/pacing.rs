//! Pacing as the paper's Google QUIC does it, through quinn's own pacer.
//!
//! What quinn 0.11 (quinn-proto 0.11.19, `connection/pacing.rs`) does with every
//! connection, and a controller cannot switch off:
//! * a token bucket refilled at `1.25 × window ÷ smoothed RTT`, i.e. one window spread
//!   over 0.8 RTT; `window` is what the controller's `window()` returns;
//! * the bucket holds `window × 2 ms ÷ smoothed RTT`, clamped to 10 … 256 datagrams, and
//!   starts full; it is refilled only when it runs dry, from the time of the previous
//!   refill. After the handshake that time is the connection's start, so the first
//!   response burst is what the handshake left in the bucket plus one full refill: 17
//!   datagrams back to back after a 3-datagram handshake flight, where Google QUIC sends 10;
//! * once empty, the sender sleeps until the bucket is full again, so paced data leaves
//!   in bursts of the bucket size (10 datagrams, or 2 ms of the rate when that is more),
//!   not datagram by datagram;
//! * the same `window()` also bounds the bytes in flight: a datagram may leave while
//!   `in_flight + datagram < window`.
//!
//! The paper's baseline paces a slow-start window over half an RTT and a window in
//! congestion avoidance (and Blitzstart's first window) over three quarters of an RTT.
//! The controller gets those rates by reporting `cwnd × gain ÷ 1.25` while the bytes in
//! flight are far enough below cwnd that the larger figure cannot let a datagram past
//! cwnd, and exactly cwnd otherwise. "Far enough" is one of quinn's transmit batches:
//! quinn checks each datagram against the reported window with its exact bytes in
//! flight, but the controller learns of sent bytes only once per batch of up to 10
//! datagrams, so a batch that starts at least 10 datagrams below cwnd cannot pass it.
//! Within the last 10 datagrams of a window the rate falls back to quinn's
//! 1.25 × window ÷ RTT.

/// quinn's pacing rate as a multiple of window ÷ smoothed RTT.
pub const QUINN_RATE_GAIN: f64 = 1.25;
/// Datagrams quinn 0.11 builds per transmit call (`MAX_TRANSMIT_SEGMENTS` in quinn's
/// connection driver); the controller hears of them only after the whole batch.
pub const QUINN_MAX_BATCH_DATAGRAMS: u64 = 10;

/// How windows are paced.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pacing {
    /// The paper: a window over `slow_start` RTTs in slow start and `avoidance` RTTs in
    /// congestion avoidance (0.5 and 0.75). Both must be at most 0.8, quinn's own spread,
    /// because a controller can only make quinn's pacer faster.
    Paper { slow_start: f64, avoidance: f64 },
    /// quinn's pacer unchanged: every window over 0.8 RTT.
    Quinn,
}

impl Pacing {
    pub const PAPER: Pacing = Pacing::Paper {
        slow_start: 0.5,
        avoidance: 0.75,
    };

    /// The fraction of an RTT over which one window is sent.
    pub fn spread(&self, slow_start: bool) -> f64 {
        match *self {
            Pacing::Paper {
                slow_start: ss,
                avoidance: ca,
            } => {
                if slow_start {
                    ss
                } else {
                    ca
                }
            }
            Pacing::Quinn => 1.0 / QUINN_RATE_GAIN,
        }
    }

    /// Pacing rate as a multiple of window ÷ RTT.
    pub fn gain(&self, slow_start: bool) -> f64 {
        1.0 / self.spread(slow_start)
    }
}

/// With datagram pacing beneath quinn (paced_socket.rs), quinn's pacer is steered to this
/// multiple of the datagram pacer's rate, so that it never holds a datagram back; and quinn
/// builds one datagram per transmit, so the controller hears of every one.
pub const DATAGRAM_PACER_HEADROOM: f64 = 2.0;
pub const DATAGRAM_PACER_BATCH: u64 = 1;

/// The largest spread a controller can ask of quinn's pacer.
pub fn max_spread() -> f64 {
    1.0 / QUINN_RATE_GAIN
}

/// The bytes a datagram may be added to: exactly `cwnd` (quinn lets a datagram leave
/// while `in_flight + size < window`, so `cwnd + 1` admits it when it fits in `cwnd`).
pub fn exact_window(cwnd: u64) -> u64 {
    cwnd.saturating_add(1)
}

/// The window to report to quinn so that its pacer runs at `gain × cwnd ÷ RTT` while
/// the bytes in flight can never exceed `cwnd`.
///
/// `in_flight` must not be below the true bytes in flight at the start of quinn's
/// transmit batch (the controller's estimate only errs upwards; see the controller), and
/// `batch` is the most datagrams quinn sends before the controller hears of them.
pub fn reported_window(cwnd: u64, in_flight: u64, mss: u64, gain: f64, batch: u64) -> u64 {
    let exact = exact_window(cwnd);
    let scale = gain / QUINN_RATE_GAIN;
    if scale <= 1.0 {
        return exact;
    }
    let margin = batch * mss;
    if in_flight.saturating_add(margin) > cwnd {
        return exact;
    }
    ((cwnd as f64 * scale) as u64).max(exact)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1472;

    /// quinn's admission rule, for checking that a reported window never lets more than
    /// cwnd into flight.
    fn quinn_admits(in_flight: u64, window: u64) -> bool {
        in_flight + MSS < window
    }

    #[test]
    fn paper_gains() {
        assert_eq!(Pacing::PAPER.gain(true), 2.0);
        assert!((Pacing::PAPER.gain(false) - 4.0 / 3.0).abs() < 1e-12);
        assert_eq!(Pacing::Quinn.gain(true), QUINN_RATE_GAIN);
    }

    #[test]
    fn slow_start_window_is_scaled_for_half_an_rtt() {
        let cwnd = 32 * MSS;
        let w = reported_window(cwnd, 0, MSS, Pacing::PAPER.gain(true), QUINN_MAX_BATCH_DATAGRAMS);
        // quinn's rate 1.25 × w ÷ RTT = 2 × cwnd ÷ RTT.
        assert!((QUINN_RATE_GAIN * w as f64 / cwnd as f64 - 2.0).abs() < 1e-4);
    }

    #[test]
    fn avoidance_window_is_scaled_for_three_quarters() {
        let cwnd = 215 * MSS;
        let w = reported_window(cwnd, 50 * MSS, MSS, Pacing::PAPER.gain(false), QUINN_MAX_BATCH_DATAGRAMS);
        assert!((QUINN_RATE_GAIN * w as f64 / cwnd as f64 - 4.0 / 3.0).abs() < 1e-4);
    }

    #[test]
    fn near_the_limit_the_window_is_exact() {
        let cwnd = 32 * MSS;
        let gain = Pacing::PAPER.gain(true);
        assert_eq!(reported_window(cwnd, 23 * MSS, MSS, gain, QUINN_MAX_BATCH_DATAGRAMS), cwnd + 1);
        assert_eq!(reported_window(cwnd, 22 * MSS, MSS, gain, QUINN_MAX_BATCH_DATAGRAMS), (cwnd as f64 * 1.6) as u64);
        assert_eq!(reported_window(cwnd, 40 * MSS, MSS, gain, QUINN_MAX_BATCH_DATAGRAMS), cwnd + 1);
    }

    #[test]
    fn quinn_pacing_reports_the_exact_window() {
        assert_eq!(
            reported_window(32 * MSS, 0, MSS, Pacing::Quinn.gain(true), QUINN_MAX_BATCH_DATAGRAMS),
            32 * MSS + 1
        );
    }

    #[test]
    fn exact_window_admits_exactly_cwnd() {
        let cwnd = 32 * MSS;
        assert!(quinn_admits(31 * MSS, exact_window(cwnd)));
        assert!(!quinn_admits(32 * MSS, exact_window(cwnd)));
    }

    #[test]
    fn a_batch_after_an_inflated_report_never_passes_cwnd() {
        // The controller reads in_flight at the start of a batch; quinn then sends up to a
        // batch of datagrams against the same reported window.
        let gain = Pacing::PAPER.gain(true);
        for cwnd_segments in [2u64, 10, 13, 32, 100, 1000] {
            let cwnd = cwnd_segments * MSS;
            for start in 0..=cwnd_segments {
                let window = reported_window(cwnd, start * MSS, MSS, gain, QUINN_MAX_BATCH_DATAGRAMS);
                let mut in_flight = start * MSS;
                for _ in 0..QUINN_MAX_BATCH_DATAGRAMS {
                    if quinn_admits(in_flight, window) {
                        in_flight += MSS;
                    }
                }
                assert!(
                    in_flight <= cwnd.max(start * MSS),
                    "cwnd {cwnd_segments}, start {start}"
                );
            }
        }
    }
}
