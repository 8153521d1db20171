//! One pass over a capture: per-packet TCP columns, per-datagram UDP columns, the
//! connection table and counts.

use crate::conns::{Tracked, Tracker};
use crate::decode::{check_linktype, decode, Decoded, Skip, TcpPacket};
use crate::npy::ColumnWriter;
use crate::pcap::{End, PcapHeader, PcapReader};
use crate::udp::UdpDatagram;
use std::fs;
use std::path::Path;

/// Per-packet column files, one entry per IPv4 TCP packet, in capture order.
pub struct Columns {
    ts: ColumnWriter<f64>,
    src: ColumnWriter<u32>,
    dst: ColumnWriter<u32>,
    sport: ColumnWriter<u16>,
    dport: ColumnWriter<u16>,
    seq: ColumnWriter<u32>,
    ack: ColumnWriter<u32>,
    flags: ColumnWriter<u8>,
    win: ColumnWriter<u16>,
    payload: ColumnWriter<u32>,
    ipid: ColumnWriter<u16>,
    conn: ColumnWriter<u32>,
    dir: ColumnWriter<u8>,
    retx: ColumnWriter<u8>,
    newbytes: ColumnWriter<u32>,
    tos: ColumnWriter<u8>,
}

impl Columns {
    fn create(dir: &Path) -> Result<Columns, String> {
        let f = |name: &str| dir.join(format!("{}.npy", name));
        Ok(Columns {
            ts: ColumnWriter::create(&f("ts"))?,
            src: ColumnWriter::create(&f("src"))?,
            dst: ColumnWriter::create(&f("dst"))?,
            sport: ColumnWriter::create(&f("sport"))?,
            dport: ColumnWriter::create(&f("dport"))?,
            seq: ColumnWriter::create(&f("seq"))?,
            ack: ColumnWriter::create(&f("ack"))?,
            flags: ColumnWriter::create(&f("flags"))?,
            win: ColumnWriter::create(&f("win"))?,
            payload: ColumnWriter::create(&f("payload"))?,
            ipid: ColumnWriter::create(&f("ipid"))?,
            conn: ColumnWriter::create(&f("conn"))?,
            dir: ColumnWriter::create(&f("dir"))?,
            retx: ColumnWriter::create(&f("retx"))?,
            newbytes: ColumnWriter::create(&f("newbytes"))?,
            tos: ColumnWriter::create(&f("tos"))?,
        })
    }

    fn push(&mut self, ts: f64, p: &TcpPacket, t: &Tracked) -> Result<(), String> {
        self.ts.push(ts)?;
        self.src.push(p.src)?;
        self.dst.push(p.dst)?;
        self.sport.push(p.sport)?;
        self.dport.push(p.dport)?;
        self.seq.push(p.seq)?;
        self.ack.push(p.ack)?;
        self.flags.push(p.flags)?;
        self.win.push(p.win)?;
        self.payload.push(p.payload)?;
        self.ipid.push(p.ipid)?;
        self.conn.push(t.conn)?;
        self.dir.push(t.dir)?;
        self.retx.push(t.retx as u8)?;
        self.newbytes.push(t.new_bytes)?;
        self.tos.push(p.tos)
    }

    fn finish(self) -> Result<(), String> {
        self.ts.finish()?;
        self.src.finish()?;
        self.dst.finish()?;
        self.sport.finish()?;
        self.dport.finish()?;
        self.seq.finish()?;
        self.ack.finish()?;
        self.flags.finish()?;
        self.win.finish()?;
        self.payload.finish()?;
        self.ipid.finish()?;
        self.conn.finish()?;
        self.dir.finish()?;
        self.retx.finish()?;
        self.newbytes.finish()?;
        self.tos.finish()
    }
}

/// Per-datagram column files (`udp_*.npy`), one entry per IPv4 UDP datagram, in
/// capture order: a table of its own, because UDP has no sequence space to track.
pub struct UdpColumns {
    ts: ColumnWriter<f64>,
    src: ColumnWriter<u32>,
    dst: ColumnWriter<u32>,
    sport: ColumnWriter<u16>,
    dport: ColumnWriter<u16>,
    ulen: ColumnWriter<u16>,
    tos: ColumnWriter<u8>,
    qlong: ColumnWriter<u8>,
    hash: ColumnWriter<u64>,
}

impl UdpColumns {
    fn create(dir: &Path) -> Result<UdpColumns, String> {
        let f = |name: &str| dir.join(format!("udp_{}.npy", name));
        Ok(UdpColumns {
            ts: ColumnWriter::create(&f("ts"))?,
            src: ColumnWriter::create(&f("src"))?,
            dst: ColumnWriter::create(&f("dst"))?,
            sport: ColumnWriter::create(&f("sport"))?,
            dport: ColumnWriter::create(&f("dport"))?,
            ulen: ColumnWriter::create(&f("ulen"))?,
            tos: ColumnWriter::create(&f("tos"))?,
            qlong: ColumnWriter::create(&f("qlong"))?,
            hash: ColumnWriter::create(&f("hash"))?,
        })
    }

    fn push(&mut self, ts: f64, u: &UdpDatagram) -> Result<(), String> {
        self.ts.push(ts)?;
        self.src.push(u.src)?;
        self.dst.push(u.dst)?;
        self.sport.push(u.sport)?;
        self.dport.push(u.dport)?;
        self.ulen.push(u.ulen)?;
        self.tos.push(u.tos)?;
        self.qlong.push(u.qlong)?;
        self.hash.push(u.hash)
    }

    fn finish(self) -> Result<(), String> {
        self.ts.finish()?;
        self.src.finish()?;
        self.dst.finish()?;
        self.sport.finish()?;
        self.dport.finish()?;
        self.ulen.finish()?;
        self.tos.finish()?;
        self.qlong.finish()?;
        self.hash.finish()
    }
}

/// Counts for meta.json: how much of the capture became columns and why not the rest.
/// `skipped_not_tcp` counts every record outside the TCP table, UDP included, so it
/// keeps the meaning it had before the UDP table existed.
#[derive(Debug, Default)]
pub struct Counts {
    pub records: u64,
    pub tcp_packets: u64,
    pub skipped_not_tcp: u64,
    pub skipped_short: u64,
    pub truncated_records: u64,
    pub udp_datagrams: u64,
    pub skipped_udp_short: u64,
}

pub struct Extraction {
    pub header: PcapHeader,
    pub tracker: Tracker,
    pub counts: Counts,
}

/// Decodes the capture at `path`, streaming the per-packet columns into `out`.
pub fn extract(path: &Path, out: &Path) -> Result<Extraction, String> {
    let mut reader = PcapReader::open(path)?;
    let header = reader.header;
    check_linktype(header.linktype)?;
    fs::create_dir_all(out).map_err(|e| format!("cannot create {}: {}", out.display(), e))?;
    let mut cols = Columns::create(out)?;
    let mut udp_cols = UdpColumns::create(out)?;
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
            Ok(Decoded::Tcp(p)) => p,
            Ok(Decoded::Udp(u)) => {
                counts.skipped_not_tcp += 1;
                counts.udp_datagrams += 1;
                udp_cols.push(rec.ts, &u)?;
                continue;
            }
            Err(Skip::UdpShort) => {
                counts.skipped_not_tcp += 1;
                counts.skipped_udp_short += 1;
                continue;
            }
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
        cols.push(rec.ts, &p, &t)?;
    }
    cols.finish()?;
    udp_cols.finish()?;
    Ok(Extraction { header, tracker, counts })
}
