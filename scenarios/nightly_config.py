"""The nightly configuration: which scenarios run every night, narrowed how, and where.

    format: 1
    root: campaigns/nightly          # relative paths are taken from the repository
    scenarios:
      - scenario: smoke              # a shipped scenario's name, or a scenario file
        name: smoke                  # optional: its directory under root (default: its name)
        profiles: [dsl-fast]         # optional overrides, as `run.py run` takes them …
        sizes: [200KB]
        reps: 5
        baseline: cubic-iw10
        variants:                    # … except that a variant may also be defined inline
          - cubic-iw10
          - name: reno-iw3
            server: {impl: linux-tcp, cc: reno, iw: 3}

Everything is validated before the first network is built, so a typo in the fourth
scenario fails at once with its file, line and field, not hours into the night.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from config import yamlfile
from config.yamlfile import Fields
from hosts.variants import Variant, parse_variant
from machine.errors import UserError
from scenarios.spec import SCENARIO_DIR, Scenario, apply_overrides, load_scenario

DEFAULT_ROOT = "campaigns/nightly"
OLD_DEFAULT_ROOT = "results/nightly"        # before format 3: refused with the move to make

REPO = SCENARIO_DIR.parent
DEFAULT_CONFIG = REPO / "config" / "nightly.yaml"
ENTRY_FIELDS = {"scenario", "name", "profiles", "sizes", "variants", "baseline", "reps"}


@dataclass
class NightlyEntry:
    """One scenario of the night, its overrides applied; `name` is its directory."""
    name: str
    scenario: Scenario


@dataclass
class NightlyConfig:
    path: Path
    root: Path
    entries: list[NightlyEntry]


def _from_repo(text: str) -> Path:
    path = Path(text)
    return path if path.is_absolute() else REPO / path


def _scenario_path(text: str) -> Path:
    """A bare name is a shipped scenario (spec.load_scenario finds it); a path is from the repo."""
    path = Path(text)
    return path if not path.suffix and len(path.parts) == 1 else _from_repo(text)


def _comma_list(fields: Fields, key: str) -> Optional[str]:
    """An override given as a YAML list (or a comma-separated string), as the command line's text."""
    if not fields.has(key):
        return None
    value = fields.data[key]
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(x, (str, int)) and not isinstance(x, bool) for x in items):
        raise fields.error(key, f"expected a list of names, got {value!r}")
    return ",".join(str(x) for x in items)


def _variants(path: Path, fields: Fields, sc: Scenario) -> None:
    """Replace the scenario's variants: names (the scenario's own or the catalogue's) or
    inline definitions, which may reuse a name to change what that variant runs."""
    chosen: dict[str, Variant] = {}
    definitions: dict[str, dict] = {}
    for i, item in enumerate(fields.list("variants")):
        if isinstance(item, str):
            try:
                chosen[item] = sc.variant(item)
            except UserError as exc:
                raise fields.error("variants", str(exc)) from None
            continue
        sub = Fields(path, item, f"{fields.where}.variants[{i}]", fields.line_of("variants"))
        name = sub.text("name")
        body = yamlfile.LineDict({k: v for k, v in item.items() if k != "name"})
        body.line, body.key_lines = item.line, item.key_lines
        chosen[name] = parse_variant(path, name, Fields(path, body, f"{sub.where}"))
        definitions[name] = chosen[name].describe()
    sc.variants = chosen
    # The overrides are part of the campaign's identity (its hash) and of campaign.json.
    sc.overrides["variants"] = list(chosen)
    if definitions:
        sc.overrides["variant_definitions"] = definitions


def _entry(path: Path, fields: Fields) -> NightlyEntry:
    fields.unknown(ENTRY_FIELDS)
    sc = load_scenario(_scenario_path(fields.text("scenario")))
    reps = int(fields.number("reps", low=1, high=10000, integer=True)) if fields.has("reps") else None
    for key in ("profiles", "sizes"):
        text = _comma_list(fields, key)
        if text is None:
            continue
        try:
            apply_overrides(sc, text if key == "profiles" else None, text if key == "sizes" else None, None, None)
        except UserError as exc:
            raise fields.error(key, str(exc).split(": ", 1)[-1]) from None
    if fields.has("variants"):
        _variants(path, fields, sc)
    if fields.has("baseline"):
        sc.baseline = fields.text("baseline", choices=list(sc.variants))
        sc.overrides["baseline"] = sc.baseline
    elif sc.baseline not in sc.variants:
        sc.baseline = next(iter(sc.variants))
    if reps is not None:
        apply_overrides(sc, None, None, None, reps)
    name = fields.text("name", sc.name)
    if not name or "/" in name or name.startswith("."):
        raise fields.error("name", f"'{name}' cannot name a directory")
    return NightlyEntry(name, sc)


def load_nightly_config(path: Path | str | None = None, root: Path | str | None = None) -> NightlyConfig:
    """Parse and validate the nightly configuration; `root` (the command line's --root,
    taken from the current directory) replaces the file's."""
    path = Path(path) if path else DEFAULT_CONFIG
    if not path.is_file():
        raise UserError(f"{path}: no such nightly configuration (the default is {DEFAULT_CONFIG})")
    top = Fields(path, yamlfile.load(path), "")
    top.unknown({"format", "root", "scenarios"})
    top.number("format", 1, low=1, high=1, integer=True)
    entries = [_entry(path, Fields(path, item, f"scenarios[{i}]", top.line_of("scenarios")))
               for i, item in enumerate(top.list("scenarios"))]
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        if entry.name in seen:
            raise top.error("scenarios", f"scenarios[{i}]: '{entry.name}' runs twice; give one a different `name`")
        seen.add(entry.name)
    chosen_root = Path(root).resolve() if root else _from_repo(top.text("root", DEFAULT_ROOT))
    moved = _from_repo(OLD_DEFAULT_ROOT)
    if not root and chosen_root == _from_repo(DEFAULT_ROOT) and not chosen_root.exists() and moved.is_dir():
        raise UserError(f"the nightly history moved from {OLD_DEFAULT_ROOT} to {DEFAULT_ROOT}: "
                        f"mv {moved} {chosen_root} (or pass --root {moved})")
    return NightlyConfig(path=path, root=chosen_root, entries=entries)
