"""Bad scenario files, generated: random bytes, shipped scenarios cut short, values of the
wrong type. Every one must give one line on stderr naming the file (and, where the parser
knows them, the line and field) with exit code 2 — never a traceback."""
from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
import yaml

from cli import main as cli

SCENARIOS = sorted((Path(__file__).resolve().parent.parent / "scenarios").glob("*.yaml"))
SEED = 20261124
CASES = 150


class Parsed(Exception):
    """The file was a valid scenario: the command got past parsing (nothing is run)."""


@pytest.fixture
def stop_after_parsing(monkeypatch):
    import scenarios.hostcheck

    def parsed(*args, **kwargs):
        raise Parsed()
    monkeypatch.setattr(scenarios.hostcheck, "check_host", parsed)
    monkeypatch.setattr("machine.capabilities.require_root", lambda: None)


def run_on(path: Path, capsys) -> tuple[int | None, str]:
    try:
        code = cli.main(["run", str(path)])
    except Parsed:
        return None, ""
    return code, capsys.readouterr().err


def assert_one_line(path: Path, code: int | None, err: str) -> None:
    if code is None:
        return                                          # a valid scenario: nothing to report
    assert code == 2, (code, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(path) in lines[0], err
    located = re.search(re.escape(str(path)) + r":(\d+): ([\w.\[\]-]+|\(top\)|YAML[ \w]*|not UTF-8)", lines[0])
    # A valid file whose variant this kernel cannot run is refused with that reason: the file
    # is named, no line of it is at fault.
    refused_here = "cannot run on this kernel" in lines[0]
    assert located or refused_here or "cannot read" in lines[0] or "no such" in lines[0] or ": YAML" in lines[0], err


def random_bytes(rng: random.Random) -> bytes:
    return bytes(rng.randrange(256) for _ in range(rng.randrange(0, 400)))


def truncated(rng: random.Random) -> bytes:
    data = rng.choice(SCENARIOS).read_bytes()
    return data[:rng.randrange(0, len(data))]


def wrong_type(rng: random.Random) -> bytes:
    """A shipped scenario with one value (at any depth) swapped for one of another type."""
    doc = yaml.safe_load(rng.choice(SCENARIOS).read_text())
    paths = []

    def walk(node, trail):
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
        for k, v in items:
            paths.append(trail + [k])
            walk(v, trail + [k])
    walk(doc, [])
    trail = rng.choice(paths)
    parent = doc
    for k in trail[:-1]:
        parent = parent[k]
    parent[trail[-1]] = rng.choice([None, True, -1, 1e308, "x" * 3, [1, "a"], {"k": [None]}, "", 0, "99MB"])
    return yaml.safe_dump(doc).encode()


@pytest.mark.parametrize("kind", [random_bytes, truncated, wrong_type], ids=lambda f: f.__name__)
def test_no_bad_scenario_gives_a_traceback(kind, tmp_path, capsys, stop_after_parsing):
    rng = random.Random(f"{SEED}-{kind.__name__}")
    path = tmp_path / "s.yaml"
    for _ in range(CASES):
        path.write_bytes(kind(rng))
        code, err = run_on(path, capsys)
        assert_one_line(path, code, err)


def test_the_format_is_checked_first_and_non_utf8_names_its_line(tmp_path, capsys, stop_after_parsing):
    path = tmp_path / "s.yaml"
    path.write_text("format: 99\nname: x\n")
    code, err = run_on(path, capsys)
    assert code == 2 and err.strip() == f"startlab: {path}:1: format: format 99 is not supported (this startlab reads 1)"
    path.write_bytes(b"format: 1\nname: caf\xe9\n")
    code, err = run_on(path, capsys)
    assert code == 2 and f"{path}:2: not UTF-8 text" in err, err
