//! startlab-pcapcols IN.pcap OUTDIR
//!
//! Turns a packet capture into columnar per-packet (TCP), per-datagram (UDP) and
//! per-connection arrays (.npy) so that startlab's Python analysis never loops over packets.

mod conns;
mod decode;
mod extract;
mod npy;
mod output;
mod pcap;
mod seqspace;
mod udp;

use std::path::Path;
use std::process::exit;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 3 || args[1].starts_with('-') {
        eprintln!("usage: startlab-pcapcols IN.pcap OUTDIR");
        exit(2);
    }
    let input = Path::new(&args[1]);
    let out = Path::new(&args[2]);
    let result = extract::extract(input, out).and_then(|x| output::write_tables(&x, input, out));
    if let Err(msg) = result {
        eprintln!("startlab-pcapcols: {}: {}", input.display(), msg);
        exit(1);
    }
}
