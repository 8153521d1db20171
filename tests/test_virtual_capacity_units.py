"""The virtual clock's capacity table (machine/vm/capacity.py): what `doctor --clock virtual`
reads instead of booting a guest."""
from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from machine.vm import capacity

RESULT = {"ok": True, "goodput_fraction": 1.0004, "guest_cpu": {"busy_fraction": 0.35},
          "clock": {"guest_s": 120.0, "wall_s": 360.0}, "explanation": "ignored when ok"}


def test_a_fidelity_result_becomes_an_entry_and_is_kept_per_kernel(tmp_path):
    capacity.store(tmp_path, "6.1", "dsl-fast", capacity.record(RESULT, "abc123"))
    capacity.store(tmp_path, "6.1", "gprs", capacity.record({**RESULT, "ok": False, "explanation": "rate 3 % low"}, "abc123"))
    table = capacity.load(tmp_path, "6.1")
    assert set(table) == {"dsl-fast", "gprs"} and capacity.load(tmp_path, "6.12") == {}
    assert table["dsl-fast"]["busy_fraction"] == 0.35 and table["dsl-fast"]["explanation"] is None
    assert table["gprs"]["explanation"] == "rate 3 % low"
    assert not list(tmp_path.glob("*.tmp"))                    # written whole, renamed into place
    # a profile measured again replaces its entry, the others stay
    capacity.store(tmp_path, "6.1", "dsl-fast", capacity.record({**RESULT, "goodput_fraction": 0.9}, "def456"))
    again = json.loads(capacity.path(tmp_path, "6.1").read_text())
    assert again["dsl-fast"]["git_rev"] == "def456" and again["gprs"]["git_rev"] == "abc123"


def test_doctor_lines_say_carried_or_why_not_and_the_cost():
    ok = capacity.line("dsl-fast", capacity.record(RESULT, "abc123"))
    assert "carried" in ok and "busy 35%" in ok and "3.0 s wall per guest s" in ok and "1.000 of ideal" in ok
    bad = capacity.line("lab-1g", capacity.record({**RESULT, "ok": False, "explanation": "goodput 0.41"}, "x"))
    assert "NOT carried: goodput 0.41" in bad
    assert capacity.line("lte", None).endswith("not measured")


def _store_many(image_dir: str, prefix: str) -> None:
    for i in range(60):
        capacity.store(Path(image_dir), "6.12", f"{prefix}{i}", {"ok": True})


def test_two_measurements_storing_at_once_keep_every_entry(tmp_path):
    procs = [multiprocessing.Process(target=_store_many, args=(str(tmp_path), p)) for p in ("a", "b")]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
    assert [p.exitcode for p in procs] == [0, 0]
    assert len(capacity.load(tmp_path, "6.12")) == 120


def test_every_fidelity_check_in_the_guest_gets_the_guest_cpu_and_a_saturated_one_fails(monkeypatch):
    """Trace links' checks too (they once carried no figure, so the table could not say
    what they cost the guest's CPU)."""
    from cli import main
    from machine import clock
    monkeypatch.setattr(clock, "is_virtual", lambda: True)
    monkeypatch.setattr(clock, "cpu_times", lambda: (50, 100))
    calm = main._guest_cpu_over({"ok": True}, (40, 0))
    assert calm["ok"] and calm["guest_cpu"]["busy_fraction"] == 0.1
    busy = main._guest_cpu_over({"ok": True, "explanation": None}, (0, 50))
    assert not busy["ok"] and "guest's CPU was busy 100%" in busy["explanation"]
    monkeypatch.setattr(clock, "is_virtual", lambda: False)
    assert "guest_cpu" not in main._guest_cpu_over({"ok": True}, (0, 0))
