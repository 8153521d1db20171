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

/// How early the timer is armed before a sparse frame's release and how long the rest may
/// be spun. startlab derives both from the host's measured timer wake-up latency (the
/// `probe` subcommand); the defaults are the constants of the machine the delay line was
/// first built on, where timerfd woke 40–60 µs late, and stay selectable for comparison.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Arm the timer this much before a sparse frame's release, then spin the rest.
    pub spin_lead_ns: i64,
    /// Never spin longer than this.
    pub spin_max_ns: i64,
}

/// The queue counts as sparse when the frame after the next one is released at least
/// this many spin windows later (or there is none): spinning then costs at most a tenth
/// of a core, whatever the window.
pub const SPARSE_GAP_SPINS: i64 = 10;

impl Tuning {
    pub const FIXED: Tuning = Tuning { spin_lead_ns: 80 * NS_PER_US, spin_max_ns: 100 * NS_PER_US };

    pub fn sparse_gap_ns(&self) -> i64 {
        SPARSE_GAP_SPINS * self.spin_max_ns
    }
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning::FIXED
    }
}

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
pub fn plan_wait(tuning: &Tuning, now: i64, next: Option<i64>, following: Option<i64>, rx_poll_by: i64, idle: bool) -> Wait {
    let t = match next {
        Some(t) => t,
        None => return if idle { Wait::Idle } else { Wait::Timer(rx_poll_by.max(now)) },
    };
    if t <= now {
        return Wait::Now;
    }
    let sparse = match following {
        Some(f) => f - t >= tuning.sparse_gap_ns(),
        None => true,
    };
    if sparse {
        if t - now <= tuning.spin_max_ns {
            return Wait::Spin(t);
        }
        return Wait::Timer((t - tuning.spin_lead_ns).min(rx_poll_by));
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
        assert_eq!(plan_wait(&Tuning::FIXED, 0, None, None, 500_000, true), Wait::Idle);
        assert_eq!(plan_wait(&Tuning::FIXED, 0, None, None, 500_000, false), Wait::Timer(500_000));
    }

    #[test]
    fn due_frame_means_no_wait() {
        assert_eq!(plan_wait(&Tuning::FIXED, 10 * MS, Some(10 * MS), None, 11 * MS, false), Wait::Now);
    }

    #[test]
    fn sparse_queue_arms_timer_early_then_spins() {
        let now = 0;
        let t = 5 * MS;
        assert_eq!(plan_wait(&Tuning::FIXED, now, Some(t), None, 100 * MS, false), Wait::Timer(t - Tuning::FIXED.spin_lead_ns));
        assert_eq!(plan_wait(&Tuning::FIXED, t - 50_000, Some(t), None, 100 * MS, false), Wait::Spin(t));
        // A frame 2 ms behind still counts as sparse.
        assert_eq!(plan_wait(&Tuning::FIXED, t - 50_000, Some(t), Some(t + 2 * MS), 100 * MS, false), Wait::Spin(t));
    }

    #[test]
    fn dense_queue_never_spins() {
        let t = 5 * MS;
        let w = plan_wait(&Tuning::FIXED, t - 50_000, Some(t), Some(t + 10_000), 100 * MS, false);
        assert_eq!(w, Wait::Timer(t));
    }

    #[test]
    fn a_measured_tuning_moves_the_spin_window() {
        // A host whose timer wakes up to 300 µs late: armed 300 µs early, spun up to 350 µs,
        // and a queue is sparse only with 3.5 ms between releases (spinning ≤ 1/10 core).
        let tuning = Tuning { spin_lead_ns: 300_000, spin_max_ns: 350_000 };
        let t = 10 * MS;
        assert_eq!(plan_wait(&tuning, 0, Some(t), None, 100 * MS, false), Wait::Timer(t - 300_000));
        assert_eq!(plan_wait(&tuning, t - 340_000, Some(t), None, 100 * MS, false), Wait::Spin(t));
        assert_eq!(plan_wait(&tuning, t - 340_000, Some(t), Some(t + 3 * MS), 100 * MS, false), Wait::Timer(t));
        assert_eq!(plan_wait(&tuning, t - 340_000, Some(t), Some(t + 4 * MS), 100 * MS, false), Wait::Spin(t));
    }

    #[test]
    fn receive_deadline_bounds_the_sleep() {
        let w = plan_wait(&Tuning::FIXED, 0, Some(20 * MS), Some(20 * MS + 10), MS / 2, false);
        assert_eq!(w, Wait::Timer(MS / 2));
    }
}
