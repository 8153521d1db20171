//! Datagram-level pacing beneath quinn: a UDP socket that releases each connection's
//! datagrams at the times its sender computed, one by one, instead of in the bursts of
//! quinn's token bucket (pacing.rs).
//!
//! How a datagram gets its time. quinn builds one datagram per transmit here
//! (`max_transmit_segments` is 1) and calls its controller's `on_sent` once per transmit,
//! just before handing that transmit to the socket. A controller that paces writes the
//! datagram's release time into its connection's [`PaceCell`] in `on_sent`, and counts it;
//! the socket, when the transmit arrives, takes that time if the count moved since that
//! destination's previous datagram, and sends at once otherwise (datagrams no controller
//! saw). A connection's datagrams leave in order: none before the one ahead of it.
//!
//! What it cannot change: quinn stamps a packet's send time when it builds it, so a
//! datagram that waits here makes its RTT sample that much longer. So a connection may
//! have at most [`AHEAD`] datagrams waiting: beyond, quinn is told to wait, and builds the
//! next one only when one has left. quinn's own pacer runs at twice the rate (pacing.rs),
//! so it never holds a datagram back. The wait is recorded per connection (`queued_us`),
//! with how late the releases were against their times (`late_us`). (Measured on a 50 ms
//! path with no limit: waits up to 12 ms, p99 9.9 ms, as quinn ran ahead.)

use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::poll_fn;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Instant;

use quinn::udp::{EcnCodepoint, RecvMeta, Transmit};
use quinn::{AsyncTimer, AsyncUdpSocket, UdpPoller};
use tokio::sync::Notify;

use crate::runtime::TimerFd;

/// Datagrams held here, all connections together, before quinn is told to wait.
const MAX_QUEUED: usize = 1024;
/// Paced datagrams one connection may have waiting: a lumpy pair.
pub const AHEAD: usize = 2;

thread_local! {
    /// The destination whose queue refused the transmit just tried on this thread. quinn
    /// asks its poller whether to retry right after a refusal, on the same thread and with
    /// no await between: the poller reads it there, as it cannot know its connection.
    static REFUSED: Cell<Option<SocketAddr>> = const { Cell::new(None) };
}

/// One connection's pacing: written by its controller, read by the socket.
#[derive(Debug, Default)]
pub struct PaceCell {
    inner: Mutex<(u64, Option<Instant>)>,
}

impl PaceCell {
    /// The controller let a datagram go, to leave at `at`.
    pub fn sent(&self, at: Instant) {
        let mut g = self.inner.lock().unwrap();
        g.0 += 1;
        g.1 = Some(at);
    }

    fn read(&self) -> (u64, Option<Instant>) {
        *self.inner.lock().unwrap()
    }

    #[cfg(test)]
    pub fn read_for_test(&self) -> (u64, Option<Instant>) {
        self.read()
    }
}

/// What the pacer achieved for one connection, in microseconds.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PaceStats {
    pub datagrams: u64,
    /// Release time to the send call, per paced datagram.
    pub late_us: Percentiles,
    /// Arrival from quinn to the send call, per datagram.
    pub queued_us: Percentiles,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Percentiles {
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}

impl Percentiles {
    fn of(mut v: Vec<u64>) -> Self {
        if v.is_empty() {
            return Self::default();
        }
        v.sort_unstable();
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Self { p50: at(0.5), p99: at(0.99), max: at(1.0) }
    }
}

struct Held {
    destination: SocketAddr,
    ecn: Option<EcnCodepoint>,
    contents: Vec<u8>,
    segment_size: Option<usize>,
    src_ip: Option<IpAddr>,
    arrived: Instant,
    release: Instant,
    paced: bool,
}

#[derive(Default)]
struct Destination {
    cell: Option<Arc<PaceCell>>,
    seen: u64,
    queue: VecDeque<Held>,
    late_us: Vec<u64>,
    queued_us: Vec<u64>,
    /// The last datagram handed over for this destination was refused: quinn holds it and
    /// builds nothing more for that connection until it is taken.
    refused: bool,
}

#[derive(Default)]
struct State {
    destinations: HashMap<SocketAddr, Destination>,
    queued: usize,
    /// Connection drivers waiting for room.
    writers: Vec<Waker>,
}

/// The socket: quinn's on top, the runtime's below.
pub struct PacedSocket {
    inner: Arc<dyn AsyncUdpSocket>,
    state: Mutex<State>,
    /// A datagram was queued (the release task may have a new earliest time).
    queued: Notify,
}

impl fmt::Debug for PacedSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PacedSocket").field("inner", &self.inner).finish()
    }
}

impl PacedSocket {
    /// Wrap `inner` and start releasing (needs a running tokio runtime).
    pub fn new(inner: Arc<dyn AsyncUdpSocket>) -> Arc<Self> {
        let socket = Arc::new(Self { inner, state: Mutex::new(State::default()), queued: Notify::new() });
        tokio::spawn(socket.clone().release());
        socket
    }

    /// Pace the datagrams to `remote` by `cell` from now on.
    pub fn register(&self, remote: SocketAddr, cell: Arc<PaceCell>) {
        let mut s = self.state.lock().unwrap();
        let d = s.destinations.entry(remote).or_default();
        d.seen = cell.read().0;
        d.cell = Some(cell);
    }

    /// Stop pacing to `remote`; what the pacer achieved for it.
    pub fn unregister(&self, remote: SocketAddr) -> PaceStats {
        let mut s = self.state.lock().unwrap();
        let Some(d) = s.destinations.get_mut(&remote) else {
            return PaceStats::default();
        };
        d.cell = None;
        let stats = PaceStats {
            datagrams: d.queued_us.len() as u64,
            late_us: Percentiles::of(std::mem::take(&mut d.late_us)),
            queued_us: Percentiles::of(std::mem::take(&mut d.queued_us)),
        };
        if d.queue.is_empty() {
            s.destinations.remove(&remote);
        }
        stats
    }

    /// Does quinn hold a datagram to `remote` that this socket refused? (A datagram quinn
    /// held back because the poller reported the shared limit, `MAX_QUEUED`, reached is not
    /// seen here: AHEAD-deep queues reach it only with hundreds of connections.)
    pub fn holds_refused(&self, remote: SocketAddr) -> bool {
        let s = self.state.lock().unwrap();
        s.destinations.get(&remote).is_some_and(|d| d.refused)
    }

    /// The earliest release among the heads of the queues.
    fn next_release(&self) -> Option<Instant> {
        let s = self.state.lock().unwrap();
        s.destinations.values().filter_map(|d| d.queue.front()).map(|h| h.release).min()
    }

    /// Take every datagram due by `now`, oldest release first within each destination.
    fn due(&self, now: Instant) -> Vec<Held> {
        let mut s = self.state.lock().unwrap();
        let mut out = Vec::new();
        for d in s.destinations.values_mut() {
            while d.queue.front().is_some_and(|h| h.release <= now) {
                out.push(d.queue.pop_front().unwrap());
            }
        }
        s.queued -= out.len();
        s.destinations.retain(|_, d| d.cell.is_some() || !d.queue.is_empty());
        for w in s.writers.drain(..) {
            w.wake();
        }
        out
    }

    fn record(&self, h: &Held, sent: Instant) {
        let mut s = self.state.lock().unwrap();
        if let Some(d) = s.destinations.get_mut(&h.destination) {
            d.queued_us.push(sent.saturating_duration_since(h.arrived).as_micros() as u64);
            if h.paced {
                d.late_us.push(sent.saturating_duration_since(h.release).as_micros() as u64);
            }
        }
    }

    async fn release(self: Arc<Self>) {
        let mut poller = self.inner.clone().create_io_poller();
        loop {
            let notified = self.queued.notified();
            match self.next_release() {
                None => notified.await,
                Some(at) if at > Instant::now() => {
                    let mut timer = match TimerFd::new(at) {
                        Ok(t) => Box::pin(t),
                        Err(_) => {
                            tokio::time::sleep_until(at.into()).await;
                            continue;
                        }
                    };
                    tokio::select! {
                        _ = poll_fn(|cx| timer.as_mut().poll(cx)) => {}
                        _ = notified => {}
                    }
                }
                Some(_) => {
                    for h in self.due(Instant::now()) {
                        let t = Transmit {
                            destination: h.destination,
                            ecn: h.ecn,
                            contents: &h.contents,
                            segment_size: h.segment_size,
                            src_ip: h.src_ip,
                        };
                        loop {
                            if poll_fn(|cx| poller.as_mut().poll_writable(cx)).await.is_err() {
                                break; // the socket is gone: quinn sees it on its next send
                            }
                            match self.inner.try_send(&t) {
                                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                                _ => break,
                            }
                        }
                        self.record(&h, Instant::now());
                    }
                }
            }
        }
    }
}

impl AsyncUdpSocket for PacedSocket {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Room { socket: self })
    }

    fn try_send(&self, t: &Transmit) -> io::Result<()> {
        let now = Instant::now();
        let mut s = self.state.lock().unwrap();
        let full = s.queued >= MAX_QUEUED;
        let d = s.destinations.entry(t.destination).or_default();
        if full || (d.cell.is_some() && d.queue.len() >= AHEAD) {
            d.refused = true;
            if !full {
                REFUSED.with(|r| r.set(Some(t.destination)));
            }
            return Err(io::ErrorKind::WouldBlock.into());
        }
        d.refused = false;
        let (release, paced) = match d.cell.as_ref().map(|c| c.read()) {
            Some((count, Some(at))) if count != d.seen => {
                d.seen = count;
                (at, true)
            }
            _ => (now, false),
        };
        let release = d.queue.back().map_or(release, |b| release.max(b.release));
        d.queue.push_back(Held {
            destination: t.destination,
            ecn: t.ecn,
            contents: t.contents.to_vec(),
            segment_size: t.segment_size,
            src_ip: t.src_ip,
            arrived: now,
            release,
            paced,
        });
        s.queued += 1;
        drop(s);
        self.queued.notify_one();
        Ok(())
    }

    fn poll_recv(&self, cx: &mut Context, bufs: &mut [IoSliceMut<'_>], meta: &mut [RecvMeta]) -> Poll<io::Result<usize>> {
        self.inner.poll_recv(cx, bufs, meta)
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.inner.local_addr()
    }

    /// One datagram per transmit, so that each gets its own time.
    fn max_transmit_segments(&self) -> usize {
        1
    }

    fn max_receive_segments(&self) -> usize {
        self.inner.max_receive_segments()
    }

    fn may_fragment(&self) -> bool {
        self.inner.may_fragment()
    }
}

/// quinn's view of whether it may hand over another datagram: while the queue has room,
/// and its connection's queue too after a refusal.
struct Room {
    socket: Arc<PacedSocket>,
}

impl fmt::Debug for Room {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Room")
    }
}

impl UdpPoller for Room {
    fn poll_writable(self: Pin<&mut Self>, cx: &mut Context) -> Poll<io::Result<()>> {
        let mut s = self.socket.state.lock().unwrap();
        let full = match REFUSED.with(|r| r.take()) {
            Some(dest) => s.destinations.get(&dest).is_some_and(|d| d.queue.len() >= AHEAD),
            None => false,
        };
        if !full && s.queued < MAX_QUEUED {
            return Poll::Ready(Ok(()));
        }
        s.writers.push(cx.waker().clone());
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use quinn::Runtime;
    use std::net::UdpSocket;
    use std::time::Duration;

    /// A paced socket with a cell registered for a receiver, and that receiver.
    fn pair() -> (Arc<PacedSocket>, Arc<PaceCell>, tokio::net::UdpSocket, SocketAddr) {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_nonblocking(true).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let inner = quinn::TokioRuntime.wrap_udp_socket(tx).unwrap();
        let to = rx.local_addr().unwrap();
        let socket = PacedSocket::new(inner);
        let cell = Arc::new(PaceCell::default());
        socket.register(to, cell.clone());
        (socket, cell, tokio::net::UdpSocket::from_std(rx).unwrap(), to)
    }

    /// Hand the socket a 100-byte datagram of `byte`s, as quinn would.
    fn send(s: &PacedSocket, to: SocketAddr, byte: u8) -> io::Result<()> {
        let contents = [byte; 100];
        s.try_send(&Transmit { destination: to, ecn: None, contents: &contents, segment_size: None, src_ip: None })
    }

    #[tokio::test(flavor = "current_thread")]
    async fn paced_datagrams_leave_at_their_times_in_order() {
        let (s, cell, rx, to) = pair();
        let t0 = Instant::now();
        // Released at 0, 10, 10, 15 ms: the third, marked 5 ms, waits behind the second.
        // Two may wait at once; the third is refused until one has left.
        for (i, ms) in [(0u8, 0u64), (1, 10), (2, 5), (3, 15)] {
            cell.sent(t0 + Duration::from_millis(ms));
            while let Err(e) = send(&s, to, i) {
                assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
                assert!(s.holds_refused(to));
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            assert!(!s.holds_refused(to));
        }
        let mut got = Vec::new();
        for _ in 0..4 {
            let mut buf = [0u8; 200];
            let n = rx.recv(&mut buf).await.unwrap();
            assert_eq!(n, 100);
            got.push((buf[0], t0.elapsed()));
        }
        assert_eq!(got.iter().map(|g| g.0).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
        assert!(got[1].1 >= Duration::from_millis(10) && got[2].1 >= Duration::from_millis(10), "{got:?}");
        assert!(got[3].1 >= Duration::from_millis(15), "{got:?}");
        let stats = s.unregister(to);
        assert_eq!(stats.datagrams, 4);
        assert!(stats.queued_us.max >= 9_000, "{stats:?}"); // the second waited 10 ms
    }

    #[tokio::test(flavor = "current_thread")]
    async fn datagrams_no_controller_saw_leave_at_once() {
        let (s, cell, rx, to) = pair();
        let t0 = Instant::now();
        cell.sent(t0 + Duration::from_millis(20));
        send(&s, to, 0).unwrap();
        send(&s, to, 1).unwrap(); // the count did not move: not paced, but behind the first
        let mut buf = [0u8; 200];
        rx.recv(&mut buf).await.unwrap();
        rx.recv(&mut buf).await.unwrap();
        assert_eq!(buf[0], 1);
        assert!(t0.elapsed() >= Duration::from_millis(20));
        // An unregistered destination is not paced at all.
        s.unregister(to);
        let t1 = Instant::now();
        cell.sent(t1 + Duration::from_millis(500));
        send(&s, to, 2).unwrap();
        rx.recv(&mut buf).await.unwrap();
        assert!(t1.elapsed() < Duration::from_millis(400));
    }
}
