"""Where startlab's native builds live (provisioning builds them; see playbooks/site.yml)."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RELEASE = REPO / "target" / "release"
BPF_OBJECTS = REPO / "target" / "bpf"
BUILD_HINT = ("build it with: sudo ./playbooks/bootstrap.sh (provisions everything; the demo's "
              "provisioning, --stage core, leaves out the QUIC endpoints)")


def built(name: str) -> Path | None:
    """target/release/<name> if it has been built, else None."""
    path = RELEASE / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def delayline() -> Path | None:
    return built("startlab-delayline")


def pcapcols() -> Path:
    """The pcap extractor's path (whether or not it exists yet)."""
    return RELEASE / "startlab-pcapcols"
