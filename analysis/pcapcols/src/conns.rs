//! Connection tracking: maps packets to connections (direction-independent
//! 4-tuple), decides each packet's direction and keeps per-direction counters.

use crate::decode::TcpPacket;
use crate::seqspace::SeqSpace;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

pub const FIN: u8 = 0x01;
pub const SYN: u8 = 0x02;
pub const RST: u8 = 0x04;
pub const ACK: u8 = 0x10;

/// Multiplicative hash for the packed 4-tuple key: std's SipHash is DoS-safe but
/// several times slower, and a capture is trusted input.
#[derive(Default)]
pub struct TupleHasher(u64);

impl Hasher for TupleHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.write_u64(*b as u64);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64);
        self.write_u64((v >> 64) as u64);
    }
}

/// Counters of one direction of a connection.
#[derive(Debug, Default)]
pub struct DirStats {
    pub pkts: u64,
    pub data_pkts: u64,
    pub total_bytes: u64,
    pub unique_bytes: u64,
    pub retx_pkts: u64,
    pub closed: bool,
    pub space: SeqSpace,
}

#[derive(Debug)]
pub struct Conn {
    /// Initiator address and port (direction 0 is sent from here).
    pub a_addr: u32,
    pub a_port: u16,
    pub b_addr: u32,
    pub b_port: u16,
    pub first_ts: f64,
    pub last_ts: f64,
    /// Time of the initiator's first SYN; NaN when the capture missed it.
    pub syn_ts: f64,
    pub syn_seq: Option<u32>,
    pub dirs: [DirStats; 2],
}

/// Per-packet results of tracking.
pub struct Tracked {
    pub conn: u32,
    pub dir: u8,
    pub retx: bool,
    pub new_bytes: u32,
}

fn key(p: &TcpPacket) -> u128 {
    let x = ((p.src as u128) << 16) | p.sport as u128;
    let y = ((p.dst as u128) << 16) | p.dport as u128;
    let (lo, hi) = if x <= y { (x, y) } else { (y, x) };
    (lo << 48) | hi
}

#[derive(Default)]
pub struct Tracker {
    pub conns: Vec<Conn>,
    index: HashMap<u128, u32, BuildHasherDefault<TupleHasher>>,
    last: Option<(u128, u32)>,
}

impl Tracker {
    fn open(&mut self, k: u128, p: &TcpPacket, ts: f64) -> u32 {
        // A SYN-ACK seen first means the capture missed the SYN: its receiver initiated.
        let from_responder = p.flags & SYN != 0 && p.flags & ACK != 0;
        let (a_addr, a_port, b_addr, b_port) = if from_responder {
            (p.dst, p.dport, p.src, p.sport)
        } else {
            (p.src, p.sport, p.dst, p.dport)
        };
        let id = self.conns.len() as u32;
        self.conns.push(Conn {
            a_addr,
            a_port,
            b_addr,
            b_port,
            first_ts: ts,
            last_ts: ts,
            syn_ts: f64::NAN,
            syn_seq: None,
            dirs: [DirStats::default(), DirStats::default()],
        });
        self.index.insert(k, id);
        id
    }

    /// A fresh SYN on a tuple whose connection was closed starts a new connection
    /// (port reuse); a retransmitted SYN of the same connection does not.
    fn is_reuse(c: &Conn, p: &TcpPacket) -> bool {
        p.flags & (SYN | ACK) == SYN
            && (c.dirs[0].closed || c.dirs[1].closed)
            && c.syn_seq != Some(p.seq)
    }

    pub fn track(&mut self, p: &TcpPacket, ts: f64) -> Tracked {
        let k = key(p);
        let cached = match self.last {
            Some((lk, id)) if lk == k => Some(id),
            _ => self.index.get(&k).copied(),
        };
        let id = match cached {
            Some(id) if !Self::is_reuse(&self.conns[id as usize], p) => id,
            _ => self.open(k, p, ts),
        };
        self.last = Some((k, id));
        let c = &mut self.conns[id as usize];
        let dir = if p.src == c.a_addr && p.sport == c.a_port { 0u8 } else { 1u8 };
        c.last_ts = ts;
        if dir == 0 && p.flags & (SYN | ACK) == SYN && c.syn_seq.is_none() {
            c.syn_ts = ts;
            c.syn_seq = Some(p.seq);
        }
        let d = &mut c.dirs[dir as usize];
        d.pkts += 1;
        if p.flags & (FIN | RST) != 0 {
            d.closed = true;
        }
        let mut tracked = Tracked { conn: id, dir, retx: false, new_bytes: 0 };
        if p.payload > 0 {
            // Data rides after the SYN's sequence number when a SYN carries data.
            let start = if p.flags & SYN != 0 { p.seq.wrapping_add(1) } else { p.seq };
            let added = d.space.add(start, p.payload);
            d.data_pkts += 1;
            d.total_bytes += p.payload as u64;
            d.unique_bytes += added.new_bytes as u64;
            if added.retx {
                d.retx_pkts += 1;
            }
            tracked.retx = added.retx;
            tracked.new_bytes = added.new_bytes;
        }
        tracked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(src: u32, sport: u16, dst: u32, dport: u16, flags: u8, seq: u32, payload: u32) -> TcpPacket {
        TcpPacket { src, dst, sport, dport, seq, ack: 0, flags, win: 0, payload, ipid: 0, tos: 0 }
    }

    #[test]
    fn directions_and_counts() {
        let mut t = Tracker::default();
        let syn = t.track(&pkt(1, 40000, 2, 80, SYN, 100, 0), 1.0);
        let synack = t.track(&pkt(2, 80, 1, 40000, SYN | ACK, 500, 0), 1.1);
        let d1 = t.track(&pkt(2, 80, 1, 40000, ACK, 501, 1000), 1.2);
        let d1again = t.track(&pkt(2, 80, 1, 40000, ACK, 501, 1000), 1.3);
        assert_eq!((syn.conn, syn.dir), (0, 0));
        assert_eq!((synack.conn, synack.dir), (0, 1));
        assert!(!d1.retx && d1again.retx);
        let c = &t.conns[0];
        assert_eq!(c.syn_ts, 1.0);
        assert_eq!((c.dirs[1].unique_bytes, c.dirs[1].total_bytes, c.dirs[1].retx_pkts), (1000, 2000, 1));
        assert_eq!(c.dirs[0].pkts, 1);
    }

    #[test]
    fn synack_first_sets_initiator() {
        let mut t = Tracker::default();
        let s = t.track(&pkt(2, 80, 1, 40000, SYN | ACK, 500, 0), 1.0);
        assert_eq!(s.dir, 1);
        assert_eq!((t.conns[0].a_addr, t.conns[0].a_port), (1, 40000));
        assert!(t.conns[0].syn_ts.is_nan());
    }

    #[test]
    fn port_reuse_after_close_is_a_new_connection() {
        let mut t = Tracker::default();
        t.track(&pkt(1, 40000, 2, 80, SYN, 100, 0), 1.0);
        assert_eq!(t.track(&pkt(1, 40000, 2, 80, SYN, 100, 0), 2.0).conn, 0); // SYN retransmitted
        t.track(&pkt(1, 40000, 2, 80, FIN | ACK, 101, 0), 3.0);
        assert_eq!(t.track(&pkt(1, 40000, 2, 80, SYN, 9999, 0), 4.0).conn, 1);
        assert_eq!(t.conns.len(), 2);
    }
}
