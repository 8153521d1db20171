//! Byte ring holding frames from arrival until they are sent or dropped.
//!
//! Frames are stored contiguously in arrival order (never split at the wrap point) so
//! that `sendmmsg` can point straight into the ring. A frame that does not fit at the
//! end of the buffer goes to the start; the unused tail is reclaimed when the reader
//! passes it. Each frame has a sequence number; frames may be freed in any order (the
//! bottleneck drops queued frames, frames with a short delay leave before older ones
//! with a long delay), and space is reclaimed from both ends up to the oldest and the
//! newest frame still held. The capacity is fixed at start: a full ring refuses the
//! frame (the caller counts an overflow) instead of growing, so memory use is known in
//! advance.

use std::collections::VecDeque;

/// Largest ring the command line accepts (4 GiB).
pub const MAX_RING_BYTES: u64 = 4 << 30;

/// One stored frame: where it is, a tag the caller chose (its delay FIFO) and whether it
/// was freed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Slot {
    pub offset: usize,
    pub len: usize,
    pub tag: u32,
    freed: bool,
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
    /// Sequence number of slots[0].
    base: u64,
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
        Ok(Ring { mem, slots: VecDeque::with_capacity(4096), base: 0 })
    }

    /// Number of slots between the oldest and the newest frame held (freed ones included).
    #[cfg(test)]
    pub fn span(&self) -> usize {
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

    /// Append a frame; its sequence number, or None (nothing stored) when there is no room.
    pub fn push(&mut self, data: &[u8], tag: u32) -> Option<u64> {
        let offset = self.place(data.len())?;
        // SAFETY: place() guarantees [offset, offset+len) lies inside the mapping and
        // overlaps no held frame.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.mem.ptr.add(offset), data.len());
        }
        self.slots.push_back(Slot { offset, len: data.len(), tag, freed: false });
        Some(self.base + self.slots.len() as u64 - 1)
    }

    /// A held frame's slot (None once freed).
    pub fn get(&self, seq: u64) -> Option<Slot> {
        let i = seq.checked_sub(self.base)? as usize;
        self.slots.get(i).copied().filter(|s| !s.freed)
    }

    /// Pointer to a held frame's bytes (for iovecs handed to the kernel).
    pub fn frame_ptr(&self, slot: &Slot) -> *const u8 {
        // SAFETY: slot came from this ring, so the offset lies inside the mapping.
        unsafe { self.mem.ptr.add(slot.offset) }
    }

    /// A held frame's bytes.
    #[cfg(test)]
    pub fn frame(&self, seq: u64) -> &[u8] {
        let slot = self.get(seq).expect("frame is held");
        // SAFETY: as frame_ptr; the bytes stay valid until the frame is freed.
        unsafe { std::slice::from_raw_parts(self.frame_ptr(&slot), slot.len) }
    }

    /// A held frame's bytes, to rewrite in place (a CE mark).
    pub fn frame_mut(&mut self, seq: u64) -> Option<&mut [u8]> {
        let slot = self.get(seq)?;
        // SAFETY: as frame_ptr; the slot is held, and &mut self keeps every other borrow out.
        Some(unsafe { std::slice::from_raw_parts_mut(self.mem.ptr.add(slot.offset), slot.len) })
    }

    /// The frame was sent or dropped: its bytes may be reused once no older (or, at
    /// the newest end, newer) frame still needs the space in between.
    pub fn free(&mut self, seq: u64) {
        let i = match seq.checked_sub(self.base) {
            Some(i) if (i as usize) < self.slots.len() => i as usize,
            _ => return,
        };
        self.slots[i].freed = true;
        while self.slots.front().map_or(false, |s| s.freed) {
            self.slots.pop_front();
            self.base += 1;
        }
        // Sequence numbers of slots removed here are handed out again; nothing refers to
        // a freed frame any more.
        while self.slots.back().map_or(false, |s| s.freed) {
            self.slots.pop_back();
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
        assert_eq!(r.push(&frame(1, 100), 0), Some(0));
        assert_eq!(r.push(&frame(2, 100), 0), Some(1));
        assert_eq!(r.push(&frame(3, 100), 0), Some(2));
        assert_eq!(r.push(&frame(4, 1), 0), None, "a full ring must refuse");
        assert_eq!(r.span(), 3);
    }

    #[test]
    fn frame_larger_than_ring_is_refused() {
        let mut r = Ring::new(100).unwrap();
        assert!(r.push(&frame(1, 101), 0).is_none());
        assert!(r.is_empty());
    }

    #[test]
    fn keeps_fifo_order_and_contents_across_wraps() {
        let mut r = Ring::new(1000).unwrap();
        let mut held = std::collections::VecDeque::new();
        let mut next_in: u32 = 0;
        let mut next_out: u32 = 0;
        // Varying sizes force frames to wrap at different points many times.
        for round in 0..200usize {
            let len = 50 + (round * 37) % 300;
            while let Some(seq) = r.push(&frame(next_in as u8, len), next_in) {
                held.push_back(seq);
                next_in += 1;
            }
            let take = 1 + round % 3;
            for _ in 0..take.min(held.len()) {
                let seq = held.pop_front().unwrap();
                let s = r.get(seq).unwrap();
                assert_eq!(s.tag, next_out);
                assert_eq!(r.frame(seq), &frame(next_out as u8, s.len)[..]);
                r.free(seq);
                next_out += 1;
            }
        }
        assert!(next_out > 100);
    }

    #[test]
    fn wrapped_frame_goes_to_start_and_never_overlaps() {
        let mut r = Ring::new(1000).unwrap();
        let a = r.push(&frame(1, 400), 1).unwrap(); // [0,400)
        let b = r.push(&frame(2, 400), 2).unwrap(); // [400,800)
        r.free(a); // free [0,400)
        // 300 bytes do not fit in [800,1000) -> go to offset 0.
        let c = r.push(&frame(3, 300), 3).unwrap();
        assert_eq!(r.get(c).unwrap().offset, 0);
        // Now free is [300,400) only (the gap [800,1000) is unusable until the reader
        // passes it): 150 bytes must not fit, 100 must.
        assert!(r.push(&frame(4, 150), 4).is_none());
        let e = r.push(&frame(5, 100), 5).unwrap();
        assert_eq!(r.get(e).unwrap().offset, 300);
        assert_eq!(r.frame(b), &frame(2, 400)[..]);
        assert_eq!(r.frame(c), &frame(3, 300)[..]);
    }

    #[test]
    fn empty_ring_restarts_at_zero() {
        let mut r = Ring::new(100).unwrap();
        let a = r.push(&frame(1, 60), 1).unwrap();
        r.free(a);
        // 80 bytes fit only because an empty ring starts again at offset 0.
        let b = r.push(&frame(2, 80), 2).unwrap();
        assert_eq!(r.get(b).unwrap().offset, 0);
    }

    #[test]
    fn frames_freed_out_of_order_keep_their_space_until_the_oldest_goes() {
        let mut r = Ring::new(400).unwrap();
        let a = r.push(&frame(1, 100), 0).unwrap();
        let b = r.push(&frame(2, 100), 1).unwrap();
        let c = r.push(&frame(3, 100), 0).unwrap();
        r.free(b); // in the middle: still occupies its bytes
        assert_eq!(r.get(b), None);
        assert_eq!(r.frame(c), &frame(3, 100)[..]);
        assert!(r.push(&frame(4, 200), 0).is_none());
        r.free(a); // now a and b are reclaimed together
        assert_eq!(r.span(), 1);
        assert!(r.push(&frame(4, 200), 0).is_some());
        assert_eq!(r.frame(c), &frame(3, 100)[..]);
    }

    #[test]
    fn freeing_the_newest_frame_gives_its_space_back_at_once() {
        // The bottleneck refuses or pushes out the frame just stored: no space is lost.
        let mut r = Ring::new(300).unwrap();
        let a = r.push(&frame(1, 100), 0).unwrap();
        for k in 0..1000u32 {
            let s = r.push(&frame(k as u8, 200), 0).expect("the refused frame's space is reused");
            r.free(s);
        }
        let s = r.push(&frame(9, 200), 0).unwrap();
        assert_eq!(s, a + 1, "sequence numbers of freed newest frames are reused");
        assert_eq!(r.frame(a), &frame(1, 100)[..]);
        // Freeing twice, or a number never handed out, changes nothing.
        r.free(s);
        r.free(s);
        r.free(12345);
        assert_eq!(r.span(), 1);
    }
}
