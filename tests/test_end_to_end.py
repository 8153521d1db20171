"""Root integration: the smoke scenario end to end through run.py, as a user runs it."""
import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT
from timing import campaign_flags, timing_check

pytestmark = [pytest.mark.root, pytest.mark.usefixtures("clean_machine")]
ENV = {**os.environ, "STARTLAB_NO_REEXEC": "1"}


def run_py(*args, timeout=600):
    return subprocess.run([sys.executable, str(ROOT / "run.py"), *args], capture_output=True, text=True,
                          env=ENV, timeout=timeout)


def test_smoke_scenario_end_to_end_and_resume(tmp_path):
    out = tmp_path / "campaign"
    res = run_py("run", "scenarios/smoke.yaml", "--reps", "1", "--out", str(out), "--json", "--unfit-host")
    assert res.returncode == 0, res.stderr[-2000:]
    figures = json.loads(res.stdout)
    assert set(figures["variants"]) == {"cubic-iw10", "reno-iw3"}
    for name in ("summary.csv", "summary.json", "report.html", "report.md"):
        assert (out / name).stat().st_size > 0, name
    assert list((out / "plots").glob("*.png"))
    html = (out / "report.html").read_text()
    assert "cubic-iw10" in html and "reno-iw3" in html and "data:image/png;base64" in html

    rows = list(csv.DictReader(open(out / "summary.csv")))
    assert {r["variant"] for r in rows} == {"cubic-iw10", "reno-iw3"}
    size, rate, rtt = 200_000, 50e6, 0.050
    for row in rows:
        assert int(row["runs"]) == 1
        fct = float(row["fct_mean_s"])
        # at least one RTT (request/response) plus the object's serialisation at the bottleneck …
        assert fct >= rtt + size * 8 / rate, row
        # … and not absurdly long for a link that the long flow shares
        assert fct < 10, row
        assert 0 < float(row["fairness_median"]) < 10, row
        assert float(row["loss_mean_pkts"]) >= 0 and float(row["retx_mean_pkts"]) >= 0

    run_dirs = [p for p in out.iterdir() if (p / "meta.json").exists()]
    assert len(run_dirs) == 2
    meta = json.loads((run_dirs[0] / "meta.json").read_text())
    assert meta["status"] == "done" and meta["scenario_hash"] and meta["kernel"]
    # The run record holds only what results/schema.py declares (its one declaration).
    from results import schema
    undeclared = set(meta) - set(schema.META_FIELDS) - set(schema.EXTRA_META)
    assert not undeclared, f"meta.json keys not declared in results/schema.py: {undeclared}"
    assert meta["format"] == schema.FORMAT and "monitor" in meta["host_check"]
    assert meta["link"]["delay_backend"] in ("netem", "delayline")
    # The path's base RTT, pinged before the runs: the path check's host flags say whether
    # the host kept time meanwhile.
    _, path_flags = campaign_flags(out)
    rtt_ms = meta["path"]["rtt_mean_ms"]
    timing_check("the path's base RTT within 2 ms of 50 ms", path_flags, abs(rtt_ms - 50) < 2, f"mean {rtt_ms} ms")
    # every flow ran what its variant declared, read from the kernel and the wire
    flows = {f["name"]: f for f in meta["flows"]}
    assert flows["long"]["observed_cc"] == ["cubic"] and flows["long"]["variant"] == "cubic-iw10"
    metrics = json.loads((run_dirs[0] / "metrics.json").read_text())
    assert metrics["flow_checks"] and all(c["cc_ok"] and c.get("iw_ok", True) for c in metrics["flow_checks"])
    assert {"cap-client.pcap", "cap-bneck-in.pcap", "cap-bneck-out.pcap"} <= {p.name for p in run_dirs[0].iterdir()}

    # The same command again resumes: nothing to run, the same summary.
    again = run_py("run", "scenarios/smoke.yaml", "--reps", "1", "--out", str(out), "--json", "--unfit-host")
    assert again.returncode == 0, again.stderr[-2000:]
    stats = json.loads(again.stdout)["run_stats"]
    assert stats["skipped"] == 2 and stats["failed"] == []

    # Another campaign of one of its variants takes that variant's run (the same declaration
    # as the runner recorded it) instead of emulating it again.
    subset = tmp_path / "subset"
    taken = run_py("run", "scenarios/smoke.yaml", "--reps", "1", "--variants", "cubic-iw10", "--out", str(subset),
                   "--reuse", str(out), "--json", "--unfit-host")
    assert taken.returncode == 0, taken.stderr[-2000:]
    assert "reused 1 run(s)" in taken.stderr, taken.stderr[-2000:]
    assert json.loads(taken.stdout)["run_stats"]["skipped"] == 1
    (run_dir,) = [p for p in subset.iterdir() if (p / "meta.json").exists()]
    copied = json.loads((run_dir / "meta.json").read_text())
    assert copied["reused_from"]["campaign"] == str(out) and copied["variant"] == "cubic-iw10"
    assert (subset / "summary.csv").stat().st_size > 0


def test_interrupted_run_leaves_nothing_that_counts(tmp_path):
    out = tmp_path / "campaign"
    proc = subprocess.Popen([sys.executable, str(ROOT / "run.py"), "run", "scenarios/smoke.yaml", "--reps", "1",
                             "--out", str(out), "--unfit-host"], env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not list(out.glob("*.partial/cap-client.pcap")):
        time.sleep(0.1)
    assert list(out.glob("*.partial")), "no run started"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 130
    finished = [p for p in out.iterdir() if p.is_dir() and (p / "meta.json").exists()]
    assert finished == [] and not list(out.glob("*.partial"))
    from results.campaign import load_campaign
    _, records = load_campaign(out)
    assert records == []


def test_bad_input_gets_one_clear_line():
    res = run_py("fidelity", "dsl-fats")
    assert res.returncode == 2
    assert res.stderr.strip().splitlines() == [
        res.stderr.strip().splitlines()[0]] and "choices: dsl-slow" in res.stderr
    assert "Traceback" not in res.stderr
    res = run_py("run", "scenarios/smoke.yaml", "--variants", "nope", "--unfit-host")
    assert res.returncode == 2 and "--variants: unknown variant 'nope'" in res.stderr
    assert "Traceback" not in res.stderr


def test_not_root_is_one_clear_line():
    """A user without root gets one line saying so, not a traceback."""
    res = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", sys.executable,
                          str(ROOT / "run.py"), "fidelity", "dsl-fast"], capture_output=True, text=True, env=ENV,
                         timeout=60)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip() == "startlab: startlab needs root to build network namespaces (run it with sudo)"
