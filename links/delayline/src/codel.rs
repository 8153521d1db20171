//! CoDel's control law (RFC 8289 §5) over any queue that can show and remove its head: the
//! bottleneck's one FIFO (policy codel) or each flow's queue of FQ-CoDel (RFC 8290 §4.2),
//! which runs one CoDel per flow with the same parameters.
//!
//! A frame is judged when the link starts sending it, as a router dequeues it: its sojourn
//! time is that start minus its arrival. A frame CoDel drops never occupies the link, so
//! the next one starts at the same instant.

/// CoDel's parameters (RFC 8289: target 5 ms, interval 100 ms). With `ecn`, an
/// ECN-capable frame is marked CE where a drop was due, and sent.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Codel {
    pub target_ns: i64,
    pub interval_ns: i64,
    pub ecn: bool,
}

impl Codel {
    pub const DEFAULT: Codel = Codel { target_ns: 5_000_000, interval_ns: 100_000_000, ecn: false };
}

/// RFC 8289's MAXPACKET: a queue holding at most one MTU-sized frame behind the head is
/// never signalled.
const MAX_PACKET_BYTES: u64 = 1_514;

/// The queue CoDel controls, as its dequeue sees it.
pub trait HeadQueue {
    /// The head's arrival time (ns), if there is a head.
    fn head_arrival(&self) -> Option<i64>;
    /// Bytes queued behind the head in the whole queue discipline (RFC 8289's MAXPACKET
    /// test; Linux's fq_codel, too, tests the qdisc's whole backlog, not the flow's).
    fn behind_head(&self) -> u64;
    /// Mark the head CE if it is ECN-capable and not marked yet; whether it did.
    fn mark_head(&mut self) -> bool;
    /// Drop the head; the next frame becomes the head.
    fn drop_head(&mut self);
}

/// CoDel's state (RFC 8289 §5): whether it is in its dropping state, when its sojourn time
/// first stayed above target, its next drop and its drop counts.
#[derive(Debug, Default)]
pub struct CodelState {
    first_above: Option<i64>,
    dropping: bool,
    drop_next: i64,
    count: u32,
    lastcount: u32,
}

impl CodelState {
    /// RFC 8289's ok-to-drop test for the head, which the link starts at `now`: its
    /// sojourn time has stayed at or above target for an interval, with more than one
    /// MTU-sized frame queued behind it.
    fn should_drop(&mut self, c: &Codel, q: &impl HeadQueue, now: i64) -> bool {
        let arrival = match q.head_arrival() {
            Some(a) => a,
            None => {
                self.first_above = None;
                return false;
            }
        };
        if now - arrival < c.target_ns || q.behind_head() <= MAX_PACKET_BYTES {
            self.first_above = None;
            return false;
        }
        match self.first_above {
            None => {
                self.first_above = Some(now + c.interval_ns);
                false
            }
            Some(t) => now >= t,
        }
    }

    /// Signal congestion on the head: mark it (ECN-capable, with ECN on; it is then sent,
    /// and true is returned) or drop it.
    fn signal(c: &Codel, q: &mut impl HeadQueue) -> bool {
        if c.ecn && q.mark_head() {
            return true;
        }
        q.drop_head();
        false
    }

    /// RFC 8289's control law: the next signal an interval / √count after `t`.
    fn next(c: &Codel, t: i64, count: u32) -> i64 {
        t + (c.interval_ns as f64 / (count.max(1) as f64).sqrt()) as i64
    }

    /// CoDel's dequeue (RFC 8289 §5.5) for the head the link starts sending at `now`:
    /// drops heads (or marks one) as the control law says, until the head is a frame to
    /// send or the queue is empty.
    pub fn dequeue(&mut self, c: &Codel, q: &mut impl HeadQueue, now: i64) {
        if q.head_arrival().is_none() {
            self.dropping = false;
            return;
        }
        let ok_to_drop = self.should_drop(c, q, now);
        if self.dropping {
            if !ok_to_drop {
                self.dropping = false;
            }
            while self.dropping && now >= self.drop_next {
                self.count += 1;
                if Self::signal(c, q) {
                    self.drop_next = Self::next(c, self.drop_next, self.count);
                    return;
                }
                if self.should_drop(c, q, now) {
                    self.drop_next = Self::next(c, self.drop_next, self.count);
                } else {
                    self.dropping = false;
                }
            }
        } else if ok_to_drop {
            if !Self::signal(c, q) {
                // The next head's sojourn starts or clears the above-target timer.
                self.should_drop(c, q, now);
            }
            self.dropping = true;
            // Back in the dropping state soon after leaving it: resume near the old rate.
            let delta = self.count.wrapping_sub(self.lastcount);
            self.count = if delta > 1 && now - self.drop_next < 16 * c.interval_ns { delta } else { 1 };
            self.drop_next = Self::next(c, now, self.count);
            self.lastcount = self.count;
        }
    }
}
