//! Per-direction counters, the lateness histogram and the JSON stats file.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;

/// Fine histogram: one bucket per microsecond up to this bound, then one overflow bucket.
const FINE_US: usize = 20_000;
/// Upper bounds (µs) of the coarse buckets written to the stats file.
const COARSE_LE_US: [u64; 14] = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000];

/// Lateness = send time − release time, in whole microseconds (rounded down).
pub struct Lateness {
    fine: Vec<u64>,
    max_ns: i64,
    count: u64,
}

impl Lateness {
    pub fn new() -> Lateness {
        Lateness { fine: vec![0; FINE_US + 1], max_ns: 0, count: 0 }
    }

    pub fn record(&mut self, late_ns: i64) {
        let ns = late_ns.max(0);
        let us = (ns / 1_000) as usize;
        self.fine[us.min(FINE_US)] += 1;
        self.max_ns = self.max_ns.max(ns);
        self.count += 1;
    }

    /// Smallest bucket (µs) below which at least fraction q of the samples lie.
    pub fn quantile_us(&self, q: f64) -> Option<u64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (us, n) in self.fine.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(us as u64);
            }
        }
        Some(FINE_US as u64)
    }

    pub fn max_us(&self) -> f64 {
        self.max_ns as f64 / 1_000.0
    }

    /// (upper bound µs or None for "more", count) for the coarse buckets.
    pub fn coarse(&self) -> Vec<(Option<u64>, u64)> {
        let mut out: Vec<(Option<u64>, u64)> = COARSE_LE_US.iter().map(|b| (Some(*b), 0)).collect();
        out.push((None, 0));
        for (us, n) in self.fine.iter().enumerate() {
            // Bucket `us` holds [us, us+1) µs: it belongs under the first bound > us.
            let i = COARSE_LE_US.iter().position(|b| (us as u64) < *b).unwrap_or(COARSE_LE_US.len());
            out[i].1 += n;
        }
        out
    }
}

/// Counters of one direction.
pub struct DirStats {
    pub name: String,
    pub rx_frames: u64,
    pub rx_bytes: u64,
    pub tx_frames: u64,
    pub tx_bytes: u64,
    pub ring_overflows: u64,
    pub send_errors: u64,
    pub rx_errors: u64,
    /// Frames the kernel dropped because the receive socket's buffer was full.
    pub socket_drops: u64,
    /// Frames the transmit interface dropped (veth: peer backlog full).
    pub link_tx_drops: u64,
    pub reorders_seen: u64,
    pub lateness: Lateness,
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
            lateness: Lateness::new(),
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
             \"link_tx_drops\": {}, \"reorders_seen\": {}, \"lateness_us\": {{\"p50\": {}, \"p99\": {}, \
             \"max\": {:.1}, \"histogram\": [{}]}}}}",
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
            opt(self.lateness.quantile_us(0.5)),
            opt(self.lateness.quantile_us(0.99)),
            self.lateness.max_us(),
            hist
        )
    }
}

/// The whole stats document.
pub fn to_json(dirs: &[DirStats], delay_ns: &[i64], ring_bytes: &[u64]) -> String {
    let mut s = String::from("{\n");
    for (i, d) in dirs.iter().enumerate() {
        let _ = writeln!(
            s,
            "  \"{}\": {},\n  \"{}_config\": {{\"delay_us\": {}, \"ring_bytes\": {}}},",
            d.name,
            d.json(),
            d.name,
            delay_ns[i] as f64 / 1_000.0,
            ring_bytes[i]
        );
    }
    let drops: u64 = dirs.iter().map(|d| d.drops()).sum();
    let reorders: u64 = dirs.iter().map(|d| d.reorders_seen).sum();
    let _ = writeln!(s, "  \"drops\": {},\n  \"reorders\": {}\n}}", drops, reorders);
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
    fn totals_sum_both_directions() {
        let mut a = DirStats::new("a_to_b");
        let mut b = DirStats::new("b_to_a");
        a.ring_overflows = 2;
        b.send_errors = 3;
        b.reorders_seen = 4;
        let j = to_json(&[a, b], &[1_000, 2_000], &[10, 20]);
        assert!(j.contains("\"drops\": 5"), "{}", j);
        assert!(j.contains("\"reorders\": 4"), "{}", j);
    }
}
