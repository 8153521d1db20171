"""Scenario files: parse, validate (file, line, field on every error), expand into runs.

A scenario is declarative: which profiles, object sizes, workload, variants,
repetitions and seed. One run = variant × profile × size × repetition.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from pathlib import Path

from config import yamlfile
from config.yamlfile import Fields, FieldError
from hosts.variants import VARIANTS, Variant, parse_variant
from hosts.workloads.competing import CompetingParams
from machine.errors import UserError
from topologies.profiles import LinkProfile, load_profiles

SCENARIO_DIR = Path(__file__).resolve().parent
WORKLOADS = ("competing",)
MAX_SIZE = 10 ** 10
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(B|KB|MB|GB|KiB|MiB|GiB)?\s*$")
_UNITS = {None: 1, "B": 1, "KB": 10 ** 3, "MB": 10 ** 6, "GB": 10 ** 9,
          "KiB": 2 ** 10, "MiB": 2 ** 20, "GiB": 2 ** 30}


def parse_size(text) -> int:
    """'70KB' → 70000, '2MB' → 2000000 (SI units as the papers write them; KiB/MiB binary)."""
    if isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match:
            raise ValueError(f"'{text}' is not a size (e.g. 70KB, 2MB, 1.5MiB, 4096)")
        value = int(round(float(match.group(1)) * _UNITS[match.group(2)]))
    if not 1 <= value <= MAX_SIZE:
        raise ValueError(f"size {value} bytes is outside 1 B … 10 GB")
    return value


def format_size(n: int) -> str:
    for unit, scale in (("GB", 10 ** 9), ("MB", 10 ** 6), ("KB", 10 ** 3)):
        if n >= scale and n % (scale // 1000 or 1) == 0:
            value = n / scale
            return f"{value:g}{unit}"
    return f"{n}B"


@dataclass
class Run:
    profile: str
    size_bytes: int
    variant: str
    rep: int
    sweep: tuple[str, float] | None = None     # (workload parameter, its value in this run)

    @property
    def run_id(self) -> str:
        swept = f"_{self.sweep[0]}-{self.sweep[1]:g}" if self.sweep else ""
        return f"{self.profile}_{format_size(self.size_bytes)}{swept}_{self.variant}_r{self.rep:02d}"


# The workload's numeric parameters and their accepted ranges: checked in the workload
# section and for every value of a sweep, so both report the same limits.
WORKLOAD_NUMBERS: dict[str, tuple[float, float, bool]] = {     # name → (low, high, integer)
    "fill_fraction": (0.5, 1.0, False),
    "fill_window_rtts": (1, 1000, False),
    "fill_min_s": (0, 600, False),
    "fill_timeout_s": (1, 3600, False),
    "tail_rtts": (0, 1000, False),
    "long_load": (0.0, 1.0, False),
    "long_streams": (1, 64, True),
    "settle_s": (0, 600, False),
}


@dataclass
class Sweep:
    """One workload parameter varied over values: a dimension of the run matrix."""
    param: str
    values: list[float]


@dataclass
class Scenario:
    name: str
    path: Path
    description: str
    paper: str
    profiles: list[LinkProfile]
    sizes: list[int]
    workload: str
    workload_params: CompetingParams
    variants: dict[str, Variant]
    baseline: str
    reps: int
    seed: int
    text_hash: str
    overrides: dict = field(default_factory=dict)
    sweep: Sweep | None = None

    @property
    def hash(self) -> str:
        """Identity of what runs: the file's text plus the command-line overrides."""
        blob = self.text_hash + json.dumps(self.overrides, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def runs(self) -> list[Run]:
        """All runs in a seeded random order, grouped by profile so a network is built once
        per profile (the order within a profile stays random)."""
        points = [(self.sweep.param, x) for x in self.sweep.values] if self.sweep else [None]
        runs = [Run(p.name, s, v, r, w) for p in self.profiles for s in self.sizes for w in points
                for v in self.variants for r in range(1, self.reps + 1)]
        random.Random(self.seed).shuffle(runs)
        order = {p.name: i for i, p in enumerate(self.profiles)}
        return sorted(runs, key=lambda run: order[run.profile])

    def params_for(self, run: Run) -> CompetingParams:
        """The workload parameters of `run`: the scenario's, with the swept one set."""
        if run.sweep is None:
            return self.workload_params
        return dataclasses.replace(self.workload_params, **{run.sweep[0]: run.sweep[1]})


def _workload(path: Path, fields: Fields) -> tuple[str, CompetingParams]:
    kind = fields.text("kind", choices=list(WORKLOADS))
    defaults = CompetingParams()
    fields.unknown({"kind", *defaults.as_dict()})
    numbers = {name: fields.number(name, getattr(defaults, name), low=low, high=high, integer=integer)
               for name, (low, high, integer) in WORKLOAD_NUMBERS.items()}
    params = CompetingParams(**numbers, long_flow=fields.flag("long_flow", defaults.long_flow))
    return kind, params


def _sweep(fields: Fields) -> Sweep:
    """`sweep: {param: NAME, values: [...]}`: NAME a numeric workload parameter, every value
    within that parameter's range, no value twice."""
    fields.unknown({"param", "values"})
    param = fields.text("param", choices=list(WORKLOAD_NUMBERS))
    low, high, integer = WORKLOAD_NUMBERS[param]
    values = fields.list("values")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fields.error("values", f"expected numbers, got {value!r}")
        if not low <= value <= high:
            raise fields.error("values", f"{value} is outside {param}'s range {low:g} … {high:g}")
        if integer and value != int(value):
            raise fields.error("values", f"{param} takes whole numbers, got {value}")
    if len(set(values)) != len(values):
        raise fields.error("values", "a value appears twice")
    return Sweep(param, [int(v) if integer else float(v) for v in values])


def load_scenario(path: Path | str) -> Scenario:
    path = Path(path)
    if not path.exists() and not path.suffix:
        candidate = SCENARIO_DIR / f"{path}.yaml"
        if candidate.exists():
            path = candidate
    if not path.exists():
        names = ", ".join(s["name"] for s in list_scenarios())
        raise UserError(f"{path}: no such scenario file (shipped scenarios: {names})")
    data = yamlfile.load(path)
    top = Fields(path, data, "")
    top.unknown({"format", "name", "description", "paper", "profiles", "sizes", "workload",
                 "variants", "baseline", "repetitions", "seed", "sweep"})
    known_profiles = load_profiles()
    profiles = []
    for name in top.list("profiles"):
        if name not in known_profiles:
            raise top.error("profiles", f"unknown profile '{name}' (choices: {', '.join(known_profiles)})")
        profiles.append(known_profiles[name])
    sizes = []
    for item in top.list("sizes"):
        try:
            sizes.append(parse_size(item))
        except ValueError as exc:
            raise top.error("sizes", str(exc)) from None
    kind, params = _workload(path, top.sub("workload"))
    variants: dict[str, Variant] = {}
    for i, item in enumerate(top.list("variants")):
        if isinstance(item, str):
            if item not in VARIANTS:
                raise top.error("variants", f"unknown variant '{item}' (catalogue: {', '.join(VARIANTS)}; "
                                            "or define it here with name/summary/server/client/router)")
            variants[item] = VARIANTS[item]
        else:
            sub = Fields(path, item, f"variants[{i}]", top.line_of("variants"))
            name = sub.text("name")
            body = {k: v for k, v in item.items() if k != "name"}
            body = yamlfile.LineDict(body)
            body.line, body.key_lines = item.line, item.key_lines
            variants[name] = parse_variant(path, name, Fields(path, body, f"variants.{name}"))
    baseline = top.text("baseline", next(iter(variants)))
    if baseline not in variants:
        raise top.error("baseline", f"'{baseline}' is not one of the scenario's variants ({', '.join(variants)})")
    return Scenario(
        name=top.text("name", path.stem), path=path, description=top.text("description", ""),
        paper=top.text("paper", ""), profiles=profiles, sizes=sizes, workload=kind,
        workload_params=params, variants=variants, baseline=baseline,
        reps=int(top.number("repetitions", 1, low=1, high=10000, integer=True)),
        seed=int(top.number("seed", 1, low=0, high=2 ** 32, integer=True)),
        text_hash=hashlib.sha256(path.read_bytes()).hexdigest(),
        sweep=_sweep(top.sub("sweep")) if top.has("sweep") else None)


def apply_overrides(sc: Scenario, profiles: str | None, sizes: str | None, variants: str | None,
                    reps: int | None) -> Scenario:
    """Narrow or change the run matrix from the command line; bad names list the choices."""
    if profiles:
        known = load_profiles()
        chosen = []
        for name in _split(profiles):
            if name not in known:
                raise UserError(f"--profiles: unknown profile '{name}' (choices: {', '.join(known)})")
            chosen.append(known[name])
        sc.profiles = chosen
        sc.overrides["profiles"] = [p.name for p in chosen]
    if sizes:
        try:
            sc.sizes = [parse_size(s) for s in _split(sizes)]
        except ValueError as exc:
            raise UserError(f"--sizes: {exc}") from None
        sc.overrides["sizes"] = sc.sizes
    if variants:
        chosen_v = {}
        for name in _split(variants):
            if name in sc.variants:
                chosen_v[name] = sc.variants[name]
            elif name in VARIANTS:
                chosen_v[name] = VARIANTS[name]
            else:
                raise UserError(f"--variants: unknown variant '{name}' (choices: "
                                f"{', '.join(dict.fromkeys([*sc.variants, *VARIANTS]))})")
        sc.variants = chosen_v
        if sc.baseline not in chosen_v:
            sc.baseline = next(iter(chosen_v))
        sc.overrides["variants"] = list(chosen_v)
    if reps is not None:
        if not 1 <= reps <= 10000:
            raise UserError(f"--reps: {reps} is not between 1 and 10000")
        sc.reps = reps
        sc.overrides["reps"] = reps
    return sc


def _split(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def list_scenarios() -> list[dict]:
    out = []
    for path in sorted(SCENARIO_DIR.glob("*.yaml")):
        try:
            sc = load_scenario(path)
            out.append({"name": sc.name, "path": str(path.relative_to(SCENARIO_DIR.parent)),
                        "runs": len(sc.runs()), "description": sc.description})
        except (UserError, FieldError) as exc:
            out.append({"name": path.stem, "path": str(path), "runs": 0, "description": f"INVALID: {exc}"})
    return out
