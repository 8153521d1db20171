//! quinn congestion controller: CUBIC with the paper's start and pacing.
//!
//! * Slow-start start (`cubic-iw32`, and Blitzstart connections without a hint): CUBIC
//!   from an initial window of N datagrams.
//! * Blitzstart: once the client's hint is in the connection's [`HintSlot`], cwnd =
//!   hint × the minimum RTT seen during the handshake, ssthresh = cwnd (congestion
//!   avoidance from the first data packet), then CUBIC.
//!
//! The server creates one controller factory per connection (quinn's
//! `Incoming::accept_with`) holding that connection's slot; the application fills the
//! slot when it reads the request, before it writes any byte of the response. The
//! controller applies the hint at its next callback; until then `window()` already
//! returns the Blitzstart window, so the first response datagram sees it.

use std::any::Any;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use quinn_proto::congestion::{Controller, ControllerFactory, ControllerMetrics};
use quinn_proto::RttEstimator;

use crate::careful_resume::{Action, CarefulResume, CrParams, PathKey, PathStore, Window};
use crate::cubic::{Cubic, CubicParams, MAX_WINDOW_BYTES, MIN_WINDOW_SEGMENTS};
use crate::gquic::GquicCubic;
use crate::gquic_pacing::{Pacer, PacerParams, Sent};
use crate::paced_socket::PaceCell;
use crate::pacing::{self, Pacing, QUINN_RATE_GAIN};
use crate::report::unix_now;
use crate::request::Hint;
use crate::sender::{CongestionControl, RapidRecord};

/// What the application tells a connection's controller: the client's Blitzstart hint, and
/// that the response has begun (the start flight, see [`StartFlight`], begins with the
/// next datagram).
#[derive(Debug, Default)]
pub struct HintSlot {
    hint: OnceLock<Hint>,
    responding: AtomicBool,
}

impl HintSlot {
    /// Store the hint; only the first one counts. Returns whether this one was stored.
    pub fn offer(&self, hint: Hint) -> bool {
        hint.kbps > 0 && self.hint.set(hint).is_ok()
    }

    pub fn get(&self) -> Option<Hint> {
        self.hint.get().copied()
    }

    /// The application is about to write its first response byte.
    pub fn respond(&self) {
        self.responding.store(true, Ordering::Release);
    }

    fn responding(&self) -> bool {
        self.responding.load(Ordering::Acquire)
    }
}

/// Why the start flight ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlightEnd {
    /// It filled the start window: from here the first acknowledgement paces the flow.
    Window,
    /// The first acknowledgement of its data came back before the window was out (a paced
    /// window longer than the RTT): the flight is what was sent until then, less than the
    /// window, and the wire can confirm only that part.
    Ack,
    /// A loss was declared first.
    Loss,
}

impl FlightEnd {
    pub fn name(self) -> &'static str {
        match self {
            FlightEnd::Window => "window",
            FlightEnd::Ack => "ack",
            FlightEnd::Loss => "loss",
        }
    }
}

/// The response's first flight as its sender saw it: from the first datagram after the
/// application began the response until the window was full or the first acknowledgement
/// of the flight came back. Reported so that the wire's count of the flight can be
/// compared with what the sender sent over the same span, whichever ended it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StartFlight {
    pub began: Instant,
    /// The window the flight started with (cwnd when its first datagram was sent).
    pub window: u64,
    /// Bytes handed to the socket from `began` until `end`, in quinn's transmit batches.
    pub bytes: u64,
    pub end: Option<(Instant, FlightEnd)>,
    /// Window reductions (losses) before the flight began: a loss while the handshake or
    /// the request was out shrinks the window the flight starts with, so such a flight
    /// says nothing about the start window.
    pub reductions_before: u64,
}

/// Whose CUBIC sends: startlab's RFC 9438 sender (its parameters in `cubic`) or Google
/// QUIC's (`gquic`, fixed as quiche has it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Sender {
    /// startlab's CUBIC: RFC 9438 with RFC 9406's HyStart (--cubic-beta, --hystart).
    Rfc9438,
    /// Google QUIC's CUBIC sender: two emulated connections, HybridSlowStart.
    #[value(name = "gquic")]
    GoogleQuic,
}

impl Sender {
    pub fn name(self) -> &'static str {
        match self {
            Sender::Rfc9438 => "rfc9438",
            Sender::GoogleQuic => "gquic",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ControllerConfig {
    /// Initial window in datagrams of the connection's size.
    pub initial_window: u64,
    pub sender: Sender,
    pub cubic: CubicParams,
    pub pacing: Pacing,
    /// Time every datagram as Google QUIC's pacer would, for the socket beneath quinn to
    /// release it then (paced_socket.rs), at the rates of `pacing`.
    pub datagram_pacing: Option<PacerParams>,
    /// Start from the hint when the client sends one.
    pub blitz: bool,
    /// Careful Resume from the server's saved path parameters (rfc9438 sender only).
    pub careful_resume: Option<CrParams>,
}

/// quiche's `kInitialRttMs`: the RTT its pacing rate uses before the first sample.
const INITIAL_RTT: Duration = Duration::from_millis(100);

/// Blitzstart's first window: hint (kbit/s) × RTT, rounded up to whole datagrams, at
/// least the minimum window.
pub fn blitz_window(kbps: u32, rtt: Duration, mss: u64) -> u64 {
    let bytes = (kbps as u128 * rtt.as_nanos()).div_ceil(8_000_000) as u64;
    let segments = bytes.div_ceil(mss.max(1)).max(MIN_WINDOW_SEGMENTS);
    (segments * mss).min(MAX_WINDOW_BYTES)
}

/// What the connection started with, for the statistics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Blitzed {
    pub hint: Hint,
    /// The handshake RTT the window was computed from.
    pub rtt: Duration,
    pub cwnd: u64,
}

/// Careful Resume's jump as paced: bytes per second, from the window and the smoothed RTT
/// when its first datagram left.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JumpPace {
    pub rate: f64,
    pub srtt: Duration,
    /// When the next datagram of the jump may leave.
    next: Instant,
}

/// The congestion control beneath the start and the pacing: one interface, two senders.
#[derive(Clone, Debug)]
enum Engine {
    Rfc9438(Cubic),
    GoogleQuic(GquicCubic),
}

impl Engine {
    /// Either sender, for everything but an acknowledgement.
    fn sender(&self) -> &dyn CongestionControl {
        match self {
            Engine::Rfc9438(c) => c,
            Engine::GoogleQuic(g) => g,
        }
    }

    fn sender_mut(&mut self) -> &mut dyn CongestionControl {
        match self {
            Engine::Rfc9438(c) => c,
            Engine::GoogleQuic(g) => g,
        }
    }
}

#[derive(Clone)]
pub struct StartlabController {
    config: ControllerConfig,
    engine: Engine,
    slot: Option<Arc<HintSlot>>,
    initial_window: u64,
    /// Bytes in flight as far as the controller knows: exact after each batch of acks,
    /// never below the truth (sent bytes are added once per transmit batch, including
    /// ack-only packets that quinn does not count).
    in_flight: u64,
    /// Smallest raw RTT sample (ack time − send time) so far.
    min_rtt: Option<Duration>,
    batch_min_rtt: Option<Duration>,
    /// In flight before the first acknowledgement of the current batch.
    batch_prior_in_flight: Option<u64>,
    srtt: Duration,
    blitzed: Option<Blitzed>,
    flight: Option<StartFlight>,
    /// The datagram pacer and where its times go (both or neither).
    pacer: Option<(Pacer, Arc<PaceCell>)>,
    /// Where Careful Resume's jump is timed, datagram by datagram (see `pace_jump`).
    jump_cell: Option<Arc<PaceCell>>,
    jump_pace: Option<JumpPace>,
    careful_resume: Option<CarefulResume>,
    /// Careful Resume was told that the response began.
    response_told: bool,
}

impl StartlabController {
    pub fn new(config: ControllerConfig, mss: u64, slot: Option<Arc<HintSlot>>) -> Self {
        let initial_window = (config.initial_window.max(MIN_WINDOW_SEGMENTS) * mss).min(MAX_WINDOW_BYTES);
        Self {
            engine: match config.sender {
                Sender::Rfc9438 => Engine::Rfc9438(Cubic::new(config.cubic, mss, initial_window)),
                Sender::GoogleQuic => Engine::GoogleQuic(GquicCubic::new(mss, initial_window)),
            },
            config,
            slot,
            initial_window,
            in_flight: 0,
            min_rtt: None,
            batch_min_rtt: None,
            batch_prior_in_flight: None,
            srtt: Duration::ZERO,
            blitzed: None,
            flight: None,
            pacer: None,
            jump_cell: None,
            jump_pace: None,
            careful_resume: None,
            response_told: false,
        }
    }

    /// Resume from (and observe into) `store`'s parameters of the path `key`.
    pub fn with_careful_resume(mut self, store: Arc<PathStore>, key: PathKey) -> Self {
        if let Some(params) = self.config.careful_resume {
            self.careful_resume = Some(CarefulResume::new(params, store, key, self.initial_window, unix_now()));
        }
        self
    }

    pub fn careful_resume(&self) -> Option<&CarefulResume> {
        self.careful_resume.as_ref()
    }

    fn cr_window(&self) -> Window {
        Window { cwnd: self.cwnd(), ssthresh: self.ssthresh(), mss: self.engine.sender().mss(), in_flight: self.in_flight }
    }

    /// Apply what Careful Resume decided to the CUBIC beneath (only startlab's: checked when
    /// the server starts).
    fn apply(&mut self, now: Instant, action: Option<Action>) {
        let (Some(action), Engine::Rfc9438(cubic)) = (action, &mut self.engine) else {
            return;
        };
        match action {
            Action::SetCwnd(c) => cubic.set_cwnd(c),
            Action::Retreat(c) => cubic.retreat(c, now),
            Action::EndRetreat { ssthresh } => cubic.end_retreat(ssthresh, now),
        }
    }

    /// The pacing gain quinn's pacer sees: during Careful Resume's jump, with the jump timed
    /// beneath quinn, twice quinn's own so that it never holds a datagram back; without,
    /// quinn's (the slowest quinn paces, a window over 0.8 RTT); else `pacing`'s.
    fn gain(&self, slow_start: bool) -> f64 {
        if self.jumping() {
            match self.jump_cell {
                Some(_) => QUINN_RATE_GAIN * pacing::DATAGRAM_PACER_HEADROOM,
                None => QUINN_RATE_GAIN,
            }
        } else {
            self.config.pacing.gain(slow_start)
        }
    }

    fn jumping(&self) -> bool {
        self.careful_resume.as_ref().is_some_and(|c| c.pacing_jump())
    }

    /// Time this connection's datagrams into `cell`: all of them if the configuration paces
    /// datagrams, else Careful Resume's jump if it resumes.
    pub fn with_pace(mut self, cell: Arc<PaceCell>) -> Self {
        match self.config.datagram_pacing {
            Some(p) => self.pacer = Some((Pacer::new(p), cell)),
            None if self.config.careful_resume.is_some() => self.jump_cell = Some(cell),
            None => {}
        }
        self
    }

    /// The jump's pacing, once it has begun (for the connection's record).
    pub fn jump_pace(&self) -> Option<JumpPace> {
        self.jump_pace
    }

    /// Careful Resume's jump, released at jump_cwnd ÷ smoothed RTT (§4.3.2), the window and
    /// the RTT as the jump's first datagram found them. quinn alone cannot pace slower than
    /// 1.25 × window ÷ RTT, and only in bursts of 10 datagrams: its rate and its limit on
    /// the bytes in flight are one number, the reported window. So the jump is timed here
    /// and released by the socket beneath quinn; every other datagram leaves at once.
    fn pace_jump(&mut self, now: Instant, bytes: u64, jumping: bool) {
        let Some(cell) = self.jump_cell.as_ref() else {
            return;
        };
        if !jumping {
            return;
        }
        let srtt = Some(self.srtt).filter(|d| !d.is_zero()).unwrap_or(INITIAL_RTT);
        let cwnd = self.cwnd();
        let jp = self.jump_pace.get_or_insert(JumpPace { rate: cwnd as f64 / srtt.as_secs_f64(), srtt, next: now });
        let at = jp.next.max(now);
        jp.next = at + Duration::from_secs_f64(bytes as f64 / jp.rate);
        cell.sent(at);
    }

    /// Give the datagram just handed to quinn its release time (`in_flight_before`: the
    /// bytes in flight without it).
    fn pace(&mut self, now: Instant, bytes: u64, in_flight_before: u64) {
        let cwnd = self.cwnd();
        let mss = self.engine.sender().mss();
        let rate = self.pacing_rate();
        let srtt = Some(self.srtt).filter(|d| !d.is_zero());
        let Some((pacer, cell)) = self.pacer.as_mut() else {
            return;
        };
        let at = pacer.earliest(now, in_flight_before).max(now);
        pacer.on_sent(
            at,
            &Sent {
                bytes,
                in_flight_before,
                cwnd,
                datagram: mss,
                rate,
                bandwidth: srtt.map(|rtt| cwnd as f64 / rtt.as_secs_f64()),
                // Recovery only stops a burst after quiescence; with nothing in flight,
                // startlab's senders have left it (their recovery ends with an ack).
                in_recovery: false,
            },
        );
        cell.sent(at);
    }

    /// The rate the sender paces at, bytes per second: `pacing`'s gain × cwnd ÷ SRTT (before
    /// the first RTT sample, quiche's initial RTT), or the jump's.
    pub fn pacing_rate(&self) -> f64 {
        if let (true, Some(_), Some(jp)) = (self.jumping(), &self.jump_cell, self.jump_pace) {
            return jp.rate;
        }
        let (cwnd, slow_start) = self.effective();
        let srtt = Some(self.srtt).filter(|d| !d.is_zero()).unwrap_or(INITIAL_RTT);
        self.gain(slow_start) * cwnd as f64 / srtt.as_secs_f64()
    }

    pub fn start_flight(&self) -> Option<StartFlight> {
        self.flight
    }

    /// Count a transmit batch into the start flight (beginning it once the response has).
    fn flight_sent(&mut self, now: Instant, bytes: u64) {
        if self.flight.is_none() && self.slot.as_ref().is_some_and(|s| s.responding()) {
            self.flight = Some(StartFlight {
                began: now,
                window: self.cwnd(),
                bytes: 0,
                end: None,
                reductions_before: self.reductions(),
            });
        }
        if let Some(f) = self.flight.as_mut().filter(|f| f.end.is_none()) {
            f.bytes += bytes;
            if f.bytes >= f.window {
                f.end = Some((now, FlightEnd::Window));
            }
        }
    }

    /// End the start flight at an acknowledgement of its data or at a loss.
    fn flight_ended(&mut self, now: Instant, sent: Instant, why: FlightEnd) {
        if let Some(f) = self.flight.as_mut().filter(|f| f.end.is_none() && sent >= f.began) {
            f.end = Some((now, why));
        }
    }

    /// The Blitzstart start this connection should have and has not applied yet.
    fn pending_blitz(&self) -> Option<Blitzed> {
        if !self.config.blitz || self.blitzed.is_some() {
            return None;
        }
        let hint = self.slot.as_ref()?.get()?;
        let rtt = self.min_rtt?;
        Some(Blitzed {
            hint,
            rtt,
            cwnd: blitz_window(hint.kbps, rtt, self.engine.sender().mss()),
        })
    }

    fn apply_pending(&mut self) {
        if let Some(b) = self.pending_blitz() {
            self.engine.sender_mut().start_in_avoidance(b.cwnd);
            self.blitzed = Some(Blitzed {
                cwnd: self.engine.sender().cwnd(),
                ..b
            });
        }
    }

    /// (cwnd, in slow start) as the next datagram will see them.
    fn effective(&self) -> (u64, bool) {
        match self.pending_blitz() {
            Some(b) => (b.cwnd.max(MIN_WINDOW_SEGMENTS * self.engine.sender().mss()), false),
            None => (self.engine.sender().cwnd(), self.engine.sender().in_slow_start()),
        }
    }

    pub fn cwnd(&self) -> u64 {
        self.effective().0
    }

    /// `None` while in the initial slow start.
    pub fn ssthresh(&self) -> Option<u64> {
        if self.pending_blitz().is_some() {
            return Some(self.cwnd());
        }
        Some(self.engine.sender().ssthresh()).filter(|&s| s != u64::MAX)
    }

    pub fn initial_window_bytes(&self) -> u64 {
        self.initial_window
    }

    pub fn blitzed(&self) -> Option<Blitzed> {
        self.blitzed.or_else(|| self.pending_blitz())
    }

    pub fn hystart_exit(&self) -> bool {
        self.engine.sender().hystart_exit()
    }

    pub fn css_entries(&self) -> u64 {
        self.engine.sender().css_entries()
    }

    pub fn rapid_start(&self) -> Option<RapidRecord> {
        self.engine.sender().rapid_start()
    }

    pub fn reductions(&self) -> u64 {
        self.engine.sender().reductions()
    }

    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// `on_ack` with the smoothed RTT taken out of quinn's estimator.
    pub fn ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, srtt: Duration) {
        self.apply_pending();
        // quinn updates its estimator after this callback, so the first handshake ack
        // would still see the configured initial RTT there; the raw sample does not lag.
        let sample = now.saturating_duration_since(sent);
        self.min_rtt = Some(self.min_rtt.map_or(sample, |m| m.min(sample)));
        self.batch_min_rtt = Some(self.batch_min_rtt.map_or(sample, |m| m.min(sample)));
        self.srtt = srtt;
        self.flight_ended(now, sent, FlightEnd::Ack);
        let prior_in_flight = *self.batch_prior_in_flight.get_or_insert(self.in_flight);
        self.in_flight = self.in_flight.saturating_sub(bytes);
        if let Some(cr) = self.careful_resume.as_mut() {
            cr.on_ack(bytes, app_limited);
            if !cr.may_grow() {
                return; // the jump, or Safe Retreat: the window does not grow
            }
        }
        match &mut self.engine {
            Engine::Rfc9438(c) => c.on_ack(now, sent, bytes, app_limited, self.srtt),
            Engine::GoogleQuic(g) => g.on_ack(now, sent, bytes, prior_in_flight),
        }
    }
}

impl Controller for StartlabController {
    fn on_sent(&mut self, now: Instant, bytes: u64, last_packet_number: u64) {
        self.apply_pending();
        self.flight_sent(now, bytes);
        // Whether this datagram belongs to the jump: decided before Careful Resume hears
        // of it, as it may be the one that ends the jump.
        let jumping = self.jumping();
        let before = self.in_flight;
        self.in_flight = self.in_flight.saturating_add(bytes);
        self.engine.sender_mut().on_sent(last_packet_number);
        if self.careful_resume.is_some() {
            let w = self.cr_window();
            let responding = self.slot.as_ref().is_some_and(|s| s.responding());
            let (in_flight, srtt) = (self.in_flight, self.srtt);
            let cr = self.careful_resume.as_mut().unwrap();
            if responding && !self.response_told {
                self.response_told = true;
                cr.on_response(now, w);
            }
            let action = cr.on_sent(now, bytes, last_packet_number, in_flight, srtt, w);
            self.apply(now, action);
        }
        self.pace(now, bytes, before);
        self.pace_jump(now, bytes, jumping);
    }

    fn on_ack(&mut self, now: Instant, sent: Instant, bytes: u64, app_limited: bool, rtt: &RttEstimator) {
        self.ack(now, sent, bytes, app_limited, rtt.get());
    }

    fn on_end_acks(&mut self, now: Instant, in_flight: u64, app_limited: bool, largest_acked: Option<u64>) {
        self.in_flight = in_flight;
        self.batch_prior_in_flight = None;
        let sample = self.batch_min_rtt.take();
        let sender = self.engine.sender_mut();
        if let Some(rtt) = sample {
            sender.on_rtt_sample(rtt);
        }
        sender.on_end_acks(largest_acked);
        if self.careful_resume.is_some() {
            let w = self.cr_window();
            let (min_rtt, srtt) = (self.min_rtt, self.srtt);
            let cr = self.careful_resume.as_mut().unwrap();
            let action =
                cr.on_end_acks(now, unix_now(), largest_acked, in_flight, app_limited, sample, min_rtt, srtt, w);
            self.apply(now, action);
        }
    }

    fn on_congestion_event(&mut self, now: Instant, sent: Instant, persistent: bool, lost_bytes: u64) {
        self.apply_pending();
        self.flight_ended(now, sent, FlightEnd::Loss);
        self.in_flight = self.in_flight.saturating_sub(lost_bytes);
        if self.careful_resume.is_some() {
            let w = self.cr_window();
            let cr = self.careful_resume.as_mut().unwrap();
            // Unvalidated, Validating and Safe Retreat answer a loss themselves (§3.5); a
            // persistent congestion ends Careful Resume and is CUBIC's (§3.6).
            let owned = cr.owns_losses() && !persistent;
            let action = cr.on_congestion(now, persistent, w);
            self.apply(now, action);
            if owned {
                return;
            }
        }
        self.engine.sender_mut().on_congestion_event(now, sent, persistent);
        self.engine.sender_mut().on_lost_bytes(lost_bytes);
        if let Some((pacer, _)) = self.pacer.as_mut() {
            pacer.on_loss();
        }
    }

    fn on_mtu_update(&mut self, new_mtu: u16) {
        self.engine.sender_mut().set_mss(new_mtu as u64);
    }

    fn window(&self) -> u64 {
        let (cwnd, slow_start) = self.effective();
        let gain = self.gain(slow_start);
        let (gain, batch) = match (&self.pacer, &self.jump_cell) {
            (Some(_), _) => (gain * pacing::DATAGRAM_PACER_HEADROOM, pacing::DATAGRAM_PACER_BATCH),
            (None, Some(_)) => (gain, pacing::DATAGRAM_PACER_BATCH),
            (None, None) => (gain, pacing::QUINN_MAX_BATCH_DATAGRAMS),
        };
        pacing::reported_window(cwnd, self.in_flight, self.engine.sender().mss(), gain, batch)
    }

    fn metrics(&self) -> ControllerMetrics {
        let mut m = ControllerMetrics::default();
        m.congestion_window = self.cwnd();
        m.ssthresh = self.ssthresh();
        m.pacing_rate = Some((self.pacing_rate() * 8.0) as u64);
        m
    }

    fn clone_box(&self) -> Box<dyn Controller> {
        Box::new(self.clone())
    }

    fn initial_window(&self) -> u64 {
        self.initial_window
    }

    fn into_any(self: Box<Self>) -> Box<dyn Any> {
        self
    }
}

/// Builds one connection's controller; the server makes one factory per connection so
/// that the controller shares that connection's hint slot.
pub struct StartlabFactory {
    pub config: ControllerConfig,
    pub slot: Option<Arc<HintSlot>>,
    /// Where the controller's datagram times go (see `ControllerConfig::datagram_pacing`).
    pub pace: Option<Arc<PaceCell>>,
    /// The server's saved path parameters and this connection's path (Careful Resume).
    pub paths: Option<(Arc<PathStore>, PathKey)>,
}

impl ControllerFactory for StartlabFactory {
    fn build(self: Arc<Self>, _now: Instant, current_mtu: u16) -> Box<dyn Controller> {
        let mut c = StartlabController::new(self.config.clone(), current_mtu as u64, self.slot.clone());
        if let Some((store, key)) = &self.paths {
            c = c.with_careful_resume(store.clone(), *key);
        }
        Box::new(match &self.pace {
            Some(cell) => c.with_pace(cell.clone()),
            None => c,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1472;

    fn config(blitz: bool) -> ControllerConfig {
        ControllerConfig {
            initial_window: 32,
            sender: Sender::Rfc9438,
            cubic: CubicParams {
                hystart: false,
                ..CubicParams::default()
            },
            pacing: Pacing::PAPER,
            datagram_pacing: None,
            blitz,
            careful_resume: None,
        }
    }

    #[test]
    fn datagram_times_follow_google_quic_pacing() {
        let cell = Arc::new(PaceCell::default());
        let cfg = ControllerConfig { datagram_pacing: Some(PacerParams::GOOGLE_QUIC), ..config(false) };
        let mut c = StartlabController::new(cfg, MSS, None).with_pace(cell.clone());
        let t0 = Instant::now();
        let rtt = Duration::from_millis(100);
        handshake(&mut c, t0, rtt);
        let t1 = t0 + rtt;
        let mut times = Vec::new();
        for pn in 2..20 {
            c.on_sent(t1, MSS, pn);
            times.push(cell.read_for_test().1.unwrap());
        }
        // The handshake is acknowledged, nothing is in flight: the response leaves
        // quiescence with a new burst of 10.
        assert!(times[..10].iter().all(|&t| t == t1), "{times:?}");
        // Then pairs at 2 × 32 datagrams per 100 ms: 3.125 ms per pair.
        assert_eq!(times[10], times[11]);
        let pair = times[12] - times[10];
        assert!((pair.as_secs_f64() - 0.003125).abs() < 1e-4, "{pair:?}");
    }

    #[test]
    fn qlog_metrics_carry_the_window_and_the_pacing_rate_in_bits() {
        let mut c = StartlabController::new(config(false), MSS, None);
        // Before an RTT sample: 2 × 32 datagrams per quiche's initial 100 ms.
        assert_eq!(c.pacing_rate(), 2.0 * 32.0 * MSS as f64 / 0.1);
        let t0 = Instant::now();
        handshake(&mut c, t0, Duration::from_millis(50));
        let m = c.metrics();
        assert_eq!((m.congestion_window, m.ssthresh), (32 * MSS, None));
        // Slow start: 2 × cwnd ÷ SRTT, in bit/s.
        assert_eq!(m.pacing_rate, Some((2.0 * 32.0 * MSS as f64 / 0.05 * 8.0) as u64));
        // Congestion avoidance (here from a loss): 4/3 × cwnd ÷ SRTT.
        c.on_sent(t0 + Duration::from_millis(50), 20 * MSS, 2);
        c.on_congestion_event(t0 + Duration::from_millis(100), t0 + Duration::from_millis(50), false, MSS);
        let m = c.metrics();
        assert_eq!(m.ssthresh, Some(m.congestion_window));
        let ca = 4.0 / 3.0 * m.congestion_window as f64 / 0.05 * 8.0;
        assert!((m.pacing_rate.unwrap() as f64 - ca).abs() <= 1.0, "{:?} vs {ca}", m.pacing_rate);
    }

    /// A controller with a hint slot (Blitzstart's when `blitz`), after a 50 ms handshake
    /// at the returned time.
    fn after_handshake(blitz: bool) -> (StartlabController, Arc<HintSlot>, Instant) {
        let slot = Arc::new(HintSlot::default());
        let mut c = StartlabController::new(config(blitz), MSS, Some(slot.clone()));
        let t0 = Instant::now();
        handshake(&mut c, t0, Duration::from_millis(50));
        (c, slot, t0)
    }

    #[test]
    fn careful_resumes_jump_is_timed_at_jump_cwnd_per_srtt_and_nothing_else_is() {
        use crate::careful_resume::Phase;
        let key = PathKey { local: "10.0.0.1".parse().unwrap(), remote: "10.0.1.1".parse().unwrap() };
        let rtt = Duration::from_millis(60);
        let store = Arc::new(PathStore::default());
        store.observe(key, 200 * MSS, rtt, false, unix_now());
        let slot = Arc::new(HintSlot::default());
        let cell = Arc::new(PaceCell::default());
        let cfg = ControllerConfig {
            initial_window: 10,
            careful_resume: Some(CrParams::default()),
            ..config(false)
        };
        let mut c = StartlabController::new(cfg, MSS, Some(slot.clone()))
            .with_careful_resume(store, key)
            .with_pace(cell.clone());
        let t0 = Instant::now();
        handshake(&mut c, t0, rtt);
        slot.respond();
        // Reconnaissance: the IW and one more, none of them timed here.
        let t1 = t0 + rtt;
        for pn in 2..=12 {
            c.on_sent(t1, MSS, pn);
        }
        assert_eq!(cell.read_for_test(), (0, None), "Reconnaissance is not timed beneath quinn");
        let t2 = t1 + rtt;
        for _ in 2..=11 {
            c.ack(t2, t1, MSS, false, rtt);
        }
        c.on_end_acks(t2, 2 * MSS, false, Some(11));
        assert_eq!(c.careful_resume().unwrap().phase(), Phase::Unvalidated);
        assert_eq!(c.cwnd(), 100 * MSS);
        // The jump: one datagram each 60 ms / 100 = 600 µs, from the first.
        let mut times = Vec::new();
        for pn in 13..=20 {
            c.on_sent(t2, MSS, pn);
            times.push(cell.read_for_test().1.unwrap());
        }
        assert_eq!(times[0], t2);
        for pair in times.windows(2) {
            let gap = pair[1] - pair[0];
            assert!((gap.as_secs_f64() - 600e-6).abs() < 1e-9, "{gap:?}");
        }
        let jp = c.jump_pace().unwrap();
        assert_eq!((jp.rate, jp.srtt), (100.0 * MSS as f64 / 0.06, rtt));
        assert_eq!(c.pacing_rate(), jp.rate);
        // quinn's own pacer runs at twice its rate there, so it never holds the jump back.
        assert!(QUINN_RATE_GAIN * c.window() as f64 / 0.06 >= 2.0 * jp.rate * 0.99);
    }

    fn handshake(c: &mut StartlabController, t0: Instant, rtt: Duration) {
        // The server's handshake flight, acknowledged one RTT later. quinn flags these
        // acks application-limited: the server had nothing more to send.
        c.on_sent(t0, 3 * MSS, 1);
        c.ack(t0 + rtt, t0, 3 * MSS, true, rtt);
        c.on_end_acks(t0 + rtt, 0, false, Some(1));
    }

    #[test]
    fn blitz_window_is_hint_times_rtt() {
        // 50 Mbit/s × 50 ms = 312,500 bytes = 213 datagrams of 1472 (rounded up).
        assert_eq!(blitz_window(50_000, Duration::from_millis(50), MSS), 213 * MSS);
        // 8 Mbit/s × 90 ms = 90,000 bytes = 62 datagrams.
        assert_eq!(blitz_window(8_000, Duration::from_millis(90), MSS), 62 * MSS);
        // Never below two datagrams.
        assert_eq!(blitz_window(1, Duration::from_millis(1), MSS), 2 * MSS);
    }

    #[test]
    fn without_hint_it_is_the_iw32_baseline() {
        let slot = Arc::new(HintSlot::default());
        let mut c = StartlabController::new(config(true), MSS, Some(slot));
        handshake(&mut c, Instant::now(), Duration::from_millis(50));
        assert_eq!(c.cwnd(), 32 * MSS);
        assert_eq!(c.ssthresh(), None);
        assert!(c.blitzed().is_none());
        // Slow start: reported window scaled for half an RTT (×1.6 of quinn's 0.8 RTT).
        assert_eq!(c.window(), (32.0 * MSS as f64 * 1.6) as u64);
    }

    #[test]
    fn hint_sets_cwnd_and_ssthresh_before_the_first_data_packet() {
        let slot = Arc::new(HintSlot::default());
        let mut c = StartlabController::new(config(true), MSS, Some(slot.clone()));
        let t0 = Instant::now();
        handshake(&mut c, t0, Duration::from_millis(50));
        assert!(slot.offer(Hint { kbps: 50_000, tech: 2 }));
        // No callback yet: window() already reflects the hint.
        assert_eq!(c.cwnd(), 213 * MSS);
        assert_eq!(c.ssthresh(), Some(213 * MSS));
        // Congestion avoidance: paced over 0.75 RTT (×16/15 of quinn's 0.8 RTT).
        assert_eq!(c.window(), (213.0 * MSS as f64 * (4.0 / 3.0) / 1.25) as u64);
        c.on_sent(t0 + Duration::from_millis(51), 10 * MSS, 11);
        let b = c.blitzed().unwrap();
        assert_eq!(b.cwnd, 213 * MSS);
        assert_eq!(b.rtt, Duration::from_millis(50));
        assert_eq!(b.hint, Hint { kbps: 50_000, tech: 2 });
        // A second hint is ignored.
        assert!(!slot.offer(Hint { kbps: 1_000, tech: 0 }));
        assert_eq!(c.cwnd(), 213 * MSS);
    }

    #[test]
    fn hint_uses_the_minimum_handshake_rtt() {
        let slot = Arc::new(HintSlot::default());
        let mut c = StartlabController::new(config(true), MSS, Some(slot.clone()));
        let t0 = Instant::now();
        c.on_sent(t0, MSS, 1);
        c.on_sent(t0, MSS, 2);
        c.ack(
            t0 + Duration::from_millis(60),
            t0,
            MSS,
            false,
            Duration::from_millis(60),
        );
        c.ack(
            t0 + Duration::from_millis(52),
            t0 + Duration::from_millis(2),
            MSS,
            false,
            Duration::from_millis(55),
        );
        slot.offer(Hint { kbps: 10_000, tech: 0 });
        // 10 Mbit/s × 50 ms = 62,500 bytes = 43 datagrams.
        assert_eq!(c.cwnd(), 43 * MSS);
    }

    #[test]
    fn cubic_baseline_ignores_hints() {
        let slot = Arc::new(HintSlot::default());
        let mut c = StartlabController::new(config(false), MSS, Some(slot.clone()));
        handshake(&mut c, Instant::now(), Duration::from_millis(50));
        slot.offer(Hint { kbps: 50_000, tech: 2 });
        assert_eq!(c.cwnd(), 32 * MSS);
    }

    #[test]
    fn loss_after_blitz_is_a_cubic_reduction() {
        let slot = Arc::new(HintSlot::default());
        let mut c = StartlabController::new(config(true), MSS, Some(slot.clone()));
        let t0 = Instant::now();
        handshake(&mut c, t0, Duration::from_millis(50));
        slot.offer(Hint { kbps: 50_000, tech: 2 });
        let t1 = t0 + Duration::from_millis(51);
        c.on_sent(t1, 100 * MSS, 111);
        c.on_congestion_event(t1 + Duration::from_millis(60), t1, false, MSS);
        assert_eq!(c.cwnd(), (213.0 * MSS as f64 * 0.7) as u64);
        assert_eq!(c.ssthresh(), Some(c.cwnd()));
        assert_eq!(c.reductions(), 1);
    }

    #[test]
    fn the_reported_window_never_admits_more_than_cwnd() {
        let mut c = StartlabController::new(config(false), MSS, None);
        let t0 = Instant::now();
        // Paper pacing inflates the report only while a whole batch fits below cwnd.
        c.on_sent(t0, 23 * MSS, 23);
        assert_eq!(c.window(), 32 * MSS + 1);
        c.on_end_acks(t0, 10 * MSS, false, None);
        assert!(c.window() > 32 * MSS + 1);
        // With datagram pacing quinn sends one datagram per transmit: inflated up to the
        // last datagram, and twice as fast, so that quinn's pacer never holds one back.
        let cfg = ControllerConfig { datagram_pacing: Some(PacerParams::GOOGLE_QUIC), ..config(false) };
        let mut d = StartlabController::new(cfg, MSS, None).with_pace(Arc::new(PaceCell::default()));
        d.on_sent(t0, 32 * MSS, 32);
        assert_eq!(d.window(), 32 * MSS + 1);
        d.on_end_acks(t0, 30 * MSS, false, None);
        assert_eq!(d.window(), (32.0 * MSS as f64 * 2.0 * 2.0 / 1.25) as u64);
    }

    #[test]
    fn the_start_flight_ends_when_the_window_is_out() {
        let (mut c, slot, t0) = after_handshake(false);
        // Nothing before the response counts.
        c.on_sent(t0 + Duration::from_millis(50), MSS, 2);
        assert!(c.start_flight().is_none());
        slot.respond();
        let t1 = t0 + Duration::from_millis(51);
        for i in 0..3 {
            c.on_sent(t1 + Duration::from_millis(i), 10 * MSS, 10 * (i + 1));
        }
        let f = c.start_flight().unwrap();
        assert_eq!((f.began, f.window, f.bytes, f.end), (t1, 32 * MSS, 30 * MSS, None));
        c.on_sent(t1 + Duration::from_millis(3), 2 * MSS, 32);
        assert_eq!(c.start_flight().unwrap().end, Some((t1 + Duration::from_millis(3), FlightEnd::Window)));
        // Later batches and acknowledgements leave it as it ended.
        c.on_sent(t1 + Duration::from_millis(60), 5 * MSS, 40);
        c.ack(t1 + Duration::from_millis(60), t1, MSS, false, Duration::from_millis(50));
        assert_eq!(c.start_flight().unwrap().bytes, 32 * MSS);
    }

    #[test]
    fn a_loss_before_the_response_is_counted_with_the_window_the_flight_starts_from() {
        let (mut c, slot, t0) = after_handshake(false);
        // A datagram sent before the response is declared lost before the response begins.
        c.on_sent(t0 + Duration::from_millis(50), MSS, 2);
        c.on_congestion_event(t0 + Duration::from_millis(150), t0 + Duration::from_millis(50), false, MSS);
        slot.respond();
        c.on_sent(t0 + Duration::from_millis(160), MSS, 3);
        let f = c.start_flight().unwrap();
        assert_eq!(f.reductions_before, 1);
        assert!(f.window < 32 * MSS, "{}", f.window);
    }

    #[test]
    fn an_acknowledgement_of_the_flight_ends_it_before_the_window_is_out() {
        let (mut c, slot, t0) = after_handshake(true);
        slot.offer(Hint { kbps: 50_000, tech: 2 });
        slot.respond();
        let t1 = t0 + Duration::from_millis(51);
        c.on_sent(t1, 100 * MSS, 100);
        // An acknowledgement of a packet sent before the flight does not end it.
        c.ack(t1 + Duration::from_millis(1), t0, MSS, false, Duration::from_millis(50));
        assert_eq!(c.start_flight().unwrap().end, None);
        c.on_sent(t1 + Duration::from_millis(40), 50 * MSS, 150);
        c.ack(t1 + Duration::from_millis(50), t1, MSS, false, Duration::from_millis(50));
        let f = c.start_flight().unwrap();
        assert_eq!((f.window, f.bytes), (213 * MSS, 150 * MSS));
        assert_eq!(f.end, Some((t1 + Duration::from_millis(50), FlightEnd::Ack)));
    }
}
