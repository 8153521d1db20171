//! The clocks and the absolute timer that every wait of the delay line (and the host
//! probe, which measures how late this same timer wakes on this host) goes through.

use std::os::unix::io::RawFd;

pub fn clock_ns(clock: libc::clockid_t) -> i64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: writes into a local timespec.
    unsafe {
        libc::clock_gettime(clock, &mut ts);
    }
    ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64
}

pub fn mono() -> i64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// The calling thread's CPU time. Under paravirtual steal accounting it leaves out the
/// time the hypervisor took, so wall time minus it is the time the thread was kept off
/// its CPU (preempted or stolen).
pub fn thread_cpu() -> i64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

pub struct Timer {
    pub fd: RawFd,
}

impl Timer {
    pub fn new() -> Result<Timer, String> {
        // SAFETY: plain timerfd_create.
        let fd = unsafe { libc::timerfd_create(libc::CLOCK_MONOTONIC, libc::TFD_CLOEXEC | libc::TFD_NONBLOCK) };
        if fd < 0 {
            return Err(format!("timerfd_create: {}", std::io::Error::last_os_error()));
        }
        Ok(Timer { fd })
    }

    /// Fire at absolute CLOCK_MONOTONIC time `at_ns` (immediately if it has passed).
    pub fn arm(&self, at_ns: i64) {
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

    pub fn clear(&self) {
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

pub fn poll(fds: &[RawFd], timeout_ms: libc::c_int) {
    let mut p: Vec<libc::pollfd> = fds.iter().map(|fd| libc::pollfd { fd: *fd, events: libc::POLLIN, revents: 0 }).collect();
    // SAFETY: p is a valid array of pollfd.
    unsafe {
        libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, timeout_ms);
    }
}
