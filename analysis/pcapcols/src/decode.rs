//! Link-layer, IPv4 and TCP header decoding. Only the header fields analysis needs;
//! payload length comes from the IP total length because captures are snapped.

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
}

/// Why a frame did not yield a TCP packet; counted separately in meta.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    /// Not IPv4, not TCP, or a non-first fragment: legitimately not ours.
    NotTcp,
    /// IPv4/TCP but the snap length cut the headers, or the lengths are inconsistent.
    Short,
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

/// Decodes one frame into TCP header fields.
pub fn decode(linktype: u32, frame: &[u8]) -> Result<TcpPacket, Skip> {
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
    if f[9] != 6 {
        return Err(Skip::NotTcp);
    }
    if be16(f, 6) & 0x1fff != 0 {
        return Err(Skip::NotTcp); // non-first fragment: no TCP header
    }
    let ihl = ((f[0] & 0x0f) as usize) * 4;
    let total = be16(f, 2) as usize;
    if ihl < 20 || f.len() < ihl + 20 {
        return Err(Skip::Short);
    }
    let t = &f[ihl..];
    let doff = ((t[12] >> 4) as usize) * 4;
    if doff < 20 || total < ihl + doff {
        return Err(Skip::Short);
    }
    Ok(TcpPacket {
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
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4_tcp(total: u16, payload_fill: usize) -> Vec<u8> {
        let mut p = vec![0u8; 40 + payload_fill];
        p[0] = 0x45;
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

    #[test]
    fn ethernet_with_vlan_and_snapped_payload() {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x81, 0x00, 0x00, 0x05, 0x08, 0x00]);
        f.extend(ipv4_tcp(1500, 10)); // snapped: only 10 of 1460 payload bytes captured
        let p = decode(LINKTYPE_ETHERNET, &f).unwrap();
        assert_eq!(p.payload, 1460);
        assert_eq!(p.seq, 0xfffffff0);
        assert_eq!((p.sport, p.dport, p.ipid, p.flags), (80, 40000, 0x1234, 0x18));
        assert_eq!(p.src, 0x0a000001);
    }

    #[test]
    fn sll_and_sll2() {
        let mut sll = vec![0u8; 14];
        sll.extend_from_slice(&[0x08, 0x00]);
        sll.extend(ipv4_tcp(40, 0));
        assert_eq!(decode(LINKTYPE_LINUX_SLL, &sll).unwrap().payload, 0);
        let mut sll2 = vec![0x08, 0x00];
        sll2.extend_from_slice(&[0u8; 18]);
        sll2.extend(ipv4_tcp(140, 0));
        assert_eq!(decode(LINKTYPE_LINUX_SLL2, &sll2).unwrap().payload, 100);
    }

    #[test]
    fn skips() {
        let mut arp = vec![0u8; 12];
        arp.extend_from_slice(&[0x08, 0x06]);
        arp.extend_from_slice(&[0u8; 28]);
        assert_eq!(decode(LINKTYPE_ETHERNET, &arp), Err(Skip::NotTcp));
        let mut udp = ipv4_tcp(40, 0);
        udp[9] = 17;
        assert_eq!(decode(LINKTYPE_RAW, &udp), Err(Skip::NotTcp));
        let cut = ipv4_tcp(40, 0);
        assert_eq!(decode(LINKTYPE_RAW, &cut[..30]), Err(Skip::Short));
        let bad_len = ipv4_tcp(30, 0); // total length smaller than the headers
        assert_eq!(decode(LINKTYPE_RAW, &bad_len), Err(Skip::Short));
        assert!(check_linktype(105).unwrap_err().contains("105"));
    }
}
