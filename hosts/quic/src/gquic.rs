//! Google QUIC's CUBIC sender (the Blitzstart paper's transport), written from the
//! behaviour of google/quiche's `TcpCubicSenderBytes`, `CubicBytes` and `HybridSlowStart`:
//!
//! * two emulated connections: β = (2 − 1 + 0.7)/2 = 0.85 at a loss, 0.925 for fast
//!   convergence, and the TCP-friendly estimate's α = 3·2²·(1 − β)/(1 + β);
//! * slow start adds one datagram per acknowledged packet, and the window grows only
//!   while the sender is window-limited: in flight before the acknowledgement ≥ cwnd, or
//!   more than half of cwnd in slow start, or within 3 datagrams of cwnd; an
//!   acknowledgement that is not window-limited restarts CUBIC's epoch;
//! * CUBIC (C = 0.4 datagrams/s³) on bytes, its clock one minimum RTT ahead, each step at
//!   most half the acknowledged bytes, never below the TCP-friendly estimate;
//! * HybridSlowStart is delay-only: in each round, the least of its first 8 RTT samples
//!   against the connection's minimum RTT plus min_rtt/8 (clamped to 4–16 ms); once found,
//!   slow start ends with ssthresh = cwnd when cwnd reaches 16 datagrams;
//! * one reduction per loss episode: a loss of a packet sent before the last reduction
//!   changes nothing, and acknowledgements grow nothing until the episode ends.
//!
//! Where this differs from quiche, on purpose: the datagram size is the connection's (quiche
//! counts 1460 bytes whatever its packets are), an RTT sample is the least of an
//! acknowledgement batch (quiche takes the latest, corrected for the peer's ack delay), and
//! there is no proportional rate reduction (quinn has no hook for it). quinn's persistent
//! congestion is taken as a loss: quiche has no such collapse for CUBIC.

use std::time::{Duration, Instant};

use crate::sender::CongestionControl;

/// quiche emulates this many TCP connections (kDefaultNumConnections).
const CONNECTIONS: f64 = 2.0;
/// Reno's and CUBIC's decrease for one connection, and CUBIC's fast-convergence factor.
const ONE_BETA: f64 = 0.7;
const ONE_BETA_LAST_MAX: f64 = 0.85;
/// CUBIC's scaling constant in datagrams per second³ (quiche: 410/1024).
const C: f64 = 410.0 / 1024.0;
/// The window is never cut below this many datagrams (kDefaultMinimumCongestionWindow).
pub const MIN_WINDOW_DATAGRAMS: u64 = 2;
/// Nor grown above this many (quic_max_congestion_window's default).
pub const MAX_WINDOW_DATAGRAMS: u64 = 2000;
/// "Window-limited" slack: within this many datagrams of cwnd (kMaxBurstBytes / MSS).
const BURST_DATAGRAMS: u64 = 3;
// HybridSlowStart's constants.
const HYSTART_LOW_WINDOW: u64 = 16;
const HYSTART_SAMPLES: u32 = 8;
const HYSTART_MIN_THRESHOLD: Duration = Duration::from_millis(4);
const HYSTART_MAX_THRESHOLD: Duration = Duration::from_millis(16);

/// β with two emulated connections: 0.85.
pub fn beta() -> f64 {
    (CONNECTIONS - 1.0 + ONE_BETA) / CONNECTIONS
}

/// The fast-convergence factor with two emulated connections: 0.925.
pub fn beta_last_max() -> f64 {
    (CONNECTIONS - 1.0 + ONE_BETA_LAST_MAX) / CONNECTIONS
}

/// The TCP-friendly estimate's growth per window: 3N²(1 − β)/(1 + β).
pub fn alpha() -> f64 {
    3.0 * CONNECTIONS * CONNECTIONS * (1.0 - beta()) / (1.0 + beta())
}

#[derive(Clone, Debug, Default)]
struct HybridSlowStart {
    /// The round ends when a packet at or above this number is acknowledged.
    round_end: Option<u64>,
    round_min: Option<Duration>,
    samples: u32,
    /// A delay increase was seen (it stays found, as quiche's does).
    found: bool,
}

impl HybridSlowStart {
    fn on_sample(&mut self, rtt: Duration, min_rtt: Duration, last_sent: Option<u64>) {
        if self.round_end.is_none() {
            self.round_end = last_sent;
            self.round_min = None;
            self.samples = 0;
        }
        if self.samples >= HYSTART_SAMPLES {
            return;
        }
        self.samples += 1;
        self.round_min = Some(self.round_min.map_or(rtt, |m| m.min(rtt)));
        if self.samples == HYSTART_SAMPLES {
            let threshold = (min_rtt / 8).clamp(HYSTART_MIN_THRESHOLD, HYSTART_MAX_THRESHOLD);
            if self.round_min.is_some_and(|m| m > min_rtt + threshold) {
                self.found = true;
            }
        }
    }

    fn on_acked(&mut self, largest_acked: u64) {
        if self.round_end.map_or(true, |end| largest_acked >= end) {
            self.round_end = None;
        }
    }
}

/// The sender's state, on byte windows of `mss`-byte datagrams.
#[derive(Clone, Debug)]
pub struct GquicCubic {
    mss: u64,
    cwnd: u64,
    ssthresh: u64,
    hystart: HybridSlowStart,
    hystart_exit: bool,
    /// The last reduction: packets sent before it belong to its episode.
    cutback: Option<Instant>,
    reductions: u64,
    last_sent: Option<u64>,
    min_rtt: Option<Duration>,
    // CUBIC's epoch: when it began, its origin window and K (seconds), the TCP-friendly
    // estimate, and the window before the last reduction.
    epoch: Option<Instant>,
    origin: f64,
    k: f64,
    reno: f64,
    last_max: f64,
}

impl GquicCubic {
    pub fn new(mss: u64, initial_window: u64) -> Self {
        Self {
            mss,
            cwnd: initial_window.clamp(MIN_WINDOW_DATAGRAMS * mss, MAX_WINDOW_DATAGRAMS * mss),
            ssthresh: u64::MAX, // unset: slow start until a loss or HybridSlowStart
            hystart: HybridSlowStart::default(),
            hystart_exit: false,
            cutback: None,
            reductions: 0,
            last_sent: None,
            min_rtt: None,
            epoch: None,
            origin: 0.0,
            k: 0.0,
            reno: 0.0,
            last_max: 0.0,
        }
    }

    fn in_recovery(&self, sent: Instant) -> bool {
        self.cutback.is_some_and(|c| sent <= c)
    }

    fn window_limited(&self, prior_in_flight: u64) -> bool {
        prior_in_flight >= self.cwnd
            || (self.in_slow_start() && prior_in_flight > self.cwnd / 2)
            || self.cwnd.saturating_sub(prior_in_flight) <= BURST_DATAGRAMS * self.mss
    }

    /// One acknowledged packet of `bytes`, sent at `sent`; `prior_in_flight` is what was in
    /// flight before the first acknowledgement of its batch (quiche's prior_in_flight).
    pub fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, prior_in_flight: u64) {
        if self.in_recovery(sent) {
            return;
        }
        if !self.window_limited(prior_in_flight) {
            self.epoch = None; // application-limited: CUBIC's clock starts again
            return;
        }
        if self.cwnd >= MAX_WINDOW_DATAGRAMS * self.mss {
            return;
        }
        if self.in_slow_start() {
            self.cwnd += self.mss;
            return;
        }
        self.avoidance(now, bytes);
    }

    fn avoidance(&mut self, now: Instant, bytes: u64) {
        let mss = self.mss as f64;
        let cwnd = self.cwnd as f64;
        let epoch = match self.epoch {
            Some(e) => e,
            None => {
                self.reno = cwnd;
                if self.last_max <= cwnd {
                    self.k = 0.0;
                    self.origin = cwnd;
                } else {
                    self.k = ((self.last_max - cwnd) / mss / C).cbrt();
                    self.origin = self.last_max;
                }
                *self.epoch.insert(now)
            }
        };
        let t = (now + self.min_rtt.unwrap_or_default()).saturating_duration_since(epoch).as_secs_f64();
        let cubic = self.w_cubic(t).min(cwnd + bytes as f64 / 2.0);
        self.reno += alpha() * bytes as f64 * mss / self.reno;
        let target = cubic.max(self.reno);
        self.cwnd = (target as u64).clamp(MIN_WINDOW_DATAGRAMS * self.mss, MAX_WINDOW_DATAGRAMS * self.mss);
    }

    /// CUBIC's window t seconds into the epoch, in bytes.
    fn w_cubic(&self, t: f64) -> f64 {
        self.origin + C * (t - self.k).powi(3) * self.mss as f64
    }
}

impl CongestionControl for GquicCubic {
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

    /// Blitzstart: congestion avoidance from `window` (ssthresh = cwnd), a fresh epoch.
    fn start_in_avoidance(&mut self, window: u64) {
        self.cwnd = window.clamp(MIN_WINDOW_DATAGRAMS * self.mss, MAX_WINDOW_DATAGRAMS * self.mss);
        self.ssthresh = self.cwnd;
        self.epoch = None;
    }

    fn on_sent(&mut self, last_packet_number: u64) {
        self.last_sent = Some(last_packet_number);
    }

    /// The batch's least RTT sample: HybridSlowStart's input.
    fn on_rtt_sample(&mut self, rtt: Duration) {
        let min_rtt = *self.min_rtt.insert(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        if !self.in_slow_start() {
            return;
        }
        self.hystart.on_sample(rtt, min_rtt, self.last_sent);
        if self.hystart.found && self.cwnd >= HYSTART_LOW_WINDOW * self.mss {
            self.ssthresh = self.cwnd;
            self.hystart_exit = true;
        }
    }

    /// The end of an acknowledgement batch, with its largest acknowledged packet.
    fn on_end_acks(&mut self, largest_acked: Option<u64>) {
        if let Some(n) = largest_acked.filter(|_| self.in_slow_start()) {
            self.hystart.on_acked(n);
        }
    }

    /// A loss of a packet sent at `sent`: one reduction per episode.
    fn on_congestion_event(&mut self, now: Instant, sent: Instant, _persistent: bool) {
        if self.in_recovery(sent) {
            return;
        }
        let cwnd = self.cwnd as f64;
        self.last_max = if cwnd + (self.mss as f64) < self.last_max { cwnd * beta_last_max() } else { cwnd };
        self.epoch = None;
        self.cwnd = ((cwnd * beta()) as u64).max(MIN_WINDOW_DATAGRAMS * self.mss);
        self.ssthresh = self.cwnd;
        self.cutback = Some(now);
        self.reductions += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1472;

    fn sender(iw: u64) -> GquicCubic {
        GquicCubic::new(MSS, iw * MSS)
    }

    /// Send `n` datagrams numbered from `first`.
    fn send(s: &mut GquicCubic, first: u64, n: u64) {
        for i in 0..n {
            s.on_sent(first + i);
        }
    }

    #[test]
    fn the_betas_and_alpha_of_two_emulated_connections() {
        assert!((beta() - 0.85).abs() < 1e-12);
        assert!((beta_last_max() - 0.925).abs() < 1e-12);
        assert!((alpha() - 3.0 * 4.0 * 0.15 / 1.85).abs() < 1e-12);
    }

    #[test]
    fn slow_start_adds_one_datagram_per_acknowledged_packet_while_window_limited() {
        let t0 = Instant::now();
        let mut s = sender(32);
        send(&mut s, 0, 32);
        for _ in 0..4 {
            s.on_ack(t0 + Duration::from_millis(50), t0, MSS, 32 * MSS);
        }
        assert_eq!(s.cwnd(), 36 * MSS);
        s.on_end_acks(Some(3));
        // Half of cwnd or less in flight in slow start, and more than 3 datagrams of room:
        // not window-limited, no growth.
        let mut idle = sender(32);
        send(&mut idle, 0, 10);
        idle.on_ack(t0 + Duration::from_millis(50), t0, MSS, 10 * MSS);
        assert_eq!(idle.cwnd(), 32 * MSS);
    }

    #[test]
    fn one_reduction_per_episode_to_085_and_ssthresh_is_the_new_window() {
        let t0 = Instant::now();
        let mut s = sender(100);
        send(&mut s, 0, 100);
        let loss = t0 + Duration::from_millis(60);
        s.on_congestion_event(loss, t0, false);
        assert_eq!(s.cwnd(), (100.0 * MSS as f64 * 0.85) as u64);
        assert_eq!(s.ssthresh(), s.cwnd());
        s.on_congestion_event(loss + Duration::from_millis(1), t0 + Duration::from_millis(10), false);
        assert_eq!(s.reductions(), 1, "a packet sent before the reduction is the same episode");
        let before = s.cwnd();
        s.on_ack(loss + Duration::from_millis(5), t0 + Duration::from_millis(20), MSS, 99 * MSS);
        assert_eq!(s.cwnd(), before, "no growth in recovery");
    }

    #[test]
    fn fast_convergence_remembers_0925_of_a_window_below_the_last_maximum() {
        let t0 = Instant::now();
        let mut s = sender(100);
        s.on_congestion_event(t0 + Duration::from_millis(1), t0, false);
        let second = s.cwnd();
        s.on_congestion_event(t0 + Duration::from_millis(3), t0 + Duration::from_millis(2), false);
        assert!((s.last_max - second as f64 * 0.925).abs() < 1.0);
    }

    #[test]
    fn avoidance_steps_at_most_half_the_acknowledged_bytes_towards_the_last_maximum() {
        let t0 = Instant::now();
        let mut s = sender(100);
        s.on_rtt_sample(Duration::from_millis(50));
        send(&mut s, 0, 100);
        s.on_congestion_event(t0, t0, false);
        let cut = s.cwnd();
        let mut now = t0 + Duration::from_millis(1);
        let mut pn = 100;
        let mut last = cut;
        for _ in 0..2000 {
            send(&mut s, pn, 1);
            pn += 1;
            s.on_ack(now, now - Duration::from_millis(50), MSS, s.cwnd()); // window-limited throughout
            s.on_end_acks(Some(pn - 1));
            assert!(s.cwnd() <= last + MSS / 2, "a step above half the acknowledged bytes");
            last = s.cwnd();
            now += Duration::from_millis(1);
        }
        assert!(s.cwnd() > cut);
        // The epoch's curve: from the last maximum (100 datagrams), K = cbrt(15 / 0.4) s.
        let k = (15.0f64 / C).cbrt();
        assert!((s.k - k).abs() < 0.01, "K {} against {k}", s.k);
        assert!((s.w_cubic(k) - 100.0 * MSS as f64).abs() < 1.0);
        assert!(s.w_cubic(0.0) < s.w_cubic(k) && s.w_cubic(2.0 * k) > s.w_cubic(k));
    }

    #[test]
    fn an_application_limited_acknowledgement_restarts_the_epoch_and_grows_nothing() {
        let t0 = Instant::now();
        let mut s = sender(100);
        s.start_in_avoidance(100 * MSS);
        send(&mut s, 0, 100);
        s.on_ack(t0, t0, MSS, 100 * MSS);
        assert!(s.epoch.is_some());
        s.on_end_acks(Some(0));
        s.on_ack(t0 + Duration::from_millis(1), t0, MSS, 10 * MSS);
        assert!(s.epoch.is_none());
    }

    #[test]
    fn hybrid_slow_start_exits_on_a_delay_increase_against_the_minimum_rtt() {
        let mut s = sender(32);
        s.on_rtt_sample(Duration::from_millis(50)); // the minimum
        send(&mut s, 0, 64);
        s.on_end_acks(Some(0)); // ends the first round
        for _ in 0..7 {
            s.on_rtt_sample(Duration::from_millis(57));
        }
        assert!(!s.hystart_exit(), "seven samples decide nothing");
        s.on_rtt_sample(Duration::from_millis(57)); // 50 + clamp(50/8 = 6.25 ms) < 57
        assert!(s.hystart_exit() && !s.in_slow_start() && s.ssthresh() == s.cwnd());
    }

    #[test]
    fn hybrid_slow_start_waits_for_16_datagrams_and_ignores_a_small_increase() {
        let mut small = sender(10);
        small.on_rtt_sample(Duration::from_millis(20));
        send(&mut small, 0, 10);
        small.on_end_acks(Some(0));
        for _ in 0..8 {
            small.on_rtt_sample(Duration::from_millis(30)); // 20 + 4 ms (the clamp) < 30
        }
        assert!(!small.hystart_exit(), "below 16 datagrams");
        small.cwnd = 16 * MSS;
        small.on_rtt_sample(Duration::from_millis(30));
        assert!(small.hystart_exit(), "found stays found: exit once the window is 16");

        let mut calm = sender(32);
        calm.on_rtt_sample(Duration::from_millis(100));
        send(&mut calm, 0, 32);
        calm.on_end_acks(Some(0));
        for _ in 0..8 {
            calm.on_rtt_sample(Duration::from_millis(112)); // threshold 12.5 ms
        }
        assert!(!calm.hystart_exit());
    }

    #[test]
    fn blitzstart_starts_in_avoidance_from_its_window() {
        let mut s = sender(32);
        s.start_in_avoidance(400 * MSS);
        assert_eq!((s.cwnd(), s.ssthresh()), (400 * MSS, 400 * MSS));
        assert!(!s.in_slow_start());
        s.start_in_avoidance(1);
        assert_eq!(s.cwnd(), MIN_WINDOW_DATAGRAMS * MSS);
    }
}
