//! One direction of the delay line: receive, queue at the bottleneck (if any), hold for
//! the delay, send at release time.
//!
//! A single thread owns the receive socket of one interface, the transmit socket of
//! the other, the ring and the stages, so frames of one delay FIFO leave in exactly the
//! order they arrived.

use crate::delaytrace::DelayTrace;
use crate::frame;
use crate::pairs::FifoMap;
use crate::queue::{Bottleneck, QueueStats};
use crate::ring::Ring;
use crate::schedule::{self, ClockOffset, Tuning, Wait, NS_PER_US};
use crate::sock::{self, PacketSocket, RecvBatch, Received, VNET_HDR_LEN};
use crate::stage::{DelayStage, Held};
use crate::stats::DirStats;
use crate::timer::{clock_ns, mono, poll, thread_cpu, Timer};
use std::collections::VecDeque;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Barrier};

/// How long a round that found a release due but could move nothing waits before trying
/// again (see the run loop).
const STALL_WAIT_NS: i64 = 50 * NS_PER_US;
/// Frames per recvmmsg/sendmmsg call.
const BATCH: usize = 64;
/// Receive calls per round before due frames are sent.
const MAX_RX_BATCHES: usize = 8;
/// Read the receive socket at least this often while frames are queued. Frames carry
/// kernel timestamps, so late reading costs no accuracy; this only bounds the socket
/// buffer needed (≈ 60 KB at 1 Gbit/s).
const RX_INTERVAL_NS: i64 = 500 * NS_PER_US;
/// Below this delay a frame could be due before the next periodic read: also wake on
/// every arrival.
const RX_POLL_ALWAYS_BELOW_NS: i64 = 4 * RX_INTERVAL_NS;

pub struct Direction {
    pub name: &'static str,
    pub index: usize,
    rx: PacketSocket,
    tx: PacketSocket,
    /// Which delay FIFO a frame goes to; a frame's FIFO is its ring tag.
    fifos: FifoMap,
    /// One-way delay of each delay FIFO (FIFO 0: the direction's default delay).
    delays_ns: Vec<i64>,
    ring: Ring,
    queue: Option<Bottleneck>,
    stage: DelayStage,
    /// Due frames taken from the stage but not yet accepted by the kernel, in order.
    pending: VecDeque<Held>,
    departed: Vec<(u64, i64)>,
    dropped: Vec<u64>,
    clock: ClockOffset,
    /// The spin window, from the host's measured timer wake-up latency.
    tuning: Tuning,
    /// This thread's snapshot eventfd (nonblocking): readable when a snapshot is asked for.
    wake_fd: RawFd,
    /// A delay that steps over time (delaytrace.rs) and its epoch, added to every FIFO's.
    delay_trace: Option<(Arc<DelayTrace>, i64)>,
    /// Each FIFO's latest release without the trace's extra: what a kernel timestamp
    /// inversion is measured against when the trace may step down.
    last_base_release: Vec<i64>,
    /// Each FIFO's latest release with the trace's extra: a frame never leaves before it.
    last_traced_release: Vec<i64>,
}

/// What the main thread shares with the direction threads. The per-frame path reads
/// none of it; each thread checks `snapshot` once per round.
pub struct Control {
    pub stop: AtomicBool,
    /// Readable once stopping (never cleared), so every thread's poll returns.
    pub stop_fd: RawFd,
    /// Generation of the newest snapshot asked for (0 = none yet).
    pub snapshot: AtomicU64,
    /// When each direction last began a round (CLOCK_MONOTONIC ns): what a snapshot that
    /// timed out reports, so a stuck direction says where it stopped.
    pub last_round: [AtomicI64; 2],
}

/// A direction's counters as of one snapshot generation.
pub struct Report {
    pub index: usize,
    pub generation: u64,
    pub stats: DirStats,
}

/// The generation to publish, if one newer than `published` was asked for. The eventfd
/// is drained before the generation is read again, so a request raised meanwhile is
/// either seen now or leaves the eventfd readable for the next poll: none is lost.
pub fn pending_snapshot(ctl: &Control, wake_fd: RawFd, published: u64) -> Option<u64> {
    if ctl.snapshot.load(Ordering::Acquire) == published {
        return None;
    }
    drain_eventfd(wake_fd);
    Some(ctl.snapshot.load(Ordering::Acquire))
}

fn drain_eventfd(fd: RawFd) {
    let mut buf = [0u8; 8];
    // SAFETY: nonblocking read of the eventfd counter into a local buffer.
    unsafe {
        libc::read(fd, buf.as_mut_ptr() as *mut libc::c_void, 8);
    }
}

/// When a round of work began, by the wall clock and by the thread's CPU clock.
#[derive(Clone, Copy)]
struct RoundStart {
    wall: i64,
    cpu: i64,
}

impl RoundStart {
    fn now() -> RoundStart {
        RoundStart { wall: mono(), cpu: thread_cpu() }
    }

    /// How long, since the round began and up to `wall`, the thread was kept off its CPU.
    fn off_cpu_until(&self, wall: i64) -> i64 {
        ((wall - self.wall) - (thread_cpu() - self.cpu)).max(0)
    }
}

struct SendBufs {
    frames: Vec<(*const u8, usize)>,
    held: Vec<Held>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl Direction {
    pub fn new(name: &'static str, index: usize, rx: PacketSocket, tx: PacketSocket, fifos: FifoMap, ring: Ring, queue: Option<Bottleneck>, wake_fd: RawFd, tuning: Tuning) -> Direction {
        let delays_ns = fifos.delays_ns().to_vec();
        Direction {
            fifos,
            name,
            index,
            rx,
            tx,
            stage: DelayStage::new(delays_ns.len()),
            last_base_release: vec![i64::MIN; delays_ns.len()],
            last_traced_release: vec![i64::MIN; delays_ns.len()],
            delays_ns,
            ring,
            queue,
            pending: VecDeque::new(),
            departed: Vec::with_capacity(BATCH),
            dropped: Vec::new(),
            clock: ClockOffset::default(),
            wake_fd,
            tuning,
            delay_trace: None,
        }
    }

    /// Put a frame into its delay FIFO, released `delay` after `start` (its arrival, or
    /// its departure from the bottleneck).
    fn hold(&mut self, seq: u64, fifo: usize, start: i64, st: &mut DirStats) {
        let base = start + self.delays_ns[fifo];
        let early = if self.delay_trace.is_none() {
            self.stage.push(fifo, seq, base)
        } else {
            // After a step down a frame waits for the higher step's last one: that is its
            // due time (lateness counts from it). Only an inversion of the frames' own
            // times counts as one.
            let release = (base + self.extra_ns(start)).max(self.last_traced_release[fifo]);
            self.last_traced_release[fifo] = release;
            self.stage.push(fifo, seq, release);
            let early = self.last_base_release[fifo].saturating_sub(base).max(0);
            self.last_base_release[fifo] = self.last_base_release[fifo].max(base);
            early
        };
        // The stage holds such a frame behind its predecessor either way. An inversion
        // within the clock conversion's uncertainty (the realtime→monotonic offset may move
        // by up to OFFSET_MAX_GAP_NS between rounds) is not the arrival order changing.
        if early > schedule::OFFSET_MAX_GAP_NS {
            st.reorders_seen += 1;
            st.reorder_max_ns = st.reorder_max_ns.max(early);
        }
    }

    /// Give this direction a delay that steps over time, counted from `epoch_ns`.
    pub fn with_delay_trace(mut self, trace: Option<Arc<DelayTrace>>, epoch_ns: i64) -> Direction {
        self.delay_trace = trace.map(|t| (t, epoch_ns));
        self
    }

    /// The delay trace's extra delay for a frame entering the delay at `start`.
    fn extra_ns(&self, start: i64) -> i64 {
        self.delay_trace.as_ref().map_or(0, |(t, epoch)| t.extra_ns(start - epoch))
    }

    /// Move the frames that left the bottleneck into their delay FIFOs.
    fn hold_departed(&mut self, st: &mut DirStats) {
        let mut departed = std::mem::take(&mut self.departed);
        for (seq, at) in departed.drain(..) {
            let fifo = self.ring.get(seq).map_or(0, |s| s.tag as usize);
            self.hold(seq, fifo, at, st);
        }
        self.departed = departed;
    }

    /// Take one received frame (virtio header included) that arrived at `arrival`.
    fn admit(&mut self, data: &[u8], arrival: i64, st: &mut DirStats) {
        let eth = &data[VNET_HDR_LEN..];
        let fifo = self.fifos.fifo_of(eth);
        let seq = match self.ring.push(data, fifo as u32) {
            Some(s) => s,
            None => {
                st.ring_overflows += 1;
                return;
            }
        };
        if self.queue.is_none() {
            self.hold(seq, fifo, arrival, st);
            return;
        }
        let q = self.queue.as_mut().expect("checked above");
        let low = q.config().is_low(frame::dscp(eth));
        let ect = matches!(frame::ecn(eth), Some(1) | Some(2));
        let bytes = frame::wire_bytes(&data[..VNET_HDR_LEN], eth);
        self.dropped.clear();
        let flow = if q.is_fair() { frame::flow_key(eth) } else { 0 };
        let queued = q.offer(seq, bytes, low, ect, flow, arrival, &mut self.departed, &mut self.dropped);
        for victim in self.dropped.iter() {
            self.ring.free(*victim);
        }
        if !queued {
            self.ring.free(seq);
        }
        self.apply_aqm();
        self.hold_departed(st);
    }

    /// What the queue's AQM decided at the head since the last call: free the frames it
    /// dropped, set CE in those it marked (before they are sent).
    fn apply_aqm(&mut self) {
        let q = match self.queue.as_mut() {
            Some(q) => q,
            None => return,
        };
        for victim in q.head_dropped.drain(..) {
            self.ring.free(victim);
        }
        for seq in q.marked.drain(..) {
            if let Some(f) = self.ring.frame_mut(seq) {
                frame::set_ce(&mut f[VNET_HDR_LEN..]);
            }
        }
    }

    /// Read everything waiting (bounded per round). Returns the frames read and the time
    /// up to which every arrival is known (the socket was found empty then), which is
    /// how far the bottleneck may be advanced without missing an arrival.
    fn receive(&mut self, batch: &mut RecvBatch, got: &mut Vec<Received>, st: &mut DirStats) -> (usize, i64) {
        let mut total = 0;
        let mut horizon = None;
        let mut latest = i64::MIN;
        let started = mono();
        for _ in 0..MAX_RX_BATCHES {
            let before = mono();
            let n = match batch.recv(&self.rx, got) {
                Ok(n) => n,
                Err(_) => {
                    // A frame the kernel could not describe (e.g. unsupported GSO type).
                    st.rx_errors += 1;
                    continue;
                }
            };
            if n < batch.capacity() {
                horizon = Some(before);
            }
            if n == 0 {
                break;
            }
            total += n;
            // Realtime, monotonic, realtime: the offset errs late, never early, and an
            // interrupted read does not shift this batch against the next.
            let rt = clock_ns(libc::CLOCK_REALTIME);
            let now = mono();
            let rt_after = clock_ns(libc::CLOCK_REALTIME);
            let now = rt + self.clock.update(rt, now, rt_after);
            for (i, r) in got.iter().enumerate() {
                if r.truncated || r.len <= VNET_HDR_LEN {
                    st.rx_errors += 1;
                    continue;
                }
                st.rx_frames += 1;
                st.rx_bytes += (r.len - VNET_HDR_LEN) as u64;
                let arrival = schedule::arrival_ns(r.ts_realtime_ns, rt, now);
                latest = latest.max(arrival);
                self.admit(batch.frame(i, r.len), arrival, st);
            }
            if n < batch.capacity() {
                break;
            }
        }
        (total, horizon.unwrap_or(if latest > i64::MIN { latest } else { started }))
    }

    /// Release times of the next two frames to leave, wherever they wait.
    fn next_releases(&self) -> (Option<i64>, Option<i64>) {
        if let Some(h) = self.pending.front() {
            return (Some(h.release_ns), None);
        }
        let (a, b) = self.stage.next_two();
        let q = self.queue.as_ref().and_then(|q| q.head()).map(|(seq, departure)| {
            let fifo = self.ring.get(seq).map_or(0, |s| s.tag as usize);
            departure + self.delays_ns[fifo] + self.extra_ns(departure)
        });
        let mut all = [a, b, q];
        all.sort_by_key(|t| t.unwrap_or(i64::MAX));
        (all[0], all[1])
    }

    /// Send every frame whose release time has come, in release order.
    /// `woke_late`: how late the thread's last wait ended against its target (0 when it
    /// did not wait for a release); `round`: when this round of work began. A frame's
    /// lateness beyond the late wake-up and the time the thread was kept off its CPU
    /// since is the line's own.
    fn send_due(&mut self, horizon: i64, woke_late: i64, round: RoundStart, bufs: &mut SendBufs, st: &mut DirStats,
                stop: &AtomicBool) -> usize {
        let mut sent_total = 0;
        if let Some(q) = self.queue.as_mut() {
            q.depart_until(horizon, &mut self.departed);
            self.apply_aqm();
            self.hold_departed(st);
        }
        loop {
            let now = mono();
            bufs.frames.clear();
            bufs.held.clear();
            while bufs.frames.len() < BATCH {
                let h = match self.pending.pop_front() {
                    Some(h) => h,
                    None => match self.stage.peek() {
                        Some(h) if schedule::is_due(h.release_ns, now) => {
                            self.stage.pop();
                            h
                        }
                        _ => break,
                    },
                };
                let slot = self.ring.get(h.seq).expect("a held frame is in the ring");
                bufs.frames.push((self.ring.frame_ptr(&slot), slot.len));
                bufs.held.push(h);
            }
            if bufs.frames.is_empty() {
                return sent_total;
            }
            let sent_at = mono();
            let off_cpu = round.off_cpu_until(sent_at);
            let sent = sock::send_batch(&self.tx, &bufs.frames, &mut bufs.iovs, &mut bufs.msgs);
            st.send_call_max_ns = st.send_call_max_ns.max(mono() - sent_at);
            st.off_cpu_max_ns = st.off_cpu_max_ns.max(off_cpu);
            let host_late = woke_late + off_cpu;
            let mut egress_drop = false;
            let (done, failed) = match sent {
                Ok(k) => (k, false),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    // The egress interface's qdisc refused the first frame (a shaper on the
                    // line's own output, as on the QUIC test path): it dropped it, as a link
                    // would. Retrying would turn the queue's drops into the line's delay.
                    egress_drop = true;
                    (0, false)
                }
                Err(e) => {
                    let code = e.raw_os_error();
                    let transient =
                        code == Some(libc::EINTR) || (code == Some(libc::EAGAIN) && !stop.load(Ordering::Relaxed));
                    if transient {
                        // Transient lack of socket buffer: retry rather than drop.
                        std::thread::yield_now();
                    }
                    (0, !transient)
                }
            };
            for (i, h) in bufs.held.iter().take(done).enumerate() {
                st.tx_frames += 1;
                st.tx_bytes += (bufs.frames[i].1 - VNET_HDR_LEN) as u64;
                st.lateness.record(sent_at - h.release_ns);
                st.own_lateness.record(sent_at - h.release_ns - host_late);
                self.ring.free(h.seq);
            }
            sent_total += done;
            let mut rest = done;
            if failed {
                st.send_errors += 1;
                self.ring.free(bufs.held[0].seq);
                rest = 1;
            } else if egress_drop {
                st.egress_drops += 1;
                st.lateness.record(sent_at - bufs.held[0].release_ns);
                st.own_lateness.record(sent_at - bufs.held[0].release_ns - host_late);
                self.ring.free(bufs.held[0].seq);
                sent_total += 1;
                rest = 1;
            }
            for h in bufs.held[rest..].iter().rev() {
                self.pending.push_front(*h);
            }
        }
    }

    /// Publish a copy of the counters if a newer snapshot was asked for.
    fn maybe_publish(&self, ctl: &Control, published: &mut u64, st: &mut DirStats, reports: &Sender<Report>) {
        if let Some(generation) = pending_snapshot(ctl, self.wake_fd, *published) {
            st.socket_drops += self.rx.take_drops();
            st.queue = self.queue_stats();
            *published = generation;
            let _ = reports.send(Report { index: self.index, generation, stats: st.clone() });
        }
    }

    /// Run until `ctl.stop` is set (the stop eventfd wakes the thread).
    pub fn run(mut self, ctl: &Control, reports: Sender<Report>, ready: Arc<Barrier>) -> Result<DirStats, String> {
        let mut st = DirStats::new(self.name);
        let timer = Timer::new();
        ready.wait();
        let timer = timer?;
        let mut batch = RecvBatch::new(BATCH);
        let mut got = Vec::with_capacity(BATCH);
        let mut bufs = SendBufs {
            frames: Vec::with_capacity(BATCH),
            held: Vec::with_capacity(BATCH),
            iovs: Vec::with_capacity(BATCH),
            msgs: Vec::with_capacity(BATCH),
        };
        let mut published = 0u64;
        let min_delay = self.delays_ns.iter().copied().min().unwrap_or(0);
        let poll_rx_always = min_delay < RX_POLL_ALWAYS_BELOW_NS;
        let (rx_fd, stop_fd, wake_fd) = (self.rx.fd, ctl.stop_fd, self.wake_fd);
        let stop = &ctl.stop;
        let mut woke_late = 0i64;
        while !stop.load(Ordering::Relaxed) {
            let round = RoundStart::now();
            ctl.last_round[self.index].store(round.wall, Ordering::Relaxed);
            self.maybe_publish(ctl, &mut published, &mut st, &reports);
            let (read, horizon) = self.receive(&mut batch, &mut got, &mut st);
            let sent = self.send_due(horizon, woke_late, round, &mut bufs, &mut st, stop);
            woke_late = 0;
            let now = mono();
            let (next, following) = self.next_releases();
            match schedule::plan_wait(&self.tuning, now, next, following, now + RX_INTERVAL_NS, read == 0) {
                Wait::Now if read == 0 && sent == 0 => {
                    // A release is due but nothing could go (nor came): never loop on it
                    // without blocking, which would shut a SCHED_FIFO sibling out of its
                    // CPU; wait a moment for the socket or the kernel instead.
                    st.stalled_rounds += 1;
                    timer.arm(now + STALL_WAIT_NS);
                    poll(&[timer.fd, stop_fd, wake_fd, rx_fd], -1);
                    timer.clear();
                }
                Wait::Now => {}
                Wait::Spin(t) => {
                    let mut last = now;
                    loop {
                        let at = mono();
                        st.spin_stall_max_ns = st.spin_stall_max_ns.max(at - last);
                        if at >= t {
                            woke_late = at - t;
                            break;
                        }
                        last = at;
                        std::hint::spin_loop();
                    }
                }
                Wait::Timer(t) => {
                    timer.arm(t);
                    if poll_rx_always {
                        poll(&[timer.fd, stop_fd, wake_fd, rx_fd], -1);
                    } else {
                        poll(&[timer.fd, stop_fd, wake_fd], -1);
                    }
                    // Past the timer's time, whatever woke the thread: this is how late the
                    // host let it run (an earlier wake-up, by a frame, says nothing).
                    let woke = mono();
                    if woke >= t && t > now {
                        st.wakeups.record(woke - t);
                        woke_late = woke - t;
                    }
                    timer.clear();
                }
                Wait::Idle => poll(&[rx_fd, stop_fd, wake_fd], -1),
            }
        }
        // The kernel's drop counter resets on read: add what came since the last snapshot.
        st.socket_drops += self.rx.take_drops();
        st.queue = self.queue_stats();
        Ok(st)
    }

    fn queue_stats(&self) -> Option<QueueStats> {
        self.queue.as_ref().map(|q| q.stats.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eventfd() -> RawFd {
        // SAFETY: plain eventfd.
        unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) }
    }

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd, zero timeout.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    fn raise(ctl: &Control, fd: RawFd, generation: u64) {
        ctl.snapshot.store(generation, Ordering::Release);
        // SAFETY: adds 1 to the eventfd counter.
        unsafe {
            libc::eventfd_write(fd, 1);
        }
    }

    #[test]
    fn time_off_the_cpu_is_wall_time_the_thread_did_not_run() {
        // Asleep: off the CPU for the whole sleep. Spinning: on it (bar a preemption).
        let round = RoundStart::now();
        std::thread::sleep(std::time::Duration::from_millis(20));
        let slept = round.off_cpu_until(mono());
        assert!(slept >= 19_000_000, "{slept} ns off the CPU over a 20 ms sleep");
        let round = RoundStart::now();
        let until = round.wall + 20_000_000;
        while mono() < until {
            std::hint::spin_loop();
        }
        let end = mono();
        let spun = round.off_cpu_until(end);
        assert!(spun < end - round.wall, "{spun} ns off the CPU over a {} ns spin", end - round.wall);
    }

    #[test]
    fn snapshot_request_is_taken_once_and_clears_the_wakeup() {
        let fd = eventfd();
        let ctl = Control { stop: AtomicBool::new(false), stop_fd: -1, snapshot: AtomicU64::new(0), last_round: [AtomicI64::new(0), AtomicI64::new(0)] };
        assert_eq!(pending_snapshot(&ctl, fd, 0), None);
        raise(&ctl, fd, 1);
        assert!(readable(fd));
        assert_eq!(pending_snapshot(&ctl, fd, 0), Some(1));
        assert!(!readable(fd), "a taken request must not keep waking the thread");
        assert_eq!(pending_snapshot(&ctl, fd, 1), None);
        // Two requests before the thread looks: it publishes the newest once.
        raise(&ctl, fd, 2);
        raise(&ctl, fd, 3);
        assert_eq!(pending_snapshot(&ctl, fd, 1), Some(3));
        assert!(!readable(fd));
        // SAFETY: owned fd.
        unsafe {
            libc::close(fd);
        }
    }

    #[test]
    fn request_raised_while_publishing_is_not_lost() {
        let fd = eventfd();
        let ctl = Control { stop: AtomicBool::new(false), stop_fd: -1, snapshot: AtomicU64::new(0), last_round: [AtomicI64::new(0), AtomicI64::new(0)] };
        raise(&ctl, fd, 1);
        assert_eq!(pending_snapshot(&ctl, fd, 0), Some(1));
        // Raised after the drain (while the thread copies its counters): the eventfd
        // stays readable, so the thread's next poll returns and it answers.
        raise(&ctl, fd, 2);
        assert!(readable(fd));
        assert_eq!(pending_snapshot(&ctl, fd, 1), Some(2));
        // SAFETY: owned fd.
        unsafe {
            libc::close(fd);
        }
    }
}
