//! TLS key logging to a named file, in the NSS key log format Wireshark and tshark read
//! (`tshark -o tls.keylog_file:FILE`).
//!
//! QUIC encrypts everything past the Initial packets, so a capture alone cannot show what
//! the client put in its request (the Blitzstart hint, `request.rs`). With the secrets an
//! endpoint logs here, a capture of that connection decrypts and the test
//! `tests/test_quic_hint_wire.py` reads the hint where it travels. Off unless the endpoint
//! is given `--keylog FILE`: an explicit flag rather than rustls's `SSLKEYLOGFILE`, so a
//! variable left in an environment never writes secrets a run did not ask for.

use std::fmt::Write as _;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Mutex;

/// One line of the NSS key log format: `LABEL <client random hex> <secret hex>`.
pub fn nss_line(label: &str, client_random: &[u8], secret: &[u8]) -> String {
    let mut line = String::with_capacity(label.len() + 2 * (client_random.len() + secret.len()) + 3);
    line.push_str(label);
    for bytes in [client_random, secret] {
        line.push(' ');
        for b in bytes {
            let _ = write!(line, "{b:02x}");
        }
    }
    line.push('\n');
    line
}

/// Appends every secret of every connection to one file, a whole line per write so the
/// lines of connections logged concurrently never interleave.
#[derive(Debug)]
pub struct KeyLogWriter {
    file: Mutex<File>,
}

impl KeyLogWriter {
    /// Opens `path` for appending (created readable by its owner only: it holds secrets).
    pub fn open(path: &Path) -> Result<KeyLogWriter, String> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(path)
            .map_err(|e| format!("cannot open --keylog {}: {e}", path.display()))?;
        Ok(KeyLogWriter { file: Mutex::new(file) })
    }
}

impl rustls::KeyLog for KeyLogWriter {
    fn log(&self, label: &str, client_random: &[u8], secret: &[u8]) {
        let line = nss_line(label, client_random, secret);
        let mut file = self.file.lock().unwrap_or_else(|e| e.into_inner());
        // A secret that cannot be written only costs the decryption of a capture; the
        // connection carries on.
        if let Err(e) = file.write_all(line.as_bytes()).and_then(|()| file.flush()) {
            eprintln!("startlab-quic: cannot write the TLS key log: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rustls::KeyLog;

    #[test]
    fn nss_format() {
        assert_eq!(
            nss_line("CLIENT_TRAFFIC_SECRET_0", &[0x00, 0xab, 0x10], &[0xff, 0x01]),
            "CLIENT_TRAFFIC_SECRET_0 00ab10 ff01\n"
        );
    }

    #[test]
    fn appends_whole_lines() {
        let path = std::env::temp_dir().join(format!("stlq-keylog-test-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let log = KeyLogWriter::open(&path).unwrap();
        log.log("SERVER_HANDSHAKE_TRAFFIC_SECRET", &[1; 32], &[2; 32]);
        log.log("CLIENT_HANDSHAKE_TRAFFIC_SECRET", &[1; 32], &[3; 32]);
        drop(log);
        let text = std::fs::read_to_string(&path).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions();
        std::fs::remove_file(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[1],
            format!("CLIENT_HANDSHAKE_TRAFFIC_SECRET {} {}", "01".repeat(32), "03".repeat(32))
        );
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.mode() & 0o777, 0o600);
    }
}
