//! The request a client writes at the start of each bidirectional stream.
//!
//! ```text
//!  0      4        5       6      7          8                  16             20
//!  | STLQ | version | flags | tech | reserved | object size (u64) | hint kbit/s (u32) |
//! ```
//! Big-endian. Flag bit 0: a Blitzstart hint is present (hint kbit/s > 0 and the access
//! technology code). The server answers with exactly `size` bytes and finishes the stream.
//!
//! The hint travels here rather than in a QUIC transport parameter because quinn 0.11
//! offers no way to send or read custom transport parameters (its codec drops unknown
//! ones). The request is the client's first stream data, in the flight of its handshake
//! Finished (a 1-RTT packet of its own right behind the Finished's datagram and the
//! client's new connection IDs: tests/test_quic_hint_wire.py), and no response byte can
//! leave before it arrives, so the server sees the hint at the same moment a transport
//! parameter would matter.

use std::fmt;

pub const MAGIC: [u8; 4] = *b"STLQ";
pub const VERSION: u8 = 1;
pub const LEN: usize = 20;
const FLAG_HINT: u8 = 0x01;

/// Stream error codes the server resets a stream with.
pub const ERR_BAD_REQUEST: u32 = 1;
pub const ERR_TOO_LARGE: u32 = 2;

/// Access-technology codes, the same as startlab's TCP Blitzstart option carries.
pub const TECHNOLOGIES: [(&str, u8); 9] = [
    ("unknown", 0),
    ("ethernet", 1),
    ("dsl", 2),
    ("cable", 3),
    ("wifi", 4),
    ("3g", 5),
    ("lte", 6),
    ("5g", 7),
    ("satellite", 8),
];

pub fn tech_code(name: &str) -> Option<u8> {
    TECHNOLOGIES
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|&(_, c)| c)
}

pub fn tech_name(code: u8) -> &'static str {
    TECHNOLOGIES
        .iter()
        .find(|&&(_, c)| c == code)
        .map_or("other", |&(n, _)| n)
}

/// The client's Blitzstart hint: its bottleneck bandwidth and access technology.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hint {
    pub kbps: u32,
    pub tech: u8,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub size: u64,
    pub hint: Option<Hint>,
}

#[derive(Debug, PartialEq, Eq)]
pub enum RequestError {
    Magic,
    Version(u8),
    ZeroHint,
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RequestError::Magic => write!(f, "not a startlab request (bad magic)"),
            RequestError::Version(v) => write!(f, "unsupported request version {v}"),
            RequestError::ZeroHint => write!(f, "hint flag set with a hint of 0 kbit/s"),
        }
    }
}

impl Request {
    pub fn encode(&self) -> [u8; LEN] {
        let mut b = [0u8; LEN];
        b[0..4].copy_from_slice(&MAGIC);
        b[4] = VERSION;
        if let Some(h) = self.hint {
            b[5] = FLAG_HINT;
            b[6] = h.tech;
            b[16..20].copy_from_slice(&h.kbps.to_be_bytes());
        }
        b[8..16].copy_from_slice(&self.size.to_be_bytes());
        b
    }

    pub fn decode(b: &[u8; LEN]) -> Result<Request, RequestError> {
        if b[0..4] != MAGIC {
            return Err(RequestError::Magic);
        }
        if b[4] != VERSION {
            return Err(RequestError::Version(b[4]));
        }
        let size = u64::from_be_bytes(b[8..16].try_into().unwrap());
        let hint = if b[5] & FLAG_HINT != 0 {
            let kbps = u32::from_be_bytes(b[16..20].try_into().unwrap());
            if kbps == 0 {
                return Err(RequestError::ZeroHint);
            }
            Some(Hint { kbps, tech: b[6] })
        } else {
            None
        };
        Ok(Request { size, hint })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        for r in [
            Request {
                size: 70_000,
                hint: None,
            },
            Request {
                size: 10_000_000,
                hint: Some(Hint { kbps: 50_000, tech: 2 }),
            },
            Request {
                size: u64::MAX,
                hint: Some(Hint {
                    kbps: u32::MAX,
                    tech: 255,
                }),
            },
        ] {
            assert_eq!(Request::decode(&r.encode()), Ok(r));
        }
    }

    #[test]
    fn layout() {
        let b = Request {
            size: 0x0102,
            hint: Some(Hint {
                kbps: 0x0A0B0C0D,
                tech: 6,
            }),
        }
        .encode();
        assert_eq!(&b[..8], b"STLQ\x01\x01\x06\x00");
        assert_eq!(&b[8..16], &[0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(&b[16..], &[0x0A, 0x0B, 0x0C, 0x0D]);
    }

    #[test]
    fn rejects_garbage() {
        let mut b = Request { size: 1, hint: None }.encode();
        b[0] = b'X';
        assert_eq!(Request::decode(&b), Err(RequestError::Magic));
        let mut b = Request { size: 1, hint: None }.encode();
        b[4] = 9;
        assert_eq!(Request::decode(&b), Err(RequestError::Version(9)));
        let mut b = Request { size: 1, hint: None }.encode();
        b[5] = FLAG_HINT;
        assert_eq!(Request::decode(&b), Err(RequestError::ZeroHint));
    }

    #[test]
    fn technologies() {
        assert_eq!(tech_code("DSL"), Some(2));
        assert_eq!(tech_code("lte"), Some(6));
        assert_eq!(tech_code("carrier-pigeon"), None);
        assert_eq!(tech_name(8), "satellite");
        assert_eq!(tech_name(200), "other");
    }
}
