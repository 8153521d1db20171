//! Command line: parsing and range checks, each failure one clear line.

use crate::queue::{Codel, FqCodel, Pie, Policy, QueueConfig, Red, TraceLink, DEFAULT_LOW_DSCP};
use crate::ring::MAX_RING_BYTES;
use crate::schedule::{Tuning, MAX_DELAY_NS, NS_PER_US};
use crate::trace::Trace;
use std::path::PathBuf;
use std::sync::Arc;

pub const USAGE: &str = "usage: startlab-delayline --if-a IFA --if-b IFB --delay-ab-us N --delay-ba-us N \
--ring-ab-bytes N --ring-ba-bytes N --stats PATH [--cpu-a K --cpu-b K]
  bottleneck per direction D (ab or ba), before the delay:
  [--rate-D-bps N --limit-D-bytes N [--policy-D droptail|pushout|red|codel|pie|fq_codel] [--low-dscp-D LIST] [--red-D MIN,MAX,P]
   [--codel-D TARGET_US,INTERVAL_US[,ecn] (codel's and each flow's of fq_codel; default 5000,100000: RFC 8289's;
    ecn marks ECN-capable frames)]
   [--pie-D TARGET_US,TUPDATE_US[,ecn] (default 15000,15000: RFC 8033's)]]
  or a trace of delivery opportunities (mahimahi's format) instead of the rate:
  [--trace-D PATH [--opportunity-D-bytes N (default 1514: an MTU-sized packet's frame)] --limit-D-bytes N ...]
  and random (Bernoulli) loss of arriving frames, before the queue: [--loss-D P]
  per-pair delays per direction (lines SRC_IPV4 DST_IPV4 DELAY_US): [--pairs-D PATH]
  a delay that steps over time, added per direction (lines DURATION_MS EXTRA_US, looping from
  the epoch, default the line's start): [--delay-trace-D PATH] [--delay-trace-epoch-ns N]
  the spin window before sparse releases (default 80 and 100): [--spin-lead-us N --spin-max-us N]
or: startlab-delayline probe --help";

/// Longest spin window accepted (5 ms): beyond it a late timer is not worth a core.
const MAX_SPIN_US: u64 = 5_000;
/// Largest bottleneck rate accepted (1 Tbit/s): far above what a veth carries.
const MAX_RATE_BPS: u64 = 1_000_000_000_000;
/// A trace opportunity carries one MTU-sized packet: 1500 bytes of IP in an Ethernet frame.
pub const DEFAULT_OPPORTUNITY_BYTES: u64 = 1514;
/// Largest opportunity accepted: a 64 KiB GSO frame.
const MAX_OPPORTUNITY_BYTES: u64 = 65_536;

#[derive(Debug, PartialEq)]
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
    /// Bottleneck queues a→b and b→a (None: frames go straight to the delay).
    pub queue_ab: Option<QueueConfig>,
    pub queue_ba: Option<QueueConfig>,
    /// Files of per-pair delays (read at start by `pairs::parse`).
    pub pairs_ab: Option<PathBuf>,
    pub pairs_ba: Option<PathBuf>,
    /// Files of delays that step over time, added to each direction's (delaytrace.rs), and
    /// the CLOCK_MONOTONIC time their steps count from (None: the line's start).
    pub delay_trace_ab: Option<PathBuf>,
    pub delay_trace_ba: Option<PathBuf>,
    pub delay_trace_epoch_ns: Option<i64>,
    /// Timer lead and spin window for sparse releases.
    pub tuning: Tuning,
}

/// The queue flags of one direction, as given.
#[derive(Default)]
struct QueueFlags {
    rate: Option<u64>,
    trace: Option<PathBuf>,
    opportunity: Option<u64>,
    limit: Option<u64>,
    policy: Option<String>,
    low_dscp: Option<u64>,
    red: Option<Red>,
    codel: Option<Codel>,
    pie: Option<Pie>,
    loss: Option<f64>,
}

fn positive(flag: &str, v: &str, what: &str, max: u64) -> Result<u64, String> {
    let n: i64 = v.trim().parse().map_err(|_| format!("{} wants {}, got {:?}", flag, what, v))?;
    if n <= 0 {
        return Err(format!("{} must be positive (got {})", flag, n));
    }
    if n as u64 > max {
        return Err(format!("{} of {} is beyond the maximum of {}", flag, n, max));
    }
    Ok(n as u64)
}

fn dscp_set(flag: &str, v: &str) -> Result<u64, String> {
    let mut mask = 0u64;
    for part in v.split(',').map(|p| p.trim()).filter(|p| !p.is_empty()) {
        let d: u32 = part.parse().map_err(|_| format!("{} wants DSCP values 0..63 separated by commas, got {:?}", flag, v))?;
        if d > 63 {
            return Err(format!("{}: DSCP {} is out of range 0..63", flag, d));
        }
        mask |= 1u64 << d;
    }
    Ok(mask)
}

fn red(flag: &str, v: &str) -> Result<Red, String> {
    let parts: Vec<&str> = v.split(',').map(|p| p.trim()).collect();
    let bad = || format!("{} wants MIN_BYTES,MAX_BYTES,MAX_P (e.g. 30000,90000,0.1), got {:?}", flag, v);
    if parts.len() != 3 {
        return Err(bad());
    }
    let min_bytes: u64 = parts[0].parse().map_err(|_| bad())?;
    let max_bytes: u64 = parts[1].parse().map_err(|_| bad())?;
    let max_p: f64 = parts[2].parse().map_err(|_| bad())?;
    if min_bytes >= max_bytes || !(max_p > 0.0 && max_p <= 1.0) {
        return Err(format!("{}: needs MIN < MAX and 0 < MAX_P <= 1, got {:?}", flag, v));
    }
    Ok(Red { min_bytes, max_bytes, max_p })
}

/// `A_US,B_US[,ecn]`: two times in µs, the first below the second, and ECN marking.
fn two_times_ecn(flag: &str, v: &str, names: &str) -> Result<(i64, i64, bool), String> {
    let parts: Vec<&str> = v.split(',').map(|p| p.trim()).collect();
    let bad = || format!("{} wants {} or {},ecn in µs, got {:?}", flag, names, names, v);
    let ecn = match parts.get(2) {
        None => false,
        Some(&"ecn") if parts.len() == 3 => true,
        _ => return Err(bad()),
    };
    if parts.len() < 2 {
        return Err(bad());
    }
    let a: i64 = parts[0].parse().map_err(|_| bad())?;
    let b: i64 = parts[1].parse().map_err(|_| bad())?;
    if a <= 0 || b <= 0 || b > MAX_DELAY_NS / NS_PER_US {
        return Err(format!("{}: needs times above 0 and at most 10 s, got {:?}", flag, v));
    }
    Ok((a * NS_PER_US, b * NS_PER_US, ecn))
}

/// `--codel-D TARGET_US,INTERVAL_US[,ecn]`.
fn codel(flag: &str, v: &str) -> Result<Codel, String> {
    let (target_ns, interval_ns, ecn) = two_times_ecn(flag, v, "TARGET_US,INTERVAL_US")?;
    if interval_ns <= target_ns {
        return Err(format!("{}: needs 0 < TARGET < INTERVAL, got {:?}", flag, v));
    }
    Ok(Codel { target_ns, interval_ns, ecn })
}

/// `--pie-D TARGET_US,TUPDATE_US[,ecn]`.
fn pie(flag: &str, v: &str) -> Result<Pie, String> {
    let (target_ns, tupdate_ns, ecn) = two_times_ecn(flag, v, "TARGET_US,TUPDATE_US")?;
    Ok(Pie { target_ns, tupdate_ns, ecn })
}

/// The trace named by --trace-D, read and checked.
fn trace_link(dir: &str, path: &PathBuf, opportunity: Option<u64>) -> Result<TraceLink, String> {
    let flag = format!("--trace-{}", dir);
    let text = std::fs::read_to_string(path).map_err(|e| format!("{} {}: {}", flag, path.display(), e))?;
    let trace = Trace::parse(&text).map_err(|e| format!("{} {}: {}", flag, path.display(), e))?;
    Ok(TraceLink {
        trace: Arc::new(trace),
        path: path.display().to_string(),
        opportunity_bytes: opportunity.unwrap_or(DEFAULT_OPPORTUNITY_BYTES),
    })
}

fn queue_config(dir: &str, f: QueueFlags) -> Result<Option<QueueConfig>, String> {
    if f.rate.is_some() && f.trace.is_some() {
        return Err(format!("--rate-{d}-bps and --trace-{d}: a trace link's rate is its trace's; give one", d = dir));
    }
    if f.opportunity.is_some() && f.trace.is_none() {
        return Err(format!("--opportunity-{d}-bytes applies to --trace-{d} only", d = dir));
    }
    let trace = match &f.trace {
        Some(path) => Some(trace_link(dir, path, f.opportunity)?),
        None => None,
    };
    let rate = match (f.rate, &trace) {
        (Some(r), _) => r,
        (None, Some(t)) => t.trace.mean_bps(t.opportunity_bytes).max(1),
        (None, None) => {
            if f.limit.is_some() || f.policy.is_some() || f.low_dscp.is_some() || f.red.is_some() || f.codel.is_some()
                || f.pie.is_some() || f.loss.is_some()
            {
                return Err(format!("queue options for {} need --rate-{}-bps or --trace-{}", dir, dir, dir));
            }
            return Ok(None);
        }
    };
    let limit = f.limit.ok_or_else(|| format!("a bottleneck for {} needs --limit-{}-bytes (its buffer)", dir, dir))?;
    let policy = match f.policy.as_deref().unwrap_or("droptail") {
        "droptail" => Policy::DropTail,
        "pushout" => Policy::PushOut,
        "red" => Policy::Red(f.red.unwrap_or_else(|| Red::for_limit(limit))),
        "codel" => Policy::Codel(f.codel.unwrap_or(Codel::DEFAULT)),
        "pie" => Policy::Pie(f.pie.unwrap_or(Pie::DEFAULT)),
        "fq_codel" => Policy::FqCodel(FqCodel { codel: f.codel.unwrap_or(Codel::DEFAULT), ..FqCodel::DEFAULT }),
        other => {
            return Err(format!("--policy-{}: unknown policy {:?}: use droptail, pushout, red, codel, pie or fq_codel",
                               dir, other))
        }
    };
    if f.red.is_some() && !matches!(policy, Policy::Red(_)) {
        return Err(format!("--red-{} applies to --policy-{} red only", dir, dir));
    }
    if f.codel.is_some() && !matches!(policy, Policy::Codel(_) | Policy::FqCodel(_)) {
        return Err(format!("--codel-{} applies to --policy-{} codel or fq_codel only", dir, dir));
    }
    if f.pie.is_some() && !matches!(policy, Policy::Pie(_)) {
        return Err(format!("--pie-{} applies to --policy-{} pie only", dir, dir));
    }
    let loss = f.loss.unwrap_or(0.0);
    Ok(Some(QueueConfig { rate_bps: rate, limit_bytes: limit, policy, low_dscp: f.low_dscp.unwrap_or(1u64 << DEFAULT_LOW_DSCP), trace, loss }))
}

/// A loss probability: 0 ≤ p < 1.
fn probability(flag: &str, v: &str) -> Result<f64, String> {
    let p: f64 = v.trim().parse().map_err(|_| format!("{} wants a probability, got {:?}", flag, v))?;
    if !(0.0..1.0).contains(&p) {
        return Err(format!("{} wants a probability from 0 up to (not including) 1, got {}", flag, p));
    }
    Ok(p)
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
    let mut q_ab = QueueFlags::default();
    let mut q_ba = QueueFlags::default();
    let mut pairs_ab = None;
    let mut pairs_ba = None;
    let mut delay_trace_ab = None;
    let mut delay_trace_ba = None;
    let mut delay_trace_epoch_ns = None;
    let mut spin_lead = None;
    let mut spin_max = None;
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
            "--rate-ab-bps" => q_ab.rate = Some(positive(flag, value, "bits per second", MAX_RATE_BPS)?),
            "--rate-ba-bps" => q_ba.rate = Some(positive(flag, value, "bits per second", MAX_RATE_BPS)?),
            "--trace-ab" => q_ab.trace = Some(PathBuf::from(value)),
            "--trace-ba" => q_ba.trace = Some(PathBuf::from(value)),
            "--opportunity-ab-bytes" => q_ab.opportunity = Some(positive(flag, value, "a byte count", MAX_OPPORTUNITY_BYTES)?),
            "--opportunity-ba-bytes" => q_ba.opportunity = Some(positive(flag, value, "a byte count", MAX_OPPORTUNITY_BYTES)?),
            "--loss-ab" => q_ab.loss = Some(probability(flag, value)?),
            "--loss-ba" => q_ba.loss = Some(probability(flag, value)?),
            "--limit-ab-bytes" => q_ab.limit = Some(positive(flag, value, "a byte count", MAX_RING_BYTES)?),
            "--limit-ba-bytes" => q_ba.limit = Some(positive(flag, value, "a byte count", MAX_RING_BYTES)?),
            "--policy-ab" => q_ab.policy = Some(value.to_string()),
            "--policy-ba" => q_ba.policy = Some(value.to_string()),
            "--low-dscp-ab" => q_ab.low_dscp = Some(dscp_set(flag, value)?),
            "--low-dscp-ba" => q_ba.low_dscp = Some(dscp_set(flag, value)?),
            "--red-ab" => q_ab.red = Some(red(flag, value)?),
            "--red-ba" => q_ba.red = Some(red(flag, value)?),
            "--codel-ab" => q_ab.codel = Some(codel(flag, value)?),
            "--codel-ba" => q_ba.codel = Some(codel(flag, value)?),
            "--pie-ab" => q_ab.pie = Some(pie(flag, value)?),
            "--pie-ba" => q_ba.pie = Some(pie(flag, value)?),
            "--pairs-ab" => pairs_ab = Some(PathBuf::from(value)),
            "--pairs-ba" => pairs_ba = Some(PathBuf::from(value)),
            "--delay-trace-ab" => delay_trace_ab = Some(PathBuf::from(value)),
            "--delay-trace-ba" => delay_trace_ba = Some(PathBuf::from(value)),
            "--delay-trace-epoch-ns" => {
                delay_trace_epoch_ns = Some(value.trim().parse::<i64>().ok().filter(|&v| v >= 0).ok_or(format!("{} wants a CLOCK_MONOTONIC time in ns, got {:?}", flag, value))?)
            }
            "--spin-lead-us" => spin_lead = Some(positive(flag, value, "microseconds", MAX_SPIN_US)? as i64 * NS_PER_US),
            "--spin-max-us" => spin_max = Some(positive(flag, value, "microseconds", MAX_SPIN_US)? as i64 * NS_PER_US),
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
        queue_ab: queue_config("ab", q_ab)?,
        queue_ba: queue_config("ba", q_ba)?,
        pairs_ab,
        pairs_ba,
        delay_trace_ab,
        delay_trace_ba,
        delay_trace_epoch_ns,
        tuning: Tuning {
            spin_lead_ns: spin_lead.unwrap_or(Tuning::FIXED.spin_lead_ns),
            spin_max_ns: spin_max.unwrap_or(Tuning::FIXED.spin_max_ns),
        },
    };
    if cfg.tuning.spin_lead_ns > cfg.tuning.spin_max_ns {
        return Err(format!(
            "--spin-lead-us ({}) must not exceed --spin-max-us ({}): the rest of an early wake-up is spun",
            cfg.tuning.spin_lead_ns / NS_PER_US,
            cfg.tuning.spin_max_ns / NS_PER_US
        ));
    }
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

    #[test]
    fn takes_a_spin_window_or_keeps_the_fixed_one() {
        assert_eq!(parse(&args(OK)).unwrap().tuning, Tuning::FIXED);
        let c = parse(&args(&format!("{} --spin-lead-us 250 --spin-max-us 300", OK))).unwrap();
        assert_eq!(c.tuning, Tuning { spin_lead_ns: 250_000, spin_max_ns: 300_000 });
        let e = parse(&args(&format!("{} --spin-lead-us 400 --spin-max-us 300", OK))).unwrap_err();
        assert!(e.contains("must not exceed"), "{}", e);
        assert!(parse(&args(&format!("{} --spin-max-us 6000", OK))).unwrap_err().contains("maximum"));
    }

    #[test]
    fn without_queue_flags_there_is_no_queue() {
        let c = parse(&args(OK)).unwrap();
        assert_eq!((c.queue_ab, c.queue_ba), (None, None));
        assert_eq!((c.pairs_ab, c.pairs_ba), (None, None));
    }

    #[test]
    fn takes_a_pair_table_per_direction() {
        let c = parse(&args(&format!("{} --pairs-ba /w/pairs-ba.txt", OK))).unwrap();
        assert_eq!(c.pairs_ba, Some(PathBuf::from("/w/pairs-ba.txt")));
        assert_eq!(c.pairs_ab, None);
    }

    #[test]
    fn takes_a_delay_trace_per_direction_and_its_epoch() {
        let c = parse(&args(&format!("{} --delay-trace-ba /w/leo.delays --delay-trace-epoch-ns 1234", OK))).unwrap();
        assert_eq!((c.delay_trace_ab, c.delay_trace_ba), (None, Some(PathBuf::from("/w/leo.delays"))));
        assert_eq!(c.delay_trace_epoch_ns, Some(1234));
        assert_eq!(parse(&args(OK)).unwrap().delay_trace_epoch_ns, None);
        let e = parse(&args(&format!("{} --delay-trace-epoch-ns -5", OK))).unwrap_err();
        assert!(e.contains("CLOCK_MONOTONIC"), "{}", e);
    }

    #[test]
    fn parses_queue_flags_per_direction() {
        let c = parse(&args(&format!(
            "{} --rate-ab-bps 1500000 --limit-ab-bytes 30000 --policy-ab pushout --low-dscp-ab 14,12 \
             --rate-ba-bps 10000000 --limit-ba-bytes 50000",
            OK
        )))
        .unwrap();
        let ab = c.queue_ab.unwrap();
        assert_eq!((ab.rate_bps, ab.limit_bytes, ab.policy), (1_500_000, 30_000, Policy::PushOut));
        assert_eq!(ab.low_dscp, (1 << 14) | (1 << 12));
        let ba = c.queue_ba.unwrap();
        assert_eq!(ba.policy, Policy::DropTail);
        assert_eq!(ba.low_dscp, 1 << 14, "AF13 by default");
        let c = parse(&args(&format!("{} --rate-ab-bps 8000 --limit-ab-bytes 4000 --policy-ab red", OK))).unwrap();
        assert_eq!(c.queue_ab.unwrap().policy, Policy::Red(Red { min_bytes: 1000, max_bytes: 3000, max_p: 0.1 }));
        let c = parse(&args(&format!("{} --rate-ab-bps 8000 --limit-ab-bytes 4000 --policy-ab red --red-ab 500,2500,0.2", OK))).unwrap();
        assert_eq!(c.queue_ab.unwrap().policy, Policy::Red(Red { min_bytes: 500, max_bytes: 2500, max_p: 0.2 }));
    }

    #[test]
    fn rejects_inconsistent_queue_flags() {
        let bad = |extra: &str| parse(&args(&format!("{} {}", OK, extra))).unwrap_err();
        assert!(bad("--limit-ab-bytes 1000").contains("need --rate-ab-bps"));
        assert!(bad("--rate-ab-bps 1000").contains("needs --limit-ab-bytes"));
        assert!(bad("--rate-ab-bps 0 --limit-ab-bytes 1").contains("positive"));
        assert!(bad("--rate-ab-bps 1000 --limit-ab-bytes 1000 --policy-ab fq").contains("unknown policy"));
        assert!(bad("--rate-ab-bps 1000 --limit-ab-bytes 1000 --pie-ab 15000,15000").contains("pie only"));
        assert!(bad("--rate-ba-bps 1000 --limit-ba-bytes 1000 --low-dscp-ba 64").contains("out of range"));
        assert!(bad("--rate-ba-bps 1000 --limit-ba-bytes 1000 --low-dscp-ba x").contains("DSCP values"));
        assert!(bad("--rate-ab-bps 1000 --limit-ab-bytes 1000 --red-ab 1,2,0.1").contains("red only"));
        assert!(bad("--rate-ab-bps 1000 --limit-ab-bytes 1000 --policy-ab red --red-ab 5,2,0.1").contains("MIN < MAX"));
        assert!(bad("--rate-ab-bps 1000 --limit-ab-bytes 1000 --codel-ab 5000,100000").contains("codel only"));
        assert!(bad("--rate-ab-bps 1000 --limit-ab-bytes 1000 --policy-ab codel --codel-ab 5000,100000,red").contains("TARGET_US,INTERVAL_US"));
        assert!(bad("--rate-ab-bps 1000 --limit-ab-bytes 1000 --policy-ab codel --codel-ab 5000,4000").contains("TARGET < INTERVAL"));
        let c = parse(&args(&format!("{} --rate-ab-bps 8000 --limit-ab-bytes 4000 --policy-ab codel", OK))).unwrap();
        assert_eq!(c.queue_ab.unwrap().policy, Policy::Codel(Codel::DEFAULT));
        let c = parse(&args(&format!("{} --rate-ab-bps 8000 --limit-ab-bytes 4000 --policy-ab codel --codel-ab 2000,50000,ecn", OK))).unwrap();
        assert_eq!(c.queue_ab.unwrap().policy, Policy::Codel(Codel { target_ns: 2_000_000, interval_ns: 50_000_000, ecn: true }));
        let c = parse(&args(&format!("{} --rate-ab-bps 8000 --limit-ab-bytes 4000 --policy-ab pie", OK))).unwrap();
        assert_eq!(c.queue_ab.unwrap().policy, Policy::Pie(Pie::DEFAULT));
        let c = parse(&args(&format!("{} --rate-ab-bps 8000 --limit-ab-bytes 4000 --policy-ab pie --pie-ab 20000,10000,ecn", OK))).unwrap();
        assert_eq!(c.queue_ab.unwrap().policy, Policy::Pie(Pie { target_ns: 20_000_000, tupdate_ns: 10_000_000, ecn: true }));
    }

    #[test]
    fn a_trace_replaces_the_rate() {
        let dir = std::env::temp_dir().join(format!("startlab-delayline-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let good = dir.join("good.trace");
        std::fs::write(&good, "1\n1\n2\n").unwrap();
        let bad_file = dir.join("bad.trace");
        std::fs::write(&bad_file, "3\n2\n").unwrap();
        let c = parse(&args(&format!("{} --trace-ab {} --limit-ab-bytes 30000", OK, good.display()))).unwrap();
        let ab = c.queue_ab.unwrap();
        let t = ab.trace.clone().unwrap();
        assert_eq!((t.trace.opportunities(), t.trace.period_ms(), t.opportunity_bytes), (3, 2, 1514));
        // Three 1514-byte frames per 2 ms: 18.168 Mbit/s.
        assert_eq!(ab.rate_bps, 18_168_000);
        let c = parse(&args(&format!("{} --trace-ba {} --opportunity-ba-bytes 9014 --limit-ba-bytes 90000", OK, good.display()))).unwrap();
        assert_eq!(c.queue_ba.unwrap().trace.unwrap().opportunity_bytes, 9014);
        let bad = |extra: String| parse(&args(&format!("{} {}", OK, extra))).unwrap_err();
        assert!(bad(format!("--trace-ab {} --rate-ab-bps 1000 --limit-ab-bytes 1", good.display())).contains("give one"));
        assert!(bad(format!("--trace-ab {}", good.display())).contains("needs --limit-ab-bytes"));
        assert!(bad("--rate-ab-bps 1000 --limit-ab-bytes 1 --opportunity-ab-bytes 1514".into()).contains("--trace-ab only"));
        assert!(bad(format!("--trace-ab {} --limit-ab-bytes 1", bad_file.display())).contains("line 2: 2 ms comes before"));
        assert!(bad(format!("--trace-ab {} --limit-ab-bytes 1", dir.join("none").display())).contains("--trace-ab"));
        let c = parse(&args(&format!("{} --trace-ab {} --limit-ab-bytes 30000 --loss-ab 0.0477", OK, good.display()))).unwrap();
        assert_eq!(c.queue_ab.unwrap().loss, 0.0477);
        assert!(bad("--loss-ab 0.1".into()).contains("need --rate-ab-bps or --trace-ab"));
        assert!(bad("--rate-ab-bps 1000 --limit-ab-bytes 1 --loss-ab 1".into()).contains("probability"));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
