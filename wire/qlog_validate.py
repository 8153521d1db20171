"""Validate a JSON-SEQ qlog file against CDDL: the qlog main schema that the Careful Resume
qlog draft builds on (draft-ietf-quic-qlog-main-schema-12, through quic-events-12) with the
draft's CarefulResumePhaseUpdated event (wire/qlog_schema/ holds both, transcribed).

The validator is the `cddl` tool (the Rust crate cddl, its CLI; playbooks/site.yml installs
it). It validates one JSON text against the first rule of a CDDL file, so each record of the
sequence is validated on its own: the header against QlogFileSeq, every other record against
Event. Two checks the CDDL cannot make are made here: the header's fixed values for JSON-SEQ
(its file_schema and serialization_format are `text` in the CDDL, fixed in the prose), and
each Careful Resume event's name (the CDDL does not tie a name to its data).
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from machine.binaries import TOOLS

SCHEMA_DIR = Path(__file__).parent / "qlog_schema"
MAIN_SCHEMA = SCHEMA_DIR / "draft-ietf-quic-qlog-main-schema-12.cddl"
CR_SCHEMA = SCHEMA_DIR / "draft-ietf-tsvwg-careful-resume-qlog-02.cddl"
FILE_SCHEMA = "urn:ietf:params:qlog:file:sequential"
SERIALIZATION_FORMAT = "application/qlog+json-seq"
CR_EVENT_NAME = "quic:careful_resume_phase_updated"   # hosts/quic/src/cr_qlog.rs
RS = b"\x1e"


def schema_for_tool() -> str:
    """Both CDDL files as the tool can read them. The cddl tool (0.10.7) misreads two
    constructs of the main schema; each is rewritten into its equivalent, and each must apply
    exactly once (a changed schema file fails here rather than validating differently):
    - the unwrap `~LogFile` in QlogFileSeq (it then refuses LogFile's keys): LogFile's
      members are written in its place;
    - the bareword key `time` in Event, which it takes for the prelude type `time`: the
      same key quoted."""
    main = MAIN_SCHEMA.read_text()
    logfile = re.search(r"^LogFile = \{\n(.*?)\n\}", main, re.S | re.M)
    rewrites = (("    ~LogFile\n", (logfile.group(1) + "\n") if logfile else ""),
                ("    time: float64\n", '    "time": float64\n'))
    for old, new in rewrites:
        if main.count(old) != 1 or not new:
            raise RuntimeError(f"{MAIN_SCHEMA.name}: expected one {old.strip()!r} to rewrite for the cddl tool")
        main = main.replace(old, new)
    return main + "\n" + CR_SCHEMA.read_text()


def cddl_tool() -> Path | None:
    """The cddl binary: provisioning's, else one on PATH."""
    mine = TOOLS / "bin" / "cddl"
    if mine.is_file():
        return mine
    found = shutil.which("cddl")
    return Path(found) if found else None


def records(path: Path) -> list[dict]:
    """The records of a JSON-SEQ file (RFC 7464: each begins with RS)."""
    data = path.read_bytes()
    if not data.startswith(RS):
        raise ValueError(f"{path}: not JSON-SEQ (no record separator at the start)")
    out = []
    for i, chunk in enumerate(data.split(RS)[1:]):
        try:
            out.append(json.loads(chunk))
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: record {i}: not JSON: {exc}") from None
    return out


def validate(path: Path) -> list[str]:
    """Every way `path` departs from the schema (empty: it validates)."""
    tool = cddl_tool()
    if tool is None:
        raise RuntimeError(f"the cddl validator is not installed ({TOOLS}/bin/cddl); run ./startlab setup")
    recs = records(path)
    if not recs:
        return [f"{path}: no records"]
    problems = []
    header, events = recs[0], recs[1:]
    if header.get("file_schema") != FILE_SCHEMA:
        problems.append(f"header: file_schema is {header.get('file_schema')!r}, not {FILE_SCHEMA!r}")
    if header.get("serialization_format") != SERIALIZATION_FORMAT:
        problems.append(f"header: serialization_format is {header.get('serialization_format')!r}")
    schemas = schema_for_tool()
    with tempfile.TemporaryDirectory(prefix="stl-qlog-") as tmp:
        for root, named in (("QlogFileSeq", [(0, header)]), ("Event", list(enumerate(events, 1)))):
            if not named:
                continue
            spec = Path(tmp) / f"{root}.cddl"
            spec.write_text(f"StartlabRoot = {root}\n\n{schemas}")
            for i, rec in named:
                doc = Path(tmp) / f"record-{i}.json"
                doc.write_text(json.dumps(rec))
                run = subprocess.run([str(tool), "--ci", "validate", "--cddl", str(spec), "--json", str(doc)],
                                     capture_output=True, text=True)
                if run.returncode != 0:
                    said = (run.stderr + run.stdout).strip().splitlines()
                    problems.append(f"record {i} ({root}): " + " | ".join(said[-3:])[:600])
    for i, ev in enumerate(events, 1):
        data = ev.get("data", {})
        if isinstance(data, dict) and "state_data" in data and ev.get("name") != CR_EVENT_NAME:
            problems.append(f"record {i}: a Careful Resume event named {ev.get('name')!r}, not {CR_EVENT_NAME!r}")
    return problems
