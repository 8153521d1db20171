//! startlab-quic-server: serves generated objects over QUIC, one bidirectional stream per
//! request, and writes one JSON line of statistics per connection when it ends.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use clap::{Parser, ValueEnum};
use quinn::crypto::rustls::QuicServerConfig;
use quinn::{
    AsyncUdpSocket, Connection, ConnectionError, Endpoint, EndpointConfig, Incoming, QlogConfig, QlogStream, RecvStream,
    Runtime, SendStream, ServerConfig, VarInt,
};
use serde_json::{json, Value};
use tokio::task::JoinSet;

use startlab_quic::careful_resume::{CrParams, PathKey, PathStore, Phase, PhaseUpdate};
use startlab_quic::cr_qlog;
use startlab_quic::controller::{ControllerConfig, HintSlot, Sender, StartlabController, StartlabFactory};
use startlab_quic::cubic::{CubicParams, RapidParams};
use startlab_quic::gquic_pacing::PacerParams;
use startlab_quic::paced_socket::{PaceCell, PaceStats, PacedSocket, Percentiles};
use startlab_quic::pacing::{max_spread, Pacing};
use startlab_quic::report::{connection_stats, ms, unix_now};
use startlab_quic::request::{self, tech_name, Hint, Request};
use startlab_quic::runtime::{StartlabRuntime, Timers};
use startlab_quic::sizes::parse_size;
use startlab_quic::transport::{TransportOptions, ETHERNET_UDP_PAYLOAD};
use startlab_quic::{socket, tls};

const NAME: &str = "startlab-quic-server";

#[derive(Copy, Clone, Debug, PartialEq, ValueEnum)]
enum Cc {
    /// The paper's baseline: CUBIC from 32 datagrams, paced as Google QUIC.
    #[value(name = "cubic-iw32")]
    CubicIw32,
    /// Blitzstart: cwnd = hint × handshake RTT in congestion avoidance, then CUBIC; the
    /// cubic-iw32 start for connections without a hint.
    Blitz,
    /// CUBIC from --iw datagrams (default 10), paced as Google QUIC.
    Cubic,
    /// quinn's own CUBIC and pacing, for reference (--iw, default 10).
    #[value(name = "quinn-cubic")]
    QuinnCubic,
    /// Careful Resume (RFC 9959) over CUBIC from --iw datagrams (default 10): the
    /// server's connections save their paths' parameters (--cr-state keeps them in a file)
    /// and resume from them.
    #[value(name = "careful-resume")]
    CarefulResume,
}

impl Cc {
    fn name(self) -> &'static str {
        match self {
            Cc::CubicIw32 => "cubic-iw32",
            Cc::Blitz => "blitz",
            Cc::Cubic => "cubic",
            Cc::QuinnCubic => "quinn-cubic",
            Cc::CarefulResume => "careful-resume",
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, ValueEnum)]
enum PacingMode {
    /// A window over --ss-pacing-rtt of an RTT in slow start, --ca-pacing-rtt otherwise.
    Paper,
    /// quinn's pacer unchanged (a window over 0.8 RTT).
    Quinn,
}

#[derive(Copy, Clone, Debug, PartialEq, ValueEnum)]
enum TimerMode {
    /// timerfd per connection: pacing wake-ups within tens of microseconds.
    Precise,
    /// tokio's timer wheel (1 ms resolution), as quinn ships.
    Tokio,
}

#[derive(Copy, Clone, Debug, PartialEq, ValueEnum)]
enum OnOff {
    On,
    Off,
}

fn size(text: &str) -> Result<u64, String> {
    parse_size(text)
}

#[derive(Parser, Debug)]
#[command(name = NAME, version, about = "QUIC object server for startlab (CUBIC IW32 baseline, Blitzstart)")]
struct Args {
    /// Address and UDP port to listen on.
    #[arg(long, default_value = "0.0.0.0:4433")]
    listen: SocketAddr,
    /// Congestion controller.
    #[arg(long, value_enum, default_value = "cubic-iw32")]
    cc: Cc,
    /// Whose CUBIC the startlab controllers run.
    #[arg(long, value_enum, default_value = "rfc9438")]
    sender: Sender,
    /// Initial window in datagrams (cubic, quinn-cubic; cubic-iw32 and blitz use 32).
    #[arg(long)]
    iw: Option<u64>,
    /// Pacing of the startlab controllers.
    #[arg(long, value_enum, default_value = "paper")]
    pacing: PacingMode,
    /// Fraction of an RTT over which a slow-start window is paced (paper: 0.5; at most 0.8).
    #[arg(long, default_value_t = 0.5)]
    ss_pacing_rtt: f64,
    /// Fraction of an RTT over which a window is paced in congestion avoidance and a
    /// Blitzstart window at start (paper: 0.75; at most 0.8).
    #[arg(long, default_value_t = 0.75)]
    ca_pacing_rtt: f64,
    /// Timers that drive pacing.
    #[arg(long, value_enum, default_value = "precise")]
    timers: TimerMode,
    /// Release every datagram at the time Google QUIC's pacer gives it (10 unpaced after
    /// quiescence, then pairs at the --pacing rates, 1 ms granularity), from a socket
    /// beneath quinn, instead of in quinn's bursts.
    #[arg(long)]
    datagram_pacing: bool,
    /// HyStart delay-increase exit from slow start.
    #[arg(long, value_enum, default_value = "on")]
    hystart: OnOff,
    /// With --hystart on: RFC 9406's HyStart++, Conservative Slow Start on the increase
    /// (CSS_ROUNDS rounds a quarter as fast, undone when the RTT falls) before leaving.
    #[arg(long)]
    hystart_pp: bool,
    /// Rapid Start (draft-kazuho-ccwg-rapid-start-02) for the initial slow start: 3x a round
    /// while the RTT floor holds, only a loss ends it, and its first recovery ends at
    /// β × what the path delivered (K = 2/3, CUBIC's β).
    #[arg(long)]
    rapid_start: bool,
    /// CUBIC's multiplicative decrease factor.
    #[arg(long, default_value_t = 0.7)]
    cubic_beta: f64,
    /// UDP payload of every datagram (1472 on a 1500-byte IPv4 path).
    #[arg(long, default_value_t = ETHERNET_UDP_PAYLOAD)]
    udp_payload: u16,
    /// Probe for larger datagrams instead of fixing them to --udp-payload.
    #[arg(long)]
    mtu_discovery: bool,
    /// Send one datagram per system call instead of UDP GSO batches.
    #[arg(long)]
    no_gso: bool,
    /// Unacknowledged response bytes buffered per connection.
    #[arg(long, default_value = "64MiB", value_parser = size)]
    send_window: u64,
    /// Largest object a client may request.
    #[arg(long, default_value = "10GB", value_parser = size)]
    max_object: u64,
    /// Where to append one JSON line per connection ("-" = standard output).
    #[arg(long, default_value = "-")]
    stats: String,
    /// Close a connection after this long without packets.
    #[arg(long, default_value_t = 10.0)]
    idle_timeout_s: f64,
    /// Seconds a client has to send its request on a new stream.
    #[arg(long, default_value_t = 10.0)]
    request_timeout_s: f64,
    /// Exit after this many connections have ended (0 = serve until SIGTERM/SIGINT).
    #[arg(long, default_value_t = 0)]
    max_connections: u64,
    /// Runtime worker threads (1 = everything on the main thread).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Socket send and receive buffer.
    #[arg(long, default_value = "4MiB", value_parser = size)]
    sock_buf: u64,
    /// Append every connection's TLS secrets to FILE (NSS key log format), so that a
    /// capture of them decrypts (tshark -o tls.keylog_file:FILE). Off by default.
    #[arg(long, value_name = "FILE")]
    keylog: Option<PathBuf>,
    /// Write each connection's qlog (JSON-SEQ: quinn's packet and recovery events, with the
    /// controller's cwnd, ssthresh and pacing rate) into DIR; event times are relative to
    /// the connection's `start_unix_s`, and its line names the file. Off by default.
    #[arg(long, value_name = "DIR")]
    qlog_dir: Option<PathBuf>,
    /// Careful Resume: seconds saved parameters may be used.
    #[arg(long, default_value_t = 3600.0)]
    cr_lifetime_s: f64,
    /// Careful Resume: the largest jump in datagrams (0: no limit but saved_cwnd / 2).
    #[arg(long, default_value_t = 0)]
    cr_max_jump: u64,
    /// Careful Resume: ssthresh = PipeSize × beta when Safe Retreat ends (0.5 … 1).
    #[arg(long, default_value_t = 0.5)]
    cr_beta: f64,
    /// Careful Resume: save an observation only of at least this many × IW.
    #[arg(long, default_value_t = 4)]
    cr_min_save: u64,
    /// Careful Resume: keep the saved parameters in FILE (read at start, written whole
    /// after every connection), so that they outlive the server.
    #[arg(long, value_name = "FILE")]
    cr_state: Option<PathBuf>,
}

/// What the server's controllers are, shared by all connections.
#[derive(Clone)]
enum Controllers {
    Startlab(ControllerConfig),
    Quinn { initial_window: u64 },
}

struct Shared {
    args: Args,
    /// Careful Resume's saved path parameters, shared by all connections.
    paths: Option<Arc<PathStore>>,
    controllers: Controllers,
    base: ServerConfig,
    transport: TransportOptions,
    out: Mutex<Box<dyn Write + Send>>,
    /// The socket that releases datagrams on their times (--datagram-pacing).
    paced: Option<Arc<PacedSocket>>,
    /// The object bytes: a byte at stream offset o is o mod 251 (the client checks this).
    pattern: Bytes,
}

/// One generated buffer, a multiple of 251 bytes long so that writing it repeatedly keeps
/// the pattern continuous.
fn pattern() -> Bytes {
    let len = 251 * 4177; // ≈ 1 MiB
    Bytes::from((0..len).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
}

fn validate(args: &Args) -> Result<Controllers, String> {
    let iw = match (args.cc, args.iw) {
        (Cc::CubicIw32 | Cc::Blitz, Some(n)) if n != 32 => {
            return Err(format!(
                "--iw {n} conflicts with --cc {} (use --cc cubic --iw {n})",
                args.cc.name()
            ))
        }
        (Cc::CubicIw32 | Cc::Blitz, _) => 32,
        (_, Some(n)) => n,
        (_, None) => 10,
    };
    if !(1..=100_000).contains(&iw) {
        return Err(format!("--iw {iw} is outside 1 … 100000 datagrams"));
    }
    for (name, v) in [
        ("--ss-pacing-rtt", args.ss_pacing_rtt),
        ("--ca-pacing-rtt", args.ca_pacing_rtt),
    ] {
        if !(v > 0.0 && v <= max_spread()) {
            return Err(format!(
                "{name} {v}: must be in (0, {}]; quinn's pacer already spreads a window over 0.8 RTT and a controller can only make it faster",
                max_spread()
            ));
        }
    }
    if args.sender == Sender::GoogleQuic && (args.cubic_beta != 0.7 || args.hystart == OnOff::Off || args.hystart_pp) {
        return Err("--cubic-beta, --hystart and --hystart-pp set the rfc9438 sender; the gquic sender's are quiche's".into());
    }
    if args.hystart_pp && args.hystart == OnOff::Off {
        return Err("--hystart-pp is HyStart's: it needs --hystart on".into());
    }
    if args.rapid_start && (args.sender == Sender::GoogleQuic || args.hystart_pp || args.cc == Cc::CarefulResume) {
        return Err("--rapid-start is the rfc9438 sender's initial slow start: not with --sender gquic, --hystart-pp or --cc careful-resume".into());
    }
    if args.datagram_pacing && (args.cc == Cc::QuinnCubic || args.pacing == PacingMode::Quinn) {
        return Err("--datagram-pacing needs a startlab controller and --pacing paper".into());
    }
    if args.sender == Sender::GoogleQuic && args.cc == Cc::QuinnCubic {
        return Err("--sender gquic needs a startlab controller, not --cc quinn-cubic".into());
    }
    if args.cc == Cc::CarefulResume && (args.sender == Sender::GoogleQuic || args.datagram_pacing) {
        return Err("--cc careful-resume runs over the rfc9438 sender and times its own jump beneath quinn (no --sender gquic, no --datagram-pacing)".into());
    }
    if !(0.5..=1.0).contains(&args.cr_beta) {
        return Err(format!("--cr-beta {} must be in [0.5, 1] (RFC 9959 §2.4)", args.cr_beta));
    }
    if !(args.cr_lifetime_s > 0.0) {
        return Err(format!("--cr-lifetime-s {} must be positive", args.cr_lifetime_s));
    }
    if !(args.cubic_beta > 0.0 && args.cubic_beta < 1.0) {
        return Err(format!("--cubic-beta {} must be in (0, 1)", args.cubic_beta));
    }
    if !(args.idle_timeout_s > 0.0 && args.request_timeout_s > 0.0) {
        return Err("timeouts must be positive".into());
    }
    if args.threads == 0 {
        return Err("--threads must be at least 1".into());
    }
    if let Some(dir) = args.qlog_dir.as_deref().filter(|d| !d.is_dir()) {
        return Err(format!("--qlog-dir {}: not a directory", dir.display()));
    }
    Ok(match args.cc {
        Cc::QuinnCubic => Controllers::Quinn { initial_window: iw },
        cc => Controllers::Startlab(ControllerConfig {
            initial_window: iw,
            sender: args.sender,
            cubic: CubicParams {
                beta: args.cubic_beta,
                hystart: args.hystart == OnOff::On,
                hystart_pp: args.hystart_pp,
                rapid_start: args.rapid_start.then_some(RapidParams::DRAFT_02),
                ..CubicParams::default()
            },
            pacing: match args.pacing {
                PacingMode::Paper => Pacing::Paper {
                    slow_start: args.ss_pacing_rtt,
                    avoidance: args.ca_pacing_rtt,
                },
                PacingMode::Quinn => Pacing::Quinn,
            },
            datagram_pacing: args.datagram_pacing.then_some(PacerParams::GOOGLE_QUIC),
            blitz: cc == Cc::Blitz,
            careful_resume: (cc == Cc::CarefulResume).then(|| CrParams {
                lifetime: Duration::from_secs_f64(args.cr_lifetime_s),
                max_jump: args.cr_max_jump * args.udp_payload as u64,
                beta: args.cr_beta,
                min_save: args.cr_min_save,
            }),
        }),
    })
}

/// Whether datagrams go through the paced socket: to pace all of them (--datagram-pacing),
/// or Careful Resume's jump, which quinn's own pacer cannot send slowly enough.
fn paced_socket(args: &Args) -> bool {
    args.datagram_pacing || args.cc == Cc::CarefulResume
}

fn main() -> ExitCode {
    let args = Args::parse();
    let controllers = match validate(&args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{NAME}: {e}");
            return ExitCode::from(2);
        }
    };
    let mut builder = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(args.threads);
        b
    };
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{NAME}: error: cannot start the runtime: {e}");
            return ExitCode::from(1);
        }
    };
    match runtime.block_on(serve(args, controllers)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{NAME}: error: {e}");
            ExitCode::from(1)
        }
    }
}

async fn serve(args: Args, controllers: Controllers) -> Result<(), String> {
    let transport = TransportOptions {
        udp_payload: args.udp_payload,
        mtu_discovery: args.mtu_discovery,
        idle_timeout: Duration::from_secs_f64(args.idle_timeout_s),
        receive_window: 1 << 20,
        send_window: args.send_window,
        gso: !args.no_gso,
    };
    transport.build()?; // reject bad settings before binding
    let names = ["localhost".to_string(), "startlab".to_string()];
    let crypto: Arc<QuicServerConfig> = Arc::new(tls::server_crypto(&names, args.keylog.as_deref())?);
    let base = ServerConfig::with_crypto(crypto);
    let out: Box<dyn Write + Send> = if args.stats == "-" {
        Box::new(std::io::stdout())
    } else {
        Box::new(
            OpenOptions::new()
                .create(true)
                .append(true)
                .open(&args.stats)
                .map_err(|e| format!("cannot open --stats {}: {e}", args.stats))?,
        )
    };
    let (udp, rcvbuf, sndbuf) = socket::bind(args.listen, args.sock_buf as usize)?;
    let timers = match args.timers {
        TimerMode::Precise => Timers::Precise,
        TimerMode::Tokio => Timers::Tokio,
    };
    let runtime = StartlabRuntime::new(timers);
    let cannot = |e: std::io::Error| format!("cannot start the QUIC endpoint on {}: {e}", args.listen);
    let socket = runtime.wrap_udp_socket(udp).map_err(cannot)?;
    let paced = paced_socket(&args).then(|| PacedSocket::new(socket.clone()));
    let endpoint = Endpoint::new_with_abstract_socket(
        EndpointConfig::default(),
        Some(base.clone()),
        match &paced {
            Some(p) => p.clone() as Arc<dyn AsyncUdpSocket>,
            None => socket,
        },
        runtime,
    )
    .map_err(cannot)?;
    let local = endpoint.local_addr().map_err(|e| e.to_string())?;
    eprintln!(
        "{NAME}: listening on {local} (cc {}, pacing {:?}, datagram pacing {}, timers {:?}, udp payload {}, gso {}, socket buffers rcv {rcvbuf} snd {sndbuf})",
        args.cc.name(),
        args.pacing,
        args.datagram_pacing,
        args.timers,
        args.udp_payload,
        !args.no_gso && !paced_socket(&args)
    );

    let max_connections = args.max_connections;
    let paths = match args.cc {
        Cc::CarefulResume => Some(Arc::new(PathStore::open(args.cr_state.as_deref())?)),
        _ => None,
    };
    let shared = Arc::new(Shared {
        paths,
        args,
        controllers,
        base,
        transport,
        out: Mutex::new(out),
        paced,
        pattern: pattern(),
    });
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    let mut connections = JoinSet::new();
    let mut accepted = 0u64;
    let mut ended = 0u64;
    loop {
        if max_connections > 0 && ended >= max_connections {
            break;
        }
        let accepting = max_connections == 0 || accepted < max_connections;
        tokio::select! {
            incoming = endpoint.accept(), if accepting => match incoming {
                Some(incoming) => {
                    accepted += 1;
                    connections.spawn(connection(shared.clone(), incoming));
                }
                None => break,
            },
            Some(_) = connections.join_next() => ended += 1,
            _ = terminate.recv() => break,
            _ = tokio::signal::ctrl_c() => break,
        }
    }
    // Closing the endpoint ends every open connection, each of which then writes its line.
    endpoint.close(VarInt::from_u32(0), b"server shutting down");
    let _ = tokio::time::timeout(Duration::from_secs(3), async {
        while connections.join_next().await.is_some() {}
    })
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(1), endpoint.wait_idle()).await;
    Ok(())
}

/// Per-connection record the stream tasks fill in.
#[derive(Default)]
struct ConnRecord {
    requests: u64,
    response_bytes: u64,
    hint: Option<Hint>,
    /// quinn's minimum RTT when the first request arrived: the handshake's RTT.
    handshake_rtt: Option<Duration>,
    first_request: Option<Instant>,
    /// First request to the acknowledgement of the last response byte.
    response_acked: Option<Duration>,
    errors: Vec<String>,
}

async fn connection(shared: Arc<Shared>, incoming: Incoming) {
    let start = Instant::now();
    let start_unix = unix_now();
    let remote = incoming.remote_address();
    let slot = Arc::new(HintSlot::default());
    let pace = shared.paced.as_ref().map(|socket| {
        let cell = Arc::new(PaceCell::default());
        socket.register(remote, cell.clone());
        cell
    });
    let mut transport = match shared.transport.build() {
        Ok(t) => t,
        Err(_) => return, // validated at start
    };
    match &shared.controllers {
        Controllers::Startlab(config) => {
            let local = incoming.local_ip().unwrap_or(shared.args.listen.ip());
            transport.congestion_controller_factory(Arc::new(StartlabFactory {
                config: config.clone(),
                slot: Some(slot.clone()),
                pace: pace.clone(),
                paths: shared.paths.clone().map(|store| (store, PathKey { local, remote: remote.ip() })),
            }));
        }
        Controllers::Quinn { initial_window } => {
            let mut cubic = quinn::congestion::CubicConfig::default();
            cubic.initial_window(initial_window * shared.args.udp_payload as u64);
            transport.congestion_controller_factory(Arc::new(cubic));
        }
    }
    let record = Arc::new(Mutex::new(ConnRecord::default()));
    let qlog = shared.args.qlog_dir.as_deref().map(|dir| qlog_path(dir, remote, start_unix));
    if let Some(path) = &qlog {
        match qlog_stream(path, start, &shared.args) {
            Ok(stream) => {
                transport.qlog_stream(Some(stream));
            }
            Err(e) => record.lock().unwrap().errors.push(e),
        }
    }
    let mut config = shared.base.clone();
    config.transport_config(Arc::new(transport));

    let (conn, close) = match incoming.accept_with(Arc::new(config)) {
        Err(e) => (None, e),
        Ok(connecting) => match connecting.await {
            Err(e) => (None, e),
            Ok(conn) => {
                let close = serve_streams(&shared, &conn, &slot, &record).await;
                (Some(conn), close)
            }
        },
    };
    if let Some(socket) = shared.paced.as_ref() {
        if !until_taken(socket, remote).await {
            record.lock().unwrap().errors.push(
                "the paced socket still refused the connection's last datagram 2 s after its close: \
                 its counters may miss the server's closing packet"
                    .into(),
            );
        }
    }
    let paced = shared.paced.as_ref().map(|socket| socket.unregister(remote));
    if let Some(Err(e)) = shared.paths.as_ref().map(|p| p.save()) {
        record.lock().unwrap().errors.push(e);
    }
    let mut line = connection_line(&shared, conn.as_ref(), &close, remote, start, start_unix, &record);
    let obj = line.as_object_mut().unwrap();
    obj.insert("datagram_pacer".into(), json!(paced.map(|p| pacer_json(&p))));
    obj.insert("qlog".into(), json!(qlog));
    let mut out = shared.out.lock().unwrap();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Wait (at most 2 s) until the paced socket has taken every datagram quinn built for
/// `remote`. quinn answers a peer's CONNECTION_CLOSE with one of its own, which it builds
/// and counts only after the datagram it holds, if the socket refused one: the connection's
/// counters are read after that, so that they match the capture (measured: the answer built
/// 1.7 ms after the peer's close, when the line was already written).
async fn until_taken(socket: &PacedSocket, remote: SocketAddr) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    while socket.holds_refused(remote) {
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    true
}

async fn serve_streams(
    shared: &Arc<Shared>,
    conn: &Connection,
    slot: &Arc<HintSlot>,
    record: &Arc<Mutex<ConnRecord>>,
) -> ConnectionError {
    let mut streams = JoinSet::new();
    let close = loop {
        match conn.accept_bi().await {
            Ok((send, recv)) => {
                streams.spawn(stream(
                    shared.clone(),
                    conn.clone(),
                    slot.clone(),
                    record.clone(),
                    send,
                    recv,
                ));
            }
            Err(e) => break e,
        }
    };
    // The connection is gone: the stream tasks end at their next operation.
    while streams.join_next().await.is_some() {}
    close
}

async fn stream(
    shared: Arc<Shared>,
    conn: Connection,
    slot: Arc<HintSlot>,
    record: Arc<Mutex<ConnRecord>>,
    mut send: SendStream,
    mut recv: RecvStream,
) {
    let fail = |record: &Mutex<ConnRecord>, msg: String| record.lock().unwrap().errors.push(msg);
    let mut head = [0u8; request::LEN];
    let timeout = Duration::from_secs_f64(shared.args.request_timeout_s);
    match tokio::time::timeout(timeout, recv.read_exact(&mut head)).await {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return fail(&record, format!("reading a request: {e}")),
        Err(_) => {
            let _ = send.reset(VarInt::from_u32(request::ERR_BAD_REQUEST));
            return fail(&record, "no complete request within --request-timeout-s".into());
        }
    }
    let req = match Request::decode(&head) {
        Ok(r) => r,
        Err(e) => {
            let _ = send.reset(VarInt::from_u32(request::ERR_BAD_REQUEST));
            let _ = recv.stop(VarInt::from_u32(request::ERR_BAD_REQUEST));
            return fail(&record, format!("bad request: {e}"));
        }
    };
    if req.size > shared.args.max_object {
        let _ = send.reset(VarInt::from_u32(request::ERR_TOO_LARGE));
        return fail(&record, format!("request for {} bytes above --max-object", req.size));
    }
    // The hint must be in the slot before the first response byte is written: the
    // controller reads it when quinn builds the first datagram of the response.
    let arrived = Instant::now();
    {
        let mut r = record.lock().unwrap();
        if let Some(h) = req.hint {
            if slot.offer(h) {
                r.hint = Some(h);
            }
        }
        r.requests += 1;
        slot.respond();
        if r.first_request.is_none() {
            r.first_request = Some(arrived);
            r.handshake_rtt = Some(conn.stats().path.min_rtt);
        }
    }
    let mut left = req.size;
    while left > 0 {
        let n = left.min(shared.pattern.len() as u64) as usize;
        if let Err(e) = send.write_chunk(shared.pattern.slice(..n)).await {
            return fail(&record, format!("writing a response: {e}"));
        }
        left -= n as u64;
        record.lock().unwrap().response_bytes += n as u64;
    }
    if send.finish().is_err() {
        return;
    }
    // Resolves once the client has acknowledged every byte (or the connection ends).
    if let Ok(None) = send.stopped().await {
        let mut r = record.lock().unwrap();
        let since = r.first_request.unwrap_or(arrived);
        r.response_acked = Some(since.elapsed());
    }
}

fn connection_line(
    shared: &Shared,
    conn: Option<&Connection>,
    close: &ConnectionError,
    remote: SocketAddr,
    start: Instant,
    start_unix: f64,
    record: &Mutex<ConnRecord>,
) -> Value {
    let r = record.lock().unwrap();
    let args = &shared.args;
    let mut line = json!({
        "event": "connection",
        "remote": remote.to_string(),
        "cc": args.cc.name(),
        "sender": match &shared.controllers {
            Controllers::Quinn { .. } => "quinn",
            Controllers::Startlab(c) => c.sender.name(),
        },
        "pacing": match (&shared.controllers, args.pacing) {
            (Controllers::Quinn { .. }, _) | (_, PacingMode::Quinn) => "quinn",
            _ => "paper",
        },
        "start_unix_s": start_unix,
        "duration_s": start.elapsed().as_secs_f64(),
        "close": close_reason(close),
        "requests": r.requests,
        "response_bytes": r.response_bytes,
        "response_acked_s": r.response_acked.map(|d| d.as_secs_f64()),
        "hint_kbps": r.hint.map(|h| h.kbps),
        "hint_tech": r.hint.map(|h| tech_name(h.tech)),
        "hint_tech_code": r.hint.map(|h| h.tech),
        "handshake_rtt_ms": r.handshake_rtt.map(ms),
        "errors": r.errors,
    });
    let obj = line.as_object_mut().unwrap();
    let Some(conn) = conn else {
        obj.insert("established".into(), json!(false));
        return line;
    };
    obj.insert("established".into(), json!(true));
    obj.extend(connection_stats(&conn.stats()));
    let state = conn.congestion_state();
    let window_now = state.window();
    match state.into_any().downcast::<StartlabController>() {
        Ok(c) => {
            let blitz = c.blitzed();
            obj.insert("hint_applied".into(), json!(blitz.is_some()));
            obj.insert("blitz_rtt_ms".into(), json!(blitz.map(|b| ms(b.rtt))));
            obj.insert("initial_window_bytes".into(), json!(c.initial_window_bytes()));
            obj.insert(
                "cwnd_start_bytes".into(),
                json!(blitz.map_or(c.initial_window_bytes(), |b| b.cwnd)),
            );
            obj.insert("ssthresh_start_bytes".into(), json!(blitz.map(|b| b.cwnd)));
            obj.insert("cwnd_end_bytes".into(), json!(c.cwnd()));
            obj.insert("ssthresh_end_bytes".into(), json!(c.ssthresh()));
            obj.insert("cc_reductions".into(), json!(c.reductions()));
            obj.insert("hystart_exit".into(), json!(c.hystart_exit()));
            obj.insert("css_entries".into(), json!(c.css_entries()));
            obj.insert(
                "rapid_start".into(),
                json!(c.rapid_start().map(|r| json!({
                    "acked_3x_bytes": r.acked_3x,
                    "acked_2x_bytes": r.acked_2x,
                    "pre_cwnd_bytes": r.pre_cwnd,
                    "recovery_acked_bytes": r.recovery_acked,
                    "recovery_lost_bytes": r.recovery_lost,
                    "end_cwnd_bytes": r.end_cwnd,
                }))),
            );
            let unix = |t: Instant| start_unix + t.saturating_duration_since(start).as_secs_f64();
            if let Some(cr) = c.careful_resume() {
                let mut out = careful_resume_json(cr.updates(), args, remote, start, start_unix);
                out["jump_pacing"] = json!(c.jump_pace().map(|j| json!({
                    "rate_Bps": j.rate, "srtt_us": j.srtt.as_micros() as u64,
                })));
                obj.insert("careful_resume".into(), out);
            }
            obj.insert(
                "start_flight".into(),
                json!(c.start_flight().map(|f| json!({
                    "began_unix_s": unix(f.began),
                    "window_bytes": f.window,
                    "bytes": f.bytes,
                    "ended_by": f.end.map(|(_, why)| why.name()),
                    "end_unix_s": f.end.map(|(t, _)| unix(t)),
                    "reductions_before": f.reductions_before,
                }))),
            );
        }
        Err(_) => {
            let iw = match shared.controllers {
                Controllers::Quinn { initial_window } => initial_window * args.udp_payload as u64,
                _ => 0,
            };
            obj.insert("hint_applied".into(), json!(false));
            obj.insert("initial_window_bytes".into(), json!(iw));
            obj.insert("cwnd_start_bytes".into(), json!(iw));
            obj.insert("cwnd_end_bytes".into(), json!(window_now));
        }
    }
    line
}

/// A connection's Careful Resume phase changes (the state after each, as the qlog draft's
/// event has it) and, with --qlog-dir, the qlog file of them.
fn careful_resume_json(updates: &[PhaseUpdate], args: &Args, remote: SocketAddr, start: Instant, start_unix: f64) -> Value {
    // Flat, as the TCP scheme records them (windows here in bytes, packets QUIC's).
    let events: Vec<Value> = updates
        .iter()
        .map(|u| {
            json!({
                "t_unix_s": start_unix + u.at.saturating_duration_since(start).as_secs_f64(),
                "old": if u.old == Phase::Observing { "observing" } else { u.old.name() },
                "new": u.new.name(),
                "trigger": u.trigger.map(|t| t.name()),
                "congestion_window": u.congestion_window,
                "ssthresh": u.ssthresh,
                "pipesize": u.pipesize,
                "flight_size": u.flight_size,
                "first_unvalidated_packet": u.first_unvalidated_packet,
                "last_unvalidated_packet": u.last_unvalidated_packet,
                "saved_congestion_window": u.saved_congestion_window,
                "saved_rtt_us": u.saved_rtt.as_micros() as u64,
            })
        })
        .collect();
    let mut out = json!({"unit": "bytes", "events": events, "qlog": null, "errors": []});
    if let (Some(dir), false) = (args.qlog_dir.as_deref(), updates.is_empty()) {
        let path = dir.join(format!("careful-resume-{}_{}-{start_unix:.6}.sqlog", remote.ip(), remote.port()));
        match cr_qlog::write(&path, updates, start, start_unix, NAME) {
            Ok(()) => out["qlog"] = json!(path),
            Err(e) => out["errors"] = json!([format!("cannot write {}: {e}", path.display())]),
        }
    }
    out
}

/// One qlog file per connection, named by its client and start.
fn qlog_path(dir: &Path, remote: SocketAddr, start_unix: f64) -> PathBuf {
    dir.join(format!("server-{}_{}-{start_unix:.6}.sqlog", remote.ip(), remote.port()))
}

/// A qlog stream into `path` whose event times count from the connection's `start`.
fn qlog_stream(path: &Path, start: Instant, args: &Args) -> Result<QlogStream, String> {
    let file = File::create(path).map_err(|e| format!("cannot create qlog {}: {e}", path.display()))?;
    let mut config = QlogConfig::default();
    config
        .writer(Box::new(BufWriter::new(file)))
        .title(Some(NAME.into()))
        .description(Some(format!("cc {}, sender {:?}, datagram pacing {}", args.cc.name(), args.sender, args.datagram_pacing)))
        .start_time(start);
    config.into_stream().ok_or_else(|| format!("cannot start qlog {}", path.display()))
}

/// What the datagram pacer achieved for a connection (paced_socket.rs).
fn pacer_json(p: &PaceStats) -> Value {
    let pct = |x: &Percentiles| json!({"p50": x.p50, "p99": x.p99, "max": x.max});
    json!({"datagrams": p.datagrams, "late_us": pct(&p.late_us), "queued_us": pct(&p.queued_us)})
}

fn close_reason(e: &ConnectionError) -> String {
    match e {
        ConnectionError::ApplicationClosed(c) if c.error_code == VarInt::from_u32(0) => "client closed".into(),
        ConnectionError::LocallyClosed => "server closed".into(),
        ConnectionError::TimedOut => "idle timeout".into(),
        other => other.to_string(),
    }
}
