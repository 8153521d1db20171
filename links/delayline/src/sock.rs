//! AF_PACKET sockets: one receive socket and one transmit socket per interface.
//!
//! Frames carry a virtio_net_hdr (PACKET_VNET_HDR) in front, so GSO super-frames and
//! CHECKSUM_PARTIAL frames pass through unchanged instead of being dropped or sent
//! with bad checksums. The transmit socket is bound with protocol 0, so it receives
//! nothing; the receive socket ignores frames sent out of its own interface.

use std::ffi::CString;
use std::io;
use std::os::unix::io::RawFd;

// <linux/if_packet.h>
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VNET_HDR: libc::c_int = 15;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
// <asm-generic/socket.h> (x86 and arm use the generic values)
const SO_TIMESTAMPNS: libc::c_int = 35;
const SO_SNDBUFFORCE: libc::c_int = 32;
const SO_RCVBUFFORCE: libc::c_int = 33;
const ETH_P_ALL: u16 = 0x0003;

/// Size of struct virtio_net_hdr in front of every frame.
pub const VNET_HDR_LEN: usize = 10;
/// Room for the largest GSO frame (64 KiB) plus headers.
pub const FRAME_BUF: usize = 65_536 + 256;

#[repr(C)]
struct PacketMreq {
    mr_ifindex: libc::c_int,
    mr_type: libc::c_ushort,
    mr_alen: libc::c_ushort,
    mr_address: [libc::c_uchar; 8],
}

#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    tp_packets: libc::c_uint,
    tp_drops: libc::c_uint,
}

fn os_err(what: &str) -> String {
    format!("{}: {}", what, io::Error::last_os_error())
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, opt: libc::c_int, val: libc::c_int, what: &str) -> Result<(), String> {
    // SAFETY: passes a pointer to a local int of the stated size.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &val as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(os_err(what));
    }
    Ok(())
}

/// Interface index, or a clear error if the interface does not exist.
pub fn ifindex(name: &str) -> Result<i32, String> {
    let c = CString::new(name).map_err(|_| format!("bad interface name {:?}", name))?;
    // SAFETY: c is a valid NUL-terminated string.
    let idx = unsafe { libc::if_nametoindex(c.as_ptr()) };
    if idx == 0 {
        return Err(format!("no interface named {:?} in this network namespace", name));
    }
    Ok(idx as i32)
}

/// MTU of an interface (SIOCGIFMTU).
pub fn mtu(name: &str) -> Result<u32, String> {
    // SAFETY: socket/ioctl/close on a local descriptor with a zeroed, filled ifreq.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return Err(os_err("socket for SIOCGIFMTU"));
        }
        let mut req: libc::ifreq = std::mem::zeroed();
        for (i, b) in name.bytes().take(libc::IFNAMSIZ - 1).enumerate() {
            req.ifr_name[i] = b as libc::c_char;
        }
        let rc = libc::ioctl(fd, libc::SIOCGIFMTU as _, &mut req);
        let err = os_err(&format!("cannot read the MTU of {}", name));
        libc::close(fd);
        if rc < 0 {
            return Err(err);
        }
        Ok(req.ifr_ifru.ifru_mtu as u32)
    }
}

/// tx_dropped of an interface (getifaddrs reads it over netlink in this namespace).
pub fn link_tx_dropped(name: &str) -> Option<u64> {
    let mut out = None;
    // SAFETY: walks the list getifaddrs returned and frees it once. For AF_PACKET
    // entries ifa_data points to struct rtnl_link_stats (u32 fields; tx_dropped is #7).
    unsafe {
        let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
        if libc::getifaddrs(&mut head) != 0 {
            return None;
        }
        let mut cur = head;
        while !cur.is_null() {
            let ifa = &*cur;
            if !ifa.ifa_addr.is_null()
                && (*ifa.ifa_addr).sa_family as libc::c_int == libc::AF_PACKET
                && !ifa.ifa_data.is_null()
                && std::ffi::CStr::from_ptr(ifa.ifa_name).to_bytes() == name.as_bytes()
            {
                let stats = ifa.ifa_data as *const u32;
                out = Some(*stats.add(7) as u64);
            }
            cur = ifa.ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

/// An AF_PACKET SOCK_RAW socket bound to one interface; closed on drop.
pub struct PacketSocket {
    pub fd: RawFd,
}

impl Drop for PacketSocket {
    fn drop(&mut self) {
        // SAFETY: fd is owned by this value.
        unsafe {
            libc::close(self.fd);
        }
    }
}

fn bind(fd: RawFd, ifindex: i32, protocol: u16, ifname: &str) -> Result<(), String> {
    // SAFETY: a zeroed sockaddr_ll with family, protocol and index filled in.
    let rc = unsafe {
        let mut sll: libc::sockaddr_ll = std::mem::zeroed();
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = protocol.to_be();
        sll.sll_ifindex = ifindex;
        libc::bind(
            fd,
            &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(os_err(&format!("cannot bind a packet socket to {}", ifname)));
    }
    Ok(())
}

fn new_socket(ifname: &str) -> Result<PacketSocket, String> {
    // Protocol 0 at creation: the socket sees nothing until bind() picks the interface,
    // so no frame of another interface slips in before the bind.
    // SAFETY: plain socket call.
    let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(os_err(&format!("cannot open a packet socket for {} (needs CAP_NET_RAW)", ifname)));
    }
    Ok(PacketSocket { fd })
}

impl PacketSocket {
    /// Receive side: every frame arriving on the interface, with kernel timestamps.
    pub fn open_rx(ifname: &str, rcvbuf: i32) -> Result<PacketSocket, String> {
        let idx = ifindex(ifname)?;
        let s = new_socket(ifname)?;
        setsockopt_int(s.fd, libc::SOL_PACKET, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR")?;
        setsockopt_int(s.fd, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1, "PACKET_IGNORE_OUTGOING")?;
        setsockopt_int(s.fd, libc::SOL_SOCKET, SO_TIMESTAMPNS, 1, "SO_TIMESTAMPNS")?;
        setsockopt_int(s.fd, libc::SOL_SOCKET, SO_RCVBUFFORCE, rcvbuf, "SO_RCVBUFFORCE")?;
        bind(s.fd, idx, ETH_P_ALL, ifname)?;
        let mreq = PacketMreq { mr_ifindex: idx, mr_type: PACKET_MR_PROMISC, mr_alen: 0, mr_address: [0; 8] };
        // SAFETY: pointer to a local packet_mreq of the stated size.
        let rc = unsafe {
            libc::setsockopt(
                s.fd,
                libc::SOL_PACKET,
                PACKET_ADD_MEMBERSHIP,
                &mreq as *const PacketMreq as *const libc::c_void,
                std::mem::size_of::<PacketMreq>() as libc::socklen_t,
            )
        };
        if rc < 0 {
            return Err(os_err(&format!("cannot make {} promiscuous", ifname)));
        }
        // Frames queued before the options took effect (none expected) are harmless:
        // they carry timestamps like any other.
        Ok(s)
    }

    /// Transmit side: sends frames (with virtio_net_hdr) out of the interface.
    pub fn open_tx(ifname: &str, sndbuf: i32) -> Result<PacketSocket, String> {
        let idx = ifindex(ifname)?;
        let s = new_socket(ifname)?;
        setsockopt_int(s.fd, libc::SOL_PACKET, PACKET_VNET_HDR, 1, "PACKET_VNET_HDR")?;
        setsockopt_int(s.fd, libc::SOL_SOCKET, SO_SNDBUFFORCE, sndbuf, "SO_SNDBUFFORCE")?;
        bind(s.fd, idx, 0, ifname)?;
        Ok(s)
    }

    /// Frames the kernel dropped on this receive socket since the last call.
    pub fn take_drops(&self) -> u64 {
        let mut st = TpacketStats::default();
        let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: pointer/len of a local tpacket_stats.
        let rc = unsafe {
            libc::getsockopt(
                self.fd,
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                &mut st as *mut TpacketStats as *mut libc::c_void,
                &mut len,
            )
        };
        if rc < 0 {
            return 0;
        }
        st.tp_drops as u64
    }
}

/// One received frame in the batch buffer.
pub struct Received {
    /// Bytes including the virtio_net_hdr.
    pub len: usize,
    /// Kernel receive timestamp (CLOCK_REALTIME, ns), if any.
    pub ts_realtime_ns: Option<i64>,
    /// The frame was larger than the buffer (cut short) and must not be forwarded.
    pub truncated: bool,
}

const CMSG_BUF: usize = 64;

/// Preallocated buffers for recvmmsg.
pub struct RecvBatch {
    bufs: Vec<Vec<u8>>,
    cmsgs: Vec<[u64; CMSG_BUF / 8]>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

// The raw pointers inside point into this struct's own vectors, used by one thread.
unsafe impl Send for RecvBatch {}

impl RecvBatch {
    pub fn new(n: usize) -> RecvBatch {
        let mut b = RecvBatch {
            bufs: (0..n).map(|_| vec![0u8; FRAME_BUF]).collect(),
            cmsgs: vec![[0u64; CMSG_BUF / 8]; n],
            iovs: Vec::with_capacity(n),
            msgs: Vec::with_capacity(n),
        };
        for i in 0..n {
            b.iovs.push(libc::iovec { iov_base: b.bufs[i].as_mut_ptr() as *mut libc::c_void, iov_len: FRAME_BUF });
        }
        for i in 0..n {
            // SAFETY: mmsghdr is plain data; all pointers are set below.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = &mut b.iovs[i] as *mut libc::iovec;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = b.cmsgs[i].as_mut_ptr() as *mut libc::c_void;
            m.msg_hdr.msg_controllen = CMSG_BUF as _;
            b.msgs.push(m);
        }
        b
    }

    pub fn capacity(&self) -> usize {
        self.msgs.len()
    }

    /// Receive up to a batch without blocking; Ok(0) when nothing is waiting.
    pub fn recv(&mut self, sock: &PacketSocket, out: &mut Vec<Received>) -> Result<usize, io::Error> {
        out.clear();
        for m in self.msgs.iter_mut() {
            m.msg_hdr.msg_controllen = CMSG_BUF as _;
            m.msg_hdr.msg_flags = 0;
            m.msg_len = 0;
        }
        // SAFETY: every mmsghdr points at buffers owned by self, sized as declared.
        let n = unsafe {
            libc::recvmmsg(
                sock.fd,
                self.msgs.as_mut_ptr(),
                self.msgs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EAGAIN) || e.raw_os_error() == Some(libc::EINTR) {
                return Ok(0);
            }
            return Err(e);
        }
        for m in self.msgs.iter().take(n as usize) {
            out.push(Received {
                len: m.msg_len as usize,
                ts_realtime_ns: timestamp(&m.msg_hdr),
                truncated: m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            });
        }
        Ok(n as usize)
    }

    pub fn frame(&self, i: usize, len: usize) -> &[u8] {
        &self.bufs[i][..len]
    }
}

fn timestamp(hdr: &libc::msghdr) -> Option<i64> {
    // SAFETY: standard cmsg walk over the control buffer the kernel filled.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SO_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                return Some(ts.tv_sec as i64 * 1_000_000_000 + ts.tv_nsec as i64);
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    None
}

/// Send frames with one sendmmsg; returns how many the kernel took, or the error of
/// the first frame when it took none.
pub fn send_batch(sock: &PacketSocket, frames: &[(*const u8, usize)], iovs: &mut Vec<libc::iovec>, msgs: &mut Vec<libc::mmsghdr>) -> Result<usize, io::Error> {
    iovs.clear();
    msgs.clear();
    for (p, len) in frames {
        iovs.push(libc::iovec { iov_base: *p as *mut libc::c_void, iov_len: *len });
    }
    for i in 0..frames.len() {
        // SAFETY: plain data; the iovec pointer stays valid for the call below.
        let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
        m.msg_hdr.msg_iov = &mut iovs[i] as *mut libc::iovec;
        m.msg_hdr.msg_iovlen = 1;
        msgs.push(m);
    }
    // SAFETY: msgs/iovs point at frames the caller keeps alive during the call.
    let n = unsafe { libc::sendmmsg(sock.fd, msgs.as_mut_ptr(), msgs.len() as libc::c_uint, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(n as usize)
}
