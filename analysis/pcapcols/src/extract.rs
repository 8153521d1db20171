//! One pass over a capture: per-packet columns, the connection table and counts.

use crate::conns::Tracker;
use crate::decode::{check_linktype, decode, Skip};
use crate::pcap::{End, PcapHeader, PcapReader};
use std::path::Path;

/// Per-packet columns, one entry per IPv4 TCP packet, in capture order.
#[derive(Default)]
pub struct Columns {
    pub ts: Vec<f64>,
    pub src: Vec<u32>,
    pub dst: Vec<u32>,
    pub sport: Vec<u16>,
    pub dport: Vec<u16>,
    pub seq: Vec<u32>,
    pub ack: Vec<u32>,
    pub flags: Vec<u8>,
    pub win: Vec<u16>,
    pub payload: Vec<u32>,
    pub ipid: Vec<u16>,
    pub conn: Vec<u32>,
    pub dir: Vec<u8>,
    pub retx: Vec<u8>,
    pub newbytes: Vec<u32>,
}

/// Counts for meta.json: how much of the capture became columns and why not the rest.
#[derive(Debug, Default)]
pub struct Counts {
    pub records: u64,
    pub tcp_packets: u64,
    pub skipped_not_tcp: u64,
    pub skipped_short: u64,
    pub truncated_records: u64,
}

pub struct Extraction {
    pub header: PcapHeader,
    pub cols: Columns,
    pub tracker: Tracker,
    pub counts: Counts,
}

pub fn extract(path: &Path) -> Result<Extraction, String> {
    let mut reader = PcapReader::open(path)?;
    let header = reader.header;
    check_linktype(header.linktype)?;
    let mut cols = Columns::default();
    let mut tracker = Tracker::default();
    let mut counts = Counts::default();
    loop {
        let rec = match reader.next_record()? {
            Ok(r) => r,
            Err(End::Clean) => break,
            Err(End::TruncatedRecord) => {
                counts.truncated_records += 1;
                break;
            }
        };
        counts.records += 1;
        let p = match decode(header.linktype, rec.data) {
            Ok(p) => p,
            Err(Skip::NotTcp) => {
                counts.skipped_not_tcp += 1;
                continue;
            }
            Err(Skip::Short) => {
                counts.skipped_short += 1;
                continue;
            }
        };
        let t = tracker.track(&p, rec.ts);
        counts.tcp_packets += 1;
        cols.ts.push(rec.ts);
        cols.src.push(p.src);
        cols.dst.push(p.dst);
        cols.sport.push(p.sport);
        cols.dport.push(p.dport);
        cols.seq.push(p.seq);
        cols.ack.push(p.ack);
        cols.flags.push(p.flags);
        cols.win.push(p.win);
        cols.payload.push(p.payload);
        cols.ipid.push(p.ipid);
        cols.conn.push(t.conn);
        cols.dir.push(t.dir);
        cols.retx.push(t.retx as u8);
        cols.newbytes.push(t.new_bytes);
    }
    Ok(Extraction { header, cols, tracker, counts })
}
