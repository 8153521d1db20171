//! Careful Resume (RFC 9959, draft-ietf-tsvwg-careful-resume-24) for the QUIC server.
//!
//! A connection observes its path (Observing: the bytes acknowledged in a round, and the
//! minimum RTT) into a [`PathStore`] shared by every connection of the server and, with a
//! state file, by later servers. A later connection to the same path claims the saved
//! parameters and reconnoitres from the initial window; once the IW is acknowledged
//! without congestion, on a confirmed RTT and with more to send than the window allows, it
//! jumps to `min(max_jump, saved_cwnd / 2)` (Unvalidated), validates the jump (Validating)
//! and, on congestion or a path change, retreats (Safe Retreat: the state is deleted, the
//! window halved from PipeSize, no growth until the unvalidated data is acknowledged, then
//! ssthresh = PipeSize × β).
//!
//! This module holds the phases and their rules; the controller (controller.rs) feeds it
//! quinn's callbacks and applies the windows it returns to the CUBIC beneath. Windows are in
//! bytes and packets are QUIC packet numbers, as the qlog draft logs them. Every phase
//! change is kept as a [`PhaseUpdate`]: the state after the change, the qlog draft's
//! CarefulResumePhaseUpdated.

use std::collections::HashMap;
use std::fs;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// Format of the state file (see [`PathStore::save`]).
pub const STATE_FORMAT: u64 = 1;

/// The scheme's parameters (the draft's Lifetime, max_jump and β; the 4 × IW below which
/// an observation is not saved is `min_save`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CrParams {
    pub lifetime: Duration,
    /// Largest jump_cwnd in bytes; 0: no limit but saved_cwnd / 2.
    pub max_jump: u64,
    /// ssthresh = PipeSize × beta when Safe Retreat ends (0.5 … 1).
    pub beta: f64,
    /// Save an observation only of at least `min_save` × IW bytes.
    pub min_save: u64,
}

impl Default for CrParams {
    fn default() -> Self {
        Self { lifetime: Duration::from_secs(3600), max_jump: 0, beta: 0.5, min_save: 4 }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Normal CC before any use of saved parameters (no qlog event: the draft has none).
    Observing,
    Reconnaissance,
    Unvalidated,
    Validating,
    SafeRetreat,
    /// Normal CC after Careful Resume; observing again.
    Normal,
}

impl Phase {
    /// The qlog draft's name (`observing` is not one of its phases: logged as `normal`).
    pub fn name(self) -> &'static str {
        match self {
            Phase::Observing | Phase::Normal => "normal",
            Phase::Reconnaissance => "reconnaissance",
            Phase::Unvalidated => "unvalidated",
            Phase::Validating => "validating",
            Phase::SafeRetreat => "safe_retreat",
        }
    }
}

/// The qlog draft's triggers (careful-resume-qlog-02 §3.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    CongestionWindowLimited,
    RttExceeded,
    FirstUnvalidatedPacketAcknowledged,
    LastUnvalidatedPacketSent,
    LastUnvalidatedPacketAcknowledged,
    RttNotValidated,
    RateLimited,
    PathChanged,
    PacketLoss,
    ExitRecovery,
}

impl Trigger {
    pub fn name(self) -> &'static str {
        match self {
            Trigger::CongestionWindowLimited => "congestion_window_limited",
            Trigger::RttExceeded => "rtt_exceeded",
            Trigger::FirstUnvalidatedPacketAcknowledged => "first_unvalidated_packet_acknowledged",
            Trigger::LastUnvalidatedPacketSent => "last_unvalidated_packet_sent",
            Trigger::LastUnvalidatedPacketAcknowledged => "last_unvalidated_packet_acknowledged",
            Trigger::RttNotValidated => "rtt_not_validated",
            Trigger::RateLimited => "rate_limited",
            Trigger::PathChanged => "path_changed",
            Trigger::PacketLoss => "packet_loss",
            Trigger::ExitRecovery => "exit_recovery",
        }
    }
}

/// One phase change, with the state after it.
#[derive(Clone, Debug, PartialEq)]
pub struct PhaseUpdate {
    pub at: Instant,
    pub old: Phase,
    pub new: Phase,
    pub trigger: Option<Trigger>,
    pub pipesize: u64,
    pub first_unvalidated_packet: u64,
    pub last_unvalidated_packet: u64,
    pub congestion_window: u64,
    /// None while ssthresh is unset (slow start before any exit).
    pub ssthresh: Option<u64>,
    /// Bytes in flight at the change (not in the draft's event: the record's, to check
    /// the windows set from it).
    pub flight_size: u64,
    pub saved_congestion_window: u64,
    pub saved_rtt: Duration,
}

impl PhaseUpdate {
    /// The event's data as the qlog draft's CDDL has it (saved_rtt in milliseconds).
    pub fn qlog_data(&self) -> Value {
        let mut state = json!({
            "pipesize": self.pipesize,
            "first_unvalidated_packet": self.first_unvalidated_packet,
            "last_unvalidated_packet": self.last_unvalidated_packet,
            "congestion_window": self.congestion_window,
        });
        if let Some(s) = self.ssthresh {
            state["ssthresh"] = json!(s);
        }
        let mut data = json!({"old": self.old.name(), "new": self.new.name(), "state_data": state});
        if self.old == Phase::Observing {
            data.as_object_mut().unwrap().remove("old");
            data["restored_data"] = json!({
                "saved_congestion_window": self.saved_congestion_window,
                "saved_rtt": self.saved_rtt.as_secs_f64() * 1e3,
            });
        }
        if let Some(t) = self.trigger {
            data["trigger"] = json!(t.name());
        }
        data
    }
}

/// A path as the draft's Remote Endpoint: the sending address and the destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PathKey {
    pub local: IpAddr,
    pub remote: IpAddr,
}

/// One path's saved parameters.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Saved {
    pub cwnd: u64,
    pub rtt: Duration,
    /// Unix seconds of the observation (a file outlives the server's clock).
    pub saved_unix: f64,
    pub observations: u64,
    /// A connection is resuming from it (§3.2: one at a time). Not kept in the file.
    pub in_use: bool,
}

/// The saved parameters of every path, shared by the server's connections; kept in a file
/// when the server has one, so that they outlive the server.
#[derive(Debug, Default)]
pub struct PathStore {
    paths: Mutex<HashMap<PathKey, Saved>>,
    file: Option<PathBuf>,
}

impl PathStore {
    /// A store kept in `file` (read now if it exists), or in memory only.
    pub fn open(file: Option<&Path>) -> Result<Self, String> {
        let mut paths = HashMap::new();
        if let Some(f) = file.filter(|f| f.exists()) {
            let text = fs::read_to_string(f).map_err(|e| format!("cannot read {}: {e}", f.display()))?;
            paths = parse_state(&text).map_err(|e| format!("{}: {e}", f.display()))?;
        }
        Ok(Self { paths: Mutex::new(paths), file: file.map(Path::to_path_buf) })
    }

    /// Claim the path's parameters for a resuming connection: None if there are none, they
    /// are in use, or their lifetime is over (then they are deleted, §3.2).
    pub fn claim(&self, key: PathKey, now_unix: f64, lifetime: Duration) -> Option<Saved> {
        let mut paths = self.paths.lock().unwrap();
        let saved = paths.get_mut(&key)?;
        if now_unix - saved.saved_unix > lifetime.as_secs_f64() {
            paths.remove(&key);
            return None;
        }
        if saved.in_use || saved.cwnd == 0 {
            return None;
        }
        saved.in_use = true;
        Some(*saved)
    }

    /// The resuming connection is done with them: free them for another, or delete them.
    pub fn let_go(&self, key: PathKey, delete: bool) {
        let mut paths = self.paths.lock().unwrap();
        if delete {
            paths.remove(&key);
        } else if let Some(s) = paths.get_mut(&key) {
            s.in_use = false;
        }
    }

    /// An observation (§3.1). One that the application limited does not lower a higher
    /// earlier one (§4.1).
    pub fn observe(&self, key: PathKey, cwnd: u64, rtt: Duration, app_limited: bool, now_unix: f64) {
        let mut paths = self.paths.lock().unwrap();
        let saved = paths.entry(key).or_insert(Saved {
            cwnd: 0,
            rtt,
            saved_unix: now_unix,
            observations: 0,
            in_use: false,
        });
        if app_limited && cwnd < saved.cwnd {
            return;
        }
        saved.cwnd = cwnd;
        saved.rtt = rtt;
        saved.saved_unix = now_unix;
        saved.observations += 1;
    }

    pub fn get(&self, key: PathKey) -> Option<Saved> {
        self.paths.lock().unwrap().get(&key).copied()
    }

    /// Write the file (if any), whole or not at all: a temporary file renamed over it.
    pub fn save(&self) -> Result<(), String> {
        let Some(file) = &self.file else { return Ok(()) };
        let paths = self.paths.lock().unwrap();
        let mut list: Vec<Value> = paths
            .iter()
            .filter(|(_, s)| s.cwnd > 0)
            .map(|(k, s)| {
                json!({"local": k.local.to_string(), "remote": k.remote.to_string(),
                       "saved_cwnd_bytes": s.cwnd, "saved_rtt_ms": s.rtt.as_secs_f64() * 1e3,
                       "saved_unix_s": s.saved_unix, "observations": s.observations})
            })
            .collect();
        list.sort_by_key(|v| (v["local"].to_string(), v["remote"].to_string()));
        let text = serde_json::to_string_pretty(&json!({"format": STATE_FORMAT, "paths": list})).unwrap();
        let tmp = file.with_extension("tmp");
        fs::write(&tmp, text + "\n").map_err(|e| format!("cannot write {}: {e}", tmp.display()))?;
        fs::rename(&tmp, file).map_err(|e| format!("cannot replace {}: {e}", file.display()))
    }
}

fn parse_state(text: &str) -> Result<HashMap<PathKey, Saved>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    if v["format"].as_u64() != Some(STATE_FORMAT) {
        return Err(format!("format {} is not {STATE_FORMAT}", v["format"]));
    }
    let mut paths = HashMap::new();
    for (i, p) in v["paths"].as_array().ok_or("no list 'paths'")?.iter().enumerate() {
        let field = |name: &str| p.get(name).ok_or_else(|| format!("paths[{i}]: no '{name}'"));
        let ip = |name: &str| -> Result<IpAddr, String> {
            field(name)?.as_str().and_then(|s| s.parse().ok()).ok_or_else(|| format!("paths[{i}].{name}: not an address"))
        };
        let num = |name: &str| -> Result<f64, String> {
            field(name)?.as_f64().filter(|x| *x >= 0.0).ok_or_else(|| format!("paths[{i}].{name}: not a number ≥ 0"))
        };
        paths.insert(
            PathKey { local: ip("local")?, remote: ip("remote")? },
            Saved {
                cwnd: num("saved_cwnd_bytes")? as u64,
                rtt: Duration::from_secs_f64(num("saved_rtt_ms")? / 1e3),
                saved_unix: num("saved_unix_s")?,
                observations: num("observations")? as u64,
                in_use: false,
            },
        );
    }
    Ok(paths)
}

/// A resuming connection's hold on its path's parameters: let go (freed) when the last
/// copy of the controller goes, unless Careful Resume let go of it first.
#[derive(Debug)]
struct Claim {
    store: Arc<PathStore>,
    key: PathKey,
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.store.let_go(self.key, false);
    }
}

/// What the controller must do to the window beneath after a Careful Resume step.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// cwnd = this, ssthresh unchanged (the jump; the end of Unvalidated).
    SetCwnd(u64),
    /// Safe Retreat's entry: cwnd = this; the CUBIC beneath holds it (no growth, no
    /// further reduction) until the retreat ends.
    Retreat(u64),
    /// Safe Retreat's end: ssthresh = this, then normal CC from the retreat's window.
    EndRetreat { ssthresh: u64 },
}

/// What the controller tells Careful Resume about the CUBIC beneath.
#[derive(Clone, Copy, Debug)]
pub struct Window {
    pub cwnd: u64,
    pub ssthresh: Option<u64>,
    pub mss: u64,
    pub in_flight: u64,
}

/// Observing's current round: it ends when a packet sent after its start is acknowledged.
#[derive(Clone, Copy, Debug, Default)]
struct Round {
    end_pn: Option<u64>,
    acked: u64,
    congested: bool,
    app_limited: bool,
}

/// One connection's Careful Resume.
#[derive(Clone, Debug)]
pub struct CarefulResume {
    params: CrParams,
    store: Arc<PathStore>,
    key: PathKey,
    claim: Option<Arc<Claim>>,
    iw: u64,
    phase: Phase,
    saved: Option<Saved>,
    pipesize: u64,
    first_unval: u64,
    last_unval: u64,
    t_unval: Option<Instant>,
    /// The last packet of the initial window, once it is out.
    recon_end: Option<u64>,
    /// Bytes of the response sent in Reconnaissance.
    recon_sent: u64,
    confirmed: bool,
    last_sent: Option<u64>,
    round: Round,
    updates: Vec<PhaseUpdate>,
}

impl CarefulResume {
    /// A connection on `key`: it resumes if the path has parameters it may claim.
    pub fn new(params: CrParams, store: Arc<PathStore>, key: PathKey, iw: u64, now_unix: f64) -> Self {
        let saved = store.claim(key, now_unix, params.lifetime);
        let claim = saved.map(|_| Arc::new(Claim { store: store.clone(), key }));
        Self {
            params,
            store,
            key,
            claim,
            iw,
            phase: Phase::Observing,
            saved,
            pipesize: 0,
            first_unval: 0,
            last_unval: 0,
            t_unval: None,
            recon_end: None,
            recon_sent: 0,
            confirmed: false,
            last_sent: None,
            round: Round::default(),
            updates: Vec::new(),
        }
    }

    pub fn phase(&self) -> Phase {
        self.phase
    }

    pub fn updates(&self) -> &[PhaseUpdate] {
        &self.updates
    }

    /// Whether the CUBIC beneath may grow the window on an acknowledgement: not while the
    /// jump is out (growth would take the window past jump_cwnd, which §3.3 bounds by
    /// saved_cwnd / 2), nor in Safe Retreat (§3.5).
    pub fn may_grow(&self) -> bool {
        !matches!(self.phase, Phase::Unvalidated | Phase::SafeRetreat)
    }

    /// Whether a loss is the CUBIC's to answer (not in Unvalidated, Validating or Safe
    /// Retreat, where Careful Resume sets the window).
    pub fn owns_losses(&self) -> bool {
        matches!(self.phase, Phase::Unvalidated | Phase::Validating | Phase::SafeRetreat)
    }

    /// Whether the jump is being sent: paced over one RTT (§3.3).
    pub fn pacing_jump(&self) -> bool {
        self.phase == Phase::Unvalidated
    }

    fn change(&mut self, at: Instant, new: Phase, trigger: Option<Trigger>, w: Window) {
        let saved = self.saved.unwrap_or(Saved { cwnd: 0, rtt: Duration::ZERO, saved_unix: 0.0, observations: 0, in_use: false });
        self.updates.push(PhaseUpdate {
            at,
            old: self.phase,
            new,
            trigger,
            pipesize: self.pipesize,
            first_unvalidated_packet: self.first_unval,
            last_unvalidated_packet: self.last_unval,
            congestion_window: w.cwnd,
            ssthresh: w.ssthresh,
            flight_size: w.in_flight,
            saved_congestion_window: saved.cwnd,
            saved_rtt: saved.rtt,
        });
        self.phase = new;
    }

    /// Careful Resume ends for this connection: the parameters are freed or deleted, and
    /// observing starts with the next round.
    fn stop(&mut self, at: Instant, trigger: Trigger, delete: bool, w: Window) {
        if self.claim.take().is_some() && delete {
            self.store.let_go(self.key, true);
        }
        self.change(at, Phase::Normal, Some(trigger), w);
        self.round = Round::default();
    }

    /// The response begins: Reconnaissance, if this connection claimed saved parameters.
    pub fn on_response(&mut self, at: Instant, w: Window) {
        if self.phase == Phase::Observing && self.claim.is_some() {
            self.change(at, Phase::Reconnaissance, None, w);
        }
    }

    /// A transmit batch of `bytes` went out, its last packet `pn`; `in_flight` with it.
    pub fn on_sent(&mut self, now: Instant, bytes: u64, pn: u64, in_flight: u64, srtt: Duration, w: Window) -> Option<Action> {
        self.last_sent = Some(pn);
        if self.round.end_pn.is_none() {
            self.round.end_pn = Some(pn);
        }
        match self.phase {
            Phase::Reconnaissance => {
                // The initial data (§3.2): what the response sent until the IW, or the
                // window (it also holds the handshake's last packets), was used up.
                self.recon_sent += bytes;
                if self.recon_end.is_none() && (self.recon_sent >= self.iw || in_flight + w.mss > w.cwnd) {
                    self.recon_end = Some(pn);
                }
                None
            }
            Phase::Unvalidated => {
                if in_flight + w.mss > w.cwnd {
                    return self.end_unvalidated(now, Trigger::LastUnvalidatedPacketSent, in_flight, w);
                }
                self.rtt_exceeded(now, in_flight, srtt, w)
            }
            _ => None,
        }
    }

    /// One acknowledged packet's bytes (before the CUBIC beneath sees them).
    pub fn on_ack(&mut self, bytes: u64, app_limited: bool) {
        if matches!(self.phase, Phase::Unvalidated | Phase::Validating | Phase::SafeRetreat) {
            self.pipesize += bytes;
        }
        self.round.acked += bytes;
        self.round.app_limited |= app_limited;
    }

    /// The end of a batch of acknowledgements: `largest` acknowledged packet, the batch's
    /// least RTT sample, the connection's minimum RTT so far.
    #[allow(clippy::too_many_arguments)]
    pub fn on_end_acks(
        &mut self,
        now: Instant,
        now_unix: f64,
        largest: Option<u64>,
        in_flight: u64,
        app_limited: bool,
        sample: Option<Duration>,
        min_rtt: Option<Duration>,
        srtt: Duration,
        w: Window,
    ) -> Option<Action> {
        let acked = |pn: u64| largest.is_some_and(|l| l >= pn);
        match self.phase {
            Phase::Observing | Phase::Normal => {
                self.observe(now_unix, largest, app_limited, min_rtt);
                None
            }
            Phase::Reconnaissance => {
                let saved = self.saved?;
                if !self.confirmed {
                    if !self.recon_end.is_some_and(acked) {
                        return None;
                    }
                    // §3.2, §4.2.1: the minimum RTT of the phase against the saved one.
                    let rtt = min_rtt?;
                    if rtt <= saved.rtt / 2 || rtt > saved.rtt * 10 {
                        self.stop(now, Trigger::RttNotValidated, false, w);
                        return None;
                    }
                    self.confirmed = true;
                }
                let jump = self.jump_cwnd(saved.cwnd);
                if jump <= w.cwnd {
                    self.stop(now, Trigger::RateLimited, false, w); // the jump would not raise it
                    return None;
                }
                if app_limited {
                    return None; // §4.2: no more to send than the window allows yet: defer
                }
                self.pipesize = in_flight;
                self.first_unval = self.last_sent.map_or(0, |p| p + 1);
                self.t_unval = Some(now);
                self.change(now, Phase::Unvalidated, Some(Trigger::CongestionWindowLimited), Window { cwnd: jump, ..w });
                Some(Action::SetCwnd(jump))
            }
            Phase::Unvalidated => {
                // §3.3: a path change (an RTT outside the bounds Reconnaissance checked).
                let saved = self.saved?;
                if sample.is_some_and(|s| s <= saved.rtt / 2 || s > saved.rtt * 10) {
                    self.last_unval = self.last_sent.unwrap_or(self.first_unval);
                    return Some(self.retreat(now, Trigger::PathChanged, w));
                }
                if acked(self.first_unval) {
                    return self.end_unvalidated(now, Trigger::FirstUnvalidatedPacketAcknowledged, in_flight, w);
                }
                self.rtt_exceeded(now, in_flight, srtt, w)
            }
            Phase::Validating => {
                if acked(self.last_unval) {
                    self.stop(now, Trigger::LastUnvalidatedPacketAcknowledged, false, w);
                }
                None
            }
            Phase::SafeRetreat => {
                if !acked(self.last_unval) {
                    return None;
                }
                let ssthresh = ((self.pipesize as f64 * self.params.beta) as u64).max(2 * w.mss);
                self.stop(now, Trigger::ExitRecovery, false, Window { ssthresh: Some(ssthresh), ..w });
                Some(Action::EndRetreat { ssthresh })
            }
        }
    }

    /// A loss (or ECN-CE) of a packet; `persistent`: quinn's persistent congestion.
    pub fn on_congestion(&mut self, now: Instant, persistent: bool, w: Window) -> Option<Action> {
        self.round.congested = true;
        match self.phase {
            Phase::Reconnaissance => {
                self.stop(now, Trigger::PacketLoss, false, w);
                None
            }
            Phase::Unvalidated | Phase::Validating if persistent => {
                self.stop(now, Trigger::PacketLoss, true, w); // §3.6
                None
            }
            Phase::Unvalidated | Phase::Validating => {
                if self.phase == Phase::Unvalidated {
                    self.last_unval = self.last_sent.unwrap_or(self.first_unval);
                }
                Some(self.retreat(now, Trigger::PacketLoss, w))
            }
            Phase::SafeRetreat if persistent => {
                self.stop(now, Trigger::PacketLoss, false, w); // deleted on entry already
                None
            }
            _ => None,
        }
    }

    /// §3.5: delete the parameters; cwnd = PipeSize / 2 (QUIC's floor of 2 packets).
    fn retreat(&mut self, now: Instant, trigger: Trigger, w: Window) -> Action {
        if self.claim.take().is_some() {
            self.store.let_go(self.key, true);
        }
        let cwnd = (self.pipesize / 2).max(2 * w.mss);
        self.change(now, Phase::SafeRetreat, Some(trigger), Window { cwnd, ..w });
        Action::Retreat(cwnd)
    }

    fn jump_cwnd(&self, saved_cwnd: u64) -> u64 {
        let half = saved_cwnd / 2;
        if self.params.max_jump > 0 {
            half.min(self.params.max_jump)
        } else {
            half
        }
    }

    fn rtt_exceeded(&mut self, now: Instant, in_flight: u64, srtt: Duration, w: Window) -> Option<Action> {
        let since = now.saturating_duration_since(self.t_unval?);
        if !srtt.is_zero() && since > srtt {
            return self.end_unvalidated(now, Trigger::RttExceeded, in_flight, w);
        }
        None
    }

    /// §3.3, "Check flight_size".
    fn end_unvalidated(&mut self, now: Instant, trigger: Trigger, in_flight: u64, w: Window) -> Option<Action> {
        self.last_unval = self.last_sent.unwrap_or(self.first_unval);
        if in_flight < self.iw || in_flight <= self.pipesize {
            let cwnd = self.pipesize.max(self.iw);
            self.stop(now, Trigger::RateLimited, false, Window { cwnd, ..w });
            return Some(Action::SetCwnd(cwnd));
        }
        self.change(now, Phase::Validating, Some(trigger), Window { cwnd: in_flight, ..w });
        Some(Action::SetCwnd(in_flight))
    }

    /// Observing (§3.1): at each round's end, the bytes acknowledged in it, if the round
    /// was wholly without congestion and reached `min_save` × IW.
    fn observe(&mut self, now_unix: f64, largest: Option<u64>, app_limited: bool, min_rtt: Option<Duration>) {
        let Some(end) = self.round.end_pn else { return };
        if !largest.is_some_and(|l| l >= end) {
            return;
        }
        let round = std::mem::take(&mut self.round);
        self.round.end_pn = self.last_sent;
        let Some(rtt) = min_rtt else { return };
        if round.congested || round.acked < self.params.min_save * self.iw {
            return;
        }
        self.store.observe(self.key, round.acked, rtt, round.app_limited || app_limited, now_unix);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MSS: u64 = 1472;
    const IW: u64 = 10 * MSS;
    const RTT: Duration = Duration::from_millis(60);

    fn key() -> PathKey {
        PathKey { local: "10.0.0.1".parse().unwrap(), remote: "10.0.1.1".parse().unwrap() }
    }

    fn w(cwnd: u64) -> Window {
        Window { cwnd, ssthresh: None, mss: MSS, in_flight: 0 }
    }

    fn store_with(cwnd: u64) -> Arc<PathStore> {
        let store = Arc::new(PathStore::default());
        store.observe(key(), cwnd, RTT, false, 1000.0);
        store
    }

    /// A resuming connection that has sent its IW (packets 1..=10) and had it acknowledged.
    fn confirmed(store: Arc<PathStore>, params: CrParams, sample: Duration) -> (CarefulResume, Option<Action>, Instant) {
        let t0 = Instant::now();
        let mut cr = CarefulResume::new(params, store, key(), IW, 1001.0);
        cr.on_response(t0, w(IW));
        for pn in 1..=10 {
            cr.on_sent(t0, MSS, pn, pn * MSS, RTT, w(IW));
        }
        cr.on_sent(t0, MSS, 11, 11 * MSS, RTT, w(IW)); // beyond the IW: not initial data
        for _ in 1..=10 {
            cr.on_ack(MSS, false);
        }
        let t1 = t0 + sample;
        let a = cr.on_end_acks(t1, 1001.1, Some(10), MSS, false, Some(sample), Some(sample), sample, w(20 * MSS));
        (cr, a, t1)
    }

    #[test]
    fn reconnaissance_jumps_to_half_the_saved_window_once_the_iw_is_acknowledged() {
        let (cr, a, _) = confirmed(store_with(200 * MSS), CrParams::default(), RTT);
        assert_eq!(a, Some(Action::SetCwnd(100 * MSS)));
        assert_eq!(cr.phase(), Phase::Unvalidated);
        let u = &cr.updates()[1];
        assert_eq!((u.trigger, u.pipesize, u.first_unvalidated_packet), (Some(Trigger::CongestionWindowLimited), MSS, 12));
        assert_eq!(u.congestion_window, 100 * MSS);
    }

    #[test]
    fn max_jump_caps_the_jump_and_a_jump_below_cwnd_is_rate_limited() {
        let p = CrParams { max_jump: 30 * MSS, ..CrParams::default() };
        let (_, a, _) = confirmed(store_with(200 * MSS), p, RTT);
        assert_eq!(a, Some(Action::SetCwnd(30 * MSS)));
        let (cr, a, _) = confirmed(store_with(40 * MSS), CrParams::default(), RTT);
        assert_eq!((a, cr.phase()), (None, Phase::Normal));
        assert_eq!(cr.updates()[1].trigger, Some(Trigger::RateLimited));
    }

    #[test]
    fn an_rtt_outside_the_bounds_is_not_validated_in_reconnaissance() {
        for rtt in [RTT / 2, RTT * 10 + Duration::from_millis(1)] {
            let store = store_with(200 * MSS);
            let (cr, a, _) = confirmed(store.clone(), CrParams::default(), rtt);
            assert_eq!((a, cr.phase()), (None, Phase::Normal), "{rtt:?}");
            assert_eq!(cr.updates()[1].trigger, Some(Trigger::RttNotValidated));
            assert!(!store.get(key()).unwrap().in_use, "freed, not deleted");
        }
    }

    #[test]
    fn one_connection_at_a_time_and_expired_state_is_deleted() {
        let store = store_with(200 * MSS);
        let a = CarefulResume::new(CrParams::default(), store.clone(), key(), IW, 1001.0);
        let b = CarefulResume::new(CrParams::default(), store.clone(), key(), IW, 1001.0);
        assert!(a.claim.is_some() && b.claim.is_none());
        drop(a);
        assert!(!store.get(key()).unwrap().in_use, "the claim goes with the connection");
        let p = CrParams { lifetime: Duration::from_secs(10), ..CrParams::default() };
        let c = CarefulResume::new(p, store.clone(), key(), IW, 1011.0);
        assert!(c.claim.is_none() && store.get(key()).is_none());
    }

    #[test]
    fn unvalidated_ends_at_the_first_unvalidated_ack_with_cwnd_from_the_flight() {
        let (mut cr, _, t1) = confirmed(store_with(200 * MSS), CrParams::default(), RTT);
        for pn in 12..=60 {
            assert_eq!(cr.on_sent(t1, MSS, pn, (pn - 10) * MSS, RTT, w(100 * MSS)), None);
        }
        cr.on_ack(MSS, false);
        let a = cr.on_end_acks(t1 + RTT / 2, 0.0, Some(12), 49 * MSS, false, Some(RTT), Some(RTT), RTT, w(100 * MSS));
        assert_eq!(a, Some(Action::SetCwnd(49 * MSS)), "Validating: cwnd = flight_size");
        let u = cr.updates().last().unwrap();
        assert_eq!((u.new, u.trigger, u.last_unvalidated_packet), (Phase::Validating, Some(Trigger::FirstUnvalidatedPacketAcknowledged), 60));
        assert_eq!(u.pipesize, 2 * MSS);
        cr.on_ack(MSS, false);
        assert_eq!(cr.on_end_acks(t1 + RTT, 0.0, Some(59), 0, false, None, Some(RTT), RTT, w(100 * MSS)), None);
        assert_eq!(cr.phase(), Phase::Validating);
        cr.on_end_acks(t1 + RTT, 0.0, Some(60), 0, false, None, Some(RTT), RTT, w(100 * MSS));
        assert_eq!(cr.updates().last().unwrap().trigger, Some(Trigger::LastUnvalidatedPacketAcknowledged));
    }

    #[test]
    fn a_flight_no_larger_than_pipesize_is_rate_limited_to_pipesize() {
        let (mut cr, _, t1) = confirmed(store_with(200 * MSS), CrParams::default(), RTT);
        let a = cr.on_end_acks(t1 + RTT + RTT / 10, 0.0, Some(11), 0, false, Some(RTT), Some(RTT), RTT, w(100 * MSS));
        assert_eq!(a, Some(Action::SetCwnd(IW)), "max(PipeSize, IW)");
        assert_eq!(cr.updates().last().unwrap().trigger, Some(Trigger::RateLimited));
    }

    #[test]
    fn the_jump_ends_when_the_window_is_out() {
        let (mut cr, _, t1) = confirmed(store_with(200 * MSS), CrParams::default(), RTT);
        let a = cr.on_sent(t1, 99 * MSS, 110, 100 * MSS, RTT, w(100 * MSS));
        assert_eq!(a, Some(Action::SetCwnd(100 * MSS)));
        assert_eq!(cr.updates().last().unwrap().trigger, Some(Trigger::LastUnvalidatedPacketSent));
    }

    #[test]
    fn loss_of_unvalidated_data_retreats_deletes_and_leaves_with_pipesize_times_beta() {
        let store = store_with(200 * MSS);
        let (mut cr, _, t1) = confirmed(store.clone(), CrParams::default(), RTT);
        cr.on_sent(t1, 40 * MSS, 51, 41 * MSS, RTT, w(100 * MSS));
        for _ in 0..20 {
            cr.on_ack(MSS, false); // PipeSize 1 + 20 datagrams
        }
        let a = cr.on_congestion(t1 + RTT, false, w(100 * MSS));
        assert_eq!(a, Some(Action::Retreat(21 * MSS / 2)));
        assert!(store.get(key()).is_none(), "§3.5: the state is deleted");
        assert!(!cr.may_grow());
        for _ in 0..19 {
            cr.on_ack(MSS, false);
        }
        assert_eq!(cr.on_end_acks(t1 + RTT, 0.0, Some(50), 0, false, None, Some(RTT), RTT, w(10 * MSS)), None);
        let a = cr.on_end_acks(t1 + RTT, 0.0, Some(51), 0, false, None, Some(RTT), RTT, w(10 * MSS));
        assert_eq!(a, Some(Action::EndRetreat { ssthresh: 40 * MSS / 2 }));
        let u = cr.updates().last().unwrap();
        assert_eq!((u.old, u.new, u.trigger), (Phase::SafeRetreat, Phase::Normal, Some(Trigger::ExitRecovery)));
        assert_eq!(u.ssthresh, Some(20 * MSS));
    }

    #[test]
    fn an_rtt_sample_out_of_bounds_in_unvalidated_is_a_path_change() {
        let store = store_with(200 * MSS);
        let (mut cr, _, t1) = confirmed(store.clone(), CrParams::default(), RTT);
        let a = cr.on_end_acks(t1, 0.0, Some(11), MSS, false, Some(RTT * 11), Some(RTT), RTT, w(100 * MSS));
        assert_eq!(a, Some(Action::Retreat(2 * MSS)));
        assert_eq!(cr.updates().last().unwrap().trigger, Some(Trigger::PathChanged));
        assert!(store.get(key()).is_none());
    }

    #[test]
    fn observing_saves_rounds_without_congestion_and_an_app_limited_round_does_not_lower() {
        let store = Arc::new(PathStore::default());
        let mut cr = CarefulResume::new(CrParams::default(), store.clone(), key(), IW, 1.0);
        let t = Instant::now();
        let round = |cr: &mut CarefulResume, first: u64, n: u64, app: bool, loss: bool| {
            cr.on_sent(t, n * MSS, first + n - 1, n * MSS, RTT, w(n * MSS));
            if loss {
                cr.on_congestion(t, false, w(n * MSS));
            }
            for _ in 0..n {
                cr.on_ack(MSS, app);
            }
            cr.on_end_acks(t, 2.0, Some(first + n - 1), 0, app, Some(RTT), Some(RTT), RTT, w(n * MSS));
        };
        round(&mut cr, 1, 10, false, false); // below 4 x IW: not saved
        assert!(store.get(key()).is_none());
        round(&mut cr, 11, 60, false, false);
        assert_eq!(store.get(key()).unwrap().cwnd, 60 * MSS);
        round(&mut cr, 71, 80, false, true); // a loss in the round: not saved
        assert_eq!(store.get(key()).unwrap().cwnd, 60 * MSS);
        round(&mut cr, 151, 45, true, false); // application-limited and lower: kept
        assert_eq!(store.get(key()).unwrap().cwnd, 60 * MSS);
        round(&mut cr, 196, 50, false, false);
        assert_eq!(store.get(key()).unwrap().cwnd, 50 * MSS);
    }

    #[test]
    fn the_state_file_round_trips_and_bad_files_say_where() {
        let dir = std::env::temp_dir().join(format!("stl-cr-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let file = dir.join("state.json");
        let store = PathStore::open(Some(&file)).unwrap();
        store.observe(key(), 123 * MSS, RTT, false, 5.0);
        store.save().unwrap();
        let again = PathStore::open(Some(&file)).unwrap();
        let s = again.get(key()).unwrap();
        assert_eq!((s.cwnd, s.observations, s.in_use), (123 * MSS, 1, false));
        assert!((s.rtt.as_secs_f64() - 0.06).abs() < 1e-9);
        fs::write(&file, r#"{"format": 1, "paths": [{"local": "x"}]}"#).unwrap();
        let err = PathStore::open(Some(&file)).unwrap_err();
        assert!(err.contains("paths[0].local"), "{err}");
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_qlog_data_follows_the_draft() {
        let (cr, _, _) = confirmed(store_with(200 * MSS), CrParams::default(), RTT);
        let first = cr.updates()[0].qlog_data();
        assert_eq!(first["new"], "reconnaissance");
        assert!(first.get("old").is_none());
        assert_eq!(first["restored_data"]["saved_congestion_window"], 200 * MSS);
        assert_eq!(first["restored_data"]["saved_rtt"], 60.0);
        let jump = cr.updates()[1].qlog_data();
        assert_eq!((jump["old"].as_str(), jump["trigger"].as_str()), (Some("reconnaissance"), Some("congestion_window_limited")));
        assert!(jump["state_data"].get("ssthresh").is_none());
    }
}
