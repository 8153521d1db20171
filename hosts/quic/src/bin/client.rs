//! startlab-quic-client: fetches one object over QUIC and prints one JSON object with its
//! flow completion time (connection start to the last byte received).

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use quinn::{ClientConfig, Connection, Endpoint, EndpointConfig, ReadError, VarInt};
use serde_json::{json, Map, Value};

use startlab_quic::report::{connection_stats, unix_now};
use startlab_quic::request::{self, tech_code, tech_name, Hint, Request};
use startlab_quic::runtime::{StartlabRuntime, Timers};
use startlab_quic::sizes::parse_size;
use startlab_quic::transport::{TransportOptions, ETHERNET_UDP_PAYLOAD};
use startlab_quic::{socket, tls};

const NAME: &str = "startlab-quic-client";

fn size(text: &str) -> Result<u64, String> {
    parse_size(text)
}

fn tech(text: &str) -> Result<u8, String> {
    tech_code(text).or_else(|| text.parse::<u8>().ok()).ok_or_else(|| {
        let names: Vec<&str> = request::TECHNOLOGIES.iter().map(|(n, _)| *n).collect();
        format!(
            "'{text}' is not an access technology ({} or a code 0-255)",
            names.join(", ")
        )
    })
}

#[derive(Parser, Debug)]
#[command(name = NAME, version, about = "Fetches one object from startlab-quic-server and reports its FCT as JSON")]
struct Args {
    /// Server address, HOST:PORT.
    #[arg(long)]
    server: String,
    /// Object size (70KB, 2MB, 10MB, 1.5MiB, 4096; KB = 1000 bytes).
    #[arg(long, value_parser = size)]
    size: u64,
    /// Blitzstart hint: the client's bottleneck bandwidth in kbit/s (omit for no hint).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    hint_kbps: Option<u32>,
    /// Access technology sent with the hint (unknown, ethernet, dsl, cable, wifi, 3g, lte,
    /// 5g, satellite, or a code).
    #[arg(long, default_value = "unknown", value_parser = tech)]
    tech: u8,
    /// Local address to bind (default: any address, an ephemeral port).
    #[arg(long)]
    bind: Option<SocketAddr>,
    /// UDP payload of every datagram (1472 on a 1500-byte IPv4 path).
    #[arg(long, default_value_t = ETHERNET_UDP_PAYLOAD)]
    udp_payload: u16,
    /// Probe for larger datagrams instead of fixing them to --udp-payload.
    #[arg(long)]
    mtu_discovery: bool,
    /// Send one datagram per system call instead of UDP GSO batches.
    #[arg(long)]
    no_gso: bool,
    /// Flow-control window granted to the server (must not limit the transfer).
    #[arg(long, default_value = "64MiB", value_parser = size)]
    recv_window: u64,
    /// Socket send and receive buffer.
    #[arg(long, default_value = "4MiB", value_parser = size)]
    sock_buf: u64,
    /// Seconds allowed for the handshake.
    #[arg(long, default_value_t = 5.0)]
    connect_timeout_s: f64,
    /// Seconds allowed for the whole fetch, handshake included.
    #[arg(long, default_value_t = 60.0)]
    timeout_s: f64,
    /// Close the connection after this long without packets.
    #[arg(long, default_value_t = 10.0)]
    idle_timeout_s: f64,
    /// Stop after this many seconds and report what arrived (a long-running flow; fetch a
    /// large --size). SIGTERM and SIGINT stop the same way.
    #[arg(long)]
    duration_s: Option<f64>,
    /// Check every byte against the server's pattern.
    #[arg(long)]
    verify: bool,
    /// TLS server name.
    #[arg(long, default_value = "startlab")]
    server_name: String,
    /// Append the connection's TLS secrets to FILE (NSS key log format), so that a
    /// capture of it decrypts (tshark -o tls.keylog_file:FILE). Off by default.
    #[arg(long, value_name = "FILE")]
    keylog: Option<PathBuf>,
}

/// What the fetch got to, kept for the JSON even when it fails half-way.
#[derive(Default)]
struct Progress {
    handshake: Option<Duration>,
    first_byte: Option<Duration>,
    last_byte: Option<Duration>,
    bytes: u64,
    conn: Option<Connection>,
    local: Option<SocketAddr>,
    remote: Option<SocketAddr>,
    sock: (usize, usize),
}

fn main() -> ExitCode {
    let args = Args::parse();
    if !(args.connect_timeout_s > 0.0
        && args.timeout_s > 0.0
        && args.idle_timeout_s > 0.0
        && args.duration_s.is_none_or(|d| d > 0.0))
    {
        eprintln!("{NAME}: timeouts must be positive");
        return ExitCode::from(2);
    }
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{NAME}: error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let start = Instant::now();
    let start_unix = unix_now();
    let mut progress = Progress::default();
    let mut endpoint = None;
    let total = Duration::from_secs_f64(args.timeout_s);
    let mut stopped: Option<&str> = None;
    let outcome = {
        let fetching = tokio::time::timeout(total, fetch(&args, start, &mut progress, &mut endpoint));
        tokio::pin!(fetching);
        let until = args.duration_s.map(Duration::from_secs_f64).unwrap_or(Duration::MAX);
        let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
        tokio::select! {
            r = &mut fetching => match r {
                Ok(r) => r,
                // Worded once the fetch has let go of the progress record.
                Err(_) => Err("timed out".to_string()),
            },
            _ = tokio::time::sleep(until) => { stopped = Some("duration"); Ok(()) }
            _ = async { match terminate.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {
                stopped = Some("signal");
                Ok(())
            }
            _ = tokio::signal::ctrl_c() => { stopped = Some("signal"); Ok(()) }
        }
    };
    let outcome = match outcome {
        Err(e) if e == "timed out" => Err(format!(
            "timed out after {} s with {} of {} bytes received",
            args.timeout_s, progress.bytes, args.size
        )),
        other => other,
    };
    let complete = outcome.is_ok() && stopped.is_none();
    let end_unix = unix_now();

    let mut out = Map::new();
    out.insert("ok".into(), json!(outcome.is_ok()));
    if let Err(e) = &outcome {
        out.insert("error".into(), json!(e));
    }
    let fct = progress.last_byte.filter(|_| complete);
    let goodput = progress.last_byte.filter(|_| outcome.is_ok() && progress.bytes > 0);
    out.extend(
        json!({
            "server": args.server,
            "remote": progress.remote.map(|a| a.to_string()),
            "local": progress.local.map(|a| a.to_string()),
            "size_bytes": args.size,
            "bytes": progress.bytes,
            "fct_s": fct.map(|d| d.as_secs_f64()),
            "handshake_s": progress.handshake.map(|d| d.as_secs_f64()),
            "ttfb_s": progress.first_byte.map(|d| d.as_secs_f64()),
            "complete": complete,
            "stopped": stopped,
            "goodput_mbps": goodput.map(|d| progress.bytes as f64 * 8.0 / d.as_secs_f64() / 1e6),
            "start_unix_s": start_unix,
            "end_unix_s": end_unix,
            "hint_kbps": args.hint_kbps,
            "tech": args.hint_kbps.map(|_| tech_name(args.tech)),
            "tech_code": args.hint_kbps.map(|_| args.tech),
            "verified": args.verify && outcome.is_ok() && progress.bytes > 0,
            "udp_payload": args.udp_payload,
            "gso": !args.no_gso,
            "sock_rcvbuf": progress.sock.0,
            "sock_sndbuf": progress.sock.1,
        })
        .as_object()
        .unwrap()
        .clone(),
    );
    if let Some(conn) = &progress.conn {
        out.insert("stats".into(), Value::Object(connection_stats(&conn.stats())));
        conn.close(VarInt::from_u32(0), b"done");
    }
    println!("{}", Value::Object(out));
    // Let the close frame leave so the server ends the connection now, not at its idle
    // timeout; the figures above are already final.
    if let Some(ep) = endpoint {
        let _ = tokio::time::timeout(Duration::from_secs(1), ep.wait_idle()).await;
    }
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{NAME}: error: {e}");
            ExitCode::from(1)
        }
    }
}

fn resolve(server: &str) -> Result<SocketAddr, String> {
    let mut addrs = server
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve --server {server}: {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("--server {server} resolves to no address"))
}

async fn fetch(
    args: &Args,
    start: Instant,
    progress: &mut Progress,
    endpoint_out: &mut Option<Endpoint>,
) -> Result<(), String> {
    let remote = resolve(&args.server)?;
    progress.remote = Some(remote);
    let transport = TransportOptions {
        udp_payload: args.udp_payload,
        mtu_discovery: args.mtu_discovery,
        idle_timeout: Duration::from_secs_f64(args.idle_timeout_s),
        receive_window: args.recv_window,
        send_window: 1 << 20,
        gso: !args.no_gso,
    }
    .build()?;
    let mut config = ClientConfig::new(Arc::new(tls::client_crypto(args.keylog.as_deref())?));
    config.transport_config(Arc::new(transport));

    let bind = args.bind.unwrap_or_else(|| {
        if remote.is_ipv6() {
            "[::]:0".parse().unwrap()
        } else {
            "0.0.0.0:0".parse().unwrap()
        }
    });
    let (udp, rcv, snd) = socket::bind(bind, args.sock_buf as usize)?;
    progress.sock = (rcv, snd);
    let endpoint = Endpoint::new(
        EndpointConfig::default(),
        None,
        udp,
        StartlabRuntime::new(Timers::Precise),
    )
    .map_err(|e| format!("cannot start the QUIC endpoint: {e}"))?;
    progress.local = endpoint.local_addr().ok();
    *endpoint_out = Some(endpoint.clone());

    // The FCT runs from here: the client's first Initial leaves on the endpoint's next
    // poll, microseconds later.
    let t0 = start.max(Instant::now());
    let connecting = endpoint
        .connect_with(config, remote, &args.server_name)
        .map_err(|e| format!("cannot connect to {remote}: {e}"))?;
    let conn = match tokio::time::timeout(Duration::from_secs_f64(args.connect_timeout_s), connecting).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(format!("handshake with {remote} failed: {e}")),
        Err(_) => {
            return Err(format!(
                "no handshake with {remote} within {} s",
                args.connect_timeout_s
            ))
        }
    };
    progress.handshake = Some(t0.elapsed());
    progress.conn = Some(conn.clone());

    let (mut send, mut recv) = conn.open_bi().await.map_err(|e| format!("cannot open a stream: {e}"))?;
    let hint = args.hint_kbps.map(|kbps| Hint { kbps, tech: args.tech });
    send.write_all(&Request { size: args.size, hint }.encode())
        .await
        .map_err(|e| format!("cannot send the request: {e}"))?;
    send.finish().map_err(|e| format!("cannot send the request: {e}"))?;

    loop {
        match recv.read_chunk(usize::MAX, true).await {
            Ok(Some(chunk)) => {
                let now = t0.elapsed();
                progress.first_byte.get_or_insert(now);
                progress.last_byte = Some(now);
                if args.verify {
                    if let Some(i) = chunk
                        .bytes
                        .iter()
                        .enumerate()
                        .position(|(i, &b)| b != ((chunk.offset + i as u64) % 251) as u8)
                    {
                        return Err(format!("byte {} of the response is wrong", chunk.offset + i as u64));
                    }
                }
                progress.bytes += chunk.bytes.len() as u64;
                if progress.bytes > args.size {
                    return Err(format!("server sent more than the {} bytes requested", args.size));
                }
            }
            Ok(None) => break,
            Err(ReadError::Reset(code)) => {
                let why = match code.into_inner() as u32 {
                    request::ERR_BAD_REQUEST => "bad request",
                    request::ERR_TOO_LARGE => "object larger than the server's --max-object",
                    _ => "unknown reason",
                };
                return Err(format!("server refused the request: {why} (code {code})"));
            }
            Err(e) => {
                return Err(format!(
                    "connection failed after {} of {} bytes: {e}",
                    progress.bytes, args.size
                ))
            }
        }
    }
    if progress.bytes != args.size {
        return Err(format!("short response: {} of {} bytes", progress.bytes, args.size));
    }
    Ok(())
}
