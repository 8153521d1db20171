//! A link whose rate is a trace of delivery opportunities, in mahimahi's format.
//!
//! A trace file has one line per opportunity: the millisecond at which the link may
//! deliver one MTU-sized packet. Several lines may name the same millisecond, and the file
//! loops: its last line's value is the period. This is `mm-link`'s format, read as it is.
//!
//! How an opportunity is used, as in mm-link: it carries up to `opportunity_bytes` (one
//! MTU-sized frame); a frame smaller than that leaves room that the next queued frame may
//! use in the same opportunity, a larger one continues in the next opportunities, and the
//! frame leaves at the opportunity that carries its last byte. An opportunity that finds
//! the queue empty, or whose remaining room no queued frame had arrived for, is lost.
//!
//! Pure logic on times in nanoseconds; the queue (queue.rs) asks for departures in order.

use std::sync::Arc;

pub const NS_PER_MS: i64 = 1_000_000;

#[derive(Debug, PartialEq)]
pub struct Trace {
    /// Opportunity times within one period, ms, non-decreasing.
    opportunities: Vec<u64>,
    period_ms: u64,
}

impl Trace {
    /// Parse mahimahi's trace format; errors name the line.
    pub fn parse(text: &str) -> Result<Trace, String> {
        let mut opportunities = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() {
                continue;
            }
            let ms: u64 = line
                .parse()
                .map_err(|_| format!("line {}: {:?} is not a whole number of milliseconds", i + 1, line))?;
            if let Some(&last) = opportunities.last() {
                if ms < last {
                    return Err(format!("line {}: {} ms comes before the previous line's {} ms", i + 1, ms, last));
                }
            }
            opportunities.push(ms);
        }
        let period_ms = *opportunities.last().ok_or("the trace has no delivery opportunity")?;
        if period_ms == 0 {
            return Err("the trace's last opportunity is at 0 ms: it has no period to loop over".into());
        }
        Ok(Trace { opportunities, period_ms })
    }

    pub fn period_ms(&self) -> u64 {
        self.period_ms
    }

    pub fn opportunities(&self) -> usize {
        self.opportunities.len()
    }

    /// The average rate the trace offers, bits per second.
    pub fn mean_bps(&self, opportunity_bytes: u64) -> u64 {
        (self.opportunities.len() as u64 * opportunity_bytes * 8 * 1000) / self.period_ms
    }

    /// Time of opportunity `k` (counted over all loops) from the trace's start, ns.
    fn time_ns(&self, k: u64) -> i64 {
        let n = self.opportunities.len() as u64;
        ((k / n) * self.period_ms + self.opportunities[(k % n) as usize]) as i64 * NS_PER_MS
    }

    /// The first opportunity at or after `t` ns from the trace's start.
    fn first_at_or_after(&self, t: i64) -> u64 {
        let n = self.opportunities.len() as u64;
        let period_ns = self.period_ms as i64 * NS_PER_MS;
        let t = t.max(0);
        let loops = (t / period_ns) as u64;
        let within = t % period_ns;
        let i = self.opportunities.partition_point(|&ms| (ms as i64 * NS_PER_MS) < within) as u64;
        loops * n + i
    }
}

/// Where a direction is in its trace.
#[derive(Debug)]
pub struct TraceDrain {
    trace: Arc<Trace>,
    opportunity_bytes: u64,
    /// The trace's time 0: the first frame offered to the queue.
    epoch: Option<i64>,
    /// The opportunity in use and the bytes left in it.
    cursor: u64,
    left: u64,
}

impl TraceDrain {
    pub fn new(trace: Arc<Trace>, opportunity_bytes: u64) -> TraceDrain {
        assert!(opportunity_bytes > 0);
        TraceDrain { trace, opportunity_bytes, epoch: None, cursor: 0, left: opportunity_bytes }
    }

    /// Start the trace at `t` unless it has started.
    pub fn start(&mut self, t: i64) {
        self.epoch.get_or_insert(t);
    }

    pub fn epoch(&self) -> Option<i64> {
        self.epoch
    }

    /// Departure of a frame of `bytes` that may start being sent at `start` (its arrival,
    /// or the previous frame's departure): the opportunity that carries its last byte.
    pub fn depart(&mut self, start: i64, bytes: u64) -> i64 {
        let epoch = *self.epoch.get_or_insert(start);
        let at = start - epoch;
        if self.left == 0 {
            self.cursor += 1;
            self.left = self.opportunity_bytes;
        }
        if self.trace.time_ns(self.cursor) < at {
            // The opportunities before `at` passed with nothing to carry: lost.
            self.cursor = self.trace.first_at_or_after(at);
            self.left = self.opportunity_bytes;
        }
        let mut remaining = bytes;
        loop {
            let take = remaining.min(self.left);
            self.left -= take;
            remaining -= take;
            if remaining == 0 {
                return epoch + self.trace.time_ns(self.cursor);
            }
            self.cursor += 1;
            self.left = self.opportunity_bytes;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OPP: u64 = 1514;
    const MS: i64 = NS_PER_MS;

    fn drain(text: &str) -> TraceDrain {
        TraceDrain::new(Arc::new(Trace::parse(text).unwrap()), OPP)
    }

    #[test]
    fn parses_mahimahi_files_and_names_the_bad_line() {
        let t = Trace::parse("1\n1\n3\n\n7\n").unwrap();
        assert_eq!((t.opportunities(), t.period_ms()), (4, 7));
        // 4 frames of 1514 bytes per 7 ms.
        assert_eq!(t.mean_bps(OPP), 4 * 1514 * 8 * 1000 / 7);
        assert_eq!(Trace::parse("1\nx\n").unwrap_err(), "line 2: \"x\" is not a whole number of milliseconds");
        assert!(Trace::parse("5\n3\n").unwrap_err().starts_with("line 2: 3 ms comes before"));
        assert!(Trace::parse("").unwrap_err().contains("no delivery opportunity"));
        assert!(Trace::parse("0\n0\n").unwrap_err().contains("no period"));
    }

    #[test]
    fn full_frames_leave_one_per_opportunity_and_the_trace_loops() {
        // Opportunities at 1, 2 and 4 ms; period 4 ms: then 5, 6, 8, 9 …
        let mut d = drain("1\n2\n4\n");
        let t0 = 1_000 * MS;
        let departures: Vec<i64> = (0..6).map(|_| d.depart(t0, OPP) - t0).collect();
        assert_eq!(departures, [1, 2, 4, 5, 6, 8].map(|m| m * MS));
    }

    #[test]
    fn small_frames_share_an_opportunity_and_large_ones_span_several() {
        let mut d = drain("1\n2\n3\n4\n");
        let t0 = 0;
        // 500 + 500 + 500 fit in the first opportunity's 1514 bytes; the fourth does not.
        let small: Vec<i64> = (0..4).map(|_| d.depart(t0, 500)).collect();
        assert_eq!(small, [MS, MS, MS, 2 * MS]);
        // 1028 bytes left at 2 ms; a 2000-byte frame takes them and 972 more at 3 ms.
        assert_eq!(d.depart(t0, 2000), 3 * MS);
    }

    #[test]
    fn a_frame_cannot_use_an_opportunity_that_passed_before_it_arrived() {
        let mut d = drain("1\n2\n3\n10\n");
        d.start(0);
        assert_eq!(d.depart(0, 100), MS);
        // Arriving at 1.5 ms: the rest of the 1 ms opportunity is gone; the next is at 2 ms.
        assert_eq!(d.depart(MS + MS / 2, 100), 2 * MS);
        // Idle until 4 ms: the 3 ms opportunity is lost, the next is at 10 ms.
        assert_eq!(d.depart(4 * MS, 1514), 10 * MS);
        // Far later, in the 100th loop: 1000 ms + 0.5 → the 1001 ms opportunity.
        assert_eq!(d.depart(1000 * MS + MS / 2, 1514), 1001 * MS);
    }

    #[test]
    fn a_frame_arriving_at_an_opportunity_leaves_at_it() {
        let mut d = drain("5\n5\n10\n");
        d.start(0);
        assert_eq!(d.depart(5 * MS, 1514), 5 * MS);
        assert_eq!(d.depart(5 * MS, 1514), 5 * MS);
        assert_eq!(d.depart(5 * MS, 1514), 10 * MS);
    }
}
