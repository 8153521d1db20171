//! Per-direction counters, the lateness histogram and the JSON stats file.

use crate::delaytrace::DelayTrace;
use crate::pairs::FifoMap;
use crate::queue::{QueueConfig, QueueStats};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// Dense part of the fine histogram: one bucket per microsecond below this bound.
/// Lateness beyond it is rare, so it goes to a sparse map that stays exact without
/// costing memory in the normal case.
const DENSE_US: usize = 20_000;
/// Lateness is clamped here so a stalled machine cannot grow the sparse map forever.
const MAX_LATE_US: u64 = 60_000_000;
/// Upper bounds (µs) of the coarse buckets written to the stats file.
const COARSE_LE_US: [u64; 14] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000];

/// Lateness = send time − release time, in whole microseconds (rounded down).
#[derive(Clone)]
pub struct Lateness {
    dense: Vec<u64>,
    sparse: BTreeMap<u64, u64>,
    max_ns: i64,
    count: u64,
}

impl Default for Lateness {
    fn default() -> Self {
        Lateness::new()
    }
}

impl Lateness {
    pub fn new() -> Lateness {
        Lateness { dense: vec![0; DENSE_US], sparse: BTreeMap::new(), max_ns: 0, count: 0 }
    }

    pub fn record(&mut self, late_ns: i64) {
        let ns = late_ns.max(0);
        let us = ((ns / 1_000) as u64).min(MAX_LATE_US);
        if (us as usize) < DENSE_US {
            self.dense[us as usize] += 1;
        } else {
            *self.sparse.entry(us).or_insert(0) += 1;
        }
        self.max_ns = self.max_ns.max(ns);
        self.count += 1;
    }

    /// Non-empty buckets in ascending order: (µs, count).
    pub fn buckets(&self) -> impl Iterator<Item = (u64, u64)> + '_ {
        let dense = self.dense.iter().enumerate().filter(|(_, n)| **n > 0).map(|(us, n)| (us as u64, *n));
        dense.chain(self.sparse.iter().map(|(us, n)| (*us, *n)))
    }

    /// Smallest bucket (µs) below which at least fraction q of the samples lie.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        let mut last = 0;
        for (us, n) in self.buckets() {
            seen += n;
            last = us;
            if seen >= rank {
                return Some(us);
            }
        }
        Some(last)
    }

    /// Add another histogram's samples (the probe's per-CPU threads into one).
    pub fn merge(&mut self, other: &Lateness) {
        for (i, n) in other.dense.iter().enumerate() {
            self.dense[i] += n;
        }
        for (us, n) in other.sparse.iter() {
            *self.sparse.entry(*us).or_insert(0) += n;
        }
        self.max_ns = self.max_ns.max(other.max_ns);
        self.count += other.count;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn max_us(&self) -> f64 {
        self.max_ns as f64 / 1_000.0
    }

    /// (upper bound µs or None for "more", count) for the coarse buckets.
    pub fn coarse(&self) -> Vec<(Option<u64>, u64)> {
        let mut out: Vec<(Option<u64>, u64)> = COARSE_LE_US.iter().map(|b| (Some(*b), 0)).collect();
        out.push((None, 0));
        for (us, n) in self.buckets() {
            // Bucket `us` holds [us, us+1) µs: it belongs under the first bound > us.
            let i = COARSE_LE_US.iter().position(|b| us < *b).unwrap_or(COARSE_LE_US.len());
            out[i].1 += n;
        }
        out
    }

    /// The sparse fine histogram as JSON: [[µs, count], ...], non-empty buckets only.
    /// Two snapshots' histograms subtract bucket by bucket into the interval's.
    pub fn fine_json(&self) -> String {
        let mut s = String::from("[");
        for (i, (us, n)) in self.buckets().enumerate() {
            if i > 0 {
                s.push_str(", ");
            }
            let _ = write!(s, "[{}, {}]", us, n);
        }
        s.push(']');
        s
    }
}

/// Counters of one direction. A snapshot is a clone taken by the direction's own thread.
#[derive(Clone)]
pub struct DirStats {
    pub name: String,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub ring_overflows: u64,
    pub send_errors: u64,
    pub rx_errors: u64,
    /// Frames the kernel dropped because the receive socket's buffer was full
    /// (accumulated: the kernel's counter resets on every read).
    pub socket_drops: u64,
    /// Frames the transmit interface dropped (veth: peer backlog full).
    pub link_tx_drops: u64,
    /// Frames whose release time came out earlier than their FIFO predecessor's by more
    /// than the clock conversion's uncertainty (arrival timestamps out of order). The line
    /// holds them behind the predecessor: it never reorders.
    pub reorders_seen: u64,
    /// Largest amount by which a frame's release time was earlier than its predecessor's.
    pub reorder_max_ns: i64,
    pub lateness: Lateness,
    /// How late the thread's own timer woke it (the wait before a release): the host's
    /// timer slack on the CPU the line ran on. Frames later than this were held up by the
    /// line's own work or by being preempted while it ran.
    pub wakeups: Lateness,
    /// Longest gap seen between two clock reads while spinning toward a release: the
    /// thread was off its CPU (interrupts, softirqs, steal) for that long.
    pub spin_stall_max_ns: i64,
    /// Each frame's lateness beyond how late the wait before its round ended: the line's
    /// own share (receiving, sending, queue work), with the host's late wake-ups taken out.
    pub own_lateness: Lateness,
    /// Longest single sendmmsg call (the kernel may run the receiver's stack inline).
    pub send_call_max_ns: i64,
    /// Longest time, within one round of work (after its wait, up to a send), that the
    /// thread was kept off its CPU (preempted, or stolen by the hypervisor): wall time
    /// minus the thread's CPU time. own_lateness leaves it out: it is the host's.
    pub off_cpu_max_ns: i64,
    /// Rounds that found a release due but could neither send nor receive anything.
    pub stalled_rounds: u64,
    /// Frames the egress interface's own qdisc dropped (a shaper on the line's output):
    /// the shaper's losses, not the line's.
    pub egress_drops: u64,
    /// The bottleneck's counters, when the direction has one.
    pub queue: Option<QueueStats>,
}

impl DirStats {
    pub fn new(name: &str) -> DirStats {
        DirStats {
            name: name.to_string(),
            rx_frames: 0,
            rx_bytes: 0,
            tx_frames: 0,
            tx_bytes: 0,
            ring_overflows: 0,
            send_errors: 0,
            rx_errors: 0,
            socket_drops: 0,
            link_tx_drops: 0,
            reorders_seen: 0,
            reorder_max_ns: 0,
            lateness: Lateness::new(),
            wakeups: Lateness::new(),
            spin_stall_max_ns: 0,
            own_lateness: Lateness::new(),
            send_call_max_ns: 0,
            off_cpu_max_ns: 0,
            stalled_rounds: 0,
            egress_drops: 0,
            queue: None,
        }
    }

    pub fn drops(&self) -> u64 {
        self.ring_overflows + self.send_errors + self.socket_drops + self.link_tx_drops
    }

    fn json(&self) -> String {
        let opt = |v: Option<u64>| v.map_or("null".to_string(), |x| x.to_string());
        let mut hist = String::new();
        for (i, (le, n)) in self.lateness.coarse().iter().enumerate() {
            if i > 0 {
                hist.push_str(", ");
            }
            let _ = write!(hist, "{{\"le_us\": {}, \"count\": {}}}", opt(*le), n);
        }
        format!(
            "{{\"rx_frames\": {}, \"rx_bytes\": {}, \"tx_frames\": {}, \"tx_bytes\": {}, \
             \"ring_overflows\": {}, \"send_errors\": {}, \"rx_errors\": {}, \"socket_drops\": {}, \
             \"link_tx_drops\": {}, \"reorders_seen\": {}, \"reorder_max_us\": {:.3}, \"lateness_us\": {{\"p50\": {}, \"p99\": {}, \
             \"max\": {:.1}, \"histogram\": [{}]}}, \"lateness_fine_us\": {}, \"wakeup_us\": {{\"count\": {}, \"p50\": {}, \"p99\": {}, \"p999\": {}, \"max\": {:.1}}}, \
             \"spin_stall_max_us\": {:.1}, \"own_lateness_us\": {{\"p50\": {}, \"p99\": {}, \"max\": {:.1}}}, \
             \"send_call_max_us\": {:.1}, \"off_cpu_max_us\": {:.1}, \"stalled_rounds\": {}, \"egress_drops\": {}, \"queue\": {}}}",
            self.rx_frames,
            self.rx_bytes,
            self.tx_frames,
            self.tx_bytes,
            self.ring_overflows,
            self.send_errors,
            self.rx_errors,
            self.socket_drops,
            self.link_tx_drops,
            self.reorders_seen,
            self.reorder_max_ns as f64 / 1_000.0,
            opt(self.lateness.quantile_us(0.5)),
            opt(self.lateness.quantile_us(0.99)),
            self.lateness.max_us(),
            hist,
            self.lateness.fine_json(),
            self.wakeups.count(),
            opt(self.wakeups.quantile_us(0.5)),
            opt(self.wakeups.quantile_us(0.99)),
            opt(self.wakeups.quantile_us(0.999)),
            self.wakeups.max_us(),
            self.spin_stall_max_ns as f64 / 1_000.0,
            opt(self.own_lateness.quantile_us(0.5)),
            opt(self.own_lateness.quantile_us(0.99)),
            self.own_lateness.max_us(),
            self.send_call_max_ns as f64 / 1_000.0,
            self.off_cpu_max_ns as f64 / 1_000.0,
            self.stalled_rounds,
            self.egress_drops,
            self.queue.as_ref().map_or("null".to_string(), |q| q.json())
        )
    }
}

/// Which write this is: snapshots count up from 1; the exit write is final.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Stamp {
    pub generation: u64,
    pub final_: bool,
    /// Seconds since the line became ready.
    pub elapsed_s: f64,
}

/// What a direction was configured with, repeated in the stats file.
#[derive(Clone, Debug)]
pub struct DirConfig {
    pub ring_bytes: u64,
    pub queue: Option<QueueConfig>,
    /// The default delay (FIFO 0) and the per-pair delays.
    pub fifos: FifoMap,
    /// A delay that steps over time, added to every FIFO's (None: fixed delays).
    pub delay_trace: Option<TracedDelay>,
}

/// A direction's delay trace as the stats file names it: where the steps count from.
#[derive(Clone, Debug)]
pub struct TracedDelay {
    pub file: String,
    pub epoch_mono_ns: i64,
    pub period_ms: i64,
    pub max_extra_us: f64,
}

impl TracedDelay {
    pub fn new(path: &std::path::Path, trace: Option<&DelayTrace>, epoch_mono_ns: i64) -> TracedDelay {
        TracedDelay {
            file: path.display().to_string(),
            epoch_mono_ns,
            period_ms: trace.map_or(0, |t| t.period_ns() / 1_000_000),
            max_extra_us: trace.map_or(0.0, |t| t.max_extra_ns() as f64 / 1_000.0),
        }
    }

    fn json(&self) -> String {
        format!(
            "{{\"file\": {:?}, \"epoch_mono_ns\": {}, \"period_ms\": {}, \"max_extra_us\": {}}}",
            self.file, self.epoch_mono_ns, self.period_ms, self.max_extra_us
        )
    }
}

impl DirConfig {
    fn json(&self) -> String {
        let us: Vec<String> = self.fifos.delays_ns().iter().map(|d| format!("{}", *d as f64 / 1_000.0)).collect();
        format!(
            "{{\"delay_us\": {}, \"ring_bytes\": {}, \"queue\": {}, \"pair_delays\": {}, \"fifo_delays_us\": [{}], \"delay_trace\": {}}}",
            self.fifos.delays_ns()[0] as f64 / 1_000.0,
            self.ring_bytes,
            self.queue.as_ref().map_or("null".to_string(), |q| q.json()),
            self.fifos.pairs(),
            us.join(", "),
            self.delay_trace.as_ref().map_or("null".to_string(), |t| t.json())
        )
    }
}

/// The whole stats document.
pub fn to_json(dirs: &[DirStats], configs: &[DirConfig], stamp: Stamp) -> String {
    let mut s = String::from("{\n");
    let _ = writeln!(
        s,
        "  \"generation\": {},\n  \"final\": {},\n  \"elapsed_s\": {:.6},",
        stamp.generation, stamp.final_, stamp.elapsed_s
    );
    for (i, d) in dirs.iter().enumerate() {
        let _ = writeln!(
            s,
            "  \"{}\": {},\n  \"{}_config\": {},",
            d.name,
            d.json(),
            d.name,
            configs[i].json()
        );
    }
    let drops: u64 = dirs.iter().map(|d| d.drops()).sum();
    let reorders: u64 = dirs.iter().map(|d| d.reorders_seen).sum();
    let queue_drops: u64 = dirs.iter().filter_map(|d| d.queue.as_ref()).map(|q| q.dropped()).sum();
    let _ = writeln!(s, "  \"drops\": {},\n  \"reorders\": {},\n  \"queue_drops\": {}\n}}", drops, reorders, queue_drops);
    s
}

/// Write `text` to `path` atomically (temporary file in the same directory, then rename).
pub fn write_atomic(path: &Path, text: &str) -> std::io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAMP: Stamp = Stamp { generation: 3, final_: false, elapsed_s: 1.5 };

    fn configs() -> Vec<DirConfig> {
        vec![
            DirConfig { ring_bytes: 10, queue: None, fifos: FifoMap::new(1_000, &vec![]), delay_trace: None },
            DirConfig { ring_bytes: 20, queue: None, fifos: FifoMap::new(2_000, &vec![((1, 2), 5_000)]), delay_trace: None },
        ]
    }

    #[test]
    fn quantiles_and_max() {
        let mut l = Lateness::new();
        for us in 0..100i64 {
            l.record(us * 1_000 + 500);
        }
        assert_eq!(l.quantile_us(0.5), Some(49));
        assert_eq!(l.quantile_us(0.99), Some(98));
        assert!((l.max_us() - 99.5).abs() < 1e-9);
        let total: u64 = l.coarse().iter().map(|(_, n)| n).sum();
        assert_eq!(total, 100);
        // 0..=0.999 µs lands in the "≤1 µs" bucket only.
        assert_eq!(l.coarse()[0], (Some(1), 1));
    }

    #[test]
    fn negative_lateness_is_clamped_and_huge_goes_to_overflow() {
        let mut l = Lateness::new();
        l.record(-5);
        l.record(60_000_000_000);
        assert_eq!(l.quantile_us(0.5), Some(0));
        assert_eq!(l.coarse().last().unwrap().1, 1);
    }

    #[test]
    fn fine_histogram_is_sparse_and_exact_beyond_the_dense_range() {
        let mut l = Lateness::new();
        l.record(3_999); // 3 µs
        l.record(3_000);
        l.record(25_000_123); // 25 000 µs: sparse part, still one bucket per µs
        l.record(99_000_000_000); // clamped to 60 s
        assert_eq!(l.fine_json(), "[[3, 2], [25000, 1], [60000000, 1]]");
        assert_eq!(l.quantile_us(0.75), Some(25_000));
        assert_eq!(l.quantile_us(1.0), Some(60_000_000));
        assert_eq!(Lateness::new().fine_json(), "[]");
    }

    #[test]
    fn a_clone_is_a_frozen_copy() {
        let mut a = DirStats::new("a_to_b");
        a.tx_frames = 5;
        a.lateness.record(1_000);
        let snap = a.clone();
        a.tx_frames = 9;
        a.lateness.record(2_000);
        assert_eq!(snap.tx_frames, 5);
        assert_eq!(snap.lateness.fine_json(), "[[1, 1]]");
    }

    #[test]
    fn totals_sum_both_directions() {
        let mut a = DirStats::new("a_to_b");
        let mut b = DirStats::new("b_to_a");
        a.ring_overflows = 2;
        b.send_errors = 3;
        b.reorders_seen = 4;
        let j = to_json(&[a, b], &configs(), STAMP);
        assert!(j.contains("\"drops\": 5"), "{}", j);
        assert!(j.contains("\"reorders\": 4"), "{}", j);
    }

    #[test]
    fn document_carries_generation_final_flag_and_fine_histogram() {
        let mut a = DirStats::new("a_to_b");
        a.lateness.record(7_500);
        let b = DirStats::new("b_to_a");
        let j = to_json(&[a, b], &configs(), STAMP);
        assert!(j.contains("\"generation\": 3,"), "{}", j);
        assert!(j.contains("\"final\": false,"), "{}", j);
        assert!(j.contains("\"elapsed_s\": 1.500000,"), "{}", j);
        assert!(j.contains("\"lateness_fine_us\": [[7, 1]]"), "{}", j);
        assert!(j.contains("\"lateness_fine_us\": []"), "{}", j);
        assert!(j.contains("\"b_to_a_config\": {\"delay_us\": 2, \"ring_bytes\": 20, \"queue\": null, \"pair_delays\": 1, \"fifo_delays_us\": [2, 5], \"delay_trace\": null}"), "{}", j);
        let mut traced = configs();
        let steps = DelayTrace::parse("15000 4000\n15000 9500\n").unwrap();
        traced[0].delay_trace = Some(TracedDelay::new(Path::new("/t/leo.delays"), Some(&steps), 42));
        let j = to_json(&[DirStats::new("a_to_b")], &traced, STAMP);
        assert!(j.contains("\"delay_trace\": {\"file\": \"/t/leo.delays\", \"epoch_mono_ns\": 42, \"period_ms\": 30000, \"max_extra_us\": 9500}"), "{}", j);
        let j = to_json(&[DirStats::new("a_to_b")], &configs(), Stamp { generation: 4, final_: true, elapsed_s: 0.0 });
        assert!(j.contains("\"final\": true,"), "{}", j);
    }

    #[test]
    fn queue_counters_and_config_are_written_and_summed() {
        use crate::queue::{ClassCounters, Policy};
        let mut a = DirStats::new("a_to_b");
        a.queue = Some(QueueStats {
            normal: ClassCounters { enqueued: 10, dropped: 2, sent: 9, sent_bytes: 9000 },
            low: ClassCounters { enqueued: 5, dropped: 4, sent: 3, sent_bytes: 3000 },
            pushed_out: 1,
            early_drops: 0,
            random_drops: 0,
            aqm_drops: 0,
            marks: 0,
            high_water_bytes: 4500,
            high_water_frames: 3,
            trace_epoch_mono_ns: None,
        });
        let b = DirStats::new("b_to_a");
        let mut cfg = configs();
        cfg[0].queue = Some(QueueConfig { rate_bps: 1_500_000, limit_bytes: 30_000, policy: Policy::PushOut, low_dscp: 1 << 14, trace: None, loss: 0.0 });
        let j = to_json(&[a, b], &cfg, STAMP);
        assert!(j.contains("\"queue\": {\"enqueued\": 15, \"dropped\": 6, \"sent\": 12, \"sent_bytes\": 12000, \"pushed_out\": 1"), "{}", j);
        assert!(j.contains("\"low\": {\"enqueued\": 5, \"dropped\": 4, \"sent\": 3, \"sent_bytes\": 3000}"), "{}", j);
        assert!(j.contains("\"high_water_bytes\": 4500"), "{}", j);
        assert!(j.contains("\"queue\": null"), "{}", j);
        assert!(j.contains("\"queue\": {\"rate_bps\": 1500000, \"limit_bytes\": 30000, \"policy\": \"pushout\", \"low_dscp\": [14]}"), "{}", j);
        assert!(j.contains("\"queue_drops\": 6\n"), "{}", j);
        assert!(j.contains("\"drops\": 0,"), "queue drops are not the line's own drops: {}", j);
    }
}
