"""Results leaving a guest one piece at a time, whole: the export stream.

A guest on the virtual clock has one way out, a virtio serial port that the host appends to
a file (machine/vm/icount.py). Each finished run goes out as one record: a header line
`startlab-export <relative path> <bytes>` and an uncompressed tar of the directory. The host
unpacks every complete record into `<path>.partial/` and renames it into place, so a guest
killed mid-record loses that record only, never a finished run, and nothing half-written
counts.
"""
from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
from pathlib import Path

from results.schema import META_FILE

MAGIC = b"startlab-export"
# The record of a campaign's own files (campaign.json, networks/, …), merged into its top.
CAMPAIGN_FILES = ".campaign-files"
# The fields the host adds to a run's meta.json as it unpacks it (`meta_extra`): where the run
# ran (a cluster's job, task and node), which the guest does not see.
HOST_META = ("slurm",)


def _tar(path: Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in sorted(path.rglob("*")):           # sorted: the same run, the same bytes
            tar.add(p, arcname=str(p.relative_to(path)), recursive=False)
    return buf.getvalue()


def export(path: Path, name: str, port: str) -> int:
    """Append `path` (a directory) to the stream at `port` as record `name`; returns its size."""
    if " " in name or "\n" in name:
        raise ValueError(f"export name {name!r} has a space or a newline")
    data = _tar(path)
    record = memoryview(MAGIC + f" {name} {len(data)}\n".encode() + data)
    # A virtio port takes at most 32 KiB a write: write until all of it is out.
    fd = os.open(port, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        while record:
            record = record[os.write(fd, record):]
    finally:
        os.close(fd)
    return len(data)


def records(stream: Path, offset: int = 0) -> tuple[list[tuple[str, bytes]], int]:
    """The complete records in `stream` from `offset`, and the offset after the last of them
    (an incomplete last record is left for a later call)."""
    data = stream.read_bytes()[offset:] if stream.is_file() else b""
    out, pos = [], 0
    while True:
        end = data.find(b"\n", pos)
        if end < 0:
            break
        head = data[pos:end].split(b" ")
        if len(head) != 3 or head[0] != MAGIC:
            raise ValueError(f"{stream}: not an export record at byte {offset + pos}: {data[pos:pos + 80]!r}")
        size = int(head[2])
        if end + 1 + size > len(data):
            break
        out.append((head[1].decode(), data[end + 1:end + 1 + size]))
        pos = end + 1 + size
    return out, offset + pos


def unpack(name: str, data: bytes, dest: Path, meta_extra: dict | None = None) -> Path:
    """Write record `name` under `dest`: unpacked beside, then renamed into place. A run's
    meta.json gets `meta_extra`'s fields on the way (what only the host knows of it)."""
    final = dest / name
    if not final.resolve().is_relative_to(dest.resolve()):
        raise ValueError(f"export record {name!r} points outside {dest}")
    tmp = final.with_name(final.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        for member in tar.getmembers():
            if member.issym() or member.islnk() or Path(member.name).is_absolute() or ".." in Path(member.name).parts:
                raise ValueError(f"export record {name!r}: refused member {member.name!r}")
        tar.extractall(tmp)
    meta = tmp / META_FILE
    assert set(meta_extra or ()) <= set(HOST_META), meta_extra
    if meta_extra and meta.is_file():
        meta.write_text(json.dumps({**json.loads(meta.read_text()), **meta_extra}, indent=1, default=str) + "\n")
    if final.exists():
        shutil.rmtree(final)
    os.rename(tmp, final)
    return final


def merge_campaign_files(dest: Path) -> None:
    """Move the campaign-files record's contents to the campaign's top (after unpack)."""
    files = dest / CAMPAIGN_FILES
    if not files.is_dir():
        return
    for p in files.iterdir():
        target = dest / p.name
        if target.is_dir():
            shutil.rmtree(target)
        os.replace(p, target)
    files.rmdir()


if __name__ == "__main__":      # `python -m results.export DIR NAME`: a guest's job sends DIR
    import sys
    if len(sys.argv) != 3 or not os.environ.get("STARTLAB_EXPORT"):
        sys.exit("usage: STARTLAB_EXPORT=PORT python -m results.export DIR NAME")
    export(Path(sys.argv[1]), sys.argv[2], os.environ["STARTLAB_EXPORT"])
