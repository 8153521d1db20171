//! A connection's Careful Resume phase changes as a qlog file: JSON-SEQ (RFC 7464) in the
//! form of the qlog main schema that the Careful Resume qlog draft builds on (the version
//! and its event name are the constants below; docs/careful-resume.md says where they come
//! from and how a file is validated), one `CarefulResumePhaseUpdated` event per change.
//!
//! quinn writes its own qlog of the connection beside it (`--qlog-dir`): quinn 0.11's is an
//! older qlog version (0.3) that this schema does not describe, so the Careful Resume
//! events go in a file of their own rather than into quinn's.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::time::Instant;

use serde_json::{json, Value};

use crate::careful_resume::PhaseUpdate;

/// The main schema's file schema and serialization for a JSON-SEQ file.
pub const FILE_SCHEMA: &str = "urn:ietf:params:qlog:file:sequential";
pub const SERIALIZATION_FORMAT: &str = "application/qlog+json-seq";
/// The QUIC event schema whose `$ProtocolEventData` the draft extends: quic-events-12, the
/// revision current when the draft was published (a draft's implementation appends its
/// number to the URI, quic-events-12 §2.1).
pub const EVENT_SCHEMA: &str = "urn:ietf:params:qlog:events:quic-12";
/// The event's name: the draft gives none; this is the QUIC namespace and the event type
/// as quic-events names its own (`quic:congestion_state_updated`).
pub const EVENT_NAME: &str = "quic:careful_resume_phase_updated";
/// JSON-SEQ's record separator.
const RS: u8 = 0x1e;

/// Write `updates` to `path`: the header, then one event per update, times in ms from the
/// connection's `start` (its `start_unix` is the reference time).
pub fn write(path: &Path, updates: &[PhaseUpdate], start: Instant, start_unix: f64, title: &str) -> std::io::Result<()> {
    let mut out = BufWriter::new(File::create(path)?);
    for record in records(updates, start, start_unix, title) {
        out.write_all(&[RS])?;
        serde_json::to_writer(&mut out, &record)?;
        out.write_all(b"\n")?;
    }
    out.flush()
}

/// The file's records: its header, then the events.
pub fn records(updates: &[PhaseUpdate], start: Instant, start_unix: f64, title: &str) -> Vec<Value> {
    let header = json!({
        "file_schema": FILE_SCHEMA,
        "serialization_format": SERIALIZATION_FORMAT,
        "title": title,
        "trace": {
            "vantage_point": {"type": "server"},
            "event_schemas": [EVENT_SCHEMA],
            "common_fields": {
                "time_format": "relative_to_epoch",
                "reference_time": {"clock_type": "system", "epoch": rfc3339(start_unix)},
            },
        },
    });
    let events = updates.iter().map(|u| {
        json!({
            "time": u.at.saturating_duration_since(start).as_secs_f64() * 1e3,
            "name": EVENT_NAME,
            "data": u.qlog_data(),
        })
    });
    std::iter::once(header).chain(events).collect()
}

/// Unix seconds as an RFC 3339 UTC date-time with microseconds.
fn rfc3339(unix: f64) -> String {
    let micros = (unix * 1e6).round() as i64;
    let (secs, frac) = (micros.div_euclid(1_000_000), micros.rem_euclid(1_000_000));
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{frac:06}Z", rem / 3600, rem / 60 % 60, rem % 60)
}

/// Days since 1970-01-01 to the proleptic Gregorian (year, month, day).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_are_rfc3339_utc() {
        assert_eq!(rfc3339(0.0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(rfc3339(951_782_400.5), "2000-02-29T00:00:00.500000Z");
        assert_eq!(rfc3339(1_795_564_800.25), "2026-11-25T00:00:00.250000Z");
    }
}
