"""The kernel matrix's pure parts: kernel names, the host's mirror, the image's key, the
guest's job and the judgement of what a guest left (crafted job directories)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from cli import kernels
from hosts.bpf.loader import _load_error
from machine.errors import UserError
from machine.vm import image


def test_kernel_names_and_their_errors() -> None:
    assert [k.name for k in image.parse_kernels("6.12, 6.1")] == ["6.12", "6.1"]
    with pytest.raises(UserError, match=r"unknown kernel '5\.10': choose from 6\.1, 6\.12"):
        image.parse_kernels("6.1,5.10")
    with pytest.raises(UserError, match="no kernel given"):
        image.parse_kernels(" , ")


def test_the_mirror_is_the_hosts_own(tmp_path: Path) -> None:
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "other.sources").write_text(
        "Types: deb\nURIs: http://example.invalid/other\nSuites: nodistro\nComponents: main\n")
    with pytest.raises(UserError, match="no Debian bookworm mirror"):
        image.host_mirror(tmp_path)
    (tmp_path / "sources.list").write_text("# a comment\ndeb [arch=amd64] http://mirror.invalid/debian bookworm main\n")
    assert image.host_mirror(tmp_path) == "http://mirror.invalid/debian"
    (tmp_path / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://other.invalid/debian\nSuites: bookworm bookworm-updates\nComponents: main\n\n"
        "Types: deb\nURIs: http://other.invalid/debian-security\nSuites: bookworm-security\n")
    assert image.host_mirror(tmp_path) == "http://other.invalid/debian"


def test_the_image_key_follows_the_kernels_versions() -> None:
    a = image.cache_key({"linux-image-amd64@bookworm": "6.1.176-1"})
    assert a == image.cache_key({"linux-image-amd64@bookworm": "6.1.176-1"})
    assert a != image.cache_key({"linux-image-amd64@bookworm": "6.1.192-2"})


def test_the_guest_job_runs_every_check_with_its_exit_code_and_time() -> None:
    selected = kernels.checks(Path("/src/startlab"))
    script = kernels.guest_script(Path("/src/startlab"), selected)
    assert script.startswith("#!/bin/sh") and "cd /src/startlab" in script
    assert "STARTLAB_BPF_OUT=" in script                  # the checkout is read-only in the guest
    assert script.index("ovs-ctl start") < script.index("== doctor") < script.index("== smoke")
    for c in selected:
        assert f"> /job/{c.name}.out 2>&1; echo $? > /job/{c.name}.rc" in script
    assert "--delay-backend netem" in script


def test_under_tcg_the_smoke_campaign_runs_on_the_low_rate_profile() -> None:
    smoke = {a: next(c for c in kernels.checks(Path("/src/startlab"), a) if c.name == "smoke").command
             for a in ("kvm", "tcg")}
    assert "--profiles" not in smoke["kvm"]                      # the scenario's own dsl-fast
    assert smoke["tcg"].endswith(f"--profiles {kernels.VARIANTS_PROFILE}")


def _doctor(job: Path, netem: bool, ovs: bool) -> None:
    (job / "doctor.json").write_text(json.dumps({
        "qdiscs": {"netem": netem, "tbf": True}, "ovs_datapath": ovs, "delay_backend": "netem" if netem else
        "delayline", "switch": "ovs" if ovs else "linux-bridge", "problems": []}))


def _smoke_run(job: Path, name: str, backend: str, switch: str, failed: bool = False) -> None:
    d = job / "smoke" / name
    d.mkdir(parents=True)
    (d / "meta.json").write_text(json.dumps({"link": {"delay_backend": backend, "switch": switch}}))
    (d / "metrics.json").write_text("{}")
    if failed:
        (d / "error.txt").write_text("the run differs from its declaration")


def test_doctor_is_judged_on_netem_and_ovs(tmp_path: Path) -> None:
    assert kernels.judge_doctor(tmp_path, 0, "tcg").status == "failed"          # no report at all
    _doctor(tmp_path, True, True)
    assert kernels.judge_doctor(tmp_path, 0, "tcg").status == "ok"
    _doctor(tmp_path, True, False)
    cell = kernels.judge_doctor(tmp_path, 0, "tcg")
    assert cell.status == "failed" and "Open vSwitch" in cell.detail


def test_the_smoke_campaign_is_function_under_tcg_and_timing_only_under_kvm(tmp_path: Path) -> None:
    assert kernels.judge_smoke(tmp_path, 1, "kvm").status == "failed"           # no run at all
    _smoke_run(tmp_path, "a", "netem", "ovs")
    _smoke_run(tmp_path, "b", "netem", "ovs", failed=True)
    tcg = kernels.judge_smoke(tmp_path, 1, "tcg")
    assert tcg.status == "not judged (TCG)" and "1 failed; b: the run differs from its declaration" in tcg.detail
    assert kernels.judge_smoke(tmp_path, 1, "kvm").status == "failed"
    # A run whose captures could not be analysed fails, whatever the accelerator.
    (tmp_path / "smoke" / "a" / "metrics.json").unlink()
    (tmp_path / "smoke.out").write_text("analysis of a failed: cap-client.pcap: no connection\n")
    cell = kernels.judge_smoke(tmp_path, 0, "tcg")
    assert cell.status == "failed" and "1 of 2 runs could not be analysed: analysis of a failed" in cell.detail
    (tmp_path / "smoke" / "a" / "metrics.json").write_text("{}")
    # A run on the delay line where netem was declared fails under either accelerator.
    _smoke_run(tmp_path, "c", "delayline", "ovs")
    assert kernels.judge_smoke(tmp_path, 0, "tcg").status == "failed"


def test_clean_is_judged_on_what_is_left(tmp_path: Path) -> None:
    (tmp_path / "clean.out").write_text("nothing of startlab's to remove\n")
    assert kernels.judge_clean(tmp_path, 0, "tcg").status == "ok"
    (tmp_path / "clean.out").write_text("nothing of startlab's to remove\nstl3f-sw1\nLEFT OVS bridges\n")
    cell = kernels.judge_clean(tmp_path, 0, "tcg")
    assert cell.status == "failed" and cell.detail == "OVS bridges"


def test_no_failed_cell_is_a_pass_but_not_judged_is_no_failure() -> None:
    r = kernels.KernelResult("6.1", cells={"smoke": kernels.Cell("not judged (TCG)"), "clean": kernels.Cell("ok")})
    assert kernels.passed([r])
    r.cells["doctor"] = kernels.Cell("failed", "x")
    assert not kernels.passed([r])


def test_a_load_failure_is_told_by_the_verifiers_last_line() -> None:
    out = ("libbpf: prog 'stl_x_init': BPF program load failed: Invalid argument\n"
           "libbpf: prog 'stl_x_init': -- BEGIN PROG LOAD LOG --\n"
           "0: R1=ctx() R10=fp0\n; int x = 0;\n0: (b7) r0 = 0\n"
           "unknown func bpf_tcp_send_ack#116\n"
           "processed 3 insns (limit 1000000)\n"
           "-- END PROG LOAD LOG --\nlibbpf: failed to load object\nError: failed to open object file\n")
    assert _load_error(out) == "the verifier: unknown func bpf_tcp_send_ack#116"
    said = "libbpf: struct_ops init_kern stl_cc: member cong_control not found in kernel struct tcp_congestion_ops"
    assert _load_error(f"{said}\nlibbpf: failed to load object 'x'\nError: failed to load object file") == said
    assert _load_error("Error: bpffs is not mounted\n") == "Error: bpffs is not mounted"


def test_a_capture_that_missed_packets_is_not_exact() -> None:
    from hosts.capture import not_exact
    fine = {"file": "a.pcap", "captured": 10, "dropped_by_kernel": 0, "received_by_filter": 10, "unwritten": 0}
    behind = {**fine, "file": "b.pcap", "captured": 4, "unwritten": 6}
    full = {**fine, "file": "c.pcap", "dropped_by_kernel": 2}
    assert not_exact([fine, None, behind, full]) == [behind, full]


def test_progress_names_the_guests_check_and_its_campaigns_eta(tmp_path: Path) -> None:
    selected = kernels.checks(Path("/src/startlab"))
    assert kernels.guest_progress(tmp_path, selected) == "booting"
    (tmp_path / "job.log").write_text("== doctor\n== smoke\n")
    (tmp_path / "smoke.out").write_text("startlab: running\n[0/2]   0%  a  elapsed 5s  ETA ?\r"
                                        "[1/2]  50%  b  elapsed 1m  ETA 1m\n")
    assert kernels.guest_progress(tmp_path, selected) == "check 2/4 smoke: [1/2]  50%  b  elapsed 1m  ETA 1m"


def test_a_variant_the_guests_kernel_cannot_load_is_unsupported_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "variants.out").write_text(
        "startlab: /job/variants.yaml: variant qs-reno cannot run on this kernel (6.1.0-50-amd64): its server "
        "part (quickstart): quickstart.bpf.o does not load on kernel 6.1.0-50-amd64: the verifier: unknown func\n")
    cell = kernels.judge_variants(tmp_path, 2, "tcg")
    assert cell.status == "unsupported"
    assert cell.detail.startswith("variant qs-reno cannot run on this kernel (6.1.0-50-amd64): its server part")
    assert kernels.judge_variants(tmp_path / "none", 1, "tcg").status == "failed"


def test_each_variant_is_verified_or_failed_with_its_error(tmp_path: Path) -> None:
    for name, error in (("cubic-iw10_r01", None), ("fs-pdrop_r01.failed", "first flight 2 segments, declared 1")):
        d = tmp_path / "variants" / f"{kernels.VARIANTS_PROFILE}_70KB_{name}"
        d.mkdir(parents=True)
        (d / ("error.txt" if error else "metrics.json")).write_text(error or "{}")
    cell = kernels.judge_variants(tmp_path, 1, "tcg")
    assert cell.status == "failed"
    assert cell.detail == ("1 of 2 variants verified on the wire; fs-pdrop: first flight 2 segments, declared 1 "
                           "(under TCG)")
