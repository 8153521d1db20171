//! The UDP socket under an endpoint, with buffers large enough that a window of
//! datagrams arriving at line rate is not dropped by the socket itself.

use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use socket2::{Domain, Protocol, Socket, Type};

fn force_buffer(socket: &Socket, option: libc::c_int, bytes: usize) -> bool {
    let value = bytes.min(i32::MAX as usize) as libc::c_int;
    // SAFETY: setsockopt with a valid descriptor and a pointer to an int of the size given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            option,
            &value as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    rc == 0
}

/// Bound socket with `buf` bytes of send and receive buffer: the *FORCE options when
/// privileged (they ignore net.core.[rw]mem_max), the plain ones (capped by those
/// sysctls) otherwise. Returns the socket and the sizes the kernel granted.
pub fn bind(addr: SocketAddr, buf: usize) -> Result<(UdpSocket, usize, usize), String> {
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))
        .map_err(|e| format!("cannot create a UDP socket: {e}"))?;
    if addr.is_ipv6() {
        let _ = socket.set_only_v6(false);
    }
    if buf > 0 {
        if !force_buffer(&socket, libc::SO_RCVBUFFORCE, buf) {
            let _ = socket.set_recv_buffer_size(buf);
        }
        if !force_buffer(&socket, libc::SO_SNDBUFFORCE, buf) {
            let _ = socket.set_send_buffer_size(buf);
        }
    }
    socket
        .bind(&addr.into())
        .map_err(|e| format!("cannot bind {addr}: {e}"))?;
    let rcv = socket.recv_buffer_size().unwrap_or(0);
    let snd = socket.send_buffer_size().unwrap_or(0);
    Ok((socket.into(), rcv, snd))
}
