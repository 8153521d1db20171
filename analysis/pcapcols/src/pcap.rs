//! Classic pcap reader (libpcap format): both byte orders, microsecond and
//! nanosecond timestamps. Reads in large chunks and hands out records in place, so large
//! captures never sit in memory and no record is copied.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

/// Records larger than this are not plausible from tcpdump; treat them as corruption
/// rather than trying to allocate gigabytes from a garbage length field.
const MAX_RECORD_LEN: u32 = 256 * 1024;

/// Global properties of a capture file, from its 24-byte header.
#[derive(Debug, Clone, Copy)]
pub struct PcapHeader {
    pub big_endian: bool,
    pub nanosecond: bool,
    pub linktype: u32,
    pub snaplen: u32,
}

/// One captured record: timestamp in seconds and the captured bytes.
pub struct Record<'a> {
    pub ts: f64,
    pub data: &'a [u8],
}

/// What ended the stream: a clean end of file or a record cut short (tcpdump killed
/// mid-write), which analysis counts instead of rejecting the capture.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    Clean,
    TruncatedRecord,
}

/// Size of the read buffer; records are decoded in place inside it (no per-record copy).
const CHUNK: usize = 4 << 20;

pub struct PcapReader {
    input: File,
    pub header: PcapHeader,
    buf: Vec<u8>,
    /// Unconsumed bytes are buf[start..end].
    start: usize,
    end: usize,
    eof: bool,
    /// File offset of buf[start], for error messages.
    offset: u64,
}

fn u32_at(b: &[u8], big: bool) -> u32 {
    let a = [b[0], b[1], b[2], b[3]];
    if big {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

/// Reads as many bytes as available into `buf`; returns how many were read
/// (fewer than `buf.len()` only at end of file).
fn read_full(input: &mut impl Read, buf: &mut [u8]) -> Result<usize, String> {
    let mut got = 0;
    while got < buf.len() {
        match input.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("read error: {}", e)),
        }
    }
    Ok(got)
}

/// Decodes the 24-byte global header; separate from I/O so it can be unit tested.
pub fn parse_header(h: &[u8]) -> Result<PcapHeader, String> {
    if h.len() < 24 {
        return Err("truncated pcap header (file shorter than 24 bytes)".to_string());
    }
    let magic_le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
    let (big_endian, nanosecond) = match magic_le {
        0xa1b2c3d4 => (false, false),
        0xa1b23c4d => (false, true),
        0xd4c3b2a1 => (true, false),
        0x4d3cb2a1 => (true, true),
        0x0a0d0d0a => {
            return Err(
                "pcapng is not supported; convert with `editcap -F pcap IN OUT` or capture with tcpdump -w".to_string(),
            )
        }
        _ => return Err(format!("not a pcap file (magic 0x{:08x})", magic_le)),
    };
    Ok(PcapHeader {
        big_endian,
        nanosecond,
        snaplen: u32_at(&h[16..20], big_endian),
        linktype: u32_at(&h[20..24], big_endian) & 0x0fff_ffff,
    })
}

impl PcapReader {
    pub fn open(path: &Path) -> Result<PcapReader, String> {
        let mut input = File::open(path).map_err(|e| format!("cannot open {}: {}", path.display(), e))?;
        let mut h = [0u8; 24];
        let got = read_full(&mut input, &mut h)?;
        let header = parse_header(&h[..got])?;
        Ok(PcapReader { input, header, buf: vec![0u8; CHUNK], start: 0, end: 0, eof: false, offset: 24 })
    }

    /// Makes at least `n` unconsumed bytes available unless the file ends first.
    fn fill(&mut self, n: usize) -> Result<bool, String> {
        if self.end - self.start >= n {
            return Ok(true);
        }
        if self.eof {
            return Ok(false);
        }
        self.buf.copy_within(self.start..self.end, 0);
        self.end -= self.start;
        self.start = 0;
        if self.buf.len() < n {
            self.buf.resize(n, 0);
        }
        let end = self.end;
        let got = read_full(&mut self.input, &mut self.buf[end..])?;
        self.end += got;
        if self.end < self.buf.len() {
            self.eof = true;
        }
        Ok(self.end - self.start >= n)
    }

    /// Next record, `Ok(Err(End))` at the end of the stream, `Err` on corruption.
    pub fn next_record(&mut self) -> Result<Result<Record<'_>, End>, String> {
        if !self.fill(16)? {
            return Ok(Err(if self.start == self.end { End::Clean } else { End::TruncatedRecord }));
        }
        let big = self.header.big_endian;
        let rh = &self.buf[self.start..self.start + 16];
        let sec = u32_at(&rh[0..4], big);
        let frac = u32_at(&rh[4..8], big);
        let caplen = u32_at(&rh[8..12], big);
        if caplen > MAX_RECORD_LEN {
            return Err(format!(
                "corrupt pcap: record at byte offset {} claims {} captured bytes",
                self.offset, caplen
            ));
        }
        let n = caplen as usize;
        if !self.fill(16 + n)? {
            return Ok(Err(End::TruncatedRecord));
        }
        let data_start = self.start + 16;
        self.start = data_start + n;
        self.offset += 16 + n as u64;
        let scale = if self.header.nanosecond { 1e-9 } else { 1e-6 };
        Ok(Ok(Record { ts: sec as f64 + frac as f64 * scale, data: &self.buf[data_start..data_start + n] }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_magics() {
        let mut h = vec![0u8; 24];
        h[0..4].copy_from_slice(&0xa1b2c3d4u32.to_be_bytes());
        h[20..24].copy_from_slice(&1u32.to_be_bytes());
        let p = parse_header(&h).unwrap();
        assert!(p.big_endian && !p.nanosecond);
        assert_eq!(p.linktype, 1);
        h[0..4].copy_from_slice(&0xa1b23c4du32.to_le_bytes());
        h[20..24].copy_from_slice(&113u32.to_le_bytes());
        let p = parse_header(&h).unwrap();
        assert!(!p.big_endian && p.nanosecond);
        assert_eq!(p.linktype, 113);
    }

    #[test]
    fn header_errors() {
        assert!(parse_header(&[0xd4, 0xc3]).unwrap_err().contains("truncated"));
        assert!(parse_header(&[0u8; 24]).unwrap_err().contains("not a pcap"));
        let mut ng = vec![0u8; 24];
        ng[0..4].copy_from_slice(&[0x0a, 0x0d, 0x0d, 0x0a]);
        assert!(parse_header(&ng).unwrap_err().contains("pcapng"));
    }
}
