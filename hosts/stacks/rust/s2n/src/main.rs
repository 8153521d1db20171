//! startlab-s2n: AWS's s2n-quic behind startlab's stack endpoint contract (hosts/stacks).
//!
//!     startlab-s2n server --listen IP:PORT --cert C --key K [--cc cubic|bbr]
//!     startlab-s2n client --server IP:PORT --cert C --size N [--timeout-s T]
//!     startlab-s2n version
//!
//! The server answers an HTTP/0.9 request ("GET /N", ALPN hq-interop, as the QUIC interop
//! runner's endpoints) on each bidirectional stream with N bytes and the stream's FIN. The
//! client trusts the server's certificate (it is its own, self-signed), fetches one object
//! and prints one JSON object: ok, bytes, fct_s from the dial to the last byte, handshake_s.
//! The congestion control is s2n-quic's own (its CUBIC by default, or its BBRv2); s2n-quic
//! writes no qlog.

use std::{env, path::Path, process::ExitCode, time::Instant};

use bytes::Bytes;
use s2n_quic::{
    client::Connect,
    provider::congestion_controller::{Bbr, Cubic},
    Client, Server,
};

const ALPN: &str = "hq-interop";
const SERVER_NAME: &str = "startlab";
const CHUNK: usize = 64 * 1024;
const MAX_OBJECT: u64 = 1 << 40;
const VERSION: &str = "1.91.0"; // s2n-quic's, as Cargo.toml pins it (=1.91.0)

type Error = Box<dyn std::error::Error + Send + Sync>;

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
    if role == "version" {
        println!("{VERSION}");
        return ExitCode::SUCCESS;
    }
    let args = Args(argv);
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a tokio runtime");
    let result = match role.as_str() {
        "server" => rt.block_on(server(&args)),
        "client" => rt.block_on(client(&args)),
        _ => Err("usage: startlab-s2n server|client|version [flags]".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("startlab-s2n: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn server(args: &Args) -> Result<(), Error> {
    let listen = args.need("listen")?;
    let (cert, key) = (args.need("cert")?, args.need("key")?);
    let tls = s2n_quic::provider::tls::default::Server::builder()
        .with_certificate(Path::new(&cert), Path::new(&key))?
        .with_application_protocols([ALPN])?
        .build()?;
    let builder = Server::builder().with_tls(tls)?.with_io(listen.as_str())?;
    let mut server = match args.get("cc").as_deref().unwrap_or("cubic") {
        "cubic" => builder.with_congestion_controller(Cubic::default())?.start()?,
        "bbr" => builder.with_congestion_controller(Bbr::default())?.start()?,
        other => return Err(format!("no congestion control '{other}' (cubic, bbr)").into()),
    };
    eprintln!("listening on {listen}");
    let mut stop = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    loop {
        tokio::select! {
            conn = server.accept() => match conn {
                Some(mut conn) => {
                    tokio::spawn(async move {
                        while let Ok(Some(stream)) = conn.accept_bidirectional_stream().await {
                            tokio::spawn(answer(stream));
                        }
                    });
                }
                None => return Ok(()),
            },
            _ = stop.recv() => return Ok(()),
        }
    }
}

async fn answer(mut stream: s2n_quic::stream::BidirectionalStream) {
    let mut line = Vec::new();
    while !line.contains(&b'\n') && line.len() < 64 {
        match stream.receive().await {
            Ok(Some(chunk)) => line.extend_from_slice(&chunk),
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&line);
    let size = text.trim().strip_prefix("GET /").and_then(|n| n.parse::<u64>().ok()).filter(|n| *n <= MAX_OBJECT);
    let Some(mut left) = size else {
        let _ = stream.reset(1u32.into());
        return;
    };
    let chunk = Bytes::from(vec![0u8; CHUNK]);
    while left > 0 {
        let n = left.min(CHUNK as u64) as usize;
        if stream.send(chunk.slice(..n)).await.is_err() {
            return;
        }
        left -= n as u64;
    }
    let _ = stream.close().await;
}

async fn client(args: &Args) -> Result<(), Error> {
    let server: std::net::SocketAddr = args.need("server")?.parse()?;
    let cert = args.need("cert")?;
    let size: u64 = args.need("size")?.parse()?;
    let timeout = args.get("timeout-s").map(|t| t.parse::<f64>()).transpose()?.unwrap_or(60.0);
    let start = Instant::now();
    let unix = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs_f64();
    let outcome = tokio::time::timeout(std::time::Duration::from_secs_f64(timeout), fetch(server, &cert, size, start)).await;
    let (got, handshake, fct, error) = match outcome {
        Ok(Ok((got, handshake, fct))) => (got, Some(handshake), Some(fct), None),
        Ok(Err(e)) => (0, None, None, Some(e.to_string())),
        Err(_) => (0, None, None, Some(format!("timed out after {timeout} s"))),
    };
    let ok = error.is_none() && got == size;
    let error = error.or_else(|| (!ok).then(|| format!("got {got} of {size} bytes")));
    let report = serde_json::json!({"ok": ok, "stack": "s2n-quic", "version": VERSION, "bytes": got,
                                    "fct_s": fct, "handshake_s": handshake, "start_unix_s": unix, "error": error});
    println!("{report}");
    if ok { Ok(()) } else { Err(report["error"].to_string().into()) }
}

async fn fetch(server: std::net::SocketAddr, cert: &str, size: u64, start: Instant)
               -> Result<(u64, f64, f64), Error> {
    let tls = s2n_quic::provider::tls::default::Client::builder()
        .with_certificate(Path::new(cert))?
        .with_application_protocols([ALPN])?
        .build()?;
    let mut client = Client::builder().with_tls(tls)?.with_io("0.0.0.0:0")?.start()?;
    let mut conn = client.connect(Connect::new(server).with_server_name(SERVER_NAME)).await?;
    let handshake = start.elapsed().as_secs_f64();
    let mut stream = conn.open_bidirectional_stream().await?;
    stream.send(Bytes::from(format!("GET /{size}\r\n"))).await?;
    stream.finish()?;
    let mut got = 0u64;
    while let Some(chunk) = stream.receive().await? {
        got += chunk.len() as u64;
    }
    let fct = start.elapsed().as_secs_f64();
    conn.close(0u32.into());
    client.wait_idle().await.ok();
    Ok((got, handshake, fct))
}
