//! Link-layer, IPv4, TCP and UDP header decoding. Only the header fields analysis
//! needs; sizes come from the IP total length and the UDP length because captures
//! are snapped.

use crate::udp::{self, UdpDatagram};

pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_RAW: u32 = 101;
pub const LINKTYPE_LINUX_SLL: u32 = 113;
pub const LINKTYPE_LINUX_SLL2: u32 = 276;

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88a8;

/// Rejects link types we cannot decode before reading any packet, so the user
/// gets one clear error instead of a capture full of "skipped" packets.
pub fn check_linktype(linktype: u32) -> Result<(), String> {
    match linktype {
        LINKTYPE_ETHERNET | LINKTYPE_RAW | LINKTYPE_LINUX_SLL | LINKTYPE_LINUX_SLL2 => Ok(()),
        other => Err(format!(
            "unsupported link type {} (supported: 1 Ethernet, 101 raw IP, 113 Linux SLL, 276 Linux SLL2)",
            other
        )),
    }
}

/// Header fields of one IPv4 TCP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TcpPacket {
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub dport: u16,
    pub seq: u32,
    pub ack: u32,
    pub flags: u8,
    pub win: u16,
    pub payload: u32,
    pub ipid: u16,
    pub tos: u8,
}

/// What a frame decoded to: a TCP packet or a UDP datagram, each with its own table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decoded {
    Tcp(TcpPacket),
    Udp(UdpDatagram),
}

/// Why a frame did not yield a TCP packet; counted separately in meta.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Not IPv4, not TCP, or a non-first fragment: legitimately not ours.
    NotTcp,
    /// IPv4/TCP but the snap length cut the headers, or the lengths are inconsistent.
    Short,
    /// IPv4/UDP (so also not TCP) whose UDP header was cut or has an impossible length.
    UdpShort,
}

fn be16(b: &[u8], i: usize) -> u16 {
    u16::from_be_bytes([b[i], b[i + 1]])
}

fn be32(b: &[u8], i: usize) -> u32 {
    u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Finds the IPv4 header inside a frame of the given link type.
fn ipv4_offset(linktype: u32, f: &[u8]) -> Result<usize, Skip> {
    let (mut off, mut ethertype) = match linktype {
        LINKTYPE_ETHERNET => {
            if f.len() < 14 {
                return Err(Skip::Short);
            }
            (14, be16(f, 12))
        }
        LINKTYPE_LINUX_SLL => {
            if f.len() < 16 {
                return Err(Skip::Short);
            }
            (16, be16(f, 14))
        }
        LINKTYPE_LINUX_SLL2 => {
            if f.len() < 20 {
                return Err(Skip::Short);
            }
            (20, be16(f, 0))
        }
        _ => return Ok(0), // raw IP: version checked by the caller
    };
    while ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ {
        if f.len() < off + 4 {
            return Err(Skip::Short);
        }
        ethertype = be16(f, off + 2);
        off += 4;
    }
    if ethertype != ETHERTYPE_IPV4 {
        return Err(Skip::NotTcp);
    }
    Ok(off)
}

/// Decodes one frame into TCP or UDP header fields.
pub fn decode(linktype: u32, frame: &[u8]) -> Result<Decoded, Skip> {
    let ip = ipv4_offset(linktype, frame)?;
    let f = &frame[ip..];
    if f.is_empty() {
        return Err(Skip::Short);
    }
    if f[0] >> 4 != 4 {
        return Err(Skip::NotTcp);
    }
    if f.len() < 20 {
        return Err(Skip::Short);
    }
    if f[9] != 6 && f[9] != 17 {
        return Err(Skip::NotTcp);
    }
    if be16(f, 6) & 0x1fff != 0 {
        return Err(Skip::NotTcp); // non-first fragment: no TCP or UDP header
    }
    let ihl = ((f[0] & 0x0f) as usize) * 4;
    let total = be16(f, 2) as usize;
    if f[9] == 17 {
        if ihl < 20 {
            return Err(Skip::UdpShort);
        }
        return udp::parse(f, ihl, total).map(Decoded::Udp).ok_or(Skip::UdpShort);
    }
    if ihl < 20 || f.len() < ihl + 20 {
        return Err(Skip::Short);
    }
    let t = &f[ihl..];
    let doff = ((t[12] >> 4) as usize) * 4;
    if doff < 20 || total < ihl + doff {
        return Err(Skip::Short);
    }
    Ok(Decoded::Tcp(TcpPacket {
        src: be32(f, 12),
        dst: be32(f, 16),
        sport: be16(t, 0),
        dport: be16(t, 2),
        seq: be32(t, 4),
        ack: be32(t, 8),
        flags: t[13],
        win: be16(t, 14),
        payload: (total - ihl - doff) as u32,
        ipid: be16(f, 4),
        tos: f[1],
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_tcp(total: u16, payload_fill: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + payload_fill];
        p[0] = 0x45;
        p[1] = 0x04;
        p[2..4].copy_from_slice(&total.to_be_bytes());
        p[4..6].copy_from_slice(&0x1234u16.to_be_bytes());
        p[9] = 6;
        p[12..16].copy_from_slice(&[10, 0, 0, 1]);
        p[16..20].copy_from_slice(&[10, 0, 0, 2]);
        p[20..22].copy_from_slice(&80u16.to_be_bytes());
        p[22..24].copy_from_slice(&40000u16.to_be_bytes());
        p[24..28].copy_from_slice(&0xfffffff0u32.to_be_bytes());
        p[32] = 0x50;
        p[33] = 0x18;
        p
    }

    /// An IPv4/UDP packet as sent: `payload` real payload bytes whose first byte is
    /// `first` and the rest count up, so every prefix is distinct.
    fn ipv4_udp(payload: usize, first: u8, ttl: u8, ipid: u16, tos: u8) -> Vec<u8> {
        let total = 28 + payload;
        let mut p = vec![0u8; total];
        p[0] = 0x45;
        p[1] = tos;
        p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
        p[4..6].copy_from_slice(&ipid.to_be_bytes());
        p[8] = ttl;
        p[9] = 17;
        p[10..12].copy_from_slice(&(ttl as u16 * 7 + ipid).to_be_bytes()); // stands in for a checksum
        p[12..16].copy_from_slice(&[10, 78, 0, 1]);
        p[16..20].copy_from_slice(&[10, 78, 0, 2]);
        p[20..22].copy_from_slice(&4433u16.to_be_bytes());
        p[22..24].copy_from_slice(&50000u16.to_be_bytes());
        p[24..26].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
        p[26..28].copy_from_slice(&(ipid ^ 0x5555).to_be_bytes());
        for (i, b) in p[28..].iter_mut().enumerate() {
            *b = i as u8;
        }
        if payload > 0 {
            p[28] = first;
        }
        p
    }

    fn ethernet(ip: &[u8]) -> Vec<u8> {
        let mut f = vec![2u8; 12];
        f.extend_from_slice(&[0x08, 0x00]);
        f.extend_from_slice(ip);
        f
    }

    fn tcp(d: Result<Decoded, Skip>) -> TcpPacket {
        match d {
            Ok(Decoded::Tcp(p)) => p,
            other => panic!("not TCP: {:?}", other),
        }
    }

    fn udp(d: Result<Decoded, Skip>) -> UdpDatagram {
        match d {
            Ok(Decoded::Udp(u)) => u,
            other => panic!("not UDP: {:?}", other),
        }
    }

    #[test]
    fn ethernet_with_vlan_and_snapped_payload() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
        f.extend(ipv4_tcp(1500, 10)); // snapped: only 10 of 1460 payload bytes captured
        let p = tcp(decode(LINKTYPE_ETHERNET, &f));
        assert_eq!(p.payload, 1460);
        assert_eq!(p.seq, 0xfffffff0);
        assert_eq!((p.sport, p.dport, p.ipid, p.flags, p.tos), (80, 40000, 0x1234, 0x18, 0x04));
        assert_eq!(p.src, 0x0a000001);
    }

    #[test]
    fn sll_and_sll2() {
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend(ipv4_tcp(40, 0));
        assert_eq!(tcp(decode(LINKTYPE_LINUX_SLL, &sll)).payload, 0);
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend(ipv4_tcp(140, 0));
        assert_eq!(tcp(decode(LINKTYPE_LINUX_SLL2, &sll2)).payload, 100);
    }

    #[test]
    fn udp_fields_and_quic_header_form() {
        let u = udp(decode(LINKTYPE_ETHERNET, &ethernet(&ipv4_udp(40, 0xc3, 64, 1, 0x02))));
        assert_eq!((u.src, u.dst, u.sport, u.dport), (0x0a4e0001, 0x0a4e0002, 4433, 50000));
        assert_eq!((u.ulen, u.tos, u.qlong), (48, 0x02, 1));
        let short_header = udp(decode(LINKTYPE_RAW, &ipv4_udp(40, 0x43, 64, 1, 0)));
        assert_eq!(short_header.qlong, 0);
        let empty = udp(decode(LINKTYPE_RAW, &ipv4_udp(0, 0, 64, 1, 0)));
        assert_eq!((empty.ulen, empty.qlong), (8, 0));
    }

    #[test]
    fn udp_truncated_by_a_128_byte_snap_keeps_its_size_and_hash() {
        let frame = ethernet(&ipv4_udp(1252, 0xc0, 64, 7, 0));
        let whole = udp(decode(LINKTYPE_ETHERNET, &frame));
        let snapped = udp(decode(LINKTYPE_ETHERNET, &frame[..128]));
        assert_eq!(snapped.ulen, 1260);
        assert_eq!(snapped, whole); // 86 payload bytes captured: the hashed 32 are all there
        // Snapped inside the hashed bytes: still a datagram, but a different prefix.
        let deep = udp(decode(LINKTYPE_ETHERNET, &frame[..14 + 28 + 10]));
        assert_eq!(deep.ulen, 1260);
        assert_ne!(deep.hash, whole.hash);
    }

    #[test]
    fn udp_hash_ignores_what_a_router_rewrites() {
        let sent = udp(decode(LINKTYPE_RAW, &ipv4_udp(1200, 0x40, 64, 1, 0x00)));
        // Next hop: TTL, IP ID, ECN bits, IP and UDP checksums changed.
        let routed = udp(decode(LINKTYPE_RAW, &ipv4_udp(1200, 0x40, 63, 99, 0x03)));
        assert_eq!(sent.hash, routed.hash);
        assert_eq!(routed.tos, 0x03);
        let other = udp(decode(LINKTYPE_RAW, &ipv4_udp(1200, 0x41, 64, 1, 0x00)));
        assert_ne!(sent.hash, other.hash); // e.g. the next packet number
    }

    #[test]
    fn udp_hash_ignores_ethernet_padding() {
        let ip = ipv4_udp(4, 0x40, 64, 1, 0);
        let mut padded = ethernet(&ip);
        padded.resize(60, 0xee);
        assert_eq!(udp(decode(LINKTYPE_ETHERNET, &padded)), udp(decode(LINKTYPE_RAW, &ip)));
    }

    #[test]
    fn udp_skips() {
        let ip = ipv4_udp(40, 0x40, 64, 1, 0);
        assert_eq!(decode(LINKTYPE_RAW, &ip[..26]), Err(Skip::UdpShort)); // header cut
        let mut bad = ip.clone();
        bad[24..26].copy_from_slice(&4u16.to_be_bytes()); // length below the header's
        assert_eq!(decode(LINKTYPE_RAW, &bad), Err(Skip::UdpShort));
        let mut frag = ip.clone();
        frag[6..8].copy_from_slice(&0x00b9u16.to_be_bytes()); // non-first fragment
        assert_eq!(decode(LINKTYPE_RAW, &frag), Err(Skip::NotTcp));
        assert_eq!(decode(LINKTYPE_RAW, &ip[..19]), Err(Skip::Short)); // IP header cut
    }

    #[test]
    fn skips() {
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        assert_eq!(decode(LINKTYPE_ETHERNET, &arp), Err(Skip::NotTcp));
        let mut icmp = ipv4_tcp(40, 0);
        icmp[9] = 1;
        assert_eq!(decode(LINKTYPE_RAW, &icmp), Err(Skip::NotTcp));
        let cut = ipv4_tcp(40, 0);
        assert_eq!(decode(LINKTYPE_RAW, &cut[..30]), Err(Skip::Short));
        let bad_len = ipv4_tcp(30, 0); // total length smaller than the headers
        assert_eq!(decode(LINKTYPE_RAW, &bad_len), Err(Skip::Short));
        assert!(check_linktype(105).unwrap_err().contains("105"));
    }
}
