//! Per-pair delays: a table of (IPv4 source, IPv4 destination) → one-way delay, and the
//! delay FIFO each frame goes to.
//!
//! The table file has one pair per line, `SRC_IPV4 DST_IPV4 DELAY_US`; `#` starts a
//! comment. Frames of pairs not in the table (and non-IPv4 frames) get the direction's
//! default delay. Every distinct delay value has one FIFO, so a pair's frames never
//! reorder and a short delay never waits behind a long one.

use crate::frame;
use crate::schedule::{MAX_DELAY_NS, NS_PER_US};
use std::collections::HashMap;
use std::net::Ipv4Addr;

/// (source, destination) as host-order integers → delay (ns).
pub type PairDelays = Vec<((u32, u32), i64)>;

/// Parse a table; errors name the source and the line.
pub fn parse(text: &str, source: &str) -> Result<PairDelays, String> {
    let mut out: PairDelays = Vec::new();
    let mut seen: HashMap<(u32, u32), (i64, usize)> = HashMap::new();
    for (n, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let at = || format!("{} line {}", source, n + 1);
        let words: Vec<&str> = line.split_whitespace().collect();
        if words.len() != 3 {
            return Err(format!("{}: wants SRC_IPV4 DST_IPV4 DELAY_US, got {:?}", at(), line));
        }
        let addr = |w: &str| -> Result<u32, String> {
            w.parse::<Ipv4Addr>().map(u32::from).map_err(|_| format!("{}: {:?} is not an IPv4 address", at(), w))
        };
        let pair = (addr(words[0])?, addr(words[1])?);
        let us: i64 = words[2].parse().map_err(|_| format!("{}: delay wants whole microseconds, got {:?}", at(), words[2]))?;
        if !(0..=MAX_DELAY_NS / NS_PER_US).contains(&us) {
            return Err(format!("{}: delay of {} us is outside 0..10 s", at(), us));
        }
        let ns = us * NS_PER_US;
        if let Some((prev, line_no)) = seen.get(&pair) {
            if *prev != ns {
                return Err(format!("{}: {} {} already has {} us on line {}", at(), words[0], words[1], prev / NS_PER_US, line_no));
            }
            continue;
        }
        seen.insert(pair, (ns, n + 1));
        out.push((pair, ns));
    }
    Ok(out)
}

/// Which delay FIFO a frame belongs to; FIFO 0 has the default delay.
#[derive(Clone, Debug)]
pub struct FifoMap {
    delays_ns: Vec<i64>,
    by_pair: HashMap<(u32, u32), usize>,
}

impl FifoMap {
    pub fn new(default_ns: i64, pairs: &PairDelays) -> FifoMap {
        let mut delays_ns = vec![default_ns];
        let mut by_pair = HashMap::new();
        for (pair, ns) in pairs {
            let fifo = match delays_ns.iter().position(|d| d == ns) {
                Some(i) => i,
                None => {
                    delays_ns.push(*ns);
                    delays_ns.len() - 1
                }
            };
            if fifo != 0 {
                by_pair.insert(*pair, fifo);
            }
        }
        FifoMap { delays_ns, by_pair }
    }

    /// Delay of each FIFO.
    pub fn delays_ns(&self) -> &[i64] {
        &self.delays_ns
    }

    pub fn pairs(&self) -> usize {
        self.by_pair.len()
    }

    /// The FIFO of an Ethernet frame (no lookup when there is no table).
    pub fn fifo_of(&self, eth: &[u8]) -> usize {
        if self.by_pair.is_empty() {
            return 0;
        }
        frame::ipv4_pair(eth).and_then(|p| self.by_pair.get(&p).copied()).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::tests::ipv4_frame;

    const A: u32 = 0x0a4d_0001; // 10.77.0.1
    const B: u32 = 0x0a4d_0002;

    #[test]
    fn parses_lines_comments_and_blank_lines() {
        let t = parse("# pair delays\n10.77.0.1 10.77.0.2 5000\n\n  10.77.0.11\t10.77.0.12  100000 # far\n", "t").unwrap();
        assert_eq!(t, vec![((A, B), 5_000_000), ((0x0a4d_000b, 0x0a4d_000c), 100_000_000)]);
        assert_eq!(parse("", "t").unwrap(), vec![]);
        // The same pair twice with the same delay is harmless.
        assert_eq!(parse("10.77.0.1 10.77.0.2 5\n10.77.0.1 10.77.0.2 5\n", "t").unwrap().len(), 1);
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse("10.77.0.1 10.77.0.2 5\n10.77.0.1 10.77.0.2\n", "pairs.txt").unwrap_err();
        assert!(e.starts_with("pairs.txt line 2:"), "{}", e);
        assert!(parse("10.77.0.1 10.77.0.256 5", "t").unwrap_err().contains("not an IPv4 address"));
        assert!(parse("::1 10.0.0.1 5", "t").unwrap_err().contains("not an IPv4 address"));
        assert!(parse("10.0.0.1 10.0.0.2 5ms", "t").unwrap_err().contains("whole microseconds"));
        assert!(parse("10.0.0.1 10.0.0.2 -1", "t").unwrap_err().contains("outside"));
        assert!(parse("10.0.0.1 10.0.0.2 10000001", "t").unwrap_err().contains("outside"));
        let e = parse("10.0.0.1 10.0.0.2 5\n10.0.0.1 10.0.0.2 6\n", "t").unwrap_err();
        assert!(e.contains("already has 5 us on line 1"), "{}", e);
    }

    #[test]
    fn one_fifo_per_distinct_delay_and_the_default_shared() {
        let pairs = vec![((A, B), 5_000), ((B, A), 7_000), ((A, 9), 5_000), ((9, A), 20_000)];
        let m = FifoMap::new(20_000, &pairs);
        assert_eq!(m.delays_ns(), &[20_000, 5_000, 7_000]);
        // A pair whose delay equals the default needs no entry.
        assert_eq!(m.pairs(), 3);
        let f = |s: [u8; 4], d: [u8; 4]| m.fifo_of(&ipv4_frame(s, d, 0, 17, 10));
        assert_eq!(f([10, 77, 0, 1], [10, 77, 0, 2]), 1);
        assert_eq!(f([10, 77, 0, 2], [10, 77, 0, 1]), 2, "pairs are directional");
        assert_eq!(f([10, 77, 0, 1], [0, 0, 0, 9]), 1);
        assert_eq!(f([10, 77, 0, 3], [10, 77, 0, 2]), 0, "an unknown pair gets the default");
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(m.fifo_of(&arp), 0);
        assert_eq!(FifoMap::new(1, &vec![]).delays_ns(), &[1]);
    }
}
