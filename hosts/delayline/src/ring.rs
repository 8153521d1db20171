//! FIFO byte ring holding frames until their release time.
//!
//! Frames are stored contiguously (never split at the wrap point) so that `sendmmsg`
//! can point straight into the ring. A frame that does not fit at the end of the
//! buffer goes to the start; the unused tail is reclaimed when the reader passes it.
//! The capacity is fixed at start: a full ring refuses the frame (the caller counts an
//! overflow) instead of growing, so memory use is known in advance.

use std::collections::VecDeque;

/// Largest ring the command line accepts (4 GiB).
pub const MAX_RING_BYTES: u64 = 4 << 30;

/// One stored frame: where it is and when it may leave (CLOCK_MONOTONIC, ns).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub offset: usize,
    pub len: usize,
    pub release_ns: i64,
}

/// Anonymous private mapping: pages are committed only when first written, so a large
/// ring costs memory only for the bytes actually queued.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

impl Mapping {
    fn new(len: usize) -> Result<Mapping, String> {
        // SAFETY: plain anonymous mapping; the result is checked before use.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(format!(
                "cannot allocate a ring of {} bytes: {}",
                len,
                std::io::Error::last_os_error()
            ));
        }
        Ok(Mapping { ptr: ptr as *mut u8, len })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len come from a successful mmap and are unmapped once.
        unsafe {
            libc::munmap(self.ptr as *mut libc::c_void, self.len);
        }
    }
}

// The mapping is owned by exactly one Ring, which is moved into one thread.
unsafe impl Send for Mapping {}

pub struct Ring {
    mem: Mapping,
    slots: VecDeque<Slot>,
}

impl Ring {
    /// A ring of `capacity` bytes; zero or more than MAX_RING_BYTES is refused.
    pub fn new(capacity: u64) -> Result<Ring, String> {
        if capacity == 0 {
            return Err("ring size must be at least 1 byte".to_string());
        }
        if capacity > MAX_RING_BYTES {
            return Err(format!(
                "ring size {} bytes exceeds the maximum of {} bytes (4 GiB)",
                capacity, MAX_RING_BYTES
            ));
        }
        let mem = Mapping::new(capacity as usize)?;
        Ok(Ring { mem, slots: VecDeque::with_capacity(4096) })
    }

    /// Number of frames queued.
    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Where a frame of `n` bytes would go, or None if it does not fit now.
    fn place(&self, n: usize) -> Option<usize> {
        let cap = self.mem.len;
        if n == 0 || n > cap {
            return None;
        }
        let (first, last) = match (self.slots.front(), self.slots.back()) {
            (Some(f), Some(l)) => (*f, *l),
            _ => return Some(0),
        };
        let head = first.offset;
        let tail = last.offset + last.len;
        let wrapped = last.offset < first.offset;
        if !wrapped {
            // Occupied: [head, tail). Free: [tail, cap) and [0, head).
            if cap - tail >= n {
                Some(tail)
            } else if head >= n {
                Some(0)
            } else {
                None
            }
        } else if head - tail >= n {
            // Occupied: [head, cap) (up to the old tail) and [0, tail). Free: [tail, head).
            Some(tail)
        } else {
            None
        }
    }

    /// Append a frame; false (nothing stored) when the ring has no room for it.
    pub fn push(&mut self, data: &[u8], release_ns: i64) -> bool {
        let offset = match self.place(data.len()) {
            Some(o) => o,
            None => return false,
        };
        // SAFETY: place() guarantees [offset, offset+len) lies inside the mapping and
        // overlaps no queued frame.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.mem.ptr.add(offset), data.len());
        }
        self.slots.push_back(Slot { offset, len: data.len(), release_ns });
        true
    }

    /// The i-th queued frame, oldest first.
    pub fn slot(&self, i: usize) -> Option<Slot> {
        self.slots.get(i).copied()
    }

    /// Pointer to a queued frame's bytes (for iovecs handed to the kernel).
    pub fn frame_ptr(&self, slot: &Slot) -> *const u8 {
        // SAFETY: slot came from this ring, so the offset lies inside the mapping.
        unsafe { self.mem.ptr.add(slot.offset) }
    }

    /// A queued frame's bytes.
    #[cfg(test)]
    pub fn frame(&self, slot: &Slot) -> &[u8] {
        // SAFETY: as frame_ptr; the bytes stay valid until the slot is popped.
        unsafe { std::slice::from_raw_parts(self.frame_ptr(slot), slot.len) }
    }

    /// Drop the oldest `n` frames (after they were sent).
    pub fn pop(&mut self, n: usize) {
        for _ in 0..n {
            self.slots.pop_front();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(tag: u8, len: usize) -> Vec<u8> {
        (0..len).map(|i| tag.wrapping_add(i as u8)).collect()
    }

    #[test]
    fn refuses_zero_and_oversized_rings() {
        assert!(Ring::new(0).is_err());
        assert!(Ring::new(MAX_RING_BYTES + 1).is_err());
        assert!(Ring::new(1024).is_ok());
    }

    #[test]
    fn fills_exactly_then_overflows() {
        let mut r = Ring::new(300).unwrap();
        assert!(r.push(&frame(1, 100), 1));
        assert!(r.push(&frame(2, 100), 2));
        assert!(r.push(&frame(3, 100), 3));
        assert!(!r.push(&frame(4, 1), 4), "a full ring must refuse");
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn frame_larger_than_ring_is_refused() {
        let mut r = Ring::new(100).unwrap();
        assert!(!r.push(&frame(1, 101), 1));
        assert!(r.is_empty());
    }

    #[test]
    fn keeps_fifo_order_and_contents_across_wraps() {
        let mut r = Ring::new(1000).unwrap();
        let mut next_in: u32 = 0;
        let mut next_out: u32 = 0;
        // Varying sizes force frames to wrap at different points many times.
        for round in 0..200usize {
            let len = 50 + (round * 37) % 300;
            while r.push(&frame(next_in as u8, len), next_in as i64) {
                next_in += 1;
            }
            let take = 1 + round % 3;
            for _ in 0..take.min(r.len()) {
                let s = r.slot(0).unwrap();
                assert_eq!(s.release_ns, next_out as i64);
                assert_eq!(r.frame(&s), &frame(next_out as u8, s.len)[..]);
                r.pop(1);
                next_out += 1;
            }
        }
        assert!(next_out > 100);
    }

    #[test]
    fn wrapped_frame_goes_to_start_and_never_overlaps() {
        let mut r = Ring::new(1000).unwrap();
        assert!(r.push(&frame(1, 400), 1)); // [0,400)
        assert!(r.push(&frame(2, 400), 2)); // [400,800)
        r.pop(1); // free [0,400)
        // 300 bytes do not fit in [800,1000) -> go to offset 0.
        assert!(r.push(&frame(3, 300), 3));
        assert_eq!(r.slot(1).unwrap().offset, 0);
        // Now free is [300,400) only (the gap [800,1000) is unusable until the reader
        // passes it): 150 bytes must not fit, 100 must.
        assert!(!r.push(&frame(4, 150), 4));
        assert!(r.push(&frame(5, 100), 5));
        assert_eq!(r.slot(2).unwrap().offset, 300);
        assert_eq!(r.frame(&r.slot(0).unwrap()), &frame(2, 400)[..]);
        assert_eq!(r.frame(&r.slot(1).unwrap()), &frame(3, 300)[..]);
    }

    #[test]
    fn empty_ring_restarts_at_zero() {
        let mut r = Ring::new(100).unwrap();
        assert!(r.push(&frame(1, 60), 1));
        r.pop(1);
        // 80 bytes fit only because an empty ring starts again at offset 0.
        assert!(r.push(&frame(2, 80), 2));
        assert_eq!(r.slot(0).unwrap().offset, 0);
    }
}
