//! CUBIC (RFC 9438) on byte windows, with HyStart's delay-increase exit from slow start
//! (the detection rule of RFC 9406, leaving straight to congestion avoidance as Linux
//! CUBIC and Google QUIC's hybrid slow start do), or with HyStart++ (RFC 9406 whole: the
//! increase starts Conservative Slow Start, which a falling RTT undoes and CSS_ROUNDS
//! rounds end), or with Rapid Start (draft-kazuho-ccwg-rapid-start-02: 3x a round while
//! the RTT floor holds, and a first recovery that ends at β × what the path delivered).
//! Plain arithmetic with no connection attached, so that tests drive it packet by packet.

use std::time::{Duration, Instant};

use crate::sender::{CongestionControl, RapidRecord};

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
    /// With `hystart`: on the rise, Conservative Slow Start first (RFC 9406's HyStart++).
    pub hystart_pp: bool,
    /// Rapid Start for the initial slow start (in place of HyStart's exit: only a loss
    /// ends it).
    pub rapid_start: Option<RapidParams>,
}

/// Rapid Start's constants (draft-kazuho-ccwg-rapid-start-02 §3.2, §3.3.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RapidParams {
    /// K: the first recovery's factors are silence = loss = β + K(1 − β), ack = K(1 − β).
    pub k: f64,
    /// 3x growth while the RTT floor is within min_rtt + this ...
    pub thresh_add: Duration,
    /// ... and within min_rtt × this, whichever is smaller.
    pub thresh_ratio: f64,
}

impl RapidParams {
    pub const DRAFT_02: Self = Self {
        k: 2.0 / 3.0,
        thresh_add: Duration::from_millis(4),
        thresh_ratio: 1.1,
    };
}

/// Where Rapid Start is in a connection.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Rapid {
    Growing,
    /// The first recovery; its floor: pre-loss window × β / 3 (bytes).
    Recovery { floor: u64 },
    Done,
}

impl Default for CubicParams {
    fn default() -> Self {
        Self {
            beta: 0.7,
            c: 0.4,
            fast_convergence: true,
            hystart: true,
            hystart_pp: false,
            rapid_start: None,
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
// HyStart++ (RFC 9406 §4.3): CSS grows a quarter as fast as slow start and ends in
// congestion avoidance after this many rounds. L is unlimited: quinn paces.
const CSS_GROWTH_DIVISOR: u64 = 4;
const CSS_ROUNDS: u32 = 5;

#[derive(Clone, Debug, Default)]
struct HyStart {
    /// The round ends when a packet number at or above this one is acknowledged.
    round_end: Option<u64>,
    last_sent: Option<u64>,
    current_min: Option<Duration>,
    last_min: Option<Duration>,
    samples: u32,
    /// In Conservative Slow Start: the least RTT of the round that started it.
    css_baseline: Option<Duration>,
    css_rounds: u32,
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

    /// True when these acknowledgements ended the round.
    fn on_end_acks(&mut self, largest_acked: Option<u64>) -> bool {
        let (Some(end), Some(acked)) = (self.round_end, largest_acked) else {
            return false;
        };
        if acked < end {
            return false;
        }
        if self.current_min.is_some() {
            self.last_min = self.current_min;
        }
        self.current_min = None;
        self.samples = 0;
        self.round_end = self.last_sent.map(|pn| pn.max(end + 1));
        true
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
    /// CSS's growth not yet a whole byte of window (bytes × CSS_GROWTH_DIVISOR).
    css_carry: u64,
    /// Rounds of Conservative Slow Start entered (a spurious entry undone counts too).
    css_entries: u64,
    /// The least RTT sample of the connection (Rapid Start's min_rtt).
    min_rtt: Option<Duration>,
    rapid: Rapid,
    rapid_record: RapidRecord,
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
            css_carry: 0,
            css_entries: 0,
            min_rtt: None,
            rapid: if params.rapid_start.is_some() { Rapid::Growing } else { Rapid::Done },
            rapid_record: RapidRecord::default(),
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
        // Rapid Start's first recovery takes ack × the bytes of every packet sent before it;
        // the first acknowledgement of a later packet ends it.
        if let Rapid::Recovery { .. } = self.rapid {
            if self.in_recovery(sent) {
                self.rapid_record.recovery_acked += bytes;
                self.rapid_reduce(self.rapid_factors().1 * bytes as f64);
                return;
            }
            self.rapid_end();
        }
        // No growth while recovering from a loss, nor from acknowledgements of a window the
        // application did not fill (RFC 9002 §7.8).
        if self.in_recovery(sent) || app_limited {
            return;
        }
        if self.in_slow_start() {
            let grow = if self.rapid == Rapid::Growing {
                // two bytes for every byte acknowledged while the RTT floor holds (§3.2)
                if self.rapid_fast() {
                    self.rapid_record.acked_3x += bytes;
                    2 * bytes
                } else {
                    self.rapid_record.acked_2x += bytes;
                    bytes
                }
            } else if self.hystart.css_baseline.is_some() {
                self.css_carry += bytes;
                let grow = self.css_carry / CSS_GROWTH_DIVISOR;
                self.css_carry -= grow * CSS_GROWTH_DIVISOR;
                grow
            } else {
                bytes
            };
            self.cwnd = (self.cwnd + grow).min(MAX_WINDOW_BYTES);
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

    /// Rapid Start's (silence and loss factor, ack factor), with CUBIC's β.
    fn rapid_factors(&self) -> (f64, f64) {
        let k = self.params.rapid_start.map_or(0.0, |r| r.k);
        let beta = self.params.beta;
        (beta + k * (1.0 - beta), k * (1.0 - beta))
    }

    /// 3x growth: the RTT floor (this round's least sample, the last round's before it has
    /// one) within min(min_rtt + thresh_add, min_rtt × thresh_ratio); yes before samples.
    fn rapid_fast(&self) -> bool {
        let (Some(r), Some(min)) = (self.params.rapid_start, self.min_rtt) else {
            return true;
        };
        let Some(floor) = self.hystart.current_min.or(self.hystart.last_min) else {
            return true;
        };
        floor <= (min + r.thresh_add).min(min.mul_f64(r.thresh_ratio))
    }

    /// The first recovery's window, less `bytes` but not below its floor; ssthresh with it
    /// (the recovery is not slow start).
    fn rapid_reduce(&mut self, bytes: f64) {
        let Rapid::Recovery { floor } = self.rapid else {
            return;
        };
        self.cwnd = ((self.cwnd as f64 - bytes).max(0.0) as u64).max(floor);
        self.ssthresh = self.cwnd;
    }

    /// The first recovery is over, and Rapid Start with it: CUBIC from this window.
    fn rapid_end(&mut self) {
        self.rapid = Rapid::Done;
        self.ssthresh = self.cwnd;
        self.rapid_record.end_cwnd = Some(self.cwnd);
        self.epoch_start = None;
    }

    /// Slow start is over: HyStart's exit, or the end of CSS.
    fn leave_slow_start(&mut self) {
        self.ssthresh = self.cwnd;
        self.hystart_exit = true;
        self.hystart.css_baseline = None;
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

    fn css_entries(&self) -> u64 {
        self.css_entries
    }

    fn on_lost_bytes(&mut self, bytes: u64) {
        if let Rapid::Recovery { .. } = self.rapid {
            self.rapid_record.recovery_lost += bytes;
            self.rapid_reduce(self.rapid_factors().0 * bytes as f64);
        }
    }

    fn rapid_start(&self) -> Option<RapidRecord> {
        self.params.rapid_start.map(|_| self.rapid_record)
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

    /// One RTT sample per batch of acknowledgements, for HyStart (or Rapid Start's RTT floor).
    fn on_rtt_sample(&mut self, rtt: Duration) {
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |m| m.min(rtt)));
        if self.rapid == Rapid::Growing {
            self.hystart.on_sample(rtt); // the rounds' least RTTs; no exit on delay
            return;
        }
        if !self.params.hystart || !self.in_slow_start() || self.recovery_start.is_some() {
            return;
        }
        self.hystart.on_sample(rtt);
        if self.cwnd < HYSTART_LOW_WINDOW_SEGMENTS * self.mss {
            return;
        }
        if let Some(baseline) = self.hystart.css_baseline {
            // A CSS round whose least RTT falls below the one that started CSS: the
            // increase was spurious, back to slow start (RFC 9406 §4.2).
            if self.hystart.samples >= HYSTART_MIN_SAMPLES && self.hystart.current_min.is_some_and(|m| m < baseline) {
                self.hystart.css_baseline = None;
            }
        } else if self.hystart.delay_increased() {
            if self.params.hystart_pp {
                self.hystart.css_baseline = self.hystart.current_min;
                self.hystart.css_rounds = 0;
                self.css_entries += 1;
            } else {
                self.leave_slow_start();
            }
        }
    }

    fn on_end_acks(&mut self, largest_acked: Option<u64>) {
        let ended = self.hystart.on_end_acks(largest_acked);
        if ended && self.hystart.css_baseline.is_some() && self.in_slow_start() {
            self.hystart.css_rounds += 1;
            if self.hystart.css_rounds >= CSS_ROUNDS {
                self.leave_slow_start();
            }
        }
    }

    /// Loss or ECN-CE of a packet sent at `sent`. One reduction per recovery period:
    /// losses of packets sent before the last reduction are part of it.
    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool) {
        match self.rapid {
            // Rapid Start's first loss: the window × silence at once, then its recovery's
            // reductions; CUBIC notes the pre-loss window as its W_max.
            Rapid::Growing if !persistent => {
                let pre = self.cwnd;
                let (silence, _) = self.rapid_factors();
                let floor = ((pre as f64 * self.params.beta / 3.0) as u64).max(self.min_window());
                self.rapid = Rapid::Recovery { floor };
                self.rapid_record.pre_cwnd = pre;
                self.recovery_start = Some(now);
                self.reductions += 1;
                self.w_max = pre as f64 / self.mss as f64;
                self.epoch_start = None;
                self.cwnd = pre;
                self.rapid_reduce(pre as f64 * (1.0 - silence));
                return;
            }
            Rapid::Recovery { .. } if !persistent && self.in_recovery(sent) => return,
            Rapid::Recovery { .. } => self.rapid_end(),
            _ => self.rapid = Rapid::Done,
        }
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

    /// Rounds of 10 packets, each round's RTT samples all `rtt`, acknowledged in full.
    fn rounds(c: &mut Cubic, pn: &mut u64, rtts: &[u64]) {
        for rtt in rtts {
            for _ in 0..10 {
                c.on_sent(*pn);
                *pn += 1;
            }
            for _ in 0..10 {
                c.on_rtt_sample(Duration::from_millis(*rtt));
                c.on_ack(Instant::now(), Instant::now(), MSS, false, RTT);
            }
            c.on_end_acks(Some(*pn));
        }
    }

    fn hystart_pp(iw: u64) -> Cubic {
        Cubic::new(CubicParams { hystart_pp: true, ..CubicParams::default() }, MSS, iw * MSS)
    }

    #[test]
    fn hystart_pp_grows_a_quarter_as_fast_in_css_and_leaves_after_its_rounds() {
        let mut c = hystart_pp(32);
        let mut pn = 0;
        rounds(&mut c, &mut pn, &[50, 50]);
        assert_eq!(c.cwnd(), 52 * MSS);            // slow start: a segment per segment
        rounds(&mut c, &mut pn, &[60]);              // +10 ms > η = 6.25 ms: CSS from here
        assert!(c.in_slow_start() && c.css_entries() == 1 && !c.hystart_exit());
        let entered = c.cwnd();
        rounds(&mut c, &mut pn, &[60, 60, 60]);
        assert_eq!(c.cwnd() - entered, 3 * 10 * MSS / 4); // a quarter of slow start's growth
        assert!(c.in_slow_start());
        rounds(&mut c, &mut pn, &[60]);              // the fifth CSS round ends it
        assert!(!c.in_slow_start() && c.hystart_exit());
        assert_eq!(c.ssthresh(), c.cwnd());
    }

    #[test]
    fn hystart_pp_returns_to_slow_start_when_the_rtt_falls() {
        let mut c = hystart_pp(32);
        let mut pn = 0;
        rounds(&mut c, &mut pn, &[50, 50, 60]);      // CSS, baseline 60 ms
        assert_eq!(c.css_entries(), 1);
        rounds(&mut c, &mut pn, &[55]);              // below the baseline: spurious
        let back = c.cwnd();
        rounds(&mut c, &mut pn, &[55]);
        assert_eq!(c.cwnd() - back, 10 * MSS);       // slow start's growth again
        assert!(c.in_slow_start() && !c.hystart_exit());
    }

    fn rapid(iw: u64) -> Cubic {
        Cubic::new(CubicParams { rapid_start: Some(RapidParams::DRAFT_02), ..CubicParams::default() }, MSS, iw * MSS)
    }

    #[test]
    fn rapid_start_grows_3x_while_the_rtt_floor_holds_and_2x_above_it() {
        let mut c = rapid(10);
        let mut pn = 0;
        rounds(&mut c, &mut pn, &[50, 50]);          // 20 segments acknowledged: +40
        assert_eq!(c.cwnd(), 50 * MSS);
        // 60 ms > min(50 + 4, 50 × 1.1) ms: slow start's growth
        rounds(&mut c, &mut pn, &[60]);
        assert_eq!(c.cwnd(), 60 * MSS);
        // a delay increase does not end Rapid Start (HyStart's exit is not its)
        assert!(c.in_slow_start() && !c.hystart_exit());
        let r = c.rapid_start().unwrap();
        assert_eq!((r.acked_3x, r.acked_2x), (20 * MSS, 10 * MSS));
    }

    #[test]
    fn rapid_start_first_recovery_ends_at_beta_times_what_was_delivered() {
        let mut c = rapid(100);
        let t0 = Instant::now();
        let pre = c.cwnd();
        c.on_congestion_event(t0 + RTT, t0, false);
        c.on_lost_bytes(10 * MSS);
        // silence: 0.7 + 2/3 × 0.3 = 0.9 of the window, then 0.9 per byte lost
        let after = pre as f64 * 0.9 - 9.0 * MSS as f64;
        assert!((c.cwnd() as f64 - after).abs() <= 2.0, "{} against {after}", c.cwnd());
        for _ in 0..90 {                                // the rest of the flight, acknowledged
            c.on_ack(t0 + RTT * 2, t0, MSS, false, RTT);
        }
        c.on_ack(t0 + RTT * 3, t0 + RTT * 2, MSS, false, RTT); // a later packet: the end
        let r = c.rapid_start().unwrap();
        let want = 0.7 * (100.0 - 10.0) * MSS as f64;  // β × (pre − lost)
        let end = r.end_cwnd.unwrap() as f64;
        // each of the 92 reductions rounds the window down to whole bytes
        assert!((end - want).abs() <= 92.0, "ended at {end}, β × delivered = {want}");
        assert_eq!((r.pre_cwnd, r.recovery_lost, r.recovery_acked), (pre, 10 * MSS, 90 * MSS));
        assert!(!c.in_slow_start() && c.ssthresh() == r.end_cwnd.unwrap());
    }

    #[test]
    fn rapid_start_recovery_stops_at_its_floor() {
        let mut c = rapid(100);
        let t0 = Instant::now();
        c.on_congestion_event(t0 + RTT, t0, false);
        c.on_lost_bytes(95 * MSS);                      // nearly all lost
        assert_eq!(c.cwnd(), (100.0 * MSS as f64 * 0.7 / 3.0) as u64);
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
