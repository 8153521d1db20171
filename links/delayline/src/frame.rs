//! What the line reads from a frame: DSCP, ECN, IPv4 address pair, its flow, and its size on
//! the wire; and the one thing it writes, a CE mark.
//!
//! Frames are Ethernet (no FCS) behind a virtio_net_hdr; up to two VLAN tags are skipped.

#[cfg(test)]
pub const ETH_HLEN: usize = 14;
const ETH_P_IP: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
// virtio_net_hdr: flags u8, gso_type u8, hdr_len u16, gso_size u16 (little-endian here).
const VIRTIO_NET_HDR_GSO_NONE: u8 = 0;
const VIRTIO_NET_HDR_GSO_ECN: u8 = 0x80;

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// (EtherType, offset of the network header), past VLAN tags.
fn network(frame: &[u8]) -> Option<(u16, usize)> {
    let mut at = 12;
    let mut kind = be16(frame, at)?;
    for _ in 0..2 {
        if kind != ETH_P_8021Q && kind != ETH_P_8021AD {
            break;
        }
        at += 4;
        kind = be16(frame, at)?;
    }
    Some((kind, at + 2))
}

/// DSCP of an IPv4 or IPv6 frame.
pub fn dscp(frame: &[u8]) -> Option<u8> {
    let (kind, l3) = network(frame)?;
    match kind {
        ETH_P_IP if frame.get(l3)? >> 4 == 4 => Some(frame.get(l3 + 1)? >> 2),
        ETH_P_IPV6 if frame.get(l3)? >> 4 == 6 => Some(((frame[l3] & 0x0f) << 2) | (frame.get(l3 + 1)? >> 6)),
        _ => None,
    }
}

/// The ECN field (RFC 3168) of an IPv4 or IPv6 frame: 0 Not-ECT, 1 ECT(1), 2 ECT(0), 3 CE.
pub fn ecn(frame: &[u8]) -> Option<u8> {
    let (kind, l3) = network(frame)?;
    match kind {
        ETH_P_IP if frame.get(l3)? >> 4 == 4 => Some(frame.get(l3 + 1)? & 0x03),
        ETH_P_IPV6 if frame.get(l3)? >> 4 == 6 => Some((frame.get(l3 + 1)? >> 4) & 0x03),
        _ => None,
    }
}

/// Set CE in an ECN-capable frame (ECT(0) or ECT(1)), as a router that marks instead of
/// dropping does; IPv4's header checksum is updated incrementally (RFC 1624, eqn. 3).
/// Returns whether the frame is now CE.
pub fn set_ce(frame: &mut [u8]) -> bool {
    let (kind, l3) = match network(frame) {
        Some(n) => n,
        None => return false,
    };
    match ecn(frame) {
        Some(3) => return true,
        Some(1) | Some(2) => {}
        _ => return false,
    }
    if kind == ETH_P_IPV6 {
        frame[l3 + 1] |= 0x30;
        return true;
    }
    if frame.len() < l3 + 20 {
        return false;
    }
    let old = u16::from_be_bytes([frame[l3], frame[l3 + 1]]);
    frame[l3 + 1] |= 0x03;
    let new = u16::from_be_bytes([frame[l3], frame[l3 + 1]]);
    let check = u16::from_be_bytes([frame[l3 + 10], frame[l3 + 11]]);
    // HC' = ~(~HC + ~m + m'), in ones' complement.
    let mut sum = (!check as u32) + (!old as u32) + new as u32;
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    frame[l3 + 10..l3 + 12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    true
}

/// IPv4 (source, destination) as host-order integers.
pub fn ipv4_pair(frame: &[u8]) -> Option<(u32, u32)> {
    let (kind, l3) = network(frame)?;
    if kind != ETH_P_IP || frame.get(l3)? >> 4 != 4 || frame.len() < l3 + 20 {
        return None;
    }
    let word = |at: usize| u32::from_be_bytes([frame[at], frame[at + 1], frame[at + 2], frame[at + 3]]);
    Some((word(l3 + 12), word(l3 + 16)))
}

/// A frame's flow for a fair queue: its addresses, protocol and TCP or UDP ports, IPv4 or
/// IPv6, hashed (FNV-1a, 64 bits) into one key; 0 for a frame without them. RFC 8290
/// §4.1.1 perturbs the hash with a random value to make collisions unpredictable; this one
/// is fixed, so that the same flows meet in the same queues in every run.
pub fn flow_key(frame: &[u8]) -> u64 {
    let Some((kind, l3)) = network(frame) else { return 0 };
    let (addrs, proto, l4) = match kind {
        ETH_P_IP if frame.len() >= l3 + 20 => {
            (&frame[l3 + 12..l3 + 20], frame[l3 + 9], l3 + (frame[l3] & 0x0f) as usize * 4)
        }
        ETH_P_IPV6 if frame.len() >= l3 + 40 => (&frame[l3 + 8..l3 + 40], frame[l3 + 6], l3 + 40),
        _ => return 0,
    };
    let ports = match proto {
        IPPROTO_TCP | IPPROTO_UDP => frame.get(l4..l4 + 4).unwrap_or(&[]),
        _ => &[],
    };
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in addrs.iter().chain([proto].iter()).chain(ports.iter()) {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Length of the Ethernet, IP and TCP/UDP headers, which every segment of a GSO frame repeats.
fn headers_len(frame: &[u8]) -> Option<usize> {
    let (kind, l3) = network(frame)?;
    let (proto, l4) = match kind {
        ETH_P_IP => {
            let ihl = (*frame.get(l3)? & 0x0f) as usize * 4;
            (*frame.get(l3 + 9)?, l3 + ihl)
        }
        ETH_P_IPV6 => (*frame.get(l3 + 6)?, l3 + 40),
        _ => return None,
    };
    match proto {
        IPPROTO_TCP => Some(l4 + (*frame.get(l4 + 12)? >> 4) as usize * 4),
        IPPROTO_UDP => Some(l4 + 8),
        _ => None,
    }
}

/// Bytes the frame occupies on an Ethernet link (header included, no FCS), as tc counts
/// them: a GSO super-frame counts as the segments it stands for, each with its headers.
pub fn wire_bytes(vnet: &[u8], frame: &[u8]) -> u64 {
    let len = frame.len() as u64;
    if vnet.len() < 6 {
        return len;
    }
    let gso_type = vnet[1] & !VIRTIO_NET_HDR_GSO_ECN;
    let gso_size = u16::from_le_bytes([vnet[4], vnet[5]]) as u64;
    if gso_type == VIRTIO_NET_HDR_GSO_NONE || gso_size == 0 {
        return len;
    }
    let hdr = match headers_len(frame) {
        Some(h) if (h as u64) < len => h as u64,
        _ => return len,
    };
    let segments = (len - hdr + gso_size - 1) / gso_size;
    len + segments.saturating_sub(1) * hdr
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// An Ethernet + IPv4 + UDP/TCP frame for tests (payload zeros).
    pub fn ipv4_frame(src: [u8; 4], dst: [u8; 4], tos: u8, proto: u8, payload: usize) -> Vec<u8> {
        let l4 = if proto == IPPROTO_TCP { 20 } else { 8 };
        let mut f = vec![0u8; ETH_HLEN + 20 + l4 + payload];
        f[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
        f[14] = 0x45;
        f[15] = tos;
        f[23] = proto;
        f[26..30].copy_from_slice(&src);
        f[30..34].copy_from_slice(&dst);
        if proto == IPPROTO_TCP {
            f[34 + 12] = 5 << 4;
        }
        f
    }

    #[test]
    fn reads_dscp_of_ipv4_ipv6_and_vlan_frames() {
        // AF13 = DSCP 14 = TOS 0x38; the ECN bits do not count.
        assert_eq!(dscp(&ipv4_frame([1, 0, 0, 1], [1, 0, 0, 2], 0x38 | 0x01, 17, 10)), Some(14));
        assert_eq!(dscp(&ipv4_frame([1, 0, 0, 1], [1, 0, 0, 2], 0, 17, 10)), Some(0));
        let mut tagged = ipv4_frame([1, 0, 0, 1], [1, 0, 0, 2], 46 << 2, 17, 10);
        tagged.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
        assert_eq!(dscp(&tagged), Some(46));
        // IPv6: version 6, traffic class 0x38 spread over the first two bytes.
        let mut v6 = vec![0u8; ETH_HLEN + 40];
        v6[12..14].copy_from_slice(&ETH_P_IPV6.to_be_bytes());
        v6[14] = 0x60 | (0x38 >> 4);
        v6[15] = (0x38 & 0x0f) << 4;
        assert_eq!(dscp(&v6), Some(14));
        // ARP, runts: no DSCP.
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(dscp(&arp), None);
        assert_eq!(dscp(&[0u8; 13]), None);
    }

    /// IPv4's header checksum computed from scratch.
    fn ipv4_checksum(h: &[u8]) -> u16 {
        let mut sum: u32 = h.chunks(2).enumerate().filter(|(i, _)| *i != 5).map(|(_, w)| u16::from_be_bytes([w[0], w[1]]) as u32).sum();
        while sum >> 16 != 0 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    #[test]
    fn sets_ce_only_in_ecn_capable_frames_and_keeps_the_ipv4_checksum_right() {
        for ecn_bits in 0..4u8 {
            let mut f = ipv4_frame([10, 0, 0, 1], [10, 0, 0, 2], (14 << 2) | ecn_bits, IPPROTO_TCP, 100);
            let sum = ipv4_checksum(&f[14..34]);
            f[24..26].copy_from_slice(&sum.to_be_bytes());
            assert_eq!(ecn(&f), Some(ecn_bits));
            let marked = set_ce(&mut f);
            assert_eq!(marked, ecn_bits != 0, "ECN bits {ecn_bits}");
            assert_eq!(ecn(&f), Some(if ecn_bits != 0 { 3 } else { 0 }));
            assert_eq!(dscp(&f), Some(14), "the DSCP is kept");
            assert_eq!(u16::from_be_bytes([f[24], f[25]]), ipv4_checksum(&f[14..34]), "ECN bits {ecn_bits}");
        }
        let mut v6 = vec![0u8; ETH_HLEN + 40];
        v6[12..14].copy_from_slice(&ETH_P_IPV6.to_be_bytes());
        v6[14] = 0x60;
        v6[15] = 0x20; // ECT(0)
        assert_eq!(ecn(&v6), Some(2));
        assert!(set_ce(&mut v6));
        assert_eq!((ecn(&v6), v6[15]), (Some(3), 0x30));
    }

    #[test]
    fn a_flow_is_its_addresses_protocol_and_ports() {
        let mut a = ipv4_frame([10, 0, 0, 1], [10, 0, 0, 2], 0, IPPROTO_TCP, 100);
        a[34..38].copy_from_slice(&[0x9c, 0x40, 0x00, 0x50]); // 40000 → 80
        let mut b = a.clone();
        b[15] = 0x38 | 0x03; // another DSCP and CE: the same flow
        b.extend_from_slice(&[0u8; 200]);
        assert_eq!(flow_key(&a), flow_key(&b));
        let mut other_port = a.clone();
        other_port[35] = 0x41;
        let mut udp = a.clone();
        udp[23] = IPPROTO_UDP;
        let mut reverse = a.clone();
        reverse[26..34].copy_from_slice(&[10, 0, 0, 2, 10, 0, 0, 1]);
        let keys = [flow_key(&a), flow_key(&other_port), flow_key(&udp), flow_key(&reverse)];
        assert!(keys.iter().enumerate().all(|(i, k)| *k != 0 && keys[..i].iter().all(|o| o != k)), "{keys:?}");
        let mut arp = vec![0u8; 42];
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(flow_key(&arp), 0);
    }

    #[test]
    fn reads_the_ipv4_pair() {
        let f = ipv4_frame([10, 77, 0, 1], [10, 77, 0, 2], 0, 17, 0);
        assert_eq!(ipv4_pair(&f), Some((0x0a4d_0001, 0x0a4d_0002)));
        assert_eq!(ipv4_pair(&f[..30]), None);
    }

    #[test]
    fn gso_frames_count_every_segment_with_its_headers() {
        // 54 bytes of Ethernet+IPv4+TCP headers and 2896 bytes of payload in 1448-byte
        // segments: two frames of 1502 bytes on the wire.
        let f = ipv4_frame([1, 0, 0, 1], [1, 0, 0, 2], 0, IPPROTO_TCP, 2896);
        let mut vnet = [0u8; 10];
        assert_eq!(wire_bytes(&vnet, &f), 2950, "no GSO: the frame as it is");
        vnet[1] = 1; // TCPV4
        vnet[4..6].copy_from_slice(&1448u16.to_le_bytes());
        assert_eq!(wire_bytes(&vnet, &f), 2 * 1502);
        // A short last segment: 3000 bytes = 1448 + 1448 + 104.
        let f = ipv4_frame([1, 0, 0, 1], [1, 0, 0, 2], 0, IPPROTO_TCP, 3000);
        assert_eq!(wire_bytes(&vnet, &f), 3000 + 3 * 54);
    }
}
