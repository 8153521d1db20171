//! The delay stage: frames waiting out their propagation delay.
//!
//! One FIFO per distinct delay value. Within a FIFO release times rise (they are arrival
//! or departure times plus one constant), so a FIFO is released in order and a frame
//! never waits behind one with a longer delay in another FIFO. Across FIFOs the earliest
//! head goes first (a heap of the FIFOs' heads). A frame whose release time is earlier
//! than its predecessor's in the same FIFO (a kernel timestamp out of order) waits for
//! it: the line never reorders a FIFO.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    /// The frame's id in the ring.
    pub seq: u64,
    pub release_ns: i64,
    /// Entry order into the stage: breaks ties between FIFOs deterministically.
    order: u64,
}

pub struct DelayStage {
    fifos: Vec<VecDeque<Held>>,
    heads: BinaryHeap<Reverse<(i64, u64, usize)>>,
    last_release: Vec<i64>,
    order: u64,
    len: usize,
}

impl DelayStage {
    pub fn new(fifos: usize) -> DelayStage {
        DelayStage {
            fifos: (0..fifos.max(1)).map(|_| VecDeque::with_capacity(4096)).collect(),
            heads: BinaryHeap::new(),
            last_release: vec![i64::MIN; fifos.max(1)],
            order: 0,
            len: 0,
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Queue a frame in `fifo`. Returns by how much its release is earlier than the
    /// latest one before it in that FIFO (it will leave that much late rather than
    /// overtake), 0 when it is in order.
    pub fn push(&mut self, fifo: usize, seq: u64, release_ns: i64) -> i64 {
        let held = Held { seq, release_ns, order: self.order };
        self.order += 1;
        let q = &mut self.fifos[fifo];
        if q.is_empty() {
            self.heads.push(Reverse((release_ns, held.order, fifo)));
        }
        q.push_back(held);
        self.len += 1;
        let early = self.last_release[fifo].saturating_sub(release_ns).max(0);
        self.last_release[fifo] = self.last_release[fifo].max(release_ns);
        early
    }

    /// The frame to send next.
    pub fn peek(&self) -> Option<Held> {
        let Reverse((_, _, fifo)) = *self.heads.peek()?;
        self.fifos[fifo].front().copied()
    }

    pub fn pop(&mut self) -> Option<Held> {
        let Reverse((_, _, fifo)) = self.heads.pop()?;
        let q = &mut self.fifos[fifo];
        let held = q.pop_front().expect("a FIFO in the heap is not empty");
        if let Some(next) = q.front() {
            self.heads.push(Reverse((next.release_ns, next.order, fifo)));
        }
        self.len -= 1;
        Some(held)
    }

    /// Release times of the next two frames to leave (for deciding how to wait).
    pub fn next_two(&self) -> (Option<i64>, Option<i64>) {
        let first = match self.heads.peek() {
            Some(Reverse((r, _, fifo))) => (*r, *fifo),
            None => return (None, None),
        };
        let behind = self.fifos[first.1].get(1).map(|h| h.release_ns);
        let other = self.heads.iter().filter(|Reverse((_, _, f))| *f != first.1).map(|Reverse((r, _, _))| *r).min();
        let second = match (behind, other) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        (Some(first.0), second)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn drain(s: &mut DelayStage) -> Vec<(u64, i64)> {
        let mut out = Vec::new();
        while let Some(h) = s.pop() {
            out.push((h.seq, h.release_ns));
        }
        out
    }

    #[test]
    fn one_fifo_keeps_arrival_order() {
        let mut s = DelayStage::new(1);
        assert_eq!(s.push(0, 1, 100), 0);
        assert_eq!(s.push(0, 2, 200), 0);
        // Stamped earlier than its predecessor: reported, and it still leaves after it.
        assert_eq!(s.push(0, 3, 150), 50);
        // In another FIFO the same time is in order.
        let mut t = DelayStage::new(2);
        t.push(0, 1, 200);
        assert_eq!(t.push(1, 2, 150), 0);
        assert_eq!(s.next_two(), (Some(100), Some(200)));
        assert_eq!(drain(&mut s), vec![(1, 100), (2, 200), (3, 150)]);
        assert_eq!(s.len(), 0);
        assert_eq!(s.next_two(), (None, None));
    }

    #[test]
    fn short_delays_do_not_wait_behind_long_ones() {
        // FIFO 0: 100 ms; FIFO 1: 5 ms. Frames arrive alternately every millisecond.
        let ms = 1_000_000i64;
        let mut s = DelayStage::new(2);
        for k in 0..10i64 {
            let fifo = (k % 2) as usize;
            let delay = if fifo == 0 { 100 * ms } else { 5 * ms };
            s.push(fifo, k as u64, k * ms + delay);
        }
        let out = drain(&mut s);
        let releases: Vec<i64> = out.iter().map(|x| x.1).collect();
        assert!(releases.windows(2).all(|w| w[0] <= w[1]), "released in time order: {:?}", out);
        // All five 5 ms frames go first, each FIFO in its own order.
        let seqs: Vec<u64> = out.iter().map(|x| x.0).collect();
        assert_eq!(seqs, vec![1, 3, 5, 7, 9, 0, 2, 4, 6, 8]);
    }

    #[test]
    fn interleaves_across_fifos_by_release_time() {
        let mut s = DelayStage::new(3);
        s.push(0, 10, 50);
        s.push(1, 11, 20);
        s.push(2, 12, 35);
        s.push(1, 13, 60);
        s.push(0, 14, 55);
        assert_eq!(s.peek().map(|h| h.seq), Some(11));
        assert_eq!(s.next_two(), (Some(20), Some(35)));
        let seqs: Vec<u64> = drain(&mut s).iter().map(|x| x.0).collect();
        assert_eq!(seqs, vec![11, 12, 10, 14, 13]);
    }

    #[test]
    fn equal_release_times_leave_in_entry_order() {
        let mut s = DelayStage::new(2);
        s.push(1, 1, 100);
        s.push(0, 2, 100);
        s.push(1, 3, 100);
        let seqs: Vec<u64> = drain(&mut s).iter().map(|x| x.0).collect();
        assert_eq!(seqs, vec![1, 2, 3]);
    }

    #[test]
    fn many_fifos_random_pattern_never_reorders_a_fifo() {
        let mut s = DelayStage::new(7);
        let mut x: u64 = 12345;
        let mut t = 0i64;
        let mut pushed: Vec<Vec<u64>> = vec![Vec::new(); 7];
        let mut popped: Vec<Vec<u64>> = vec![Vec::new(); 7];
        let mut last = i64::MIN;
        for seq in 0..5000u64 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let fifo = (x % 7) as usize;
            t += (x % 1000) as i64;
            s.push(fifo, seq, t + (fifo as i64 + 1) * 10_000);
            pushed[fifo].push(seq);
            // Pop whatever is due at t.
            while let Some(h) = s.peek() {
                if h.release_ns > t {
                    break;
                }
                let h = s.pop().unwrap();
                assert!(h.release_ns >= last);
                last = h.release_ns;
                let f = pushed.iter().position(|v| v.contains(&h.seq)).unwrap();
                popped[f].push(h.seq);
            }
        }
        while let Some(h) = s.pop() {
            let f = pushed.iter().position(|v| v.contains(&h.seq)).unwrap();
            popped[f].push(h.seq);
        }
        assert_eq!(pushed, popped);
    }
}
