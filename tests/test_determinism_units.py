"""analysis.determinism on hand-made campaigns: the comparison that backs the virtual
clock's claim of the same figures, file for file."""
from __future__ import annotations

import json
from pathlib import Path

from analysis import determinism
from results import schema


def campaign(root: Path, fct_s: float, meta: dict, pcap: bytes = b"pcap") -> Path:
    run = root / "dsl-slow_200KB_cubic-iw10_r01"
    run.mkdir(parents=True)
    (run / schema.METRICS_FILE).write_text(json.dumps({"short": {"fct_s": fct_s, "lost_pkts": 3, "retx_pkts": 3}}))
    (run / schema.META_FILE).write_text(json.dumps(meta, indent=2))
    (run / "client.pcap").write_bytes(pcap)
    return root


def test_the_same_run_is_the_same_file_for_file(tmp_path: Path) -> None:
    dirs = [campaign(tmp_path / n, 0.5348, {"run_id": "r", "seed": 7}) for n in ("a", "b")]
    [r] = determinism.compare(dirs)
    assert not r.differing_figures and not r.differing_files and not r.missing_files


def test_where_a_cluster_ran_it_is_not_a_difference_but_anything_else_in_its_meta_is(tmp_path: Path) -> None:
    """The host adds `slurm` (the job, task, node) as it unpacks a guest's run, and rewrites
    the file; the run is the same. Any other field that differs is reported."""
    a = campaign(tmp_path / "a", 0.5348, {"run_id": "r", "seed": 7})
    b = campaign(tmp_path / "b", 0.5348, {"seed": 7, "run_id": "r", "slurm": {"job": "12", "node": "n1"}})
    c = campaign(tmp_path / "c", 0.5348, {"run_id": "r", "seed": 8})
    [same] = determinism.compare([a, b])
    assert not same.differing_files
    [other] = determinism.compare([a, c])
    assert other.differing_files == [schema.META_FILE] and not other.differing_figures


def test_a_figure_or_a_capture_that_differs_is_named(tmp_path: Path) -> None:
    a = campaign(tmp_path / "a", 0.5348, {"run_id": "r"})
    b = campaign(tmp_path / "b", 0.5349, {"run_id": "r"}, pcap=b"other")
    [r] = determinism.compare([a, b])
    assert r.differing_figures == ["short.fct_s"] and r.differing_files == ["client.pcap", schema.METRICS_FILE]
    assert "1 of 1" not in determinism.text([r], [a, b]) and "DIFFER: short.fct_s" in determinism.text([r], [a, b])


def test_runs_from_different_bundles_are_named_as_not_the_same_run(tmp_path: Path) -> None:
    """A file of the checkout changed between the campaigns: every later guest instruction
    moves, so figures that differ then say nothing of the clock."""
    a = campaign(tmp_path / "a", 0.5348, {"run_id": "r", "run_clock": {"clock": "virtual", "bundle": "0a1b"}})
    b = campaign(tmp_path / "b", 0.5351, {"run_id": "r", "run_clock": {"clock": "virtual", "bundle": "9f8e"}})
    [r] = determinism.compare([a, b])
    assert r.bundles == ["0a1b", "9f8e"]
    assert "from different bundles (0a1b / 9f8e), not the same run" in determinism.text([r], [a, b])
    [same] = determinism.compare([a, a])
    assert "different bundles" not in determinism.text([same], [a, a])


def test_the_guests_interrupt_sources_that_differ_are_named(tmp_path: Path) -> None:
    """On the virtual clock an interrupt that reached the guest at a host-decided time shows as
    a source whose count differs between two boots of the same run."""
    a = campaign(tmp_path / "a", 0.5348, {"run_id": "r", "guest_interrupts": {"LOC Local timer interrupts": 900,
                                                                           "25 virtio1-output.0": 4}})
    b = campaign(tmp_path / "b", 0.5348, {"run_id": "r", "guest_interrupts": {"LOC Local timer interrupts": 900,
                                                                           "25 virtio1-output.0": 5,
                                                                           "RES Rescheduling interrupts": 1}})
    [r] = determinism.compare([a, b])
    assert r.interrupts == {"25 virtio1-output.0": [4, 5], "RES Rescheduling interrupts": [0, 1]}
    assert "the guest's interrupts differ: 25 virtio1-output.0 4 / 5; RES Rescheduling interrupts 0 / 1" in \
        determinism.text([r], [a, b])
    [same] = determinism.compare([a, a])
    assert same.interrupts == {} and "interrupts differ" not in determinism.text([same], [a, a])
