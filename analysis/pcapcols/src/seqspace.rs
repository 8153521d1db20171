//! Which sequence numbers one direction of a connection has already sent.
//!
//! A data segment is a retransmission (tcptrace's notion) when any byte of its
//! range was covered by an earlier segment; the bytes not covered before are the
//! segment's unique ("new") bytes. 32-bit sequence numbers are unwrapped into a
//! 64-bit space around the highest byte seen, so transfers past 4 GiB or starting
//! near 2^32 are handled.

/// Outcome of adding one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Added {
    pub new_bytes: u32,
    pub retx: bool,
}

/// Covered byte ranges of one direction, kept sorted, disjoint and merged.
#[derive(Debug, Default)]
pub struct SeqSpace {
    /// Unwrapped end of the highest data seen; `None` until the first segment.
    high: Option<i64>,
    ranges: Vec<(i64, i64)>,
}

impl SeqSpace {
    /// Maps a raw sequence number to the unwrapped space: the nearest value to the
    /// highest byte seen (a segment is never 2 GiB away from it in real TCP).
    fn unwrap(&self, seq: u32) -> i64 {
        match self.high {
            // Start far from zero so slightly earlier sequence numbers stay positive.
            None => (1i64 << 40) + seq as i64,
            Some(h) => h + (seq.wrapping_sub(h as u32) as i32) as i64,
        }
    }

    /// Records the segment [seq, seq+len) and reports how much of it was new.
    pub fn add(&mut self, seq: u32, len: u32) -> Added {
        if len == 0 {
            return Added { new_bytes: 0, retx: false };
        }
        let s = self.unwrap(seq);
        let e = s + len as i64;
        self.high = Some(match self.high {
            Some(h) if h >= e => h,
            _ => e,
        });
        // Fast path: in-order or beyond everything seen (the common case).
        match self.ranges.last_mut() {
            None => {
                self.ranges.push((s, e));
                return Added { new_bytes: len, retx: false };
            }
            Some(last) if s >= last.1 => {
                if s == last.1 {
                    last.1 = e;
                } else {
                    self.ranges.push((s, e));
                }
                return Added { new_bytes: len, retx: false };
            }
            _ => {}
        }
        // General path: merge with every range overlapping or touching [s, e).
        let first = self.ranges.partition_point(|r| r.1 < s);
        let mut last = first;
        let mut covered = 0i64;
        let (mut lo, mut hi) = (s, e);
        while last < self.ranges.len() && self.ranges[last].0 <= e {
            let (rs, re) = self.ranges[last];
            let overlap = re.min(e) - rs.max(s);
            if overlap > 0 {
                covered += overlap;
            }
            lo = lo.min(rs);
            hi = hi.max(re);
            last += 1;
        }
        self.ranges.splice(first..last, std::iter::once((lo, hi)));
        Added { new_bytes: (len as i64 - covered) as u32, retx: covered > 0 }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_then_retransmission() {
        let mut sp = SeqSpace::default();
        assert_eq!(sp.add(1000, 100), Added { new_bytes: 100, retx: false });
        assert_eq!(sp.add(1100, 100), Added { new_bytes: 100, retx: false });
        assert_eq!(sp.add(1000, 100), Added { new_bytes: 0, retx: true });
        assert_eq!(sp.ranges.len(), 1);
    }

    #[test]
    fn hole_filled_out_of_order_is_not_retx() {
        let mut sp = SeqSpace::default();
        sp.add(0, 100);
        sp.add(200, 100); // 100..200 missing (lost before this capture point)
        assert_eq!(sp.add(100, 100), Added { new_bytes: 100, retx: false });
        assert_eq!(sp.ranges, vec![(1 << 40, (1 << 40) + 300)]);
    }

    #[test]
    fn partial_overlap_counts_new_bytes() {
        let mut sp = SeqSpace::default();
        sp.add(0, 100);
        sp.add(200, 100);
        // Covers 50..250: 50 bytes old on each side, 100 new in the hole.
        assert_eq!(sp.add(50, 200), Added { new_bytes: 100, retx: true });
        assert_eq!(sp.ranges.len(), 1);
    }

    #[test]
    fn sequence_wrap() {
        let mut sp = SeqSpace::default();
        let start = u32::MAX - 149; // 150 bytes before the wrap
        assert_eq!(sp.add(start, 100).new_bytes, 100);
        assert_eq!(sp.add(start.wrapping_add(100), 100).new_bytes, 100); // crosses 2^32
        assert_eq!(sp.add(50, 100).new_bytes, 100); // after the wrap
        assert_eq!(sp.add(start.wrapping_add(100), 100), Added { new_bytes: 0, retx: true });
        assert_eq!(sp.add(10, 20), Added { new_bytes: 0, retx: true });
        assert_eq!(sp.ranges.len(), 1);
    }
}
