"""Third-party QUIC stacks behind one endpoint contract (contract.py): one adapter each,
so comparing N stacks is a loop over STACKS."""
from __future__ import annotations

from hosts.stacks.aioquic import Aioquic
from hosts.stacks.contract import Stack
from hosts.stacks.ngtcp2 import Ngtcp2
from hosts.stacks.quicgo import QuicGo
from hosts.stacks.rust import CfQuiche, S2nQuic

STACKS: dict[str, Stack] = {s.name: s for s in (Aioquic(), CfQuiche(), Ngtcp2(), QuicGo(), S2nQuic())}


def stack(name: str) -> Stack:
    try:
        return STACKS[name]
    except KeyError:
        raise ValueError(f"unknown QUIC stack '{name}' (known: {', '.join(sorted(STACKS))})") from None
