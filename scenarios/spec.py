"""Scenario files: parse, validate (file, line, field on every error), expand into runs.

A scenario is declarative: which profiles, object sizes, workload (with its parameters),
variants, repetitions and seed. One run = variant × profile × size × sweep value ×
repetition. The workload is looked up in the catalogue and validates its own parameters,
so this parser knows no workload by name.
"""
from __future__ import annotations

import hashlib
import json
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Optional

from config import yamlfile
from hosts import workloads
from config.params import Param
from config.sizes import parse_size, size_label
from config.yamlfile import Fields, FieldError
from hosts.variants import VARIANTS, Variant, parse_variant
from hosts.workloads.base import HostNeeds, Workload
from machine.errors import UserError
from links.profiles import LinkProfile, load_profiles
from links import shapers
from links.shapers import Shaper
from topologies.endhosts import ECN_MODES

SCENARIO_DIR = Path(__file__).resolve().parent


@dataclass
class Run:
    profile: str
    size_bytes: Optional[int]                  # None for workloads without object sizes
    variant: str
    rep: int
    sweep: tuple[str, float] | None = None     # (workload parameter, its value in this run)

    @property
    def run_id(self) -> str:
        swept = f"_{self.sweep[0]}-{self.sweep[1]:g}" if self.sweep else ""
        size = f"_{size_label(self.size_bytes)}" if self.size_bytes is not None else ""
        return f"{self.profile}{size}{swept}_{self.variant}_r{self.rep:02d}"


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
    workload: Workload
    workload_params: dict
    variants: dict[str, Variant]
    baseline: str
    reps: int
    seed: int
    text_hash: str
    overrides: dict = field(default_factory=dict)
    sweep: Sweep | None = None
    # The bottleneck's queue the file names; None: each profile's default (shapers.default_for),
    # so that one trace link among the profiles does not move the others off the kernel's tbf.
    shaper: Shaper | None = None
    # Sizes per profile where the file gives them as a mapping: a size that means a few BDPs
    # on one path means thirty on another, and a campaign's wall time goes where it matters.
    profile_sizes: dict[str, list[int]] = field(default_factory=dict)
    # ECN in every end host's TCP handshake (topologies.endhosts.ECN_MODES).
    ecn: str = "accept"
    # The queues a campaign compares (`shapers:`): each profile runs behind each, as a profile
    # of its own named PROFILE+QUEUE (behind_each), so every table and plot has a row per queue.
    shapers: list[Shaper] = field(default_factory=list)
    placed: dict[str, Placed] = field(default_factory=dict)       # PROFILE+QUEUE → its profile and queue

    def behind(self) -> dict[str, dict[str, str]]:
        """campaign.json's `behind`: each PROFILE+QUEUE profile's own profile and queue, so
        that the report compares the queues without reading names (empty: one queue)."""
        return {name: {"profile": p.base, "queue": shaper_label(p.shaper)} for name, p in self.placed.items()}

    def shaper_for(self, profile: LinkProfile) -> Shaper:
        """The shaper of `profile`'s bottleneck: its own (`shapers:`), the file's, else the
        profile's default."""
        placed = self.placed.get(profile.name)
        return placed.shaper if placed else self.shaper or shapers.default_for([profile])

    def shapers_record(self) -> dict:
        """campaign.json's `shaper`: one description where every profile has the same
        shaper (every scenario's record before per-profile defaults, so --reuse still
        matches), else one per profile."""
        per_profile = {p.name: self.shaper_for(p).describe() for p in self.profiles}
        kinds = list({json.dumps(d, sort_keys=True): d for d in per_profile.values()}.values())
        return kinds[0] if len(kinds) == 1 else per_profile

    def sizes_for(self, profile: str) -> list[int]:
        """The object sizes run on `profile`."""
        return self.profile_sizes.get(profile, self.sizes)

    @property
    def hash(self) -> str:
        """Identity of what runs: the file's text plus the command-line overrides."""
        blob = self.text_hash + json.dumps(self.overrides, sort_keys=True)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def runs(self) -> list[Run]:
        """All runs in a seeded random order, grouped by profile so a network is built once
        per profile (the order within a profile stays random)."""
        points = [(self.sweep.param, x) for x in self.sweep.values] if self.sweep else [None]
        runs = [Run(p.name, s, v, r, w) for p in self.profiles
                for s in (self.sizes_for(p.name) if self.workload.sized else [None]) for w in points
                for v in self.variants for r in range(1, self.reps + 1)]
        random.Random(self.seed).shuffle(runs)
        order = {p.name: i for i, p in enumerate(self.profiles)}
        return sorted(runs, key=lambda run: order[run.profile])

    def params_for(self, run: Run) -> dict:
        """The workload parameters of `run`: the scenario's, with the swept one set."""
        if run.sweep is None:
            return dict(self.workload_params)
        return {**self.workload_params, run.sweep[0]: run.sweep[1]}

    def declaration(self, run: Run) -> dict:
        """What `run` emulates, as its meta.json records it: what decides its traffic besides
        the campaign's shaper and workload variants (scenarios/reuse.py compares these)."""
        profile = next(p for p in self.profiles if p.name == run.profile)
        return {"profile": run.profile, "profile_params": profile.as_dict(), "size_bytes": run.size_bytes,
                "variant": run.variant, "variant_definition": self.variants[run.variant].describe(),
                "rep": run.rep, "workload": self.workload.name, "workload_params": self.params_for(run),
                "sweep": {run.sweep[0]: run.sweep[1]} if run.sweep else {}}

    def pairs_needed(self) -> int:
        """Client/server pairs the network needs for every run of the scenario."""
        return self.host_needs().pairs

    def host_needs(self) -> HostNeeds:
        """What the network needs for every run: the most pairs any sweep point asks for, and
        the per-pair RTTs (which a sweep must not change: the network is built once)."""
        points = [self.params_for(Run("", None, "", 0, (self.sweep.param, x))) for x in self.sweep.values] \
            if self.sweep else [self.workload_params]
        needs = [self.workload.hosts(p) for p in points]
        if any(n.rtts_ms != needs[0].rtts_ms for n in needs):
            raise UserError(f"{self.path}: sweep.param: {self.sweep.param} changes the per-pair RTTs, "
                            "which are fixed for a network")
        return HostNeeds(pairs=max(n.pairs for n in needs), rtts_ms=needs[0].rtts_ms)

    def variant(self, name: str) -> Variant:
        """A variant by name: the scenario's own, else the catalogue's."""
        found = find_variant(self.variants, name)
        if found is None:
            raise UserError(f"unknown variant '{name}' (choices: {variant_choices(self.variants)})")
        return found

    def used_variants(self) -> dict[str, Variant]:
        """Every variant a run of this scenario installs: its own, the other side of each
        mix, and those its workload names (a competing flow's)."""
        names = list(self.variants)
        names += [v.mix.other for v in self.variants.values() if v.mix]
        names += [v for k, v in self.workload_params.items() if self.workload.params[k].kind == "variant"]
        return {n: self.variant(n) for n in dict.fromkeys(names)}

    def record(self) -> dict:
        """What campaign.json says about the campaign."""
        return {"scenario": self.name, "scenario_file": str(self.path), "scenario_hash": self.hash,
                "description": self.description, "paper": self.paper, "baseline": self.baseline,
                "variants": list(self.variants), "profiles": [p.name for p in self.profiles],
                "sizes": self.sizes if self.workload.sized else [], "reps": self.reps, "seed": self.seed,
                "profile_sizes": {p.name: self.profile_sizes[p.name] for p in self.profiles
                                  if p.name in self.profile_sizes},
                "workload": self.workload.name, "workload_params": self.workload_params,
                "overrides": self.overrides,
                "sweep": {"param": self.sweep.param, "values": self.sweep.values} if self.sweep else None,
                "variant_definitions": {n: v.describe() for n, v in self.variants.items()},
                "shaper": self.shapers_record(), "ecn": self.ecn, "behind": self.behind(),
                "workload_variants": {k: self.variant(v).describe() for k, v in self.workload_params.items()
                                      if self.workload.params[k].kind == "variant"}}


def find_variant(own: dict[str, Variant], name: str) -> Variant | None:
    """A variant by name: a scenario's own (`own`) first, else the catalogue's; None if neither."""
    return own.get(name) or VARIANTS.get(name)


def variant_choices(own: dict[str, Variant]) -> str:
    """The names a scenario may use, its own first, for an error message."""
    return ", ".join(dict.fromkeys([*own, *VARIANTS]))


def _value(fields: Fields, name: str, param: Param, known_variants: set[str]):
    """One workload parameter from the YAML, checked against its declaration."""
    value = fields.data[name]
    problem = param.check(value)
    if problem:
        raise fields.error(name, problem)
    if param.kind == "variant" and value not in known_variants:
        raise fields.error(name, f"unknown variant '{value}' (catalogue: {', '.join(sorted(known_variants))})")
    return param.normalise(value)


def _workload(fields: Fields, known_variants: set[str]) -> tuple[Workload, dict]:
    kind = fields.text("kind", choices=list(workloads.registry()))
    workload = workloads.registry()[kind]
    fields.unknown({"kind", *workload.params})
    params = {name: p.default for name, p in workload.params.items()}
    for name, param in workload.params.items():
        if fields.has(name):
            params[name] = _value(fields, name, param, known_variants)
    problem = workload.check(params)
    if problem:
        raise fields.error(problem[0], problem[1])
    return workload, params


def _sweep(fields: Fields, workload: Workload) -> Sweep:
    """`sweep: {param: NAME, values: [...]}`: NAME a numeric workload parameter, every value
    within that parameter's range, no value twice."""
    fields.unknown({"param", "values"})
    numeric = [name for name, p in workload.params.items() if p.numeric]
    param = fields.text("param", choices=numeric)
    declared = workload.params[param]
    values = fields.list("values")
    low = declared.low if declared.low is not None else float("-inf")
    high = declared.high if declared.high is not None else float("inf")
    for value in values:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise fields.error("values", f"expected numbers, got {value!r}")
        if not low <= value <= high:
            raise fields.error("values", f"{value} is outside {param}'s range {low:g} … {high:g}")
        if declared.integer and value != int(value):
            raise fields.error("values", f"{param} takes whole numbers, got {value}")
    if len(set(values)) != len(values):
        raise fields.error("values", "a value appears twice")
    return Sweep(param, [declared.normalise(v) for v in values])


def shaper_label(shaper: Shaper) -> str:
    """A queue's short name in a profile's: its kind, its policy and whether it marks
    (tbf, codel-ecn, delayline-pie-ecn)."""
    d = shaper.describe()
    return "-".join([d["kind"], *([d["policy"]] if d.get("policy") else []), *(["ecn"] if d.get("ecn") else [])])


@dataclass(frozen=True)
class Placed:
    """What a PROFILE+QUEUE profile is: its own profile's name and the queue it is behind."""
    base: str
    shaper: Shaper


@dataclass
class BehindEach:
    """Every profile behind every queue: the profiles, named PROFILE+QUEUE, and per name the
    sizes the file gave its profile and what it is (Placed)."""
    profiles: list[LinkProfile]
    sizes: dict[str, list[int]]
    placed: dict[str, Placed]


def behind_each(profiles: list[LinkProfile], queues: list[Shaper], sizes: dict[str, list[int]]) -> BehindEach:
    out = BehindEach([], {}, {})
    for p in profiles:
        for q in queues:
            name = f"{p.name}+{shaper_label(q)}"
            out.profiles.append(replace(p, name=name))
            out.placed[name] = Placed(p.name, q)
            if p.name in sizes:
                out.sizes[name] = sizes[p.name]
    return out


def _shapers(path: Path, top: Fields, profiles: list[LinkProfile]) -> list[Shaper]:
    """`shapers: [{kind: tbf}, {kind: codel, ecn: true}, ...]`: each an entry as `shaper:`
    takes it, no two with the same name."""
    queues, labels = [], set()
    for i, item in enumerate(top.list("shapers")):
        if not isinstance(item, dict):
            raise top.error("shapers", f"expected a mapping with `kind:`, got {item!r}")
        queue = _shaper(Fields(path, item, f"shapers[{i}]", top.line_of("shapers")), profiles)
        if shaper_label(queue) in labels:
            raise top.error("shapers", f"two entries are both {shaper_label(queue)}")
        labels.add(shaper_label(queue))
        queues.append(queue)
    return queues


def _shaper(fields: Fields, profiles: list[LinkProfile]) -> Shaper:
    """`shaper: {kind: tbf}` (the default; the delay line's queue where a profile is a
    trace link) or another kind of links/shapers/ with its own fields: how the bottleneck
    queues."""
    kinds = shapers.registry()
    shaper = kinds[fields.text("kind", choices=list(kinds))].from_fields(fields)
    refusal = next(filter(None, (shapers.refusal(shaper, p) for p in profiles)), None)
    if refusal:
        raise fields.error("kind", refusal)
    return shaper


def _variants(path: Path, top: Fields) -> dict[str, Variant]:
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
            body = yamlfile.LineDict({k: v for k, v in item.items() if k != "name"})
            body.line, body.key_lines = item.line, item.key_lines
            variants[name] = parse_variant(path, name, Fields(path, body, f"variants.{name}"))
    return variants


def _check_variants(top: Fields, workload: Workload, params: dict, variants: dict[str, Variant]) -> None:
    """Every variant the scenario runs must suit its workload (e.g. its transport): the
    variants under test and those its workload parameters name."""
    for name, variant in variants.items():
        problem = workload.check_variant(params, variant)
        if problem:
            raise top.error("variants", f"{name}: {problem}")
        if variant.mix is not None:
            if not workload.mixes:
                raise top.error("variants", f"{name}: workload {workload.name} cannot split its connections "
                                            "between two variants (mix)")
            other = find_variant(variants, variant.mix.other)
            if other is None:
                raise top.error("variants", f"{name}: mix.other '{variant.mix.other}' is not a variant of the "
                                            f"catalogue or the scenario")
            if other.mix is not None:
                raise top.error("variants", f"{name}: mix.other '{other.name}' is itself a mix")
    for key, declared in workload.params.items():
        if declared.kind == "variant":
            variant = find_variant(variants, params[key])
            problem = workload.check_variant(params, variant, key) if variant else None
            if problem:
                raise top.sub("workload").error(key, f"{params[key]}: {problem}")


SCENARIO_FORMAT = 1            # the scenario file format this code reads
# Every top-level field of a scenario file and what it means: the parser accepts exactly
# these, and the reference page (docs/reference/scenario.md) lists them.
SCENARIO_FIELDS = {
    "format": f"the scenario file format (this startlab reads {SCENARIO_FORMAT}); optional",
    "name": "the campaign's name; default: the file's name",
    "description": "one line on what the campaign compares",
    "paper": "the paper (and figure or table) the campaign reproduces",
    "profiles": "link profiles to run on (docs/reference/profiles.md)",
    "sizes": "object sizes, e.g. [70KB, 2MB], for a sized workload; or per profile, a mapping "
             "of every profile to its list (e.g. {dsl-fast: [10KB, 1MB], geo-sat: [1MB]})",
    "workload": "`kind:` a workload (docs/reference/workloads.md) and its parameters",
    "variants": "variant names from the catalogue (docs/reference/variants.md), or definitions of "
                "the scenario's own (a list item with `name`, `summary` and `server`/`client`/`router` roles)",
    "baseline": "the variant others are compared with; default: the first",
    "repetitions": "runs per cell (1 … 10000); default 1",
    "seed": "seed of the run order; default 1 (a workload draws from its own `seed` parameter)",
    "sweep": "`param:` a numeric workload parameter and its `values:` (one cell per value)",
    "shaper": "`kind:` how the bottleneck queues (below); default per profile: tbf, delayline on a trace or lossy link",
    "shapers": "instead of `shaper:`, a list of them: each profile runs behind each, as a profile named "
               "PROFILE+QUEUE (dsl-fast+codel-ecn), so every table and plot has a row per queue",
    "ecn": "ECN in every end host's TCP handshake: off, accept (only when the peer asks; the default) or on "
           "(clients and servers ask for it)",
}


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
    # The file's format first: a scenario written for another startlab fails on that, not
    # on whatever field it happens to name differently.
    if top.has("format") and top.data["format"] != SCENARIO_FORMAT:
        raise top.error("format", f"format {top.data['format']!r} is not supported "
                                  f"(this startlab reads {SCENARIO_FORMAT})")
    top.unknown(set(SCENARIO_FIELDS))
    known_profiles = load_profiles()
    profiles = []
    for name in top.list("profiles"):
        if not isinstance(name, str):
            raise top.error("profiles", f"expected profile names, got {name!r}")
        if name not in known_profiles:
            raise top.error("profiles", f"unknown profile '{name}' (choices: {', '.join(known_profiles)})")
        profiles.append(known_profiles[name])
    variants = _variants(path, top)
    workload, params = _workload(top.sub("workload"), set(VARIANTS) | set(variants))
    _check_variants(top, workload, params, variants)
    sizes, profile_sizes = [], {}
    if workload.sized:
        sizes, profile_sizes = _sizes(top, [p.name for p in profiles])
    elif top.has("sizes"):
        raise top.error("sizes", f"workload {workload.name} takes no object sizes")
    if top.has("shaper") and top.has("shapers"):
        raise top.error("shapers", "give either `shaper:` (one queue) or `shapers:` (a list), not both")
    queues = _shapers(path, top, profiles) if top.has("shapers") else []
    placed = behind_each(profiles, queues, profile_sizes) if queues else None
    if placed:
        profiles, profile_sizes = placed.profiles, placed.sizes
    baseline = top.text("baseline", next(iter(variants)))
    if baseline not in variants:
        raise top.error("baseline", f"'{baseline}' is not one of the scenario's variants ({', '.join(variants)})")
    return Scenario(
        name=top.text("name", path.stem), path=path, description=top.text("description", ""),
        paper=top.text("paper", ""), profiles=profiles, sizes=sizes, workload=workload,
        workload_params=params, variants=variants, baseline=baseline,
        reps=int(top.number("repetitions", 1, low=1, high=10000, integer=True)),
        seed=int(top.number("seed", 1, low=0, high=2 ** 32, integer=True)),
        text_hash=hashlib.sha256(path.read_bytes()).hexdigest(), profile_sizes=profile_sizes,
        sweep=_sweep(top.sub("sweep"), workload) if top.has("sweep") else None,
        shaper=_shaper(top.sub("shaper"), profiles) if top.has("shaper") else None,
        ecn=_ecn(top, workload), shapers=queues, placed=placed.placed if placed else {})


def _ecn(top: Fields, workload: Workload) -> str:
    """`ecn:` off, accept or on; YAML reads a bare on/off as true/false, which mean the same.
    `on` is checked on the wire (every flow's handshake), so only where the workload's
    analysis reads it."""
    value = top.data.get("ecn", "accept")
    mode = ("on" if value else "off") if isinstance(value, bool) else top.text("ecn", "accept",
                                                                                 choices=list(ECN_MODES))
    if mode == "on" and not workload.reads_ecn:
        readers = ", ".join(name for name, w in workloads.registry().items() if w.reads_ecn)
        raise top.error("ecn", f"workload {workload.name} does not read ECN from the wire yet "
                               f"(workloads that do: {readers})")
    return mode


def _size_list(fields: Fields, key: str) -> list[int]:
    try:
        return [parse_size(item) for item in fields.list(key)]
    except ValueError as exc:
        raise fields.error(key, str(exc)) from None


def _sizes(top: Fields, profiles: list[str]) -> tuple[list[int], dict[str, list[int]]]:
    """`sizes:` as one list for every profile, or a mapping of each profile to its own:
    (every size, from the smallest where a mapping names them; the per-profile lists or {})."""
    if not isinstance(top.data.get("sizes"), dict):
        return _size_list(top, "sizes"), {}
    per = top.sub("sizes")
    per.unknown(set(profiles))
    missing = [p for p in profiles if not per.has(p)]
    if missing:
        raise top.error("sizes", f"no sizes for profile(s) {', '.join(missing)} (a mapping names every profile)")
    profile_sizes = {p: _size_list(per, p) for p in profiles}
    union = sorted({s for p in profiles for s in profile_sizes[p]})
    return union, profile_sizes


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
        sc.overrides["profiles"] = [p.name for p in chosen]
        if sc.shapers:                          # the file's sizes per profile, by its own name
            file_sizes = {sc.placed[name].base: v for name, v in sc.profile_sizes.items()}
            placed = behind_each(chosen, sc.shapers, file_sizes)
            chosen, sc.profile_sizes, sc.placed = placed.profiles, placed.sizes, placed.placed
        sc.profiles = chosen
    if sizes:
        if not sc.workload.sized:
            raise UserError(f"--sizes: workload {sc.workload.name} takes no object sizes")
        try:
            sc.sizes = [parse_size(s) for s in _split(sizes)]
        except ValueError as exc:
            raise UserError(f"--sizes: {exc}") from None
        sc.profile_sizes = {}                   # the command line's sizes hold on every profile
        sc.overrides["sizes"] = sc.sizes
    if variants:
        chosen_v = {}
        for name in _split(variants):
            found = find_variant(sc.variants, name)
            if found is None:
                raise UserError(f"--variants: unknown variant '{name}' (choices: {variant_choices(sc.variants)})")
            chosen_v[name] = found
            problem = sc.workload.check_variant(sc.workload_params, chosen_v[name])
            if problem:
                raise UserError(f"--variants: {name}: {problem}")
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
                        "runs": len(sc.runs()), "workload": sc.workload.name, "description": sc.description})
        except (UserError, FieldError) as exc:
            out.append({"name": path.stem, "path": str(path), "runs": 0, "workload": "?",
                        "description": f"INVALID: {exc}"})
    return out
