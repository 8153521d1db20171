//! startlab-cfquiche: Cloudflare's quiche behind startlab's stack endpoint contract
//! (hosts/stacks). Named apart from Google's QUICHE, after which startlab's own `gquic`
//! sender is modelled.
//!
//!     startlab-cfquiche server --listen IP:PORT --cert C --key K [--cc cubic|reno|bbr2] [--qlog-dir D]
//!     startlab-cfquiche client --server IP:PORT --size N [--qlog-dir D] [--timeout-s T]
//!     startlab-cfquiche version
//!
//! The server answers an HTTP/0.9 request ("GET /N", ALPN hq-interop, as the QUIC interop
//! runner's endpoints) on each bidirectional stream with N bytes and the stream's FIN. The
//! client fetches one object and prints one JSON object: ok, bytes, fct_s from the dial to
//! the last byte, handshake_s. quiche's defaults run: CUBIC with HyStart++, 10 packets of
//! 1200 bytes, pacing on. quiche paces by the time it gives each packet (`SendInfo::at`)
//! and leaves the sending to the application: this one holds each packet until its time.

use std::{
    collections::HashMap,
    env,
    fs::File,
    io::BufWriter,
    net::{SocketAddr, UdpSocket},
    path::PathBuf,
    process::ExitCode,
    time::{Duration, Instant},
};

use ring::rand::{SecureRandom, SystemRandom};

const ALPN: &[u8] = b"hq-interop";
const MAX_DATAGRAM: usize = 65535;
const CHUNK: usize = 64 * 1024;
const MAX_OBJECT: u64 = 1 << 40;
const WINDOW: u64 = 64 << 20; // flow control never limits a startup
const VERSION: &str = "0.30.0"; // quiche's, as Cargo.toml pins it (=0.30.0)

type Error = Box<dyn std::error::Error>;

struct Args(Vec<String>);

impl Args {
    fn get(&self, name: &str) -> Option<String> {
        let flag = format!("--{name}");
        self.0.iter().position(|a| *a == flag).and_then(|i| self.0.get(i + 1).cloned())
    }
    fn need(&self, name: &str) -> Result<String, Error> {
        self.get(name).ok_or_else(|| format!("--{name} is required").into())
    }
}

fn main() -> ExitCode {
    let argv: Vec<String> = env::args().skip(1).collect();
    let role = argv.first().cloned().unwrap_or_default();
    let args = Args(argv);
    let result = match role.as_str() {
        "version" => {
            println!("{VERSION}");
            Ok(())
        }
        "server" => server(&args),
        "client" => client(&args),
        _ => Err("usage: startlab-cfquiche server|client|version [flags]".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("startlab-cfquiche: {e}");
            ExitCode::FAILURE
        }
    }
}

fn config(args: &Args) -> Result<quiche::Config, Error> {
    let mut c = quiche::Config::new(quiche::PROTOCOL_VERSION)?;
    c.set_application_protos(&[ALPN])?;
    c.set_max_idle_timeout(30_000);
    c.set_max_recv_udp_payload_size(MAX_DATAGRAM);
    c.set_initial_max_data(WINDOW);
    c.set_initial_max_stream_data_bidi_local(WINDOW);
    c.set_initial_max_stream_data_bidi_remote(WINDOW);
    c.set_initial_max_streams_bidi(100);
    c.set_disable_active_migration(true);
    if let Some(cc) = args.get("cc") {
        c.set_cc_algorithm_name(&cc).map_err(|_| format!("no congestion control '{cc}' (cubic, reno, bbr2)"))?;
    }
    Ok(c)
}

fn new_cid(rng: &SystemRandom) -> quiche::ConnectionId<'static> {
    let mut id = [0u8; quiche::MAX_CONN_ID_LEN];
    rng.fill(&mut id).expect("random bytes");
    quiche::ConnectionId::from_vec(id.to_vec())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn qlog(conn: &mut quiche::Connection, dir: &Option<String>, name: &str) -> Result<(), Error> {
    if let Some(dir) = dir {
        let path = PathBuf::from(dir).join(format!("{name}.sqlog"));
        conn.set_qlog(Box::new(BufWriter::new(File::create(path)?)), "startlab-cfquiche".into(), name.into());
    }
    Ok(())
}

/// The packet a connection produced and holds until quiche's time for it (pacing).
struct Held {
    bytes: Vec<u8>,
    to: SocketAddr,
    at: Instant,
}

/// Send what the connection has, in quiche's time; returns the next hold, if any.
fn flush(conn: &mut quiche::Connection, socket: &UdpSocket, held: &mut Option<Held>) -> Result<(), Error> {
    let mut out = [0u8; MAX_DATAGRAM];
    loop {
        if let Some(h) = held.as_ref() {
            if h.at > Instant::now() {
                return Ok(());
            }
            socket.send_to(&h.bytes, h.to)?;
            *held = None;
        }
        match conn.send(&mut out) {
            Ok((n, info)) => *held = Some(Held { bytes: out[..n].to_vec(), to: info.to, at: info.at }),
            Err(quiche::Error::Done) => return Ok(()),
            Err(e) => return Err(e.into()),
        }
    }
}

/// How long the loop may wait: until a connection's timer or a held packet's time.
fn wait(conns: &[(&quiche::Connection, &Option<Held>)]) -> Duration {
    let now = Instant::now();
    let mut d = Duration::from_millis(100);
    for (conn, held) in conns {
        if let Some(t) = conn.timeout() {
            d = d.min(t);
        }
        if let Some(h) = held {
            d = d.min(h.at.saturating_duration_since(now));
        }
    }
    d.max(Duration::from_micros(1))
}

struct Peer {
    conn: quiche::Connection,
    held: Option<Held>,
    requests: HashMap<u64, Vec<u8>>,
    answers: HashMap<u64, u64>,
}

fn server(args: &Args) -> Result<(), Error> {
    let listen: SocketAddr = args.need("listen")?.parse()?;
    let qlog_dir = args.get("qlog-dir");
    let mut cfg = config(args)?;
    cfg.load_cert_chain_from_pem_file(&args.need("cert")?)?;
    cfg.load_priv_key_from_pem_file(&args.need("key")?)?;
    let socket = UdpSocket::bind(listen)?;
    eprintln!("listening on {listen}");
    stop_on_sigterm();
    let rng = SystemRandom::new();
    let mut peers: Vec<Peer> = Vec::new();
    let mut ids: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut buf = [0u8; MAX_DATAGRAM];
    let zeros = vec![0u8; CHUNK];
    while !stopped() {
        let timeout = wait(&peers.iter().map(|p| (&p.conn, &p.held)).collect::<Vec<_>>());
        socket.set_read_timeout(Some(timeout))?;
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                let Ok(hdr) = quiche::Header::from_slice(&mut buf[..n], quiche::MAX_CONN_ID_LEN) else { continue };
                let i = match ids.get(hdr.dcid.as_ref()) {
                    Some(i) => *i,
                    None if hdr.ty == quiche::Type::Initial => {
                        let scid = new_cid(&rng);
                        let mut conn = quiche::accept(&scid, None, listen, from, &mut cfg)?;
                        qlog(&mut conn, &qlog_dir, &format!("{}_server", hex(&hdr.dcid)))?;
                        peers.push(Peer { conn, held: None, requests: HashMap::new(), answers: HashMap::new() });
                        ids.insert(scid.to_vec(), peers.len() - 1);
                        ids.insert(hdr.dcid.to_vec(), peers.len() - 1);
                        peers.len() - 1
                    }
                    None => continue,
                };
                let _ = peers[i].conn.recv(&mut buf[..n], quiche::RecvInfo { from, to: listen });
            }
            // A signal (SIGTERM: stop) interrupts the wait; the loop's condition reads it.
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                                         | std::io::ErrorKind::Interrupted) => {}
            Err(e) => return Err(e.into()),
        }
        for p in peers.iter_mut() {
            if p.conn.timeout() == Some(Duration::ZERO) {
                p.conn.on_timeout();
            }
            for id in p.conn.readable() {
                let mut got = [0u8; 256];
                while let Ok((n, _fin)) = p.conn.stream_recv(id, &mut got) {
                    let line = p.requests.entry(id).or_default();
                    line.extend_from_slice(&got[..n]);
                }
                let line = p.requests.get(&id).cloned().unwrap_or_default();
                if line.contains(&b'\n') && !p.answers.contains_key(&id) {
                    let text = String::from_utf8_lossy(&line);
                    match text.trim().strip_prefix("GET /").and_then(|s| s.parse::<u64>().ok()) {
                        Some(size) if size <= MAX_OBJECT => {
                            p.answers.insert(id, size);
                        }
                        _ => {
                            let _ = p.conn.stream_shutdown(id, quiche::Shutdown::Write, 1);
                        }
                    }
                }
            }
            let mut done = Vec::new();
            for (id, left) in p.answers.iter_mut() {
                // quiche takes what its stream buffer has room for; the FIN goes with the last byte.
                while *left > 0 {
                    let n = (*left).min(CHUNK as u64) as usize;
                    match p.conn.stream_send(*id, &zeros[..n], n as u64 == *left) {
                        Ok(sent) if sent > 0 => *left -= sent as u64,
                        _ => break,
                    }
                }
                if *left == 0 {
                    done.push(*id);
                }
            }
            for id in done {
                p.answers.remove(&id);
            }
            flush(&mut p.conn, &socket, &mut p.held)?;
        }
        // Closed connections leave; their ids with them.
        if peers.iter().any(|p| p.conn.is_closed()) {
            peers.retain(|p| !p.conn.is_closed());
            ids.clear();
            for (i, p) in peers.iter().enumerate() {
                for id in p.conn.source_ids() {
                    ids.insert(id.to_vec(), i);
                }
            }
        }
    }
    for p in peers.iter_mut() {
        let _ = p.conn.close(true, 0, b"");
        let _ = flush(&mut p.conn, &socket, &mut p.held);
    }
    Ok(())
}

fn client(args: &Args) -> Result<(), Error> {
    let server: SocketAddr = args.need("server")?.parse()?;
    let size: u64 = args.need("size")?.parse()?;
    let timeout = Duration::from_secs_f64(args.get("timeout-s").map(|t| t.parse::<f64>()).transpose()?.unwrap_or(60.0));
    let start = Instant::now();
    let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs_f64();
    let outcome = fetch(args, server, size, start, timeout);
    let (got, handshake, fct, error) = match outcome {
        Ok((got, handshake, fct)) => (got, Some(handshake), Some(fct), None),
        Err(e) => (0, None, None, Some(e.to_string())),
    };
    let ok = error.is_none() && got == size;
    let error = error.or_else(|| (!ok).then(|| format!("got {got} of {size} bytes")));
    let report = serde_json::json!({"ok": ok, "stack": "quiche", "version": VERSION, "bytes": got,
                                    "fct_s": fct, "handshake_s": handshake, "start_unix_s": unix, "error": error});
    println!("{report}");
    if ok { Ok(()) } else { Err(report["error"].to_string().into()) }
}

fn fetch(args: &Args, server: SocketAddr, size: u64, start: Instant, timeout: Duration) -> Result<(u64, f64, f64), Error> {
    let mut cfg = config(args)?;
    cfg.verify_peer(false);
    let socket = UdpSocket::bind("0.0.0.0:0")?;
    socket.connect(server)?;
    let local = socket.local_addr()?;
    let rng = SystemRandom::new();
    let scid = new_cid(&rng);
    let mut conn = quiche::connect(Some("startlab"), &scid, local, server, &mut cfg)?;
    qlog(&mut conn, &args.get("qlog-dir"), &format!("{}_client", hex(&scid)))?;
    let mut held = None;
    let mut buf = [0u8; MAX_DATAGRAM];
    let (mut handshake, mut requested, mut got, mut fct) = (None, false, 0u64, None);
    flush(&mut conn, &socket, &mut held)?;
    while !conn.is_closed() {
        if start.elapsed() > timeout {
            return Err(format!("timed out after {} s with {got} of {size} bytes", timeout.as_secs_f64()).into());
        }
        socket.set_read_timeout(Some(wait(&[(&conn, &held)])))?;
        match socket.recv_from(&mut buf) {
            Ok((n, from)) => {
                let _ = conn.recv(&mut buf[..n], quiche::RecvInfo { from, to: local });
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(e) => return Err(e.into()),
        }
        if conn.timeout() == Some(Duration::ZERO) {
            conn.on_timeout();
        }
        if conn.is_established() && !requested {
            handshake = Some(start.elapsed().as_secs_f64());
            conn.stream_send(0, format!("GET /{size}\r\n").as_bytes(), true)?;
            requested = true;
        }
        for id in conn.readable() {
            while let Ok((n, fin)) = conn.stream_recv(id, &mut buf) {
                got += n as u64;
                if fin {
                    fct = Some(start.elapsed().as_secs_f64());
                    conn.close(true, 0, b"")?;
                }
            }
        }
        flush(&mut conn, &socket, &mut held)?;
    }
    match (handshake, fct) {
        (Some(h), Some(f)) => Ok((got, h, f)),
        _ => Err(format!("the connection closed with {got} of {size} bytes").into()),
    }
}

static STOP: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_sigterm(_: i32) {
    STOP.store(true, std::sync::atomic::Ordering::SeqCst);
}

fn stop_on_sigterm() {
    // SIGTERM (15) and SIGINT (2) end the server's loop; it then closes its connections.
    unsafe {
        signal(15, on_sigterm);
        signal(2, on_sigterm);
    }
}

fn stopped() -> bool {
    STOP.load(std::sync::atomic::Ordering::SeqCst)
}

extern "C" {
    fn signal(signum: i32, handler: extern "C" fn(i32)) -> usize;
}
