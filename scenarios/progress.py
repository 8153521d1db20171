"""Progress of a campaign on stderr: runs done, elapsed time and an ETA."""
from __future__ import annotations

import sys
import time


def fmt_duration(seconds: float) -> str:
    seconds = int(max(0, seconds))
    h, rest = divmod(seconds, 3600)
    m, s = divmod(rest, 60)
    return f"{h}h{m:02d}m" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


class Progress:
    def __init__(self, total: int, already_done: int, stream=sys.stderr):
        self.total, self.done, self.stream = total, already_done, stream
        self.started = time.monotonic()
        self.finished_here = 0
        self.tty = stream.isatty()

    def eta(self) -> float | None:
        if not self.finished_here:
            return None
        per_run = (time.monotonic() - self.started) / self.finished_here
        return per_run * (self.total - self.done)

    def show(self, label: str) -> None:
        eta = self.eta()
        pct = 100 * self.done / self.total if self.total else 100
        text = (f"[{self.done:>{len(str(self.total))}}/{self.total}] {pct:3.0f}%  {label}  "
                f"elapsed {fmt_duration(time.monotonic() - self.started)}"
                f"  ETA {fmt_duration(eta) if eta is not None else '?'}")
        if self.tty:
            self.stream.write("\r\033[K" + text)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def set_done(self, done_here: int) -> None:
        """Runs finished by workers elsewhere (lanes, a cluster's tasks): `done_here` since the start."""
        self.done += done_here - self.finished_here
        self.finished_here = done_here

    def advance(self) -> None:
        self.done += 1
        self.finished_here += 1

    def close(self) -> None:
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()
