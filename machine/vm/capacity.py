"""What the virtual clock carries: per profile, the fidelity check's verdict in a guest, kept
beside the image so that `doctor --clock virtual` reads it instead of booting a guest.

A guest's CPU is finite (one instruction per ns), so whether a profile's path fits in it is a
measurement, not a property of the host: the same image, kernel and checkout give the same
verdict on any machine. Each entry records the checkout's revision it was measured at; the
wall-time cost is this machine's.
"""
from __future__ import annotations

import fcntl
import json
import os
import time
from pathlib import Path

# A fidelity check's guest seconds and the wall time they took, as measured per profile.
FIELDS = ("ok", "goodput_fraction", "busy_fraction", "guest_s", "wall_s", "explanation", "git_rev", "measured_unix")


def path(image_dir: Path, kernel_name: str) -> Path:
    return image_dir / f"capacity-{kernel_name}.json"


def load(image_dir: Path, kernel_name: str) -> dict[str, dict]:
    """Profile name -> its last measurement ({} when none)."""
    p = path(image_dir, kernel_name)
    return json.loads(p.read_text()) if p.is_file() else {}


def record(result: dict, git_rev: str) -> dict:
    """One profile's entry from `fidelity PROFILE --clock virtual --json`'s result."""
    clock = result.get("clock") or {}
    return {"ok": bool(result.get("ok")), "goodput_fraction": result.get("goodput_fraction"),
            "busy_fraction": (result.get("guest_cpu") or {}).get("busy_fraction"),
            "guest_s": clock.get("guest_s"), "wall_s": clock.get("wall_s"),
            "explanation": None if result.get("ok") else str(result.get("explanation") or "")[:300],
            "git_rev": git_rev, "measured_unix": round(time.time())}


def store(image_dir: Path, kernel_name: str, profile: str, entry: dict) -> None:
    """Add or replace one profile's entry, atomically (a killed measurement loses only itself),
    under a lock: two measurements may run at once (a guest's figures do not depend on what
    else the host runs), and neither may drop the other's entry."""
    p = path(image_dir, kernel_name)
    with open(p.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        table = load(image_dir, kernel_name)
        table[profile] = {k: entry.get(k) for k in FIELDS}
        tmp = p.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(table, indent=1, sort_keys=True))
        os.replace(tmp, p)


def line(profile: str, entry: dict | None) -> str:
    """doctor's line for one profile."""
    if not entry:
        return f"  {profile:<28} not measured"
    cost = (f"{entry['wall_s'] / entry['guest_s']:.1f} s wall per guest s"
            if entry.get("wall_s") and entry.get("guest_s") else "cost not recorded")
    busy = entry.get("busy_fraction")
    good = entry.get("goodput_fraction")
    figures = (f"guest CPU busy {busy:.0%}" if busy is not None else "guest CPU not measured") + (
        f", TCP goodput {good:.3f} of ideal" if good is not None else "")
    verdict = "carried" if entry.get("ok") else f"NOT carried: {entry.get('explanation') or 'fidelity not ok'}"
    return f"  {profile:<28} {verdict} ({figures}; {cost}; at {str(entry.get('git_rev'))[:10]})"
