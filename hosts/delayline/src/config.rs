//! Command line: parsing and range checks, each failure one clear line.

use crate::ring::MAX_RING_BYTES;
use crate::schedule::{MAX_DELAY_NS, NS_PER_US};
use std::path::PathBuf;

pub const USAGE: &str = "usage: startlab-delayline --if-a IFA --if-b IFB --delay-ab-us N --delay-ba-us N \
--ring-ab-bytes N --ring-ba-bytes N --stats PATH [--cpu-a K --cpu-b K]";

#[derive(Debug, PartialEq, Eq)]
pub struct Config {
    pub if_a: String,
    pub if_b: String,
    pub delay_ab_ns: i64,
    pub delay_ba_ns: i64,
    pub ring_ab_bytes: u64,
    pub ring_ba_bytes: u64,
    pub stats: PathBuf,
    /// CPU of the a→b thread (receives on A) and of the b→a thread.
    pub cpu_a: Option<usize>,
    pub cpu_b: Option<usize>,
}

fn delay_ns(flag: &str, v: &str) -> Result<i64, String> {
    let us: i64 = v.trim().parse().map_err(|_| format!("{} wants whole microseconds, got {:?}", flag, v))?;
    if us < 0 {
        return Err(format!("{} must not be negative (got {} us)", flag, us));
    }
    if us > MAX_DELAY_NS / NS_PER_US {
        return Err(format!("{} of {} us is absurd: the maximum is 10 s (10000000 us)", flag, us));
    }
    Ok(us * NS_PER_US)
}

fn ring_bytes(flag: &str, v: &str) -> Result<u64, String> {
    let n: i64 = v.trim().parse().map_err(|_| format!("{} wants a byte count, got {:?}", flag, v))?;
    if n <= 0 {
        return Err(format!("{} must be positive: cannot allocate a ring of {} bytes", flag, n));
    }
    if n as u64 > MAX_RING_BYTES {
        return Err(format!("{}: cannot allocate a ring of {} bytes (maximum 4 GiB)", flag, n));
    }
    Ok(n as u64)
}

fn cpu(flag: &str, v: &str) -> Result<usize, String> {
    v.trim().parse().map_err(|_| format!("{} wants a CPU number, got {:?}", flag, v))
}

pub fn parse(args: &[String]) -> Result<Config, String> {
    let mut if_a = None;
    let mut if_b = None;
    let mut d_ab = None;
    let mut d_ba = None;
    let mut r_ab = None;
    let mut r_ba = None;
    let mut stats = None;
    let mut cpu_a = None;
    let mut cpu_b = None;
    let mut i = 0;
    while i < args.len() {
        let flag = args[i].as_str();
        let value = match args.get(i + 1) {
            Some(v) => v.as_str(),
            None => return Err(format!("{} needs a value\n{}", flag, USAGE)),
        };
        match flag {
            "--if-a" => if_a = Some(value.to_string()),
            "--if-b" => if_b = Some(value.to_string()),
            "--delay-ab-us" => d_ab = Some(delay_ns(flag, value)?),
            "--delay-ba-us" => d_ba = Some(delay_ns(flag, value)?),
            "--ring-ab-bytes" => r_ab = Some(ring_bytes(flag, value)?),
            "--ring-ba-bytes" => r_ba = Some(ring_bytes(flag, value)?),
            "--stats" => stats = Some(PathBuf::from(value)),
            "--cpu-a" => cpu_a = Some(cpu(flag, value)?),
            "--cpu-b" => cpu_b = Some(cpu(flag, value)?),
            _ => return Err(format!("unknown option {}\n{}", flag, USAGE)),
        }
        i += 2;
    }
    fn need<T>(v: Option<T>, flag: &str) -> Result<T, String> {
        v.ok_or_else(|| format!("missing {}\n{}", flag, USAGE))
    }
    let cfg = Config {
        if_a: need(if_a, "--if-a")?,
        if_b: need(if_b, "--if-b")?,
        delay_ab_ns: need(d_ab, "--delay-ab-us")?,
        delay_ba_ns: need(d_ba, "--delay-ba-us")?,
        ring_ab_bytes: need(r_ab, "--ring-ab-bytes")?,
        ring_ba_bytes: need(r_ba, "--ring-ba-bytes")?,
        stats: need(stats, "--stats")?,
        cpu_a,
        cpu_b,
    };
    if cfg.if_a == cfg.if_b {
        return Err(format!("--if-a and --if-b are both {:?}: the line needs two interfaces", cfg.if_a));
    }
    Ok(cfg)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(|x| x.to_string()).collect()
    }

    const OK: &str = "--if-a a --if-b b --delay-ab-us 20000 --delay-ba-us 5 --ring-ab-bytes 1000 --ring-ba-bytes 2000 --stats /tmp/s.json";

    #[test]
    fn parses_a_full_command_line() {
        let c = parse(&args(&format!("{} --cpu-a 0 --cpu-b 1", OK))).unwrap();
        assert_eq!(c.delay_ab_ns, 20_000_000);
        assert_eq!(c.delay_ba_ns, 5_000);
        assert_eq!(c.ring_ba_bytes, 2000);
        assert_eq!((c.cpu_a, c.cpu_b), (Some(0), Some(1)));
    }

    #[test]
    fn rejects_bad_delays_and_rings() {
        let e = parse(&args(&OK.replace("20000", "-1"))).unwrap_err();
        assert!(e.contains("negative"), "{}", e);
        let e = parse(&args(&OK.replace("20000", "10000001"))).unwrap_err();
        assert!(e.contains("absurd"), "{}", e);
        assert!(parse(&args(&OK.replace("20000", "10000000"))).is_ok());
        let e = parse(&args(&OK.replace("1000 ", "0 "))).unwrap_err();
        assert!(e.contains("cannot allocate"), "{}", e);
        let e = parse(&args(&OK.replace("1000 ", "4294967297 "))).unwrap_err();
        assert!(e.contains("4 GiB"), "{}", e);
    }

    #[test]
    fn rejects_missing_and_unknown_options() {
        assert!(parse(&args("--if-a a")).unwrap_err().contains("missing --if-b"));
        assert!(parse(&args(&format!("{} --frob 1", OK))).unwrap_err().contains("unknown option"));
        assert!(parse(&args(&OK.replace("--if-b b", "--if-b a"))).is_err());
    }
}
