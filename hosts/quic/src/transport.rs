//! Transport settings both endpoints share.

use std::time::Duration;

use quinn::{IdleTimeout, MtuDiscoveryConfig, TransportConfig, VarInt};

/// Largest UDP payload on a 1500-byte Ethernet path over IPv4 (1500 − 20 − 8).
pub const ETHERNET_UDP_PAYLOAD: u16 = 1472;
/// QUIC's floor for datagram sizes (RFC 9000 §14).
pub const QUIC_MIN_UDP_PAYLOAD: u16 = 1200;

#[derive(Clone, Debug)]
pub struct TransportOptions {
    /// Datagram size used from the first packet. The experiments fix it to the path's so
    /// that a window of N datagrams is N full-size packets from the start.
    pub udp_payload: u16,
    /// Probe for larger datagrams (off: every datagram is `udp_payload`).
    pub mtu_discovery: bool,
    pub idle_timeout: Duration,
    /// Flow-control credit the receiver grants per stream and per connection.
    pub receive_window: u64,
    /// Unacknowledged bytes a sender buffers across its streams.
    pub send_window: u64,
    /// UDP GSO: hand quinn's batches of up to 10 datagrams to the kernel in one call.
    pub gso: bool,
}

impl TransportOptions {
    pub fn build(&self) -> Result<TransportConfig, String> {
        if self.udp_payload < QUIC_MIN_UDP_PAYLOAD {
            return Err(format!(
                "--udp-payload {} is below QUIC's minimum of 1200",
                self.udp_payload
            ));
        }
        let idle = IdleTimeout::try_from(self.idle_timeout).map_err(|_| "idle timeout too large".to_string())?;
        let window = VarInt::from_u64(self.receive_window).map_err(|_| "receive window too large".to_string())?;
        let mut t = TransportConfig::default();
        t.initial_mtu(self.udp_payload)
            .max_idle_timeout(Some(idle))
            .stream_receive_window(window)
            .receive_window(VarInt::MAX)
            .send_window(self.send_window)
            .enable_segmentation_offload(self.gso);
        if self.mtu_discovery {
            t.min_mtu(QUIC_MIN_UDP_PAYLOAD)
                .mtu_discovery_config(Some(MtuDiscoveryConfig::default()));
        } else {
            t.min_mtu(self.udp_payload).mtu_discovery_config(None);
        }
        Ok(t)
    }
}
