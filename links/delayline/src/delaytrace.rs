//! A delay that changes over time: a path whose propagation delay steps, as a LEO
//! satellite path's does when the terminal is handed to another satellite.
//!
//! A delay trace file has one line per step, `DURATION_MS EXTRA_US`: for that many
//! milliseconds every frame entering the delay gets that many microseconds more than its
//! FIFO's fixed delay. Lines starting with `#` are comments. The file loops. Time counts
//! from an epoch the caller gives (the line's start unless told), so whoever started the
//! line knows which step applies when.
//!
//! A step down does not reorder: the delay stage holds a frame behind its predecessor in
//! the same FIFO (stage.rs), as a FIFO path would; a step up spaces frames apart.

pub const NS_PER_MS: i64 = 1_000_000;
const NS_PER_US: i64 = 1_000;
/// Largest extra delay accepted: 10 s, as the fixed delays.
const MAX_EXTRA_US: i64 = 10_000_000;

#[derive(Debug, PartialEq)]
pub struct DelayTrace {
    /// (start of the step within one period, extra delay), ns; starts rise from 0.
    steps: Vec<(i64, i64)>,
    period_ns: i64,
}

impl DelayTrace {
    /// Parse the format above; errors name the line.
    pub fn parse(text: &str) -> Result<DelayTrace, String> {
        let mut steps = Vec::new();
        let mut at = 0i64;
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let words: Vec<&str> = line.split_whitespace().collect();
            let (ms, us) = match words.as_slice() {
                [ms, us] => (ms.parse::<i64>(), us.parse::<i64>()),
                _ => return Err(format!("line {}: {:?} is not `DURATION_MS EXTRA_US`", i + 1, line)),
            };
            let ms = ms.ok().filter(|&v| v > 0).ok_or(format!("line {}: the duration must be a whole number of ms above 0", i + 1))?;
            let us = us
                .ok()
                .filter(|&v| (0..=MAX_EXTRA_US).contains(&v))
                .ok_or(format!("line {}: the extra delay must be whole µs in 0..{}", i + 1, MAX_EXTRA_US))?;
            steps.push((at, us * NS_PER_US));
            at += ms * NS_PER_MS;
        }
        if steps.is_empty() {
            return Err("the delay trace has no step".into());
        }
        Ok(DelayTrace { steps, period_ns: at })
    }

    /// The extra delay `t` ns after the epoch (before it: the first step's).
    pub fn extra_ns(&self, t: i64) -> i64 {
        let within = t.max(0) % self.period_ns;
        let i = self.steps.partition_point(|&(start, _)| start <= within);
        self.steps[i - 1].1
    }

    pub fn max_extra_ns(&self) -> i64 {
        self.steps.iter().map(|s| s.1).max().unwrap_or(0)
    }

    pub fn period_ns(&self) -> i64 {
        self.period_ns
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_loop_from_the_epoch() {
        let t = DelayTrace::parse("# two slots\n15000 4000\n\n5000 0\n").unwrap();
        assert_eq!(t.period_ns(), 20_000 * NS_PER_MS);
        assert_eq!(t.max_extra_ns(), 4_000_000);
        assert_eq!(t.extra_ns(-5), 4_000_000);
        assert_eq!(t.extra_ns(0), 4_000_000);
        assert_eq!(t.extra_ns(15_000 * NS_PER_MS - 1), 4_000_000);
        assert_eq!(t.extra_ns(15_000 * NS_PER_MS), 0);
        assert_eq!(t.extra_ns(20_000 * NS_PER_MS), 4_000_000);
        assert_eq!(t.extra_ns(36_000 * NS_PER_MS), 0);
    }

    #[test]
    fn bad_lines_are_named() {
        assert!(DelayTrace::parse("").unwrap_err().contains("no step"));
        assert!(DelayTrace::parse("10 5\n0 3\n").unwrap_err().starts_with("line 2"));
        assert!(DelayTrace::parse("10 -1\n").unwrap_err().starts_with("line 1"));
        assert!(DelayTrace::parse("10\n").unwrap_err().contains("DURATION_MS EXTRA_US"));
        assert!(DelayTrace::parse("10 20000000\n").unwrap_err().contains("extra delay"));
    }
}
