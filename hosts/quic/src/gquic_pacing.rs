//! Google QUIC's pacing, as a schedule of the times at which one connection's datagrams
//! may leave.
//!
//! What quiche's `PacingSender` (`quic/core/congestion_control/pacing_sender.cc`, read at
//! commit f44fa9f) does, with its default flags:
//! * the first 10 datagrams leave unpaced (`kInitialUnpacedBurst`), and so do up to 10
//!   more (at most cwnd ÷ 1460 bytes) whenever a datagram leaves with nothing in flight
//!   and the sender is not in recovery; a loss clears what is left of them;
//! * otherwise each datagram moves the ideal time of the next one on by its size at the
//!   sender's pacing rate (2 × cwnd ÷ SRTT in slow start, 1.25 × in congestion avoidance);
//!   while pacing, not the window or the application, holds the sender back, that time
//!   keeps its own pace ("making up for lost time"), else it starts again from now;
//! * "lumpy" pacing: datagrams leave in pairs (`quic_lumpy_pacing_size` 2), but never
//!   more than a quarter of cwnd at once (`quic_lumpy_pacing_cwnd_fraction`), one at a time
//!   below a bandwidth estimate of 1.2 Mbit/s and when the window is full;
//! * a datagram whose time is within the alarm granularity (1 ms) of now leaves now.
//!
//! The congestion window is quinn's to enforce; this only says when.
//!
//! One difference from quiche: its pacer ignores datagrams that carry no retransmittable
//! data (ACK-only ones). quinn tells its controller of every datagram it sends, without
//! saying which elicit an acknowledgement, so here an ACK-only datagram takes a burst token
//! like any other. Measured on the wire: a server whose ACK of the request left on its own
//! after HANDSHAKE_DONE sent 8 response datagrams unpaced, one whose ACK rode with
//! HANDSHAKE_DONE sent 9 (tests/test_quic_first_flight.py counts them together).

use std::time::{Duration, Instant};

/// quiche's `kDefaultTCPMSS`: the unit in which it counts burst and lumpy tokens, whatever
/// the datagram size.
pub const DEFAULT_TCP_MSS: u64 = 1460;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PacerParams {
    /// Datagrams that leave unpaced at the start and after quiescence.
    pub initial_burst: u32,
    /// Refill that burst whenever the connection leaves quiescence (quiche's default; its
    /// flag `quic_pacing_remove_non_initial_burst` turns it off).
    pub burst_after_quiescence: bool,
    /// Datagrams released together.
    pub lumpy_size: u32,
    /// … at most this fraction of cwnd.
    pub lumpy_cwnd_fraction: f64,
    /// Below this bandwidth estimate (bit/s), one datagram at a time.
    pub lumpy_min_bandwidth_bps: f64,
    /// A datagram due within this of now leaves now.
    pub granularity: Duration,
}

impl PacerParams {
    pub const GOOGLE_QUIC: PacerParams = PacerParams {
        initial_burst: 10,
        burst_after_quiescence: true,
        lumpy_size: 2,
        lumpy_cwnd_fraction: 0.25,
        lumpy_min_bandwidth_bps: 1_200_000.0,
        granularity: Duration::from_millis(1),
    };
}

/// The sender's state as one congestion-controlled datagram leaves.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sent {
    pub bytes: u64,
    /// Bytes in flight before this datagram.
    pub in_flight_before: u64,
    pub cwnd: u64,
    /// A full datagram of the connection. The window holds the sender back once another
    /// would not fit: quinn sends a datagram only if it fits in cwnd, where quiche sends
    /// while anything of cwnd is left, so quiche's "bytes in flight ≥ cwnd" is this here.
    pub datagram: u64,
    /// The sender's pacing rate, bytes per second.
    pub rate: f64,
    /// cwnd ÷ SRTT in bytes per second; `None` before the first RTT sample (quiche's
    /// estimate is then zero).
    pub bandwidth: Option<f64>,
    pub in_recovery: bool,
}

#[derive(Clone, Debug)]
pub struct Pacer {
    params: PacerParams,
    burst_tokens: u32,
    lumpy_tokens: u32,
    /// When the next datagram should ideally leave; `None` until pacing begins.
    ideal_next: Option<Instant>,
    /// Whether pacing (not the window, not the application) held the last datagram back.
    pacing_limited: bool,
}

impl Pacer {
    pub fn new(params: PacerParams) -> Self {
        Self {
            burst_tokens: params.initial_burst,
            params,
            lumpy_tokens: 0,
            ideal_next: None,
            pacing_limited: false,
        }
    }

    /// The earliest time the next datagram may leave, with `in_flight` bytes outstanding
    /// (quiche's `TimeUntilSend`, as an absolute time).
    pub fn earliest(&self, now: Instant, in_flight: u64) -> Instant {
        let quiescent = self.params.burst_after_quiescence && in_flight == 0;
        if self.burst_tokens > 0 || self.lumpy_tokens > 0 || quiescent {
            return now;
        }
        match self.ideal_next {
            Some(t) if t > now + self.params.granularity => t,
            _ => now,
        }
    }

    /// A congestion event: a loss ends any unpaced burst.
    pub fn on_loss(&mut self) {
        self.burst_tokens = 0;
    }

    /// The application has nothing to send: stop making up for lost time.
    pub fn on_application_limited(&mut self) {
        self.pacing_limited = false;
    }

    /// A congestion-controlled datagram left at `now`.
    pub fn on_sent(&mut self, now: Instant, s: &Sent) {
        if self.params.burst_after_quiescence && s.in_flight_before == 0 && !s.in_recovery {
            self.burst_tokens = self.params.initial_burst.min(tokens(s.cwnd as f64));
        }
        if self.burst_tokens > 0 {
            self.burst_tokens -= 1;
            self.ideal_next = None;
            self.pacing_limited = false;
            return;
        }
        let after = s.in_flight_before.saturating_add(s.bytes);
        let window_full = after.saturating_add(s.datagram) > s.cwnd;
        let delay = if s.rate > 0.0 {
            Duration::from_secs_f64(s.bytes as f64 / s.rate)
        } else {
            Duration::ZERO
        };
        if !self.pacing_limited || self.lumpy_tokens == 0 {
            let slow = s.bandwidth.unwrap_or(0.0) * 8.0 < self.params.lumpy_min_bandwidth_bps;
            self.lumpy_tokens = if slow || window_full {
                1
            } else {
                self.params
                    .lumpy_size
                    .min(tokens(s.cwnd as f64 * self.params.lumpy_cwnd_fraction))
                    .max(1)
            };
        }
        self.lumpy_tokens -= 1;
        let ideal = self.ideal_next.unwrap_or(now) + delay;
        self.ideal_next = Some(if self.pacing_limited {
            ideal
        } else {
            ideal.max(now + delay)
        });
        self.pacing_limited = !window_full;
    }
}

/// Whole `DEFAULT_TCP_MSS` segments in `bytes`, as quiche counts tokens.
fn tokens(bytes: f64) -> u32 {
    (bytes / DEFAULT_TCP_MSS as f64).min(u32::MAX as f64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZE: u64 = 1350;
    const RTT: Duration = Duration::from_millis(100);

    /// Send a window of `n` datagrams as fast as the pacer lets them leave, with nothing
    /// acknowledged; returns each one's departure offset from the first.
    fn departures(n: u64, cwnd: u64, slow_start: bool) -> Vec<Duration> {
        let t0 = Instant::now();
        let mut p = Pacer::new(PacerParams::GOOGLE_QUIC);
        let mut now = t0;
        let mut out = Vec::new();
        let gain = if slow_start { 2.0 } else { 1.25 };
        for i in 0..n {
            now = p.earliest(now, i * SIZE).max(now);
            out.push(now - t0);
            p.on_sent(
                now,
                &Sent {
                    bytes: SIZE,
                    in_flight_before: i * SIZE,
                    cwnd,
                    datagram: SIZE,
                    rate: gain * cwnd as f64 / RTT.as_secs_f64(),
                    bandwidth: Some(cwnd as f64 / RTT.as_secs_f64()),
                    in_recovery: false,
                },
            );
        }
        out
    }

    #[test]
    fn ten_leave_at_once_then_pairs_at_the_pacing_rate() {
        let cwnd = 32 * SIZE;
        let d = departures(32, cwnd, true);
        assert!(d[..10].iter().all(|t| t.is_zero()), "{d:?}");
        // The rest: 2 × cwnd ÷ RTT = one datagram per RTT ÷ 64, released in pairs.
        let gap = RTT / 64;
        for pair in d[10..30].chunks(2) {
            assert_eq!(pair[0], pair[1], "{d:?}");
        }
        let spacing = d[12] - d[10];
        assert!(spacing >= 2 * gap - Duration::from_micros(5) && spacing <= 2 * gap + Duration::from_micros(5));
        // The 22 paced datagrams take about 22 gaps, a third of half an RTT.
        let span = d[31] - d[10];
        assert!(span <= 22 * gap && span >= 18 * gap, "{span:?}");
    }

    #[test]
    fn within_the_granularity_a_datagram_leaves_at_once() {
        // A gap under 1 ms is never waited for: at 2 × 320 datagrams per 100 ms the gaps
        // are 156 µs, so after the burst everything leaves in ms-sized clumps.
        let d = departures(60, 320 * SIZE, true);
        let distinct: std::collections::BTreeSet<_> = d.iter().collect();
        assert!(distinct.len() < 20, "{distinct:?}");
        // A clump ends once the ideal time is over 1 ms ahead, at most a pair's time more.
        let pair = 2 * RTT / 640;
        for w in d.windows(2) {
            assert!(w[1] - w[0] <= Duration::from_millis(1) + pair, "{d:?}");
        }
    }

    #[test]
    fn leaving_quiescence_refills_the_burst() {
        let mut p = Pacer::new(PacerParams::GOOGLE_QUIC);
        let t0 = Instant::now();
        let sent = |in_flight_before| Sent {
            bytes: SIZE,
            in_flight_before,
            cwnd: 40 * SIZE,
            datagram: SIZE,
            rate: 1e6,
            bandwidth: Some(5e5),
            in_recovery: false,
        };
        for i in 0..12 {
            p.on_sent(t0, &sent(i * SIZE));
        }
        assert!(p.earliest(t0, 12 * SIZE) > t0);
        // Everything acknowledged, then a new response: unpaced again (past a lumpy pair).
        p.on_sent(t0, &sent(0));
        p.on_sent(t0, &sent(SIZE));
        assert_eq!(p.earliest(t0, 2 * SIZE), t0);
        let mut q = Pacer::new(PacerParams { burst_after_quiescence: false, ..PacerParams::GOOGLE_QUIC });
        for i in 0..12 {
            q.on_sent(t0, &sent(i * SIZE));
        }
        q.on_sent(t0, &sent(0));
        q.on_sent(t0, &sent(SIZE));
        assert!(q.earliest(t0, 2 * SIZE) > t0);
    }

    #[test]
    fn a_window_without_room_for_a_datagram_is_full_and_the_wait_is_not_made_up() {
        // The first flight of 32 with one small packet among them: 31 full datagrams and 40
        // bytes fill cwnd but for less than a datagram, so quinn sends nothing more. The
        // window, not the pacer, held the sender back: after the wait for the first
        // acknowledgement the pacer starts again from then, in pairs, instead of making up
        // the wait's time in one burst.
        let cwnd = 32 * SIZE;
        let rate = 2.0 * cwnd as f64 / RTT.as_secs_f64();
        let sent = |in_flight_before, bytes| Sent {
            bytes,
            in_flight_before,
            cwnd,
            datagram: SIZE,
            rate,
            bandwidth: Some(rate / 2.0),
            in_recovery: false,
        };
        let t0 = Instant::now();
        let mut p = Pacer::new(PacerParams::GOOGLE_QUIC);
        let mut now = t0;
        p.on_sent(now, &sent(0, 40));
        for i in 0..31 {
            now = p.earliest(now, 40 + i * SIZE).max(now);
            p.on_sent(now, &sent(40 + i * SIZE, SIZE));
        }
        // Half an RTT later two datagrams are acknowledged: four may leave.
        let ack = now + RTT / 2;
        let in_flight = 40 + 29 * SIZE;
        let mut departures = Vec::new();
        let mut t = ack;
        for i in 0..4 {
            t = p.earliest(t, in_flight + i * SIZE).max(t);
            departures.push(t - ack);
            p.on_sent(t, &sent(in_flight + i * SIZE, SIZE));
        }
        let pair = Duration::from_secs_f64(2.0 * SIZE as f64 / rate);
        assert_eq!(departures[..2], [Duration::ZERO, Duration::ZERO], "{departures:?}");
        assert!(departures[2] >= pair - Duration::from_micros(5), "{departures:?}");
    }

    #[test]
    fn a_loss_ends_the_burst_and_slow_paths_go_one_by_one() {
        let mut p = Pacer::new(PacerParams::GOOGLE_QUIC);
        let t0 = Instant::now();
        p.on_loss();
        assert_eq!(p.earliest(t0, SIZE), t0); // nothing paced yet
        let slow = Sent {
            bytes: SIZE,
            in_flight_before: SIZE,
            cwnd: 10 * SIZE,
            datagram: SIZE,
            rate: 100_000.0,             // 0.8 Mbit/s
            bandwidth: Some(100_000.0), // under 1.2 Mbit/s: no pairs
            in_recovery: false,
        };
        p.on_sent(t0, &slow);
        let next = p.earliest(t0, 2 * SIZE);
        assert_eq!(next, t0 + Duration::from_secs_f64(SIZE as f64 / 100_000.0));
    }

    #[test]
    fn congestion_avoidance_paces_at_five_quarters() {
        let cwnd = 100 * SIZE;
        let d = departures(100, cwnd, false);
        // After the burst, 89 gaps of RTT ÷ 125 (1.25 × cwnd ÷ RTT): 0.71 RTT.
        let span = (d[99] - d[10]).as_secs_f64() / RTT.as_secs_f64();
        assert!((span - 0.712).abs() < 0.02, "{span}");
    }
}
