//! startlab's QUIC endpoints (Rüth et al., "Blitz-starting QUIC Connections").
//!
//! `startlab-quic-server` serves generated objects, one bidirectional stream per
//! request; `startlab-quic-client` fetches one object and reports its flow completion
//! time. The congestion controller ([`controller`]) is CUBIC ([`cubic`]) that starts
//! either with a fixed initial window in slow start (the paper's Google QUIC baseline:
//! 32 datagrams) or, with Blitzstart, in congestion avoidance at the client's bandwidth
//! hint × the handshake RTT. Pacing follows the paper through the window the controller
//! reports to quinn's pacer ([`pacing`]).

pub mod careful_resume;
pub mod controller;
pub mod cr_qlog;
pub mod cubic;
pub mod gquic;
pub mod gquic_pacing;
pub mod keylog;
pub mod paced_socket;
pub mod pacing;
pub mod report;
pub mod request;
pub mod sender;
pub mod runtime;
pub mod sizes;
pub mod socket;
pub mod tls;
pub mod transport;

/// ALPN of startlab's request/response protocol (not HTTP/3: one object per stream).
pub const ALPN: &[u8] = b"stlq/1";
