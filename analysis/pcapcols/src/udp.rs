//! UDP datagrams (QUIC's carrier): header fields and an identity hash that lets two
//! captures of the same path be matched datagram by datagram without decrypting.
//!
//! The hash covers what a router leaves unchanged: addresses, ports, the UDP length
//! and the first `HASHED_PAYLOAD` payload bytes. QUIC's packet number sits inside
//! those bytes, so every datagram of a connection hashes differently; the IP ID, TTL,
//! TOS/ECN and both checksums are left out because a hop may rewrite them.

/// Payload bytes that enter the hash. A 128-byte snap keeps at least this many
/// behind Ethernet (or SLL/SLL2), a VLAN tag, IPv4 options up to 16 bytes and UDP.
pub const HASHED_PAYLOAD: usize = 32;

/// QUIC's header form bit: set in the first byte of a long-header packet.
const QUIC_LONG_HEADER: u8 = 0x80;

/// Header fields of one IPv4 UDP datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpDatagram {
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
    /// The UDP length field (header included): the datagram's true size, even when
    /// the capture kept only its start.
    pub ulen: u16,
    pub tos: u8,
    /// 1 when the first payload byte has QUIC's long-header bit; 0 otherwise or
    /// when no payload byte was captured.
    pub qlong: u8,
    pub hash: u64,
}

/// FNV-1a, 64 bits: a few instructions per byte and no dependency; the hash only
/// has to tell apart datagrams of trusted captures, not resist an adversary.
struct Fnv1a(u64);

impl Fnv1a {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;

    fn new() -> Fnv1a {
        Fnv1a(Self::OFFSET)
    }

    fn bytes(mut self, data: &[u8]) -> Fnv1a {
        for b in data {
            self.0 = (self.0 ^ *b as u64).wrapping_mul(Self::PRIME);
        }
        self
    }
}

/// The identity hash of a datagram: (src, dst, sport, dport, ulen, payload prefix),
/// each in network byte order. `payload` is what the capture holds of the payload.
pub fn datagram_hash(src: u32, dst: u32, sport: u16, dport: u16, ulen: u16, payload: &[u8]) -> u64 {
    let prefix = &payload[..payload.len().min(HASHED_PAYLOAD)];
    Fnv1a::new()
        .bytes(&src.to_be_bytes())
        .bytes(&dst.to_be_bytes())
        .bytes(&sport.to_be_bytes())
        .bytes(&dport.to_be_bytes())
        .bytes(&ulen.to_be_bytes())
        .bytes(prefix)
        .0
}

/// Decodes the UDP part of an IPv4 packet. `ip` is the captured IPv4 packet from its
/// first byte, `ihl` its header length and `total` its total length field, both
/// already checked by the caller. None when the UDP header was not captured or its
/// length field is impossible.
pub fn parse(ip: &[u8], ihl: usize, total: usize) -> Option<UdpDatagram> {
    let u = ip.get(ihl..)?;
    if u.len() < 8 {
        return None;
    }
    let ulen = u16::from_be_bytes([u[4], u[5]]);
    if (ulen as usize) < 8 || total < ihl + 8 {
        return None;
    }
    // Captured payload, without link-layer padding after the IP packet (a short
    // frame is padded to 60 bytes on Ethernet, and only at some capture points).
    let end = u.len().min(ulen as usize).min(total - ihl);
    let payload: &[u8] = if end > 8 { &u[8..end] } else { &[] };
    let src = u32::from_be_bytes([ip[12], ip[13], ip[14], ip[15]]);
    let dst = u32::from_be_bytes([ip[16], ip[17], ip[18], ip[19]]);
    let sport = u16::from_be_bytes([u[0], u[1]]);
    let dport = u16::from_be_bytes([u[2], u[3]]);
    Some(UdpDatagram {
        src,
        dst,
        sport,
        dport,
        ulen,
        tos: ip[1],
        qlong: payload.first().map_or(0, |b| (b & QUIC_LONG_HEADER != 0) as u8),
        hash: datagram_hash(src, dst, sport, dport, ulen, payload),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv1a_reference_values() {
        // Published FNV-1a 64 test vectors.
        assert_eq!(Fnv1a::new().bytes(b"").0, 0xcbf29ce484222325);
        assert_eq!(Fnv1a::new().bytes(b"a").0, 0xaf63dc4c8601ec8c);
        assert_eq!(Fnv1a::new().bytes(b"foobar").0, 0x85944171f73967e8);
    }

    #[test]
    fn hash_uses_at_most_the_first_32_payload_bytes() {
        let p: Vec<u8> = (0..100u8).collect();
        let h = |payload: &[u8]| datagram_hash(1, 2, 3, 4, 108, payload);
        assert_eq!(h(&p), h(&p[..32]));
        assert_ne!(h(&p), h(&p[..31]));
        let mut q = p.clone();
        q[31] ^= 1;
        assert_ne!(h(&p), h(&q));
        q[31] ^= 1;
        q[32] ^= 1;
        assert_eq!(h(&p), h(&q));
        assert_ne!(h(&p), datagram_hash(1, 2, 3, 4, 109, &p));
        assert_ne!(h(&p), datagram_hash(2, 1, 4, 3, 108, &p));
    }
}
