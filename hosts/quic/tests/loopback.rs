//! The two binaries against each other on the loopback interface: objects arrive whole
//! and byte-exact, the JSON of both sides has its fields, failures exit non-zero with a
//! message.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;

const SERVER: &str = env!("CARGO_BIN_EXE_startlab-quic-server");
const CLIENT: &str = env!("CARGO_BIN_EXE_startlab-quic-client");

fn temp_path(name: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    std::env::temp_dir().join(format!(
        "stlq-test-{}-{}-{name}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    ))
}

struct Server {
    child: Child,
    addr: String,
    stats: PathBuf,
}

impl Server {
    fn start(args: &[&str]) -> Server {
        let stats = temp_path("stats.jsonl");
        let mut child = Command::new(SERVER)
            .args(["--listen", "127.0.0.1:0", "--stats", stats.to_str().unwrap()])
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("server starts");
        let mut line = String::new();
        BufReader::new(child.stderr.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let addr = line
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no listening line: {line:?}"))
            .to_string();
        Server { child, addr, stats }
    }

    /// SIGTERM, then the per-connection lines it wrote.
    fn stop(mut self) -> Vec<Value> {
        // SAFETY: signalling our own child by its PID.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "server exit status {status}");
                break;
            }
            assert!(Instant::now() < deadline, "server ignored SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        }
        let text = std::fs::read_to_string(&self.stats).unwrap_or_default();
        let _ = std::fs::remove_file(&self.stats);
        text.lines()
            .map(|l| serde_json::from_str(l).expect("stats line is JSON"))
            .collect()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Fetch {
    code: i32,
    json: Value,
    stderr: String,
}

fn fetch(addr: &str, args: &[&str]) -> Fetch {
    let out = Command::new(CLIENT)
        .args(["--server", addr])
        .args(args)
        .output()
        .expect("client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    Fetch {
        code: out.status.code().unwrap_or(-1),
        json: serde_json::from_str(stdout.trim()).unwrap_or(Value::Null),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
fn fetches_70kb_2mb_10mb_with_cubic_iw32() {
    let server = Server::start(&["--cc", "cubic-iw32"]);
    let sizes = [("70KB", 70_000u64), ("2MB", 2_000_000), ("10MB", 10_000_000)];
    for (label, bytes) in sizes {
        let f = fetch(&server.addr, &["--size", label, "--verify"]);
        assert_eq!(f.code, 0, "{label}: {}", f.stderr);
        let j = &f.json;
        assert_eq!(j["ok"], true);
        assert_eq!(j["bytes"], bytes);
        assert_eq!(j["size_bytes"], bytes);
        assert_eq!(j["verified"], true);
        let fct = j["fct_s"].as_f64().unwrap();
        let hs = j["handshake_s"].as_f64().unwrap();
        let ttfb = j["ttfb_s"].as_f64().unwrap();
        assert!(0.0 < hs && hs <= ttfb && ttfb <= fct && fct < 30.0, "{j}");
        assert!(j["goodput_mbps"].as_f64().unwrap() > 0.0);
        assert!(j["stats"]["received_bytes"].as_u64().unwrap() > bytes);
        for key in ["sent_packets", "lost_packets", "srtt_ms", "min_rtt_ms", "mtu"] {
            assert!(j["stats"].get(key).is_some(), "client stats lack {key}");
        }
        assert!(j["hint_kbps"].is_null());
    }
    let lines = server.stop();
    assert_eq!(lines.len(), sizes.len(), "one line per connection: {lines:?}");
    let mut served: Vec<u64> = lines.iter().map(|l| l["response_bytes"].as_u64().unwrap()).collect();
    served.sort();
    assert_eq!(served, sizes.map(|(_, b)| b));
    for l in &lines {
        assert_eq!(l["event"], "connection");
        assert_eq!(l["cc"], "cubic-iw32");
        assert_eq!(l["close"], "client closed");
        assert_eq!(l["requests"], 1);
        assert_eq!(l["hint_applied"], false);
        assert_eq!(l["initial_window_bytes"], 32 * 1472);
        assert_eq!(l["cwnd_start_bytes"], 32 * 1472);
        assert!(l["handshake_rtt_ms"].as_f64().unwrap() > 0.0);
        assert!(l["sent_bytes"].as_u64().unwrap() >= l["response_bytes"].as_u64().unwrap());
        // The start flight: from the response's first datagram, within the window, ended by
        // the window or an acknowledgement at or after its beginning.
        let f = &l["start_flight"];
        assert_eq!(f["window_bytes"], 32 * 1472);
        assert!(f["bytes"].as_u64().unwrap() > 0);
        assert!(f["bytes"].as_u64().unwrap() <= 32 * 1472 + 10 * 1472, "{f}");
        assert!(["window", "ack"].contains(&f["ended_by"].as_str().unwrap()), "{f}");
        let began = f["began_unix_s"].as_f64().unwrap();
        assert!(began >= l["start_unix_s"].as_f64().unwrap());
        assert!(f["end_unix_s"].as_f64().unwrap() >= began);
        for key in [
            "sent_packets",
            "lost_packets",
            "lost_bytes",
            "retransmitted_packets",
            "retransmitted_bytes",
            "cwnd_end_bytes",
            "congestion_events",
            "errors",
        ] {
            assert!(l.get(key).is_some(), "server stats lack {key}");
        }
    }
}

#[test]
fn blitz_applies_the_hint() {
    let server = Server::start(&["--cc", "blitz"]);
    let f = fetch(
        &server.addr,
        &["--size", "2MB", "--hint-kbps", "1000000", "--tech", "dsl", "--verify"],
    );
    assert_eq!(f.code, 0, "{}", f.stderr);
    assert_eq!(f.json["hint_kbps"], 1_000_000);
    assert_eq!(f.json["tech"], "dsl");
    assert_eq!(f.json["tech_code"], 2);
    let g = fetch(&server.addr, &["--size", "70KB"]);
    assert_eq!(g.code, 0, "{}", g.stderr);
    let lines = server.stop();
    assert_eq!(lines.len(), 2);
    let hinted = lines
        .iter()
        .find(|l| l["hint_kbps"] == 1_000_000)
        .expect("the hinted connection");
    assert_eq!(hinted["hint_applied"], true);
    assert_eq!(hinted["hint_tech"], "dsl");
    assert_eq!(hinted["hint_tech_code"], 2);
    // cwnd = hint × handshake RTT, whole datagrams, at least two; ssthresh = cwnd.
    let rtt_ms = hinted["blitz_rtt_ms"].as_f64().unwrap();
    let want = ((1e6 * 1e3 / 8.0 * rtt_ms / 1e3) / 1472.0).ceil().max(2.0) as u64 * 1472;
    let got = hinted["cwnd_start_bytes"].as_u64().unwrap();
    assert!(got.abs_diff(want) <= 1472, "cwnd {got}, hint × RTT {want}");
    assert_eq!(hinted["ssthresh_start_bytes"], hinted["cwnd_start_bytes"]);
    let plain = lines
        .iter()
        .find(|l| l["hint_kbps"].is_null())
        .expect("the plain connection");
    assert_eq!(plain["hint_applied"], false);
    assert_eq!(plain["cwnd_start_bytes"], 32 * 1472);
}

/// The secrets of one connection in a key log, by label.
#[test]
fn google_quics_sender_serves_the_baseline_and_blitzstart() {
    let server = Server::start(&["--cc", "blitz", "--sender", "gquic"]);
    let f = fetch(&server.addr, &["--size", "2MB", "--hint-kbps", "1000000", "--verify"]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    let g = fetch(&server.addr, &["--size", "2MB", "--verify"]);
    assert_eq!(g.code, 0, "{}", g.stderr);
    let lines = server.stop();
    assert_eq!(lines.len(), 2);
    for l in &lines {
        assert_eq!(l["sender"], "gquic");
        assert_eq!(l["cc"], "blitz");
    }
    let hinted = lines.iter().find(|l| l["hint_applied"] == true).expect("the hinted connection");
    assert_eq!(hinted["ssthresh_start_bytes"], hinted["cwnd_start_bytes"]);
    let plain = lines.iter().find(|l| l["hint_applied"] == false).expect("the plain connection");
    assert_eq!(plain["cwnd_start_bytes"], 32 * 1472);
}

fn secrets(path: &PathBuf) -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let _ = std::fs::remove_file(path);
    let mut lines: Vec<(String, String, String)> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split(' ').collect();
            assert_eq!(f.len(), 3, "not an NSS key log line: {l:?}");
            (f[0].to_string(), f[1].to_string(), f[2].to_string())
        })
        .collect();
    lines.sort();
    lines
}

#[test]
fn keylog_writes_both_sides_secrets_only_when_asked() {
    let server_keys = temp_path("server.keys");
    let client_keys = temp_path("client.keys");
    let server = Server::start(&["--keylog", server_keys.to_str().unwrap()]);
    let f = fetch(
        &server.addr,
        &["--size", "70KB", "--keylog", client_keys.to_str().unwrap()],
    );
    assert_eq!(f.code, 0, "{}", f.stderr);
    server.stop();
    let client = secrets(&client_keys);
    let labels: Vec<&str> = client.iter().map(|(l, _, _)| l.as_str()).collect();
    // TLS 1.3 over QUIC: handshake and traffic secrets of both directions, the exporter.
    assert_eq!(
        labels,
        [
            "CLIENT_HANDSHAKE_TRAFFIC_SECRET",
            "CLIENT_TRAFFIC_SECRET_0",
            "EXPORTER_SECRET",
            "SERVER_HANDSHAKE_TRAFFIC_SECRET",
            "SERVER_TRAFFIC_SECRET_0"
        ]
    );
    for (_, random, secret) in &client {
        assert_eq!(random.len(), 64, "a 32-byte client random in hex");
        assert!(secret.len() >= 64 && secret.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(random, &client[0].1, "one connection, one client random");
    }
    // The server derives the same secrets for the same connection.
    assert_eq!(secrets(&server_keys), client);

    // Without the flag nothing is written, whatever the environment says.
    let quiet = temp_path("quiet.keys");
    let server = Server::start(&[]);
    let out = Command::new(CLIENT)
        .args(["--server", &server.addr, "--size", "70KB"])
        .env("SSLKEYLOGFILE", &quiet)
        .output()
        .expect("client runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    server.stop();
    assert!(!quiet.exists(), "SSLKEYLOGFILE must not turn key logging on");
}

#[test]
fn failures_exit_nonzero_with_a_message() {
    // Nothing listens: the handshake times out.
    let dead = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = dead.local_addr().unwrap().to_string();
    drop(dead);
    let started = Instant::now();
    let f = fetch(&addr, &["--size", "70KB", "--connect-timeout-s", "1"]);
    assert_eq!(f.code, 1);
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(f.stderr.contains("startlab-quic-client: error:"), "{}", f.stderr);
    assert_eq!(f.json["ok"], false);
    assert!(f.json["error"].as_str().unwrap().contains(&addr), "{}", f.json);

    // The server refuses an object above its limit.
    let server = Server::start(&["--max-object", "1MB"]);
    let f = fetch(&server.addr, &["--size", "2MB"]);
    assert_eq!(f.code, 1);
    assert!(f.stderr.contains("refused"), "{}", f.stderr);
    assert_eq!(f.json["bytes"], 0);

    // The whole fetch has a deadline.
    let f = fetch(&server.addr, &["--size", "10GB", "--timeout-s", "0.5"]);
    assert_eq!(f.code, 1);
    assert!(
        f.stderr.contains("refused") || f.stderr.contains("timed out"),
        "{}",
        f.stderr
    );
    let lines = server.stop();
    assert!(
        lines.iter().any(|l| l["errors"].to_string().contains("--max-object")),
        "{lines:?}"
    );

    // Usage errors: exit 2.
    let f = fetch("127.0.0.1:1", &["--size", "lots"]);
    assert_eq!(f.code, 2);
    let out = Command::new(SERVER)
        .args(["--cc", "blitz", "--iw", "10"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--iw 10 conflicts"));
    let out = Command::new(SERVER)
        .args(["--sender", "gquic", "--cubic-beta", "0.8"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the gquic sender's are quiche's"));
}

#[test]
fn short_read_deadline() {
    // A fetch that cannot finish within --timeout-s reports what it got.
    let server = Server::start(&[]);
    let f = fetch(&server.addr, &["--size", "10GB", "--timeout-s", "0.3"]);
    assert_eq!(f.code, 1);
    assert!(f.stderr.contains("timed out"), "{}", f.stderr);
    assert_eq!(f.json["ok"], false);
    assert!(f.json["fct_s"].is_null());
    server.stop();
}

#[test]
fn long_flow_stops_after_duration_or_sigterm() {
    let server = Server::start(&[]);
    let f = fetch(&server.addr, &["--size", "10GB", "--duration-s", "0.5", "--verify"]);
    assert_eq!(f.code, 0, "{}", f.stderr);
    let j = &f.json;
    assert_eq!(j["ok"], true);
    assert_eq!(j["complete"], false);
    assert_eq!(j["stopped"], "duration");
    assert!(j["fct_s"].is_null());
    assert!(j["bytes"].as_u64().unwrap() > 0);
    assert!(j["goodput_mbps"].as_f64().unwrap() > 0.0);
    assert_eq!(j["verified"], true);

    let child = Command::new(CLIENT)
        .args(["--server", &server.addr, "--size", "10GB"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    // SAFETY: signalling our own child by its PID.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let j: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(j["stopped"], "signal");
    assert!(j["bytes"].as_u64().unwrap() > 0);
    let lines = server.stop();
    assert_eq!(lines.len(), 2);
    assert!(lines.iter().all(|l| l["close"] == "client closed"), "{lines:?}");
}
