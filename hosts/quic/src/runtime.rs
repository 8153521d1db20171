//! quinn's tokio runtime with timers that fire on time.
//!
//! quinn paces from its connection timer: once the token bucket is empty it sleeps until
//! the bucket would be full again (about 1.8 ms for a 50 Mbit/s, 50 ms window) and then
//! sends a burst. tokio's timer wheel has a resolution of 1 ms, so such a sleep ends up to
//! ~1.3 ms late; the bucket cannot hold the tokens of the extra time, and the rate falls
//! (measured: bursts 2–3 ms apart instead of 1.8 ms, a Blitzstart flight at ~65 % of its
//! rate, below a 50 Mbit/s bottleneck). An absolute-time timerfd per connection wakes
//! within tens of microseconds.

use std::fmt;
use std::future::Future;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use quinn::{AsyncTimer, AsyncUdpSocket, Runtime, TokioRuntime};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// Which timers the endpoints use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Timers {
    /// timerfd, microsecond precision.
    Precise,
    /// tokio's own (1 ms resolution), as quinn ships.
    Tokio,
}

#[derive(Debug)]
pub struct StartlabRuntime {
    timers: Timers,
}

impl StartlabRuntime {
    pub fn new(timers: Timers) -> Arc<Self> {
        Arc::new(Self { timers })
    }
}

impl Runtime for StartlabRuntime {
    fn new_timer(&self, i: Instant) -> Pin<Box<dyn AsyncTimer>> {
        if self.timers == Timers::Precise {
            // A runtime without I/O (or out of descriptors) falls back to tokio's timer.
            if let Ok(t) = TimerFd::new(i) {
                return Box::pin(t);
            }
        }
        TokioRuntime.new_timer(i)
    }

    fn spawn(&self, future: Pin<Box<dyn Future<Output = ()> + Send>>) {
        TokioRuntime.spawn(future)
    }

    fn wrap_udp_socket(&self, t: std::net::UdpSocket) -> io::Result<Arc<dyn AsyncUdpSocket>> {
        TokioRuntime.wrap_udp_socket(t)
    }

    fn now(&self) -> Instant {
        TokioRuntime.now()
    }
}

/// A one-shot CLOCK_MONOTONIC timerfd armed at an absolute time.
pub struct TimerFd {
    fd: AsyncFd<OwnedFd>,
    deadline: Instant,
}

impl fmt::Debug for TimerFd {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TimerFd")
            .field("fd", &self.fd.get_ref().as_raw_fd())
            .field("deadline", &self.deadline)
            .finish()
    }
}

fn monotonic_now() -> Duration {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

impl TimerFd {
    pub fn new(deadline: Instant) -> io::Result<Self> {
        // SAFETY: timerfd_create returns a new descriptor or -1.
        let raw = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_NONBLOCK | libc::TFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: raw is a new descriptor this function owns; the AsyncFd then owns it, so
        // it stays open for as long as it is registered.
        let fd = unsafe { AsyncFd::register_with_interest(OwnedFd::from_raw_fd(raw), Interest::READABLE) }
            .map_err(io::Error::from)?;
        let t = Self { fd, deadline };
        t.arm()?;
        Ok(t)
    }

    /// Arm at the deadline, translated from `Instant` into the timerfd's clock through a
    /// pair of readings of both (Instant is CLOCK_MONOTONIC on Linux, but opaque).
    fn arm(&self) -> io::Result<()> {
        let now = Instant::now();
        let mono = monotonic_now();
        // Never a zero value: that would disarm the timer. A deadline in the past fires
        // at once.
        let at = mono + self.deadline.saturating_duration_since(now) + Duration::from_nanos(1);
        let spec = libc::itimerspec {
            it_interval: libc::timespec { tv_sec: 0, tv_nsec: 0 },
            it_value: libc::timespec {
                tv_sec: at.as_secs() as libc::time_t,
                tv_nsec: at.subsec_nanos() as libc::c_long,
            },
        };
        // SAFETY: a valid timerfd and itimerspec; the old value is not wanted.
        let rc = unsafe {
            libc::timerfd_settime(
                self.fd.get_ref().as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        };
        if rc < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    fn drain(&self) {
        let mut expirations = [0u8; 8];
        // SAFETY: reading 8 bytes into an 8-byte buffer; EAGAIN is fine (non-blocking).
        unsafe { libc::read(self.fd.get_ref().as_raw_fd(), expirations.as_mut_ptr().cast(), 8) };
    }
}

impl AsyncTimer for TimerFd {
    fn reset(mut self: Pin<&mut Self>, i: Instant) {
        self.deadline = i;
        let _ = self.arm();
    }

    fn poll(self: Pin<&mut Self>, cx: &mut Context) -> Poll<()> {
        loop {
            if Instant::now() >= self.deadline {
                return Poll::Ready(());
            }
            match self.fd.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(()),
                Poll::Ready(Ok(mut guard)) => {
                    self.drain();
                    guard.clear_ready();
                    drop(guard);
                    // Expired a hair before the deadline as Instant sees it, or a stale
                    // readiness: arm again, or the one-shot timer would never fire.
                    if Instant::now() < self.deadline && self.arm().is_err() {
                        return Poll::Ready(());
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn fires_on_time() {
        for delay_us in [0u64, 300, 1800, 5000] {
            let deadline = Instant::now() + Duration::from_micros(delay_us);
            let mut t = Box::pin(TimerFd::new(deadline).unwrap());
            std::future::poll_fn(|cx| t.as_mut().poll(cx)).await;
            let late = Instant::now().saturating_duration_since(deadline);
            assert!(Instant::now() >= deadline);
            // Generous for a loaded machine; tokio's timer would be up to 1 ms late.
            assert!(
                late < Duration::from_millis(5),
                "{delay_us} µs timer fired {late:?} late"
            );
        }
    }

    #[tokio::test(flavor = "current_thread")]
    async fn reset_moves_the_deadline() {
        let mut t = Box::pin(TimerFd::new(Instant::now() + Duration::from_secs(60)).unwrap());
        let deadline = Instant::now() + Duration::from_millis(2);
        t.as_mut().reset(deadline);
        std::future::poll_fn(|cx| t.as_mut().poll(cx)).await;
        assert!(Instant::now() >= deadline);
    }
}
