//! The bottleneck in front of the delay: a byte-limited queue drained at a fixed rate.
//!
//! Time is virtual: every frame carries its kernel arrival time, and the queue is
//! advanced to each arrival before the frame is judged, so its occupancy is what a
//! real link would hold at that instant however late the line reads the frame. A frame
//! leaves at departure = max(arrival, previous departure) + wire bits / rate (it stays
//! counted in the buffer until then, as in tbf), then gets the propagation delay.
//! Departures never decrease; only FQ-CoDel reorders (below).
//!
//! Pure logic on frame ids: the caller stores the bytes, frees the ids this queue reports
//! dropped and sets CE in the ids it reports marked.
//!
//! CoDel (RFC 8289, crate::codel) judges a frame when the link starts sending it.
//! FQ-CoDel (RFC 8290) keeps a queue per flow, each under its own CoDel, and chooses the
//! next frame to send by deficit round robin when the link is free: it reorders frames of
//! different flows, never one flow's, and departures still never decrease. PIE (RFC 8033) judges
//! arrivals with a drop probability its controller updates every T_UPDATE of queue time,
//! from the queueing delay at that instant (the time the link needs to send what is
//! queued: Little's law with the link's own rate), interleaved with the departures.

use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::Arc;

pub use crate::codel::Codel;
use crate::codel::{CodelState, HeadQueue};
use crate::trace::{Trace, TraceDrain};

pub const NS_PER_S: u64 = 1_000_000_000;
/// AF13: the default low-priority class.
pub const DEFAULT_LOW_DSCP: u8 = 14;
/// RED's weight of a new sample in the average queue (Floyd & Jacobson's 0.002).
const RED_WEIGHT: f64 = 0.002;
/// RED counts an idle period as the departures of frames of this size it could have sent.
const RED_IDLE_FRAME_BYTES: u64 = 1_514;

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Red {
    pub min_bytes: u64,
    pub max_bytes: u64,
    pub max_p: f64,
}

impl Red {
    /// The defaults for a buffer: thresholds at a quarter and three quarters, 10 %.
    pub fn for_limit(limit_bytes: u64) -> Red {
        Red { min_bytes: limit_bytes / 4, max_bytes: limit_bytes * 3 / 4, max_p: 0.1 }
    }
}

/// FQ-CoDel's parameters (RFC 8290 §5.2 and §4: Linux's defaults): CoDel's for every
/// flow's queue, the round robin's quantum (one MTU-sized frame) and the number of flow
/// queues frames are hashed into.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FqCodel {
    pub codel: Codel,
    pub quantum_bytes: u64,
    pub flows: u32,
}

impl FqCodel {
    pub const DEFAULT: FqCodel = FqCodel { codel: Codel::DEFAULT, quantum_bytes: 1_514, flows: 1_024 };
}

/// PIE's parameters (RFC 8033 §5: QDELAY_REF 15 ms, T_UPDATE 15 ms, alpha 0.125 and beta
/// 1.25 per second, MAX_BURST 150 ms). With `ecn`, an ECN-capable arrival is marked CE
/// where it would have been dropped, while the drop probability is at most 10 % (§5.1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Pie {
    pub target_ns: i64,
    pub tupdate_ns: i64,
    pub ecn: bool,
}

impl Pie {
    pub const DEFAULT: Pie = Pie { target_ns: 15_000_000, tupdate_ns: 15_000_000, ecn: false };
}

const PIE_ALPHA: f64 = 0.125;
const PIE_BETA: f64 = 1.25;
const PIE_MAX_BURST_NS: i64 = 150_000_000;
/// RFC 8033 §5.1: above this drop probability ECN-capable packets are dropped, not marked.
const PIE_MARK_ECN_THRESHOLD: f64 = 0.1;
/// RFC 8033's MEAN_PKTSIZE, here an MTU-sized frame: with two or fewer queued, no early drop.
const PIE_MEAN_PACKET_BYTES: u64 = 1_514;

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Policy {
    /// A full buffer drops the arrival.
    DropTail,
    /// A full buffer drops the most recently queued low-priority frames to make room.
    PushOut,
    /// Random early drop on the average queue, drop-tail at the limit.
    Red(Red),
    /// CoDel's sojourn-time control law at the head, drop-tail at the limit.
    Codel(Codel),
    /// PIE's drop probability on arrivals, drop-tail at the limit.
    Pie(Pie),
    /// A CoDel queue per flow, served by deficit round robin; a full buffer drops at the
    /// head of the flow queue holding the most bytes.
    FqCodel(FqCodel),
}

impl Policy {
    pub fn name(&self) -> &'static str {
        match self {
            Policy::DropTail => "droptail",
            Policy::PushOut => "pushout",
            Policy::Red(_) => "red",
            Policy::Codel(_) => "codel",
            Policy::Pie(_) => "pie",
            Policy::FqCodel(_) => "fq_codel",
        }
    }
}

/// A trace of delivery opportunities that drains the queue instead of a fixed rate.
#[derive(Clone, Debug, PartialEq)]
pub struct TraceLink {
    pub trace: Arc<Trace>,
    /// Where it was read from, for the record.
    pub path: String,
    /// Frame bytes one opportunity carries: one MTU-sized packet in its Ethernet frame.
    pub opportunity_bytes: u64,
}

#[derive(Clone, Debug, PartialEq)]
pub struct QueueConfig {
    /// The drain rate; with a trace, the trace's mean rate (RED's idle estimate uses it).
    pub rate_bps: u64,
    pub limit_bytes: u64,
    pub policy: Policy,
    /// Bit d set: DSCP d is low priority.
    pub low_dscp: u64,
    pub trace: Option<TraceLink>,
    /// Probability that an arriving frame is lost on the link (Bernoulli), before the queue.
    pub loss: f64,
}

impl QueueConfig {
    pub fn is_low(&self, dscp: Option<u8>) -> bool {
        matches!(dscp, Some(d) if d < 64 && self.low_dscp & (1u64 << d) != 0)
    }

    pub fn json(&self) -> String {
        let dscps: Vec<String> = (0..64).filter(|d| self.low_dscp & (1u64 << d) != 0).map(|d: u32| d.to_string()).collect();
        let mut s = format!(
            "{{\"rate_bps\": {}, \"limit_bytes\": {}, \"policy\": \"{}\", \"low_dscp\": [{}]",
            self.rate_bps,
            self.limit_bytes,
            self.policy.name(),
            dscps.join(", ")
        );
        if let Policy::Red(r) = self.policy {
            let _ = write!(s, ", \"red\": {{\"min_bytes\": {}, \"max_bytes\": {}, \"max_p\": {}}}", r.min_bytes, r.max_bytes, r.max_p);
        }
        if let Policy::Codel(c) = self.policy {
            let _ = write!(s, ", \"codel\": {{\"target_ns\": {}, \"interval_ns\": {}, \"ecn\": {}}}", c.target_ns, c.interval_ns, c.ecn);
        }
        if let Policy::FqCodel(f) = self.policy {
            let _ = write!(s, ", \"fq_codel\": {{\"target_ns\": {}, \"interval_ns\": {}, \"ecn\": {}, \"quantum_bytes\": {}, \"flows\": {}}}",
                           f.codel.target_ns, f.codel.interval_ns, f.codel.ecn, f.quantum_bytes, f.flows);
        }
        if let Policy::Pie(p) = self.policy {
            let _ = write!(s, ", \"pie\": {{\"target_ns\": {}, \"tupdate_ns\": {}, \"ecn\": {}}}", p.target_ns, p.tupdate_ns, p.ecn);
        }
        if self.loss > 0.0 {
            let _ = write!(s, ", \"loss\": {}", self.loss);
        }
        if let Some(t) = &self.trace {
            let _ = write!(
                s,
                ", \"trace\": {{\"path\": {:?}, \"opportunities\": {}, \"period_ms\": {}, \"opportunity_bytes\": {}}}",
                t.path,
                t.trace.opportunities(),
                t.trace.period_ms(),
                t.opportunity_bytes
            );
        }
        s.push('}');
        s
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ClassCounters {
    pub enqueued: u64,
    /// Arrivals refused plus queued frames pushed out.
    pub dropped: u64,
    pub sent: u64,
    pub sent_bytes: u64,
}

impl ClassCounters {
    fn json(&self) -> String {
        format!(
            "{{\"enqueued\": {}, \"dropped\": {}, \"sent\": {}, \"sent_bytes\": {}}}",
            self.enqueued, self.dropped, self.sent, self.sent_bytes
        )
    }
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    pub normal: ClassCounters,
    pub low: ClassCounters,
    /// Of the drops, queued frames pushed out to make room.
    pub pushed_out: u64,
    /// Of the drops, RED's early drops (below the limit).
    pub early_drops: u64,
    /// Of the drops, the link's random losses (QueueConfig::loss), not the queue's.
    pub random_drops: u64,
    /// Of the drops, the AQM's: CoDel's at the head, PIE's on arrival.
    pub aqm_drops: u64,
    /// Frames the AQM marked CE instead of dropping them (not drops).
    pub marks: u64,
    pub high_water_bytes: u64,
    pub high_water_frames: u64,
    /// With a trace link: when its trace began (the first frame's arrival, CLOCK_MONOTONIC).
    pub trace_epoch_mono_ns: Option<i64>,
}

impl QueueStats {
    pub fn dropped(&self) -> u64 {
        self.normal.dropped + self.low.dropped
    }

    pub fn json(&self) -> String {
        format!(
            "{{\"enqueued\": {}, \"dropped\": {}, \"sent\": {}, \"sent_bytes\": {}, \"pushed_out\": {}, \
             \"early_drops\": {}, \"random_drops\": {}, \"aqm_drops\": {}, \"marks\": {}, \
             \"high_water_bytes\": {}, \"high_water_frames\": {}, \
             \"trace_epoch_mono_ns\": {}, \
             \"classes\": {{\"normal\": {}, \"low\": {}}}}}",
            self.normal.enqueued + self.low.enqueued,
            self.dropped(),
            self.normal.sent + self.low.sent,
            self.normal.sent_bytes + self.low.sent_bytes,
            self.pushed_out,
            self.early_drops,
            self.random_drops,
            self.aqm_drops,
            self.marks,
            self.high_water_bytes,
            self.high_water_frames,
            self.trace_epoch_mono_ns.map_or("null".to_string(), |t| t.to_string()),
            self.normal.json(),
            self.low.json()
        )
    }

    fn class(&mut self, low: bool) -> &mut ClassCounters {
        if low {
            &mut self.low
        } else {
            &mut self.normal
        }
    }
}

struct Entry {
    id: u64,
    bytes: u64,
    low: bool,
    arrival_ns: i64,
    /// ECN-capable (ECT(0) or ECT(1)): CoDel with ECN marks it instead of dropping it.
    ect: bool,
    /// Pushed out: skipped when it reaches the head.
    dead: bool,
}

/// PIE's state (RFC 8033 §4): the drop probability, the queueing delay at the last update,
/// the burst allowance left and when the next update is due (from the first arrival on).
struct PieState {
    drop_prob: f64,
    qdelay_old_s: f64,
    burst_allowance_ns: i64,
    next_update: Option<i64>,
    rng: u64,
}

/// One flow's queue of FQ-CoDel: its frames, their bytes, its deficit, its CoDel, and
/// whether it is in the round robin's new or old list.
#[derive(Default)]
struct FlowQueue {
    frames: VecDeque<Entry>,
    bytes: u64,
    deficit: i64,
    codel: CodelState,
    listed: bool,
}

/// FQ-CoDel's flow queues and its two lists of flows with frames (RFC 8290 §4.2): a flow
/// that becomes active joins the new flows, which are served first.
struct Fair {
    cfg: FqCodel,
    flows: Vec<FlowQueue>,
    new_flows: VecDeque<usize>,
    old_flows: VecDeque<usize>,
}

struct RedState {
    avg: f64,
    /// Arrivals since the last early drop (−1: below the minimum threshold).
    count: i64,
    /// When the queue last became empty.
    idle_since: Option<i64>,
    rng: u64,
}

pub struct Bottleneck {
    cfg: QueueConfig,
    /// Frames in arrival order; the front is always live and is the one being sent.
    entries: VecDeque<Entry>,
    /// Position (arrival count) of entries[0].
    first_pos: u64,
    /// Positions of the live low-priority entries, oldest first.
    low_pos: VecDeque<u64>,
    low_bytes: u64,
    bytes: u64,
    frames: u64,
    /// Departure of entries[0], fixed once it reached the head.
    head_departure: Option<i64>,
    last_departure: i64,
    /// Remainder of the serialisation times in units of 1/rate ns, so back-to-back
    /// departures add up to exactly bytes × 8 / rate.
    carry: u64,
    clock: i64,
    red: RedState,
    /// With a trace link: where the direction is in its trace.
    trace: Option<TraceDrain>,
    /// The random loss's own generator, so that RED's draws do not depend on it.
    loss_rng: u64,
    codel: CodelState,
    pie: PieState,
    /// FQ-CoDel's flow queues; the frame being sent is in `entries`, alone.
    fair: Option<Fair>,
    /// Queued frames CoDel dropped at the head, for the caller to free (it drains this).
    pub head_dropped: Vec<u64>,
    /// Frames CoDel marked, for the caller to set CE in before they are sent (it drains this).
    pub marked: Vec<u64>,
    pub stats: QueueStats,
}

impl Bottleneck {
    pub fn new(cfg: QueueConfig) -> Bottleneck {
        assert!(cfg.rate_bps > 0, "a bottleneck needs a rate");
        Bottleneck {
            entries: VecDeque::with_capacity(1024),
            first_pos: 0,
            low_pos: VecDeque::new(),
            low_bytes: 0,
            bytes: 0,
            frames: 0,
            head_departure: None,
            last_departure: i64::MIN,
            carry: 0,
            clock: i64::MIN,
            red: RedState { avg: 0.0, count: -1, idle_since: None, rng: 0x9E37_79B9_7F4A_7C15 },
            trace: cfg.trace.as_ref().map(|t| TraceDrain::new(t.trace.clone(), t.opportunity_bytes)),
            loss_rng: 0xD1B5_4A32_D192_ED03,
            codel: CodelState::default(),
            pie: PieState { drop_prob: 0.0, qdelay_old_s: 0.0, burst_allowance_ns: PIE_MAX_BURST_NS, next_update: None,
                            rng: 0x6A09_E667_F3BC_C909 },
            fair: match cfg.policy {
                Policy::FqCodel(f) => Some(Fair {
                    cfg: f,
                    flows: (0..f.flows.max(1)).map(|_| FlowQueue::default()).collect(),
                    new_flows: VecDeque::new(),
                    old_flows: VecDeque::new(),
                }),
                _ => None,
            },
            head_dropped: Vec::new(),
            marked: Vec::new(),
            cfg,
            stats: QueueStats::default(),
        }
    }

    pub fn config(&self) -> &QueueConfig {
        &self.cfg
    }

    /// Bytes and frames queued (including the one being sent).
    #[cfg(test)]
    pub fn occupancy(&self) -> (u64, u64) {
        (self.bytes, self.frames)
    }

    /// The frame being sent and its departure time.
    pub fn head(&self) -> Option<(u64, i64)> {
        Some((self.entries.front()?.id, self.head_departure?))
    }

    /// Serialisation time of `bytes`, carrying the sub-nanosecond remainder.
    fn serialise_ns(&mut self, bytes: u64) -> i64 {
        let num = bytes * 8 * NS_PER_S + self.carry;
        self.carry = num % self.cfg.rate_bps;
        (num / self.cfg.rate_bps) as i64
    }

    /// Fix the departure of the new head, which the link can start at `now` at the earliest
    /// (after CoDel has judged it, or FQ-CoDel has chosen it).
    fn start_head(&mut self, now: i64) {
        match self.cfg.policy {
            Policy::Codel(c) => {
                let now = self.entries.front().map_or(now, |e| e.arrival_ns.max(self.last_departure));
                let mut codel = std::mem::take(&mut self.codel);
                codel.dequeue(&c, self, now);
                self.codel = codel;
            }
            Policy::FqCodel(_) if self.entries.is_empty() => self.fair_next(now.max(self.last_departure)),
            _ => {}
        }
        let (arrival, bytes) = match self.entries.front() {
            Some(e) => (e.arrival_ns, e.bytes),
            None => {
                self.head_departure = None;
                return;
            }
        };
        if arrival > self.last_departure {
            // The link was idle: a fresh start, no remainder owed.
            self.carry = 0;
        }
        let start = arrival.max(self.last_departure);
        self.head_departure = Some(match self.trace.as_mut() {
            Some(trace) => {
                let departure = trace.depart(start, bytes);
                self.stats.trace_epoch_mono_ns = trace.epoch();
                departure
            }
            None => start + self.serialise_ns(bytes),
        });
    }

    /// Take the head out of the queue (sent or dropped), and the pushed-out frames behind it.
    fn pop_head(&mut self) -> Entry {
        let e = self.entries.pop_front().expect("a head");
        if e.low && self.fair.is_none() {
            let p = self.low_pos.pop_front();
            debug_assert_eq!(p, Some(self.first_pos));
            self.low_bytes -= e.bytes;
        }
        self.first_pos += 1;
        self.bytes -= e.bytes;
        self.frames -= 1;
        while self.entries.front().map_or(false, |f| f.dead) {
            self.entries.pop_front();
            self.first_pos += 1;
        }
        e
    }

    /// Move every frame whose departure is ≤ `t` out, in order: (id, departure ns).
    pub fn depart_until(&mut self, t: i64, out: &mut Vec<(u64, i64)>) {
        loop {
            let departure = self.head_departure.filter(|&d| d <= t);
            // Set only under PIE (on an arrival), so this is PIE's controller or nothing.
            let update = self.pie.next_update.filter(|&u| u <= t);
            match (departure, update) {
                (Some(d), Some(u)) if u < d => self.pie_update(u),
                (Some(d), _) => self.depart_head(d, out),
                (None, Some(u)) => self.pie_update(u),
                (None, None) => break,
            }
        }
        self.clock = self.clock.max(t);
    }

    /// The head leaves at `d`; the next frame starts.
    fn depart_head(&mut self, d: i64, out: &mut Vec<(u64, i64)>) {
        let e = self.pop_head();
        let c = self.stats.class(e.low);
        c.sent += 1;
        c.sent_bytes += e.bytes;
        self.last_departure = d;
        out.push((e.id, d));
        self.start_head(d);
        if self.frames == 0 {
            self.red.idle_since = Some(d);
        }
    }

    /// The queueing delay at `t`: the time the link needs to send what is queued then.
    fn queueing_delay_ns(&self, t: i64) -> i64 {
        match (self.entries.front(), self.head_departure) {
            (Some(head), Some(d)) => {
                let behind = (self.bytes - head.bytes) as u128 * 8 * NS_PER_S as u128 / self.cfg.rate_bps as u128;
                (d - t).max(0) + behind as i64
            }
            _ => 0,
        }
    }

    /// RFC 8033 §4.2 and §4.4: PIE's update at `u`, from the queueing delay then.
    fn pie_update(&mut self, u: i64) {
        let p = match self.cfg.policy {
            Policy::Pie(p) => p,
            _ => return,
        };
        let qdelay = self.queueing_delay_ns(u) as f64 / 1e9;
        let target = p.target_ns as f64 / 1e9;
        let empty = self.frames == 0;
        let st = &mut self.pie;
        let mut delta = PIE_ALPHA * (qdelay - target) + PIE_BETA * (qdelay - st.qdelay_old_s);
        // Auto-tuning: small probabilities move in small steps.
        delta /= match st.drop_prob {
            x if x < 0.000_001 => 2048.0,
            x if x < 0.000_01 => 512.0,
            x if x < 0.000_1 => 128.0,
            x if x < 0.001 => 32.0,
            x if x < 0.01 => 8.0,
            x if x < 0.1 => 2.0,
            _ => 1.0,
        };
        st.drop_prob += delta;
        if qdelay == 0.0 && st.qdelay_old_s == 0.0 {
            st.drop_prob *= 0.98; // decay once the queue stays empty
        }
        st.drop_prob = st.drop_prob.clamp(0.0, 1.0);
        if st.drop_prob == 0.0 && qdelay < target / 2.0 && st.qdelay_old_s < target / 2.0 {
            st.burst_allowance_ns = PIE_MAX_BURST_NS;
        } else {
            st.burst_allowance_ns = (st.burst_allowance_ns - p.tupdate_ns).max(0);
        }
        st.qdelay_old_s = qdelay;
        // Once the queue is empty and the state at rest, updates change nothing: the next
        // arrival starts them again.
        let at_rest = empty && st.drop_prob == 0.0 && qdelay == 0.0 && st.burst_allowance_ns == PIE_MAX_BURST_NS;
        st.next_update = if at_rest { None } else { Some(u + p.tupdate_ns) };
    }

    /// RFC 8033 §4.1: whether PIE refuses an arrival (a drop, or with ECN a mark).
    fn pie_early_signal(&mut self, p: &Pie) -> bool {
        let st = &mut self.pie;
        if st.burst_allowance_ns > 0 {
            return false;
        }
        if (st.qdelay_old_s < p.target_ns as f64 / 2e9 && st.drop_prob < 0.2) || self.bytes <= 2 * PIE_MEAN_PACKET_BYTES {
            return false;
        }
        uniform(&mut st.rng) < st.drop_prob
    }

    /// PIE's drop probability now (for tests and the record).
    #[cfg(test)]
    pub fn pie_drop_prob(&self) -> f64 {
        self.pie.drop_prob
    }

    /// Offer a frame arriving at `t` (kernel time; clamped to the queue's clock, which
    /// never goes back); `ect`: it is ECN-capable; `flow`: its flow's key (frame::flow_key,
    /// which only FQ-CoDel reads). Frames that departed up to `t` are appended to
    /// `departed`, ids of queued frames pushed out to `dropped`. Returns whether the frame
    /// was queued.
    #[allow(clippy::too_many_arguments)]
    pub fn offer(&mut self, id: u64, bytes: u64, low: bool, ect: bool, flow: u64, t: i64,
                 departed: &mut Vec<(u64, i64)>, dropped: &mut Vec<u64>) -> bool {
        let t = t.max(self.clock);
        self.depart_until(t, departed);
        if self.cfg.loss > 0.0 && uniform(&mut self.loss_rng) < self.cfg.loss {
            self.stats.random_drops += 1;
            self.stats.class(low).dropped += 1;
            return false;
        }
        if self.fair.is_some() {
            return self.fair_offer(Entry { id, bytes, low, arrival_ns: t, ect, dead: false }, flow, dropped);
        }
        let full = self.bytes + bytes > self.cfg.limit_bytes;
        let mut mark = false;
        let admit = match self.cfg.policy {
            Policy::DropTail | Policy::Codel(_) => !full,
            Policy::Pie(p) => {
                if self.pie.next_update.is_none() {
                    self.pie.next_update = Some(t + p.tupdate_ns);
                }
                let signal = !full && self.pie_early_signal(&p);
                mark = signal && p.ecn && ect && self.pie.drop_prob <= PIE_MARK_ECN_THRESHOLD;
                if signal && !mark {
                    self.stats.aqm_drops += 1;
                }
                !full && (!signal || mark)
            }
            Policy::PushOut => !full || self.push_out(self.bytes + bytes - self.cfg.limit_bytes, dropped),
            Policy::FqCodel(_) => unreachable!("FQ-CoDel's arrivals are offered to its flows"),
            Policy::Red(r) => {
                let early = self.red_early_drop(&r, t);
                if early && !full {
                    self.stats.early_drops += 1;
                }
                !early && !full
            }
        };
        if !admit {
            self.stats.class(low).dropped += 1;
            return false;
        }
        let pos = self.first_pos + self.entries.len() as u64;
        if mark {
            self.marked.push(id);
            self.stats.marks += 1;
        }
        self.entries.push_back(Entry { id, bytes, low, arrival_ns: t, ect: ect && !mark, dead: false });
        if low {
            self.low_pos.push_back(pos);
            self.low_bytes += bytes;
        }
        self.bytes += bytes;
        self.frames += 1;
        self.stats.class(low).enqueued += 1;
        self.after_arrival(t);
        true
    }

    /// What follows an arrival at `t`: the high-water marks, and the link's start if it was idle.
    fn after_arrival(&mut self, t: i64) {
        self.stats.high_water_bytes = self.stats.high_water_bytes.max(self.bytes);
        self.stats.high_water_frames = self.stats.high_water_frames.max(self.frames);
        if self.head_departure.is_none() {
            self.start_head(t);
        }
    }

    /// Whether the queue needs each frame's flow key (FQ-CoDel).
    pub fn is_fair(&self) -> bool {
        self.fair.is_some()
    }

    /// RFC 8290 §4.1: an arrival joins its flow's queue (a flow that had none joins the new
    /// flows with a quantum of credit); while the buffer is over its limit, the frame at
    /// the head of the flow queue holding the most bytes is dropped (the arrival itself,
    /// when that is where it sits alone). Never the frame being sent.
    fn fair_offer(&mut self, e: Entry, flow: u64, dropped: &mut Vec<u64>) -> bool {
        let (id, bytes, low, t) = (e.id, e.bytes, e.low, e.arrival_ns);
        let fair = self.fair.as_mut().expect("FQ-CoDel");
        let i = (flow % fair.flows.len() as u64) as usize;
        let q = &mut fair.flows[i];
        q.frames.push_back(e);
        q.bytes += bytes;
        if !q.listed {
            q.listed = true;
            q.deficit = fair.cfg.quantum_bytes as i64;
            fair.new_flows.push_back(i);
        }
        self.bytes += bytes;
        self.frames += 1;
        let mut queued = true;
        while self.bytes > self.cfg.limit_bytes {
            let fattest = fair.new_flows.iter().chain(fair.old_flows.iter()).copied()
                .filter(|&f| !fair.flows[f].frames.is_empty())
                .max_by_key(|&f| (fair.flows[f].bytes, std::cmp::Reverse(f)));
            let Some(f) = fattest else { break };
            let victim = fair.flows[f].frames.pop_front().expect("a flow with frames");
            fair.flows[f].bytes -= victim.bytes;
            self.bytes -= victim.bytes;
            self.frames -= 1;
            self.stats.class(victim.low).dropped += 1;
            if victim.id == id {
                queued = false;
            } else {
                dropped.push(victim.id);
            }
        }
        if queued {
            self.stats.class(low).enqueued += 1;
        }
        self.after_arrival(t);
        queued
    }

    /// RFC 8290 §4.2: the next frame to send, by deficit round robin over the new flows,
    /// then the old ones, each flow's head judged by its own CoDel when the link takes it
    /// at `now`. A flow out of credit gets a quantum more and goes to the end of the old
    /// flows; an empty new flow goes there too (so that a flow cannot stay new by emptying
    /// its queue each round), an empty old one leaves the lists. The frame chosen becomes
    /// `entries`' only frame.
    fn fair_next(&mut self, now: i64) {
        let Bottleneck { fair, entries, stats, bytes, frames, head_dropped, marked, .. } = self;
        let fair = fair.as_mut().expect("FQ-CoDel");
        loop {
            let (from_new, i) = match (fair.new_flows.front(), fair.old_flows.front()) {
                (Some(&i), _) => (true, i),
                (None, Some(&i)) => (false, i),
                (None, None) => return,
            };
            let list = if from_new { &mut fair.new_flows } else { &mut fair.old_flows };
            if fair.flows[i].deficit <= 0 {
                fair.flows[i].deficit += fair.cfg.quantum_bytes as i64;
                list.pop_front();
                fair.old_flows.push_back(i);
                continue;
            }
            let q = &mut fair.flows[i];
            let mut codel = std::mem::take(&mut q.codel);
            let mut head = FlowHead { q, bytes: &mut *bytes, frames: &mut *frames, stats: &mut *stats,
                                      head_dropped: &mut *head_dropped, marked: &mut *marked };
            codel.dequeue(&fair.cfg.codel, &mut head, now);
            let q = &mut fair.flows[i];
            q.codel = codel;
            match q.frames.pop_front() {
                Some(e) => {
                    q.bytes -= e.bytes;
                    q.deficit -= e.bytes as i64;
                    entries.push_back(e);
                    return;
                }
                None => {
                    let list = if from_new { &mut fair.new_flows } else { &mut fair.old_flows };
                    list.pop_front();
                    if from_new {
                        fair.old_flows.push_back(i);
                    } else {
                        q.listed = false;
                    }
                }
            }
        }
    }

    /// Free at least `need` bytes by dropping the most recently queued low-priority
    /// frames (never the one being sent). Drops nothing and returns false when even all
    /// of them would not make room.
    fn push_out(&mut self, need: u64, dropped: &mut Vec<u64>) -> bool {
        let head_low = self.entries.front().map_or(0, |e| if e.low { e.bytes } else { 0 });
        if self.low_bytes - head_low < need {
            return false;
        }
        let mut freed = 0;
        while freed < need {
            let pos = self.low_pos.pop_back().expect("enough low-priority bytes are queued");
            let e = &mut self.entries[(pos - self.first_pos) as usize];
            debug_assert!(e.low && !e.dead && pos != self.first_pos);
            e.dead = true;
            freed += e.bytes;
            self.low_bytes -= e.bytes;
            self.bytes -= e.bytes;
            self.frames -= 1;
            dropped.push(e.id);
            self.stats.low.dropped += 1;
            self.stats.pushed_out += 1;
        }
        true
    }

    fn random(&mut self) -> f64 {
        uniform(&mut self.red.rng)
    }

    /// RED's early-drop decision for an arrival at `t` (Floyd & Jacobson 1993, gentle off).
    fn red_early_drop(&mut self, r: &Red, t: i64) -> bool {
        if self.frames == 0 {
            // Decay the average as if the idle link had sent small frames all along.
            if let Some(since) = self.red.idle_since.take() {
                let per_frame_ns = (RED_IDLE_FRAME_BYTES * 8 * NS_PER_S / self.cfg.rate_bps).max(1) as f64;
                let m = ((t - since).max(0) as f64) / per_frame_ns;
                self.red.avg *= (1.0 - RED_WEIGHT).powf(m);
            }
        } else {
            self.red.avg = (1.0 - RED_WEIGHT) * self.red.avg + RED_WEIGHT * self.bytes as f64;
        }
        let avg = self.red.avg;
        if avg < r.min_bytes as f64 {
            self.red.count = -1;
            return false;
        }
        if avg >= r.max_bytes as f64 {
            self.red.count = 0;
            return true;
        }
        self.red.count += 1;
        let pb = r.max_p * (avg - r.min_bytes as f64) / (r.max_bytes - r.min_bytes).max(1) as f64;
        let denom = 1.0 - self.red.count as f64 * pb;
        let pa = if denom <= 0.0 { 1.0 } else { pb / denom };
        if self.random() < pa {
            self.red.count = 0;
            return true;
        }
        false
    }
}

/// The bottleneck's FIFO under CoDel: its head is `entries`' front.
impl HeadQueue for Bottleneck {
    fn head_arrival(&self) -> Option<i64> {
        self.entries.front().map(|e| e.arrival_ns)
    }

    fn behind_head(&self) -> u64 {
        self.entries.front().map_or(0, |e| self.bytes - e.bytes)
    }

    fn mark_head(&mut self) -> bool {
        let e = self.entries.front_mut().expect("a head to mark");
        if !e.ect {
            return false;
        }
        e.ect = false; // CE now: a frame is marked once
        self.marked.push(e.id);
        self.stats.marks += 1;
        true
    }

    fn drop_head(&mut self) {
        let e = self.pop_head();
        self.head_dropped.push(e.id);
        self.stats.class(e.low).dropped += 1;
        self.stats.aqm_drops += 1;
    }
}

/// One flow's queue of FQ-CoDel as its CoDel sees it, with the counters a drop or a mark
/// changes (`bytes`: the whole queue's, the frame being sent has left it).
struct FlowHead<'a> {
    q: &'a mut FlowQueue,
    bytes: &'a mut u64,
    frames: &'a mut u64,
    stats: &'a mut QueueStats,
    head_dropped: &'a mut Vec<u64>,
    marked: &'a mut Vec<u64>,
}

impl HeadQueue for FlowHead<'_> {
    fn head_arrival(&self) -> Option<i64> {
        self.q.frames.front().map(|e| e.arrival_ns)
    }

    fn behind_head(&self) -> u64 {
        self.q.frames.front().map_or(0, |e| *self.bytes - e.bytes)
    }

    fn mark_head(&mut self) -> bool {
        let e = self.q.frames.front_mut().expect("a head to mark");
        if !e.ect {
            return false;
        }
        e.ect = false;
        self.marked.push(e.id);
        self.stats.marks += 1;
        true
    }

    fn drop_head(&mut self) {
        let e = self.q.frames.pop_front().expect("a head to drop");
        self.q.bytes -= e.bytes;
        *self.bytes -= e.bytes;
        *self.frames -= 1;
        self.head_dropped.push(e.id);
        self.stats.class(e.low).dropped += 1;
        self.stats.aqm_drops += 1;
    }
}

/// xorshift64*: a uniform draw in [0, 1), deterministic so that runs and tests repeat exactly.
fn uniform(state: &mut u64) -> f64 {
    let mut x = *state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *state = x;
    (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    const MBIT: u64 = 1_000_000;

    fn q(rate_bps: u64, limit: u64, policy: Policy) -> Bottleneck {
        Bottleneck::new(QueueConfig { rate_bps, limit_bytes: limit, policy, low_dscp: 1 << DEFAULT_LOW_DSCP, trace: None, loss: 0.0 })
    }

    /// Offer and return (accepted, pushed-out ids); departures go to `dep`.
    fn offer(b: &mut Bottleneck, id: u64, bytes: u64, low: bool, t: i64, dep: &mut Vec<(u64, i64)>) -> (bool, Vec<u64>) {
        let mut dropped = Vec::new();
        let ok = b.offer(id, bytes, low, false, 0, t, dep, &mut dropped);
        (ok, dropped)
    }

    fn drain(b: &mut Bottleneck) -> Vec<(u64, i64)> {
        let mut out = Vec::new();
        b.depart_until(i64::MAX, &mut out);
        out
    }

    #[test]
    fn classifies_by_the_configured_dscp_set() {
        let c = QueueConfig { rate_bps: 1, limit_bytes: 1, policy: Policy::DropTail, low_dscp: (1 << 14) | (1 << 12), trace: None, loss: 0.0 };
        assert!(c.is_low(Some(14)) && c.is_low(Some(12)));
        assert!(!c.is_low(Some(0)) && !c.is_low(Some(46)) && !c.is_low(None) && !c.is_low(Some(64)));
        assert!(c.json().contains("\"low_dscp\": [12, 14]"), "{}", c.json());
    }

    #[test]
    fn a_trace_link_sends_at_its_opportunities_and_its_buffer_still_drops() {
        // One opportunity per ms at 2, 3, 4, 5 ms of a 5 ms period; a buffer of 3 frames.
        let trace = Arc::new(Trace::parse("2\n3\n4\n5\n").unwrap());
        let link = TraceLink { trace: trace.clone(), path: "t".into(), opportunity_bytes: 1514 };
        let mut b = Bottleneck::new(QueueConfig {
            rate_bps: trace.mean_bps(1514),
            limit_bytes: 3 * 1514,
            policy: Policy::DropTail,
            low_dscp: 0,
            trace: Some(link),
            loss: 0.0,
        });
        let ms = 1_000_000;
        let mut dep = Vec::new();
        // Four frames at once (the trace starts with the first): three fit, one is dropped.
        let admitted: Vec<bool> = (0..4).map(|id| offer(&mut b, id, 1514, false, 10 * ms, &mut dep).0).collect();
        assert_eq!(admitted, [true, true, true, false]);
        // At 12.5 ms the first has left (12 ms), so a fifth fits; it leaves at 15 ms.
        assert!(offer(&mut b, 4, 1514, false, 12 * ms + ms / 2, &mut dep).0);
        let mut out = dep.clone();
        out.extend(drain(&mut b));
        assert_eq!(out, vec![(0, 12 * ms), (1, 13 * ms), (2, 14 * ms), (4, 15 * ms)]);
        assert_eq!(b.stats.dropped(), 1);
        assert!(b.config().json().contains("\"trace\": {\"path\": \"t\", \"opportunities\": 4, \"period_ms\": 5"));
        assert_eq!(b.stats.trace_epoch_mono_ns, Some(10 * ms));
    }

    #[test]
    fn a_lossy_link_drops_its_share_of_arrivals_at_random_and_counts_them_apart() {
        let mut b = Bottleneck::new(QueueConfig {
            rate_bps: 1_000 * MBIT,
            limit_bytes: 1 << 30,
            policy: Policy::DropTail,
            low_dscp: 0,
            trace: None,
            loss: 0.05,
        });
        let mut dep = Vec::new();
        let admitted = (0..20_000).filter(|&id| offer(&mut b, id, 1514, false, id as i64 * 20_000, &mut dep).0).count();
        let lost = 20_000 - admitted as u64;
        // 1000 of 20,000 expected; the binomial's standard deviation is 31.
        assert!((900..1100).contains(&lost), "{lost}");
        assert_eq!((b.stats.random_drops, b.stats.dropped()), (lost, lost));
        assert!(b.config().json().contains("\"loss\": 0.05"));
    }

    #[test]
    fn departures_are_spaced_exactly_by_size_over_rate() {
        // 1514 bytes at 1.5 Mbit/s: 8074.666… µs. A burst of 30 back-to-back frames must
        // leave k × 12112 bits / rate after the first one started, with no rounding drift.
        let mut b = q(1_500_000, 1 << 20, Policy::DropTail);
        let mut dep = Vec::new();
        for id in 0..30 {
            assert!(offer(&mut b, id, 1514, false, 1_000, &mut dep).0);
        }
        let out = drain(&mut b);
        assert_eq!(out.len(), 30);
        for (k, (id, d)) in out.iter().enumerate() {
            assert_eq!(*id, k as u64);
            let exact = 1_000 + ((k as u64 + 1) * 1514 * 8 * NS_PER_S / 1_500_000) as i64;
            assert_eq!(*d, exact, "frame {}", k);
        }
        assert_eq!(b.stats.normal.sent, 30);
        assert_eq!(b.stats.normal.sent_bytes, 30 * 1514);
    }

    #[test]
    fn an_idle_link_starts_at_the_arrival() {
        let mut b = q(8 * MBIT, 1 << 20, Policy::DropTail); // 1 byte per µs
        let mut dep = Vec::new();
        offer(&mut b, 1, 1000, false, 0, &mut dep);
        // Arrives after the first left: departure = arrival + 1000 µs, not chained.
        offer(&mut b, 2, 500, false, 5_000_000, &mut dep);
        assert_eq!(dep, vec![(1, 1_000_000)]);
        dep.clear();
        b.depart_until(5_600_000, &mut dep);
        assert_eq!(dep, vec![(2, 5_500_000)]);
        // Arrives while the previous is being sent: waits for it.
        offer(&mut b, 3, 1000, false, 6_000_000, &mut dep);
        offer(&mut b, 4, 1000, false, 6_100_000, &mut dep);
        assert_eq!(drain(&mut b), vec![(3, 7_000_000), (4, 8_000_000)]);
    }

    #[test]
    fn droptail_drops_the_arrival_when_full() {
        let mut b = q(8 * MBIT, 3000, Policy::DropTail);
        let mut dep = Vec::new();
        assert!(offer(&mut b, 1, 1000, true, 0, &mut dep).0);
        assert!(offer(&mut b, 2, 1000, true, 0, &mut dep).0);
        assert!(offer(&mut b, 3, 1000, false, 0, &mut dep).0);
        let (ok, pushed) = offer(&mut b, 4, 1000, false, 0, &mut dep);
        assert!(!ok && pushed.is_empty(), "droptail never pushes out");
        assert_eq!(b.occupancy(), (3000, 3));
        assert_eq!((b.stats.normal.dropped, b.stats.low.dropped), (1, 0));
        // The frame being sent still counts: at 1 ms the first has left, room for one.
        assert!(offer(&mut b, 5, 1000, false, 1_000_000, &mut dep).0);
        assert!(!offer(&mut b, 6, 1, false, 1_000_000, &mut dep).0);
        assert_eq!(dep, vec![(1, 1_000_000)]);
    }

    #[test]
    fn pushout_drops_the_newest_queued_low_frame_before_an_unmarked_arrival() {
        let mut b = q(8 * MBIT, 4000, Policy::PushOut);
        let mut dep = Vec::new();
        offer(&mut b, 1, 1000, true, 0, &mut dep); // being sent: never pushed out
        offer(&mut b, 2, 1000, true, 0, &mut dep);
        offer(&mut b, 3, 1000, true, 0, &mut dep);
        offer(&mut b, 4, 1000, false, 0, &mut dep);
        let (ok, pushed) = offer(&mut b, 5, 1000, false, 0, &mut dep);
        assert!(ok);
        assert_eq!(pushed, vec![3], "the most recently queued low-priority frame goes");
        let (ok, pushed) = offer(&mut b, 6, 1000, false, 0, &mut dep);
        assert!(ok && pushed == vec![2]);
        // Only the low frame in service is left: an unmarked arrival is dropped now.
        let (ok, pushed) = offer(&mut b, 7, 1000, false, 0, &mut dep);
        assert!(!ok && pushed.is_empty());
        assert_eq!(b.stats.pushed_out, 2);
        assert_eq!((b.stats.low.dropped, b.stats.normal.dropped), (2, 1));
        // Order kept, pushed-out frames skipped, spacing unaffected by the holes.
        assert_eq!(drain(&mut b), vec![(1, 1_000_000), (4, 2_000_000), (5, 3_000_000), (6, 4_000_000)]);
        assert_eq!(b.stats.low.sent + b.stats.normal.sent, 4);
    }

    #[test]
    fn pushout_low_arrival_replaces_a_queued_low_frame_or_is_dropped() {
        let mut b = q(8 * MBIT, 3000, Policy::PushOut);
        let mut dep = Vec::new();
        offer(&mut b, 1, 1000, false, 0, &mut dep);
        offer(&mut b, 2, 1000, true, 0, &mut dep);
        offer(&mut b, 3, 1000, false, 0, &mut dep);
        // A low arrival to a full buffer with a low frame queued: that one goes.
        let (ok, pushed) = offer(&mut b, 4, 1000, true, 0, &mut dep);
        assert!(ok && pushed == vec![2]);
        let (ok, pushed) = offer(&mut b, 5, 1000, true, 0, &mut dep);
        assert!(ok && pushed == vec![4]);
        assert_eq!(drain(&mut b).iter().map(|x| x.0).collect::<Vec<_>>(), vec![1, 3, 5]);
        // No low frame queued: a low arrival to a full buffer is dropped.
        let mut b = q(8 * MBIT, 2000, Policy::PushOut);
        offer(&mut b, 1, 1000, false, 0, &mut dep);
        offer(&mut b, 2, 1000, false, 0, &mut dep);
        let (ok, pushed) = offer(&mut b, 3, 1000, true, 0, &mut dep);
        assert!(!ok && pushed.is_empty());
        assert_eq!(b.stats.low.dropped, 1);
    }

    #[test]
    fn pushout_drops_several_small_frames_for_a_large_one_or_none_at_all() {
        let mut b = q(8 * MBIT, 3000, Policy::PushOut);
        let mut dep = Vec::new();
        offer(&mut b, 1, 1500, false, 0, &mut dep);
        offer(&mut b, 2, 500, true, 0, &mut dep);
        offer(&mut b, 3, 500, true, 0, &mut dep);
        offer(&mut b, 4, 500, false, 0, &mut dep);
        // 1000 bytes needed: both queued low frames go, newest first.
        let (ok, pushed) = offer(&mut b, 5, 1000, false, 0, &mut dep);
        assert!(ok && pushed == vec![3, 2]);
        // 1500 needed but no low bytes: nothing is pushed out in vain.
        let (ok, pushed) = offer(&mut b, 6, 1500, false, 0, &mut dep);
        assert!(!ok && pushed.is_empty());
        assert_eq!(b.occupancy(), (3000, 3));
    }

    #[test]
    fn order_is_kept_under_a_mixed_overload() {
        let mut b = q(10 * MBIT, 20_000, Policy::PushOut);
        let mut dep = Vec::new();
        let mut accepted = Vec::new();
        let mut t = 0i64;
        for id in 0..20_000u64 {
            // 15 Mbit/s of 1000..1500-byte frames, every third one low priority.
            let bytes = 1000 + (id * 97) % 501;
            t += (bytes * 8 * NS_PER_S / (15 * MBIT)) as i64;
            let mut dropped = Vec::new();
            if b.offer(id, bytes, id % 3 == 0, false, 0, t, &mut dep, &mut dropped) {
                accepted.push(id);
            }
            accepted.retain(|a| !dropped.contains(a));
            assert!(b.occupancy().0 <= 20_000);
        }
        dep.extend(drain(&mut b));
        let ids: Vec<u64> = dep.iter().map(|x| x.0).collect();
        assert_eq!(ids, accepted, "every accepted frame leaves once, in arrival order");
        assert!(dep.windows(2).all(|w| w[0].1 <= w[1].1), "departures never go back");
        let s = &b.stats;
        assert_eq!(s.normal.enqueued + s.low.enqueued, s.normal.sent + s.low.sent + s.pushed_out);
        assert_eq!(s.normal.enqueued + s.normal.dropped + s.low.enqueued + s.low.dropped - s.pushed_out, 20_000);
        assert!(s.low.dropped > s.normal.dropped, "{:?}", s);
        assert!(s.high_water_bytes <= 20_000 && s.high_water_bytes > 18_000);
    }

    #[test]
    fn a_saturated_queue_delivers_exactly_its_rate() {
        let mut b = q(50 * MBIT, 100_000, Policy::DropTail);
        let mut dep = Vec::new();
        let mut t = 0;
        for id in 0..50_000u64 {
            t += (1514 * 8 * NS_PER_S / (75 * MBIT)) as i64;
            let mut d = Vec::new();
            b.offer(id, 1514, false, false, 0, t, &mut dep, &mut d);
        }
        // Between two departures of a busy link: bytes sent after the first / time.
        let (first, last) = (dep[100], dep[dep.len() - 1]);
        let frames = dep.len() - 101;
        let rate = frames as f64 * 1514.0 * 8.0 / ((last.1 - first.1) as f64 / 1e9);
        assert!((rate / 50e6 - 1.0).abs() < 1e-6, "{}", rate);
    }

    #[test]
    fn arrivals_never_go_back_in_time() {
        let mut b = q(8 * MBIT, 1 << 20, Policy::DropTail);
        let mut dep = Vec::new();
        b.depart_until(10_000_000, &mut dep);
        offer(&mut b, 1, 1000, false, 2_000_000, &mut dep); // stamped before the clock
        assert_eq!(drain(&mut b), vec![(1, 11_000_000)]);
    }

    #[test]
    fn red_drops_early_only_when_the_average_is_high() {
        let limit = 100_000;
        let mut b = q(10 * MBIT, limit, Policy::Red(Red::for_limit(limit)));
        let mut dep = Vec::new();
        // Under the rate: the queue stays short, nothing is dropped.
        let mut t = 0;
        for id in 0..5_000u64 {
            t += 2_000_000; // 1000 B every 2 ms = 4 Mbit/s
            assert!(offer(&mut b, id, 1000, false, t, &mut dep).0);
        }
        assert_eq!(b.stats.early_drops, 0);
        // Twice the rate for a long while: RED drops before the buffer is full.
        for id in 5_000..40_000u64 {
            t += 400_000; // 20 Mbit/s
            offer(&mut b, id, 1000, false, t, &mut dep);
        }
        assert!(b.stats.early_drops > 1000, "{:?}", b.stats);
        // The slow average lets the start of the overload fill the buffer; after that
        // nearly every drop is an early one.
        assert!(b.stats.early_drops * 10 > b.stats.dropped() * 9, "{:?}", b.stats);
        // Deterministic: the same input gives the same drops.
        let mut again = q(10 * MBIT, limit, Policy::Red(Red::for_limit(limit)));
        let mut t = 0;
        for id in 0..40_000u64 {
            t += if id < 5_000 { 2_000_000 } else { 400_000 };
            offer(&mut again, id, 1000, false, t, &mut dep);
        }
        assert_eq!(again.stats, b.stats);
    }

    /// CoDel on a 10 Mbit/s link offered 20 Mbit/s of 1514-byte frames for `ms`: every
    /// frame's (id, arrival), the departures, the ids dropped at the head and those marked.
    fn codel_overload(ecn: bool, ms: i64) -> (Vec<(u64, i64)>, Vec<(u64, i64)>, Vec<u64>, Vec<u64>, QueueStats) {
        let mut b = q(10 * MBIT, 1 << 30, Policy::Codel(Codel { ecn, ..Codel::DEFAULT }));
        let (mut arrivals, mut dep, mut dropped, mut marked) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        let gap = (1514 * 8 * NS_PER_S / (20 * MBIT)) as i64;
        let mut id = 0;
        while id as i64 * gap < ms * 1_000_000 {
            let t = id as i64 * gap;
            let mut pushed = Vec::new();
            assert!(b.offer(id, 1514, false, true, 0, t, &mut dep, &mut pushed));
            arrivals.push((id, t));
            dropped.append(&mut b.head_dropped);
            marked.append(&mut b.marked);
            id += 1;
        }
        dep.extend(drain(&mut b));
        dropped.append(&mut b.head_dropped);
        marked.append(&mut b.marked);
        (arrivals, dep, dropped, marked, b.stats.clone())
    }

    /// When the link started sending (or dropped) frame `id` of a busy link: the departure
    /// of the last frame sent before it.
    fn start_of(id: u64, dep: &[(u64, i64)]) -> i64 {
        dep.iter().filter(|(d, _)| *d < id).map(|(_, t)| *t).max().expect("a frame left before")
    }

    #[test]
    fn codel_drops_first_an_interval_after_the_sojourn_rose_above_target_then_at_interval_over_root_count() {
        let (arrivals, dep, dropped, _, stats) = codel_overload(false, 1_000);
        let frame_ns = (1514 * 8 * NS_PER_S / (10 * MBIT)) as i64; // 1.2112 ms
        // The first frame that waited at least the target (5 ms) when the link took it.
        let above = arrivals.iter().find(|(id, a)| *id > 0 && start_of(*id, &dep) - a >= 5_000_000).unwrap();
        let t_above = start_of(above.0, &dep);
        // The first drop: the first head the link takes an interval (100 ms) later.
        let first = start_of(dropped[0], &dep);
        assert!(first >= t_above + 100_000_000 && first < t_above + 100_000_000 + frame_ns,
                "sojourn above target from {t_above} ns, first drop at {first} ns");
        // Then the k-th drop's due time plus interval / √k for the next (100 ms, 70.7 ms,
        // 57.7 ms, …), each at the first head the link takes at or after it.
        let mut next = first as f64;
        for (n, id) in dropped.iter().enumerate().skip(1).take(8) {
            next += 100e6 / (n as f64).sqrt();
            let at = start_of(*id, &dep) as f64;
            assert!(at >= next - 1.0 && at < next + frame_ns as f64, "drop {n} at {at} ns, due at {next} ns");
        }
        assert_eq!(stats.aqm_drops, dropped.len() as u64);
        assert_eq!(stats.normal.dropped, stats.aqm_drops);
        // A drop never takes the link: the sent frames still leave back to back.
        assert!(dep.windows(2).skip(5).take(500).all(|w| w[1].1 - w[0].1 <= frame_ns + 1));
    }

    #[test]
    fn codel_with_ecn_marks_the_frame_it_would_have_dropped_and_drops_none() {
        let (_, _, dropped, _, _) = codel_overload(false, 400);
        let (_, dep, none, marked, stats) = codel_overload(true, 400);
        assert!(none.is_empty() && stats.aqm_drops == 0, "{:?}", stats);
        assert_eq!(marked[0], dropped[0], "the first signal falls on the same frame");
        assert_eq!(stats.marks, marked.len() as u64);
        assert!(marked.len() > 1 && marked.iter().all(|m| dep.iter().any(|(d, _)| d == m)), "marked frames are sent");
        let json = stats.json();
        assert!(json.contains(&format!("\"marks\": {}", marked.len())) && json.contains("\"aqm_drops\": 0"), "{json}");
    }

    #[test]
    fn codel_never_signals_a_queue_of_one_frame_however_long_it_waits() {
        // 1 Mbit/s: a 1514-byte frame takes 12.1 ms. Pairs every 30 ms: the second of each
        // pair waits 12.1 ms (above target) with nothing queued behind it.
        let mut b = q(MBIT, 1 << 20, Policy::Codel(Codel::DEFAULT));
        let mut dep = Vec::new();
        for pair in 0..100u64 {
            for k in 0..2 {
                offer(&mut b, pair * 2 + k, 1514, false, pair as i64 * 30_000_000, &mut dep);
            }
        }
        assert_eq!(drain(&mut b).len() + dep.len(), 200);
        assert!(b.head_dropped.is_empty() && b.stats.aqm_drops == 0);
        assert!(b.config().json().contains("\"codel\": {\"target_ns\": 5000000, \"interval_ns\": 100000000, \"ecn\": false}"));
    }

    /// PIE on a 10 Mbit/s link offered `factor` × its rate of 1514-byte frames for `secs`
    /// (ECN-capable when `ect`): per arrival (time, admitted, marked, drop probability after),
    /// the departures, and the queue.
    fn pie_overload(pie: Pie, factor: f64, secs: f64, ect: bool) -> (Vec<(i64, bool, bool, f64)>, Vec<(u64, i64)>, Bottleneck) {
        let mut b = q(10 * MBIT, 1 << 30, Policy::Pie(pie));
        let gap = (1514.0 * 8.0 * 1e9 / (10e6 * factor)) as i64;
        let (mut seen, mut dep) = (Vec::new(), Vec::new());
        let mut id = 0u64;
        while (id as i64) * gap < (secs * 1e9) as i64 {
            let t = id as i64 * gap;
            let mut pushed = Vec::new();
            let admitted = b.offer(id, 1514, false, ect, 0, t, &mut dep, &mut pushed);
            let marked = b.marked.last() == Some(&id);
            seen.push((t, admitted, marked, b.pie_drop_prob()));
            id += 1;
        }
        (seen, dep, b)
    }

    #[test]
    fn pie_holds_an_unresponsive_overload_at_its_target_delay_by_dropping_the_excess() {
        // 1.5 × the rate: the queue stops growing only when a third of the arrivals go, and
        // PIE's integral term moves the drop probability until the delay sits at 15 ms.
        let (seen, dep, b) = pie_overload(Pie::DEFAULT, 1.5, 30.0, false);
        let late: Vec<_> = seen.iter().filter(|a| a.0 >= 10_000_000_000).collect();
        let dropped = late.iter().filter(|a| !a.1).count() as f64 / late.len() as f64;
        assert!((dropped - 1.0 / 3.0).abs() < 0.02, "dropped {dropped} of the arrivals after 10 s");
        // Each frame's queueing delay: its departure less its arrival and its own wire time.
        let frame_ns = 1514 * 8 * 1_000 / 10; // 1211.2 µs at 10 Mbit/s, in ns
        let arrivals: std::collections::HashMap<u64, i64> = seen.iter().enumerate().map(|(i, a)| (i as u64, a.0)).collect();
        let delays: Vec<f64> = dep.iter().filter(|(id, _)| arrivals[id] >= 10_000_000_000)
            .map(|(id, d)| (d - arrivals[id] - frame_ns as i64) as f64 / 1e6).collect();
        let mean = delays.iter().sum::<f64>() / delays.len() as f64;
        assert!((mean - 15.0).abs() < 3.0, "mean queueing delay {mean:.2} ms after 10 s (target 15 ms)");
        assert_eq!(b.stats.aqm_drops, seen.iter().filter(|a| !a.1).count() as u64);
        assert_eq!(b.stats.marks, 0);
    }

    #[test]
    fn pie_drops_nothing_early_within_its_150_ms_burst_allowance() {
        let (seen, _, _) = pie_overload(Pie::DEFAULT, 3.0, 1.0, false);
        let first = seen.iter().find(|a| !a.1).expect("PIE drops under a 3 × overload").0;
        assert!(first >= 150_000_000, "first drop at {} ms", first / 1_000_000);
    }

    #[test]
    fn pie_with_ecn_marks_while_its_probability_is_at_most_ten_percent_and_drops_above() {
        let (seen, _, b) = pie_overload(Pie { ecn: true, ..Pie::DEFAULT }, 1.5, 20.0, true);
        let first = seen.iter().position(|a| a.2 || !a.1).expect("PIE signals");
        assert!(seen[first].2, "the first signal is a mark");
        // A mark is decided before the update that may follow, so at most 10 % then.
        assert!(seen.iter().filter(|a| a.2).all(|a| a.3 <= PIE_MARK_ECN_THRESHOLD + 0.02), "a mark above 10 %");
        // Marks do not slow an unresponsive flood: the probability climbs past 10 %, and PIE
        // drops (a third of the arrivals, as without ECN, once it has settled).
        let late: Vec<_> = seen.iter().filter(|a| a.0 >= 10_000_000_000).collect();
        let dropped = late.iter().filter(|a| !a.1).count() as f64 / late.len() as f64;
        assert!((dropped - 1.0 / 3.0).abs() < 0.03, "dropped {dropped}");
        assert!(b.stats.marks > 0 && b.stats.marks as usize == seen.iter().filter(|a| a.2).count());
    }

    #[test]
    fn pie_decays_to_zero_and_rests_once_the_queue_empties() {
        let (_, _, mut b) = pie_overload(Pie::DEFAULT, 1.5, 3.0, false);
        assert!(b.pie_drop_prob() > 0.1);
        drain(&mut b); // ends: once empty and at rest, PIE stops updating
        assert_eq!(b.pie_drop_prob(), 0.0);
        assert!(b.pie.next_update.is_none() && b.pie.burst_allowance_ns == PIE_MAX_BURST_NS);
        assert!(b.config().json().contains("\"pie\": {\"target_ns\": 15000000, \"tupdate_ns\": 15000000, \"ecn\": false}"));
    }

    fn fq(rate_bps: u64, limit: u64, codel: Codel) -> Bottleneck {
        q(rate_bps, limit, Policy::FqCodel(FqCodel { codel, ..FqCodel::DEFAULT }))
    }

    /// FQ-CoDel on a 10 Mbit/s link: flow 1 floods it with 1514-byte frames at 20 Mbit/s
    /// for `ms`, flow 2 sends a 200-byte frame every 50 ms. Returns the departures, each
    /// id's (flow, arrival), the ids dropped at the heads and the queue.
    fn fq_flood_and_sparse(ms: i64) -> (Vec<(u64, i64)>, std::collections::HashMap<u64, (u64, i64)>, Vec<u64>, Bottleneck) {
        let mut b = fq(10 * MBIT, 1 << 30, Codel::DEFAULT);
        let gap = (1514 * 8 * NS_PER_S / (20 * MBIT)) as i64;
        let mut arrivals: Vec<(i64, u64, u64)> = (0..).map(|k| k * gap).take_while(|t| *t < ms * 1_000_000)
            .map(|t| (t, 1, 1514)).collect();
        arrivals.extend((0..).map(|k| 3_000_000 + k * 50_000_000).take_while(|t| *t < ms * 1_000_000).map(|t| (t, 2, 200)));
        arrivals.sort();
        let (mut dep, mut dropped, mut seen) = (Vec::new(), Vec::new(), std::collections::HashMap::new());
        for (id, (t, flow, bytes)) in arrivals.into_iter().enumerate() {
            let mut pushed = Vec::new();
            assert!(b.offer(id as u64, bytes, false, false, flow, t, &mut dep, &mut pushed));
            assert!(pushed.is_empty(), "a buffer of 1 GiB never overflows");
            seen.insert(id as u64, (flow, t));
            dropped.append(&mut b.head_dropped);
        }
        dep.extend(drain(&mut b));
        dropped.append(&mut b.head_dropped);
        (dep, seen, dropped, b)
    }

    #[test]
    fn fq_codel_sends_a_sparse_flow_ahead_of_a_flood_whose_own_codel_drops_it() {
        let (dep, seen, dropped, b) = fq_flood_and_sparse(1_000);
        let frame_ns = 1514 * 8 * NS_PER_S as i64 / (10 * MBIT) as i64;
        let small_ns = 200 * 8 * NS_PER_S as i64 / (10 * MBIT) as i64;
        // The sparse flow's frame joins the new flows and goes next: it waits at most for
        // the flood's frame on the link, then its own serialisation.
        let sparse: Vec<i64> = dep.iter().filter(|(id, _)| seen[id].0 == 2).map(|(id, d)| d - seen[id].1).collect();
        assert_eq!(sparse.len(), 20);
        assert!(sparse.iter().all(|w| *w <= frame_ns + small_ns + 1), "sparse flow's waits {sparse:?}");
        assert!(dropped.iter().all(|id| seen[id].0 == 1), "only the flood is dropped");
        // The flood's CoDel: its first drop an interval after its sojourn first stayed above
        // 5 ms (5 ms of backlog builds within 10 ms at twice the rate), then faster.
        let first = dep.iter().filter(|(id, _)| *id < dropped[0]).map(|(_, d)| *d).max().unwrap();
        assert!((100_000_000..125_000_000).contains(&first), "first drop when the link took a frame at {first} ns");
        assert!(dropped.len() > 10 && b.stats.aqm_drops == dropped.len() as u64);
        // The link never idles while frames wait: back to back.
        assert!(dep.windows(2).all(|w| w[1].1 >= w[0].1), "departures never decrease");
        assert!(b.config().json().contains(
            "\"fq_codel\": {\"target_ns\": 5000000, \"interval_ns\": 100000000, \"ecn\": false, \"quantum_bytes\": 1514, \"flows\": 1024}"));
        // And the same input gives the same output.
        let (again, _, dropped_again, _) = fq_flood_and_sparse(1_000);
        assert_eq!((again, dropped_again), (dep, dropped));
    }

    #[test]
    fn fq_codel_shares_a_saturated_link_by_bytes_whatever_the_frame_sizes() {
        // Two floods at the link's rate each, of 1514- and 500-byte frames; CoDel's target
        // too far to drop within the run, so the round robin alone decides.
        let mut b = fq(10 * MBIT, 1 << 30, Codel { target_ns: 10_000_000_000, interval_ns: 20_000_000_000, ecn: false });
        let mut arrivals: Vec<(i64, u64, u64)> = Vec::new();
        for (flow, bytes) in [(1u64, 1514u64), (2, 500)] {
            let gap = (bytes * 8 * NS_PER_S / (10 * MBIT)) as i64;
            arrivals.extend((0..).map(|k| k * gap).take_while(|t| *t < 2_000_000_000).map(|t| (t, flow, bytes)));
        }
        arrivals.sort();
        let mut dep = Vec::new();
        let mut flow_of = Vec::new();
        for (id, (t, flow, bytes)) in arrivals.iter().enumerate() {
            let mut pushed = Vec::new();
            b.offer(id as u64, *bytes, false, false, *flow, *t, &mut dep, &mut pushed);
            flow_of.push((*flow, *bytes));
        }
        // From 0.5 s to 2 s each flow sent half the link's bytes, within two quanta.
        let sent = |f: u64| -> u64 { dep.iter().filter(|(id, d)| *d >= 500_000_000 && flow_of[*id as usize].0 == f)
            .map(|(id, _)| flow_of[*id as usize].1).sum() };
        let (big, small) = (sent(1), sent(2));
        assert!(big.abs_diff(small) <= 2 * 1514, "1514-byte flow {big} bytes, 500-byte flow {small}");
        assert_eq!(b.stats.aqm_drops, 0);
    }

    #[test]
    fn fq_codel_makes_room_at_the_head_of_the_fattest_flow() {
        // A buffer of 6 frames: flow 1's first frame goes on the link, four more queue, then
        // flow 2 sends two. The second overflows: flow 1 (four frames) loses its oldest
        // queued one, not the one being sent, and not flow 2's.
        let mut b = fq(MBIT, 6 * 1514, Codel::DEFAULT);
        let mut dep = Vec::new();
        let mut dropped = Vec::new();
        for id in 0..5 {
            assert!(b.offer(id, 1514, false, false, 1, 0, &mut dep, &mut dropped));
        }
        assert!(b.offer(5, 1514, false, false, 2, 1_000, &mut dep, &mut dropped));
        assert!(dropped.is_empty());
        assert!(b.offer(6, 1514, false, false, 2, 2_000, &mut dep, &mut dropped));
        assert_eq!(dropped, vec![1]);
        assert_eq!(b.occupancy(), (6 * 1514, 6));
        // Flow 2 is new: it goes right after the frame on the link, once per quantum.
        let order: Vec<u64> = dep.iter().chain(drain(&mut b).iter()).map(|(id, _)| *id).collect();
        assert_eq!(order, vec![0, 5, 2, 6, 3, 4]);
        // A flow that is the fattest with only the arrival loses the arrival itself.
        let mut b = fq(MBIT, 2 * 1514, Codel::DEFAULT);
        let mut dropped = Vec::new();
        assert!(b.offer(0, 1514, false, false, 1, 0, &mut dep, &mut dropped));
        assert!(b.offer(1, 1000, false, false, 1, 0, &mut dep, &mut dropped));
        assert!(!b.offer(2, 1514, false, false, 2, 0, &mut dep, &mut dropped));
        assert!(dropped.is_empty() && b.stats.dropped() == 1 && b.stats.normal.enqueued == 2);
    }
}
