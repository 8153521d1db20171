//! One direction of the delay line: receive, hold in the ring, send at release time.
//!
//! A single thread owns the receive socket of one interface, the transmit socket of
//! the other and the ring, so frames leave in exactly the order they arrived.

use crate::ring::Ring;
use crate::schedule::{self, Wait, NS_PER_US};
use crate::sock::{self, PacketSocket, RecvBatch, Received, VNET_HDR_LEN};
use crate::stats::DirStats;
use std::os::unix::io::RawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};

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
    pub rx: PacketSocket,
    pub tx: PacketSocket,
    pub delay_ns: i64,
    pub ring: Ring,
}

pub fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes into a local timespec.
    unsafe {
        libc::clock_gettime(clock, &mut ts);
    }
    ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
}

fn mono() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

struct Timer {
    fd: RawFd,
}

impl Timer {
    fn new() -> Result<Timer, String> {
        // SAFETY: plain timerfd_create.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) };
        if fd < 0 {
            return Err(format!("timerfd_create: {}", std::io::Error::last_os_error()));
        }
        Ok(Timer { fd })
    }

    /// Fire at absolute CLOCK_MONOTONIC time `at_ns` (immediately if it has passed).
    fn arm(&self, at_ns: i64) {
        let at = at_ns.max(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec { tv_sec: (at / 1_000_000_000) as _, tv_nsec: (at % 1_000_000_000) as _ },
        };
        // SAFETY: valid fd and itimerspec.
        unsafe {
            libc::timerfd_settime(self.fd, libc::TFD_TIMER_ABSTIME, &spec, std::ptr::null_mut());
        }
    }

    fn clear(&self) {
        let mut buf = [0u8; 8];
        // SAFETY: nonblocking read of the expiry counter into a local buffer.
        unsafe {
            libc::read(self.fd, buf.as_mut_ptr() as *mut libc::c_void, 8);
        }
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: owned fd.
        unsafe {
            libc::close(self.fd);
        }
    }
}

fn poll(fds: &[RawFd], timeout_ms: libc::c_int) {
    let mut p: Vec<libc::pollfd> = fds.iter().map(|fd| libc::pollfd { fd: *fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: p is a valid array of pollfd.
    unsafe {
        libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms);
    }
}

struct SendBufs {
    frames: Vec<(*const u8, usize)>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

impl Direction {
    /// Read everything waiting (bounded per round) into the ring. Returns frames read.
    fn receive(&mut self, batch: &mut RecvBatch, got: &mut Vec<Received>, last_release: &mut i64, st: &mut DirStats) -> usize {
        let mut total = 0;
        for _ in 0..MAX_RX_BATCHES {
            let n = match batch.recv(&self.rx, got) {
                Ok(n) => n,
                Err(_) => {
                    // A frame the kernel could not describe (e.g. unsupported GSO type).
                    st.rx_errors += 1;
                    continue;
                }
            };
            if n == 0 {
                break;
            }
            total += n;
            // Realtime first, then monotonic: the offset errs late, never early.
            let rt = clock_ns(libc::CLOCK_REALTIME);
            let now = mono();
            for (i, r) in got.iter().enumerate() {
                if r.truncated || r.len <= VNET_HDR_LEN {
                    st.rx_errors += 1;
                    continue;
                }
                st.rx_frames += 1;
                st.rx_bytes += (r.len - VNET_HDR_LEN) as u64;
                let release = schedule::release_ns(r.ts_realtime_ns, rt, now, self.delay_ns);
                if release < *last_release {
                    st.reorders_seen += 1;
                }
                *last_release = (*last_release).max(release);
                if !self.ring.push(batch.frame(i, r.len), release) {
                    st.ring_overflows += 1;
                }
            }
            if n < batch.capacity() {
                break;
            }
        }
        total
    }

    /// Send every frame whose release time has come, oldest first.
    fn send_due(&mut self, bufs: &mut SendBufs, st: &mut DirStats, stop: &AtomicBool) {
        loop {
            let now = mono();
            bufs.frames.clear();
            let mut releases = [0i64; BATCH];
            while bufs.frames.len() < BATCH {
                let s = match self.ring.slot(bufs.frames.len()) {
                    Some(s) if schedule::is_due(s.release_ns, now) => s,
                    _ => break,
                };
                releases[bufs.frames.len()] = s.release_ns;
                bufs.frames.push((self.ring.frame_ptr(&s), s.len));
            }
            if bufs.frames.is_empty() {
                return;
            }
            let sent_at = mono();
            match sock::send_batch(&self.tx, &bufs.frames, &mut bufs.iovs, &mut bufs.msgs) {
                Ok(k) => {
                    for (i, (_, len)) in bufs.frames.iter().take(k).enumerate() {
                        st.tx_frames += 1;
                        st.tx_bytes += (len - VNET_HDR_LEN) as u64;
                        st.lateness.record(sent_at - releases[i]);
                    }
                    self.ring.pop(k);
                }
                Err(e) => {
                    let code = e.raw_os_error();
                    if code == Some(libc::EINTR) {
                        continue;
                    }
                    if (code == Some(libc::ENOBUFS) || code == Some(libc::EAGAIN)) && !stop.load(Ordering::Relaxed) {
                        // Transient lack of buffers: retry rather than drop.
                        std::thread::yield_now();
                        continue;
                    }
                    st.send_errors += 1;
                    self.ring.pop(1);
                }
            }
        }
    }

    /// Run until `stop` is set (the stop eventfd wakes the thread).
    pub fn run(mut self, stop: &AtomicBool, stop_fd: RawFd, ready: Arc<Barrier>) -> Result<DirStats, String> {
        let mut st = DirStats::new(self.name);
        let timer = Timer::new();
        ready.wait();
        let timer = timer?;
        let mut batch = RecvBatch::new(BATCH);
        let mut got = Vec::with_capacity(BATCH);
        let mut bufs = SendBufs { frames: Vec::with_capacity(BATCH), iovs: Vec::with_capacity(BATCH), msgs: Vec::with_capacity(BATCH) };
        let mut last_release = i64::MIN;
        let poll_rx_always = self.delay_ns < RX_POLL_ALWAYS_BELOW_NS;
        let rx_fd = self.rx.fd;
        while !stop.load(Ordering::Relaxed) {
            let idle = self.receive(&mut batch, &mut got, &mut last_release, &mut st) == 0;
            self.send_due(&mut bufs, &mut st, stop);
            let now = mono();
            let next = self.ring.slot(0).map(|s| s.release_ns);
            let following = self.ring.slot(1).map(|s| s.release_ns);
            match schedule::plan_wait(now, next, following, now + RX_INTERVAL_NS, idle) {
                Wait::Now => {}
                Wait::Spin(t) => {
                    while mono() < t {
                        std::hint::spin_loop();
                    }
                }
                Wait::Timer(t) => {
                    timer.arm(t);
                    if poll_rx_always {
                        poll(&[timer.fd, stop_fd, rx_fd], -1);
                    } else {
                        poll(&[timer.fd, stop_fd], -1);
                    }
                    timer.clear();
                }
                Wait::Idle => poll(&[rx_fd, stop_fd], -1),
            }
        }
        st.socket_drops = self.rx.take_drops();
        Ok(st)
    }
}
