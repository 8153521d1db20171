//! Writes an extraction as .npy columns plus meta.json. This file and
//! analysis/packets.py are the two ends of the on-disk format; bump
//! FORMAT_VERSION when a column changes meaning.

use crate::extract::Extraction;
use crate::npy::{write, Element};
use std::fs;
use std::path::Path;

/// 2: the `tos` TCP column and the UDP datagram table (`udp_*.npy`) were added.
pub const FORMAT_VERSION: u32 = 2;

fn col<T: Element>(dir: &Path, name: &str, v: &[T]) -> Result<(), String> {
    write(&dir.join(format!("{}.npy", name)), v)
}

fn per_conn<T: Element>(x: &Extraction, f: impl Fn(&crate::conns::Conn) -> T) -> Vec<T> {
    x.tracker.conns.iter().map(f).collect()
}

/// JSON string literal with the escapes JSON requires.
fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for ch in s.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

pub fn meta_json(x: &Extraction, input: &Path) -> String {
    let c = &x.counts;
    let h = &x.header;
    format!(
        "{{\n  \"format_version\": {},\n  \"tool\": \"startlab-pcapcols {}\",\n  \"input\": {},\n  \
         \"linktype\": {},\n  \"snaplen\": {},\n  \"nanosecond\": {},\n  \"big_endian\": {},\n  \
         \"records\": {},\n  \"tcp_packets\": {},\n  \"skipped_not_tcp\": {},\n  \
         \"skipped_short\": {},\n  \"truncated_records\": {},\n  \"connections\": {},\n  \
         \"udp_datagrams\": {},\n  \"skipped_udp_short\": {}\n}}\n",
        FORMAT_VERSION,
        env!("CARGO_PKG_VERSION"),
        json_str(&input.display().to_string()),
        h.linktype,
        h.snaplen,
        h.nanosecond,
        h.big_endian,
        c.records,
        c.tcp_packets,
        c.skipped_not_tcp,
        c.skipped_short,
        c.truncated_records,
        x.tracker.conns.len(),
        c.udp_datagrams,
        c.skipped_udp_short
    )
}

/// Writes the connection table and, last, meta.json (its presence marks a complete
/// output directory; the per-packet columns were streamed by `extract`).
pub fn write_tables(x: &Extraction, input: &Path, out: &Path) -> Result<(), String> {
    col(out, "conns_src", &per_conn(x, |c| c.a_addr))?;
    col(out, "conns_dst", &per_conn(x, |c| c.b_addr))?;
    col(out, "conns_sport", &per_conn(x, |c| c.a_port))?;
    col(out, "conns_dport", &per_conn(x, |c| c.b_port))?;
    col(out, "conns_first_ts", &per_conn(x, |c| c.first_ts))?;
    col(out, "conns_last_ts", &per_conn(x, |c| c.last_ts))?;
    col(out, "conns_syn_ts", &per_conn(x, |c| c.syn_ts))?;
    for d in 0..2usize {
        col(out, &format!("conns_pkts_{}", d), &per_conn(x, |c| c.dirs[d].pkts))?;
        col(out, &format!("conns_data_pkts_{}", d), &per_conn(x, |c| c.dirs[d].data_pkts))?;
        col(out, &format!("conns_total_bytes_{}", d), &per_conn(x, |c| c.dirs[d].total_bytes))?;
        col(out, &format!("conns_unique_bytes_{}", d), &per_conn(x, |c| c.dirs[d].unique_bytes))?;
        col(out, &format!("conns_retx_pkts_{}", d), &per_conn(x, |c| c.dirs[d].retx_pkts))?;
    }
    let meta = out.join("meta.json");
    fs::write(&meta, meta_json(x, input)).map_err(|e| format!("cannot write {}: {}", meta.display(), e))
}

#[cfg(test)]
mod tests {
    use super::json_str;

    #[test]
    fn json_escapes() {
        assert_eq!(json_str("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\"");
    }
}
