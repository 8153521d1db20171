//! CUBIC (RFC 9438) on byte windows, with HyStart's delay-increase exit from slow start
//! (the detection rule of RFC 9406, leaving straight to congestion avoidance as Linux
//! CUBIC and Google QUIC's hybrid slow start do). Plain arithmetic with no connection
//! attached, so that tests drive it packet by packet.

use std::time::{Duration, Instant};

use crate::sender::CongestionControl;

/// CUBIC's parameters (RFC 9438 §4: β = 0.7, C = 0.4).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CubicParams {
    /// Multiplicative decrease: the window after a congestion event is β × the window.
    pub beta: f64,
    /// Scaling constant of the cubic function, in segments per second³.
    pub c: f64,
    /// Release bandwidth faster when the window shrinks between events (RFC 9438 §4.7).
    pub fast_convergence: bool,
    /// Leave slow start when the RTT of a round rises (HyStart delay detection).
    pub hystart: bool,
}

impl Default for CubicParams {
    fn default() -> Self {
        Self {
            beta: 0.7,
            c: 0.4,
            fast_convergence: true,
            hystart: true,
        }
    }
}

/// The smallest window after persistent congestion or a reduction (RFC 9002 §7.2).
pub const MIN_WINDOW_SEGMENTS: u64 = 2;
/// Windows above this are treated as unlimited; it keeps the arithmetic finite.
pub const MAX_WINDOW_BYTES: u64 = 1 << 40;

// HyStart (RFC 9406 §4.2): samples per round before deciding, the clamp of the RTT
// increase that counts as queueing, and the window below which slow start is never left
// early (Linux's hystart_low_window).
const HYSTART_MIN_SAMPLES: u32 = 8;
const HYSTART_MIN_ETA: Duration = Duration::from_millis(4);
const HYSTART_MAX_ETA: Duration = Duration::from_millis(16);
const HYSTART_LOW_WINDOW_SEGMENTS: u64 = 16;

#[derive(Clone, Debug, Default)]
struct HyStart {
    /// The round ends when a packet number at or above this one is acknowledged.
    round_end: Option<u64>,
    last_sent: Option<u64>,
    current_min: Option<Duration>,
    last_min: Option<Duration>,
    samples: u32,
}

impl HyStart {
    fn on_sent(&mut self, packet_number: u64) {
        self.last_sent = Some(packet_number);
        if self.round_end.is_none() {
            self.round_end = Some(packet_number);
        }
    }

    fn on_sample(&mut self, rtt: Duration) {
        self.current_min = Some(self.current_min.map_or(rtt, |m| m.min(rtt)));
        self.samples += 1;
    }

    /// True when this round's RTT has risen above the last round's by the threshold.
    fn delay_increased(&self) -> bool {
        let (Some(current), Some(last)) = (self.current_min, self.last_min) else {
            return false;
        };
        if self.samples < HYSTART_MIN_SAMPLES {
            return false;
        }
        let eta = (last / 8).clamp(HYSTART_MIN_ETA, HYSTART_MAX_ETA);
        current >= last + eta
    }

    fn on_end_acks(&mut self, largest_acked: Option<u64>) {
        let (Some(end), Some(acked)) = (self.round_end, largest_acked) else {
            return;
        };
        if acked >= end {
            if self.current_min.is_some() {
                self.last_min = self.current_min;
            }
            self.current_min = None;
            self.samples = 0;
            self.round_end = self.last_sent.map(|pn| pn.max(end + 1));
        }
    }
}

/// One connection's CUBIC state. Windows are in bytes of QUIC datagrams; `mss` is the
/// datagram size the path carries.
#[derive(Clone, Debug)]
pub struct Cubic {
    params: CubicParams,
    mss: u64,
    cwnd: u64,
    ssthresh: u64,
    /// Window just before the last reduction (segments); 0 before any.
    w_max: f64,
    /// Time the cubic function takes to climb back to its origin (seconds).
    k: f64,
    /// The plateau of the cubic function (segments).
    origin: f64,
    epoch_start: Option<Instant>,
    /// The window standard Reno would have reached in this epoch (segments).
    w_est: f64,
    /// Packets sent up to this time belong to the recovery period already reacted to.
    recovery_start: Option<Instant>,
    hystart: HyStart,
    hystart_exit: bool,
    reductions: u64,
}

impl Cubic {
    pub fn new(params: CubicParams, mss: u64, initial_window: u64) -> Self {
        let mss = mss.max(1);
        Self {
            params,
            mss,
            cwnd: initial_window.clamp(MIN_WINDOW_SEGMENTS * mss, MAX_WINDOW_BYTES),
            ssthresh: u64::MAX,
            w_max: 0.0,
            k: 0.0,
            origin: 0.0,
            epoch_start: None,
            w_est: 0.0,
            recovery_start: None,
            hystart: HyStart::default(),
            hystart_exit: false,
            reductions: 0,
        }
    }

    fn min_window(&self) -> u64 {
        MIN_WINDOW_SEGMENTS * self.mss
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.recovery_start.is_some_and(|start| sent <= start)
    }

    /// `bytes` of a packet sent at `sent` were acknowledged at `now`; `srtt` is the smoothed
    /// RTT (the cubic function is evaluated one RTT ahead, RFC 9438 §4.2).
    pub fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, srtt: Duration) {
        // No growth while recovering from a loss, nor from acknowledgements of a window the
        // application did not fill (RFC 9002 §7.8).
        if self.in_recovery(sent) || app_limited {
            return;
        }
        if self.in_slow_start() {
            self.cwnd = (self.cwnd + bytes).min(MAX_WINDOW_BYTES);
            return;
        }
        self.avoidance(now, bytes, srtt);
    }

    fn avoidance(&mut self, now: Instant, bytes: u64, srtt: Duration) {
        let mss = self.mss as f64;
        let cwnd = self.cwnd as f64 / mss;
        let start = *self.epoch_start.get_or_insert_with(|| {
            // A new epoch: climb back to the window of the last reduction, or, without
            // one (after slow start or a Blitzstart), grow from here.
            if cwnd < self.w_max {
                self.k = ((self.w_max - cwnd) / self.params.c).cbrt();
                self.origin = self.w_max;
            } else {
                self.k = 0.0;
                self.origin = cwnd;
            }
            self.w_est = cwnd;
            now
        });
        let t = now.saturating_duration_since(start).as_secs_f64();
        let target = self.w_cubic(t + srtt.as_secs_f64()).clamp(cwnd, 1.5 * cwnd);

        // The Reno-friendly estimate grows by α per window acknowledged; α reaches 1 once
        // the estimate passes the window of the last reduction (RFC 9438 §4.3).
        let beta = self.params.beta;
        let alpha = if self.w_est >= self.w_max {
            1.0
        } else {
            3.0 * (1.0 - beta) / (1.0 + beta)
        };
        self.w_est += alpha * (bytes as f64 / mss) / cwnd;

        let next = if self.w_cubic(t) < self.w_est {
            self.w_est
        } else {
            cwnd + (target - cwnd) * (bytes as f64 / mss) / cwnd
        };
        self.cwnd = ((next * mss) as u64).clamp(self.cwnd, MAX_WINDOW_BYTES);
    }

    /// Careful Resume sets the window (the jump, the end of the Unvalidated phase);
    /// ssthresh and the cubic epoch are left as they are.
    pub fn set_cwnd(&mut self, cwnd: u64) {
        self.cwnd = cwnd.clamp(self.min_window(), MAX_WINDOW_BYTES);
    }

    /// Careful Resume's Safe Retreat begins: the window is `cwnd`, and packets sent until
    /// now belong to the retreat (Careful Resume answers their losses, not CUBIC).
    pub fn retreat(&mut self, cwnd: u64, now: Instant) {
        self.set_cwnd(cwnd);
        self.recovery_start = Some(now);
        self.reductions += 1;
        self.epoch_start = None;
    }

    /// Safe Retreat ends: ssthresh from PipeSize; the retreat's window is the plateau of
    /// the next epoch, and losses of packets sent until now still belong to the retreat.
    pub fn end_retreat(&mut self, ssthresh: u64, now: Instant) {
        self.ssthresh = ssthresh.clamp(self.min_window(), MAX_WINDOW_BYTES);
        self.w_max = self.cwnd as f64 / self.mss as f64;
        self.recovery_start = Some(now);
        self.epoch_start = None;
    }

    /// W_cubic(t) = C (t − K)³ + origin, in segments.
    fn w_cubic(&self, t: f64) -> f64 {
        self.params.c * (t - self.k).powi(3) + self.origin
    }
}

impl CongestionControl for Cubic {
    fn cwnd(&self) -> u64 {
        self.cwnd
    }

    fn ssthresh(&self) -> u64 {
        self.ssthresh
    }

    fn mss(&self) -> u64 {
        self.mss
    }

    fn hystart_exit(&self) -> bool {
        self.hystart_exit
    }

    fn reductions(&self) -> u64 {
        self.reductions
    }

    fn set_mss(&mut self, mss: u64) {
        self.mss = mss.max(1);
    }

    /// Skip slow start: congestion avoidance from `window` (ssthresh = cwnd), the cubic
    /// epoch starting at the first acknowledgement with its plateau at this window.
    fn start_in_avoidance(&mut self, window: u64) {
        self.cwnd = window.clamp(self.min_window(), MAX_WINDOW_BYTES);
        self.ssthresh = self.cwnd;
        self.w_max = 0.0;
        self.epoch_start = None;
    }

    fn on_sent(&mut self, last_packet_number: u64) {
        self.hystart.on_sent(last_packet_number);
    }

    /// One RTT sample per batch of acknowledgements, for HyStart.
    fn on_rtt_sample(&mut self, rtt: Duration) {
        if !self.params.hystart || !self.in_slow_start() || self.recovery_start.is_some() {
            return;
        }
        self.hystart.on_sample(rtt);
        if self.cwnd >= HYSTART_LOW_WINDOW_SEGMENTS * self.mss && self.hystart.delay_increased() {
            self.ssthresh = self.cwnd;
            self.hystart_exit = true;
        }
    }

    fn on_end_acks(&mut self, largest_acked: Option<u64>) {
        self.hystart.on_end_acks(largest_acked);
    }

    /// Loss or ECN-CE of a packet sent at `sent`. One reduction per recovery period:
    /// losses of packets sent before the last reduction are part of it.
    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool) {
        if !self.in_recovery(sent) {
            self.recovery_start = Some(now);
            self.reductions += 1;
            let cwnd = self.cwnd as f64 / self.mss as f64;
            let beta = self.params.beta;
            self.w_max = if self.params.fast_convergence && cwnd < self.w_max {
                cwnd * (1.0 + beta) / 2.0
            } else {
                cwnd
            };
            self.ssthresh = ((self.cwnd as f64 * beta) as u64).max(self.min_window());
            self.cwnd = self.ssthresh;
            self.epoch_start = None;
        }
        if persistent {
            // RFC 9002 §7.6.2: everything in flight for a long time was lost.
            self.cwnd = self.min_window();
            self.epoch_start = None;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1472;
    const RTT: Duration = Duration::from_millis(50);

    fn cubic(iw: u64) -> Cubic {
        Cubic::new(
            CubicParams {
                hystart: false,
                ..CubicParams::default()
            },
            MSS,
            iw * MSS,
        )
    }

    #[test]
    fn slow_start_grows_by_the_bytes_acknowledged() {
        let mut c = cubic(32);
        let t0 = Instant::now();
        for i in 0..32 {
            c.on_ack(t0 + RTT, t0 + Duration::from_micros(i), MSS, false, RTT);
        }
        assert_eq!(c.cwnd(), 64 * MSS);
        assert!(c.in_slow_start());
    }

    #[test]
    fn app_limited_acks_do_not_grow_the_window() {
        let mut c = cubic(32);
        let t0 = Instant::now();
        c.on_ack(t0 + RTT, t0, MSS, true, RTT);
        assert_eq!(c.cwnd(), 32 * MSS);
    }

    #[test]
    fn loss_cuts_to_beta_and_sets_ssthresh() {
        let mut c = cubic(100);
        let t0 = Instant::now();
        c.on_congestion_event(t0 + RTT, t0, false);
        assert_eq!(c.cwnd(), (100.0 * MSS as f64 * 0.7) as u64);
        assert_eq!(c.ssthresh(), c.cwnd());
        assert!(!c.in_slow_start());
        assert_eq!(c.reductions(), 1);
    }

    #[test]
    fn one_reduction_per_recovery_period() {
        let mut c = cubic(100);
        let t0 = Instant::now();
        c.on_congestion_event(t0 + RTT, t0, false);
        let after_first = c.cwnd();
        // A packet sent before the reduction is lost too: same recovery period.
        c.on_congestion_event(
            t0 + RTT + Duration::from_millis(1),
            t0 + Duration::from_millis(10),
            false,
        );
        assert_eq!(c.cwnd(), after_first);
        // Acknowledgements of packets sent before the reduction do not grow the window.
        c.on_ack(t0 + 2 * RTT, t0 + Duration::from_millis(20), MSS, false, RTT);
        assert_eq!(c.cwnd(), after_first);
        // A packet sent after it starts a new period.
        c.on_congestion_event(t0 + 3 * RTT, t0 + 2 * RTT, false);
        assert_eq!(c.cwnd(), (after_first as f64 * 0.7) as u64);
        assert_eq!(c.reductions(), 2);
    }

    #[test]
    fn fast_convergence_lowers_the_plateau() {
        let mut c = cubic(100);
        let t0 = Instant::now();
        c.on_congestion_event(t0 + RTT, t0, false); // w_max = 100
        c.on_congestion_event(t0 + 3 * RTT, t0 + 2 * RTT, false); // 70 < 100: w_max = 70 × 0.85
        assert!((c.w_max - 70.0 * 0.85).abs() < 0.01, "w_max {}", c.w_max);
    }

    #[test]
    fn persistent_congestion_collapses_the_window() {
        let mut c = cubic(100);
        let t0 = Instant::now();
        c.on_congestion_event(t0 + RTT, t0, true);
        assert_eq!(c.cwnd(), 2 * MSS);
        assert_eq!(c.ssthresh(), 70 * MSS);
    }

    #[test]
    fn avoidance_returns_to_the_plateau_after_k() {
        // A window large enough for the cubic function to dominate the Reno estimate.
        let rtt = Duration::from_millis(100);
        let mut c = cubic(1000);
        let t0 = Instant::now();
        c.on_congestion_event(t0, t0 - rtt, false);
        assert_eq!((c.cwnd() as f64 / MSS as f64).round(), 700.0);
        // K = cbrt(300 / 0.4) ≈ 9.09 s: feed a window of acks per RTT for 12 s.
        let k = (300.0f64 / 0.4).cbrt();
        let mut now = t0;
        let mut at_k = 0;
        let mut at_half_k = 0;
        while now < t0 + Duration::from_secs(12) {
            now += rtt;
            for _ in 0..c.cwnd() / MSS {
                c.on_ack(now, now - rtt, MSS, false, rtt);
            }
            let t = now.duration_since(t0).as_secs_f64();
            if at_half_k == 0 && t >= k / 2.0 {
                at_half_k = c.cwnd() / MSS;
            }
            if at_k == 0 && t >= k {
                at_k = c.cwnd() / MSS;
            }
        }
        // Concave: most of the way back by K/2 (W(K/2) = 1000 − 0.4 (K/2)³ ≈ 962), at the
        // plateau at K, convex beyond (W(12 s) ≈ 1010).
        assert!((950..=975).contains(&at_half_k), "window at K/2: {at_half_k} segments");
        assert!((995..=1003).contains(&at_k), "window at K: {at_k} segments");
        assert!(
            (1005..=1015).contains(&(c.cwnd() / MSS)),
            "window after 12 s: {}",
            c.cwnd() / MSS
        );
    }

    #[test]
    fn reno_friendly_region_when_the_cubic_is_slower() {
        // Small window, short RTT: standard Reno would grow faster than the cubic function.
        let mut c = cubic(10);
        let t0 = Instant::now();
        c.on_congestion_event(t0, t0 - Duration::from_millis(1), false); // 7 segments, w_max 10
        let rtt = Duration::from_millis(1);
        let mut now = t0;
        for _ in 0..200 {
            now += rtt;
            for _ in 0..c.cwnd() / MSS {
                c.on_ack(now, now - rtt, MSS, false, rtt);
            }
        }
        // 200 RTTs in 0.2 s: the cubic function has barely moved (K ≈ 1.96 s), the Reno
        // estimate has added ≈ 0.53 segments per RTT up to w_max and 1 per RTT after.
        assert!(c.cwnd() / MSS > 100, "window {}", c.cwnd() / MSS);
    }

    #[test]
    fn start_in_avoidance_skips_slow_start() {
        let mut c = cubic(32);
        c.start_in_avoidance(215 * MSS);
        assert_eq!(c.cwnd(), 215 * MSS);
        assert_eq!(c.ssthresh(), 215 * MSS);
        assert!(!c.in_slow_start());
        // Congestion avoidance: one window of acks adds far less than a window.
        let t0 = Instant::now();
        for _ in 0..215 {
            c.on_ack(t0 + RTT, t0, MSS, false, RTT);
        }
        assert!(c.cwnd() < 220 * MSS, "grew to {} segments in one RTT", c.cwnd() / MSS);
        assert!(c.cwnd() >= 215 * MSS);
    }

    #[test]
    fn start_in_avoidance_keeps_the_minimum_window() {
        let mut c = cubic(32);
        c.start_in_avoidance(100);
        assert_eq!(c.cwnd(), 2 * MSS);
    }

    #[test]
    fn hystart_leaves_slow_start_when_the_rtt_rises() {
        let mut c = Cubic::new(CubicParams::default(), MSS, 32 * MSS);
        let mut pn = 0u64;
        let mut round = |c: &mut Cubic, rtt: Duration| {
            for _ in 0..10 {
                c.on_sent(pn);
                pn += 1;
            }
            for _ in 0..10 {
                c.on_rtt_sample(rtt);
            }
            c.on_end_acks(Some(pn));
        };
        round(&mut c, RTT);
        assert!(c.in_slow_start());
        round(&mut c, RTT + Duration::from_millis(3)); // below η = 50/8 = 6.25 ms
        assert!(c.in_slow_start());
        round(&mut c, RTT + Duration::from_millis(10));
        assert!(!c.in_slow_start());
        assert!(c.hystart_exit());
        assert_eq!(c.ssthresh(), c.cwnd());
    }

    #[test]
    fn hystart_off_stays_in_slow_start() {
        let mut c = cubic(32);
        for (i, rtt) in [50u64, 80, 120].iter().enumerate() {
            for _ in 0..10 {
                c.on_sent(i as u64);
                c.on_rtt_sample(Duration::from_millis(*rtt));
            }
            c.on_end_acks(Some(i as u64 + 1));
        }
        assert!(c.in_slow_start());
    }
}
