"""Where startlab's native builds live (provisioning builds them; see playbooks/site.yml)."""
from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RELEASE = REPO / "target" / "release"
# hosts/bpf/build.sh writes there too; STARTLAB_BPF_OUT moves both (a VM guest, whose
# checkout is read-only, builds against its own kernel elsewhere).
BPF_OBJECTS = Path(os.environ.get("STARTLAB_BPF_OUT") or REPO / "target" / "bpf")
# Tools provisioning installs machine-wide (every clone on the machine shares them): the cddl
# validator. A virtual clock's guest gets them in its bundle.
TOOLS = Path(os.environ.get("STARTLAB_TOOLS", "/var/lib/startlab/tools"))
BUILD_HINT = "build it with: sudo ./playbooks/bootstrap.sh (provisioning; cargo build --release --locked)"
# The QUIC endpoints are in provisioning's full stage, which the demo's (core) leaves out.
QUIC_BUILD_HINT = "build it with: sudo ./playbooks/bootstrap.sh --stage full (the demo provisions only the core stage)"


def built(name: str) -> Path | None:
    """target/release/<name> if it has been built, else None."""
    path = RELEASE / name
    return path if path.is_file() and os.access(path, os.X_OK) else None


def delayline() -> Path | None:
    return built("startlab-delayline")


def pcapcols() -> Path:
    """The pcap extractor's path (whether or not it exists yet)."""
    return RELEASE / "startlab-pcapcols"
