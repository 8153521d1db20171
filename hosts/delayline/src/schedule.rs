//! Release-time arithmetic and the decision how to wait for the next release.
//!
//! Kernel receive timestamps (SO_TIMESTAMPNS) are CLOCK_REALTIME, which NTP may step;
//! timers and lateness use CLOCK_MONOTONIC. Each timestamp is therefore moved onto the
//! monotonic clock with an offset read next to it, so a clock step can only affect the
//! frames that straddle it, and the wait uses an absolute CLOCK_MONOTONIC timerfd.

pub const NS_PER_US: i64 = 1_000;
pub const NS_PER_S: i64 = 1_000_000_000;

/// Largest one-way delay accepted (10 s).
pub const MAX_DELAY_NS: i64 = 10 * NS_PER_S;

/// A timestamp further in the past than this (or in the future) is not trusted; the
/// read time is used instead.
const MAX_TIMESTAMP_AGE_NS: i64 = NS_PER_S;

/// timerfd wakes 40–60 µs late on the measured machines: for sparse traffic the timer
/// is armed this much early and the rest is spun.
pub const SPIN_LEAD_NS: i64 = 80 * NS_PER_US;
/// Never spin longer than this.
pub const SPIN_MAX_NS: i64 = 100 * NS_PER_US;
/// The queue counts as sparse when the frame after the next one is released at least
/// this much later (or there is none): spinning then costs at most
/// SPIN_MAX_NS / SPARSE_GAP_NS of a core.
pub const SPARSE_GAP_NS: i64 = 1_000 * NS_PER_US;

/// Release time of a frame on CLOCK_MONOTONIC.
///
/// `rx_realtime_ns` is the kernel receive timestamp (or None when the kernel gave
/// none); `realtime_now_ns` must be read before `mono_now_ns`, which makes the
/// offset err on the late side, never the early side.
pub fn release_ns(rx_realtime_ns: Option<i64>, realtime_now_ns: i64, mono_now_ns: i64, delay_ns: i64) -> i64 {
    let ts = match rx_realtime_ns {
        Some(t) if t <= realtime_now_ns && realtime_now_ns - t <= MAX_TIMESTAMP_AGE_NS => t,
        _ => realtime_now_ns,
    };
    let age = realtime_now_ns - ts;
    mono_now_ns - age + delay_ns
}

/// Two realtime reads around the monotonic one further apart than this were
/// interrupted (an interrupt or softirq ran in between): the offset they give is late by
/// the interruption, which would move one batch's frames later than the next batch's.
pub const OFFSET_MAX_GAP_NS: i64 = 2 * NS_PER_US;
/// An earlier offset is reused for at most this long: clock slewing (≤ 500 ppm) moves
/// the true offset by at most 5 µs in that time.
pub const OFFSET_MAX_AGE_NS: i64 = 10_000 * NS_PER_US;

/// The offset CLOCK_MONOTONIC − CLOCK_REALTIME that moves kernel timestamps onto the
/// monotonic clock, taken only from clean (uninterrupted) reads.
#[derive(Default)]
pub struct ClockOffset {
    last: Option<(i64, i64)>,
}

impl ClockOffset {
    /// Offset from CLOCK_REALTIME read before (`rt_before`) and after (`rt_after`) a
    /// CLOCK_MONOTONIC read `mono`. `mono − rt_before` errs late, never early, by at
    /// most the gap between the reads; a wide gap keeps the previous clean offset.
    pub fn update(&mut self, rt_before: i64, mono: i64, rt_after: i64) -> i64 {
        let fresh = mono - rt_before;
        match self.last {
            Some((offset, at)) if rt_after - rt_before > OFFSET_MAX_GAP_NS && mono - at <= OFFSET_MAX_AGE_NS => offset,
            _ => {
                if rt_after - rt_before <= OFFSET_MAX_GAP_NS || self.last.is_none() {
                    self.last = Some((fresh, mono));
                }
                fresh
            }
        }
    }
}

/// Arrival time of a frame on CLOCK_MONOTONIC: its release time with no delay.
pub fn arrival_ns(rx_realtime_ns: Option<i64>, realtime_now_ns: i64, mono_now_ns: i64) -> i64 {
    release_ns(rx_realtime_ns, realtime_now_ns, mono_now_ns, 0)
}

/// How the direction's thread should wait before its next round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Something is due now: no wait.
    Now,
    /// Busy-wait until this monotonic time (short, sparse queue only).
    Spin(i64),
    /// Sleep on the absolute timer until this monotonic time.
    Timer(i64),
    /// Nothing queued and nothing arriving: block until a frame arrives.
    Idle,
}

/// Decide the wait.
///
/// `next` / `following` are the release times of the two oldest queued frames.
/// `rx_poll_by` is the latest time at which the receive socket must be read again
/// (frames carry kernel timestamps, so reading them in batches costs no accuracy; the
/// bound keeps the socket buffer small). `idle` says the last receive found nothing.
pub fn plan_wait(now: i64, next: Option<i64>, following: Option<i64>, rx_poll_by: i64, idle: bool) -> Wait {
    let t = match next {
        Some(t) => t,
        None => return if idle { Wait::Idle } else { Wait::Timer(rx_poll_by.max(now)) },
    };
    if t <= now {
        return Wait::Now;
    }
    let sparse = match following {
        Some(f) => f - t >= SPARSE_GAP_NS,
        None => true,
    };
    if sparse {
        if t - now <= SPIN_MAX_NS {
            return Wait::Spin(t);
        }
        return Wait::Timer((t - SPIN_LEAD_NS).min(rx_poll_by));
    }
    Wait::Timer(t.min(rx_poll_by))
}

/// Whether a frame released at `release` may be sent at `now` (never early).
pub fn is_due(release: i64, now: i64) -> bool {
    now >= release
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    #[test]
    fn release_is_timestamp_plus_delay_on_the_monotonic_clock() {
        // Frame stamped 300 µs before it was read; realtime and monotonic differ by 1e12.
        let rt_now = 1_000_000_000_000_000;
        let mono_now = rt_now - 1_000_000_000_000;
        let r = release_ns(Some(rt_now - 300_000), rt_now, mono_now, 20 * MS);
        assert_eq!(r, mono_now - 300_000 + 20 * MS);
    }

    #[test]
    fn untrusted_timestamps_fall_back_to_read_time() {
        let rt_now = 5_000 * MS;
        let mono_now = 7 * MS;
        // In the future, absent, or older than a second: use now (late, never early).
        assert_eq!(release_ns(Some(rt_now + MS), rt_now, mono_now, 10 * MS), mono_now + 10 * MS);
        assert_eq!(release_ns(None, rt_now, mono_now, 10 * MS), mono_now + 10 * MS);
        assert_eq!(release_ns(Some(rt_now - 2_000 * MS), rt_now, mono_now, 10 * MS), mono_now + 10 * MS);
    }

    #[test]
    fn clock_offset_ignores_interrupted_reads() {
        let mut c = ClockOffset::default();
        let true_offset = -1_000_000_000_000i64;
        // Clean read: monotonic read 100 ns after the first realtime read.
        let rt = 5_000 * MS;
        assert_eq!(c.update(rt, rt + true_offset + 100, rt + 200), true_offset + 100);
        // Interrupted for 30 µs between the reads: the previous offset is kept.
        let rt = 5_001 * MS;
        assert_eq!(c.update(rt, rt + true_offset + 30_000, rt + 30_100), true_offset + 100);
        // A clean read replaces it (e.g. after the clock was stepped).
        let rt = 5_002 * MS;
        assert_eq!(c.update(rt, rt + true_offset - 7 * MS + 50, rt + 100), true_offset - 7 * MS + 50);
        // The kept offset expires: after 10 ms even an interrupted read is taken.
        let rt = 5_020 * MS;
        assert_eq!(c.update(rt, rt + true_offset + 40_000, rt + 40_100), true_offset + 40_000);
        // The first read is taken whatever its gap.
        let mut fresh = ClockOffset::default();
        assert_eq!(fresh.update(0, 50_000, 50_000), 50_000);
    }

    #[test]
    fn due_only_at_or_after_release() {
        assert!(!is_due(100, 99));
        assert!(is_due(100, 100));
        assert!(is_due(100, 101));
    }

    #[test]
    fn empty_queue_blocks_only_when_idle() {
        assert_eq!(plan_wait(0, None, None, 500_000, true), Wait::Idle);
        assert_eq!(plan_wait(0, None, None, 500_000, false), Wait::Timer(500_000));
    }

    #[test]
    fn due_frame_means_no_wait() {
        assert_eq!(plan_wait(10 * MS, Some(10 * MS), None, 11 * MS, false), Wait::Now);
    }

    #[test]
    fn sparse_queue_arms_timer_early_then_spins() {
        let now = 0;
        let t = 5 * MS;
        assert_eq!(plan_wait(now, Some(t), None, 100 * MS, false), Wait::Timer(t - SPIN_LEAD_NS));
        assert_eq!(plan_wait(t - 50_000, Some(t), None, 100 * MS, false), Wait::Spin(t));
        // A frame 2 ms behind still counts as sparse.
        assert_eq!(plan_wait(t - 50_000, Some(t), Some(t + 2 * MS), 100 * MS, false), Wait::Spin(t));
    }

    #[test]
    fn dense_queue_never_spins() {
        let t = 5 * MS;
        let w = plan_wait(t - 50_000, Some(t), Some(t + 10_000), 100 * MS, false);
        assert_eq!(w, Wait::Timer(t));
    }

    #[test]
    fn receive_deadline_bounds_the_sleep() {
        let w = plan_wait(0, Some(20 * MS), Some(20 * MS + 10), MS / 2, false);
        assert_eq!(w, Wait::Timer(MS / 2));
    }
}
