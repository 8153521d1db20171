"""Variants: which implementation, with which parameters, on which host role.

The catalogue lives in hosts/variants.yaml; scenarios may define more inline with the
same fields. Installing a variant is a loop over roles, whatever the scheme.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from config import yamlfile
from config.plugins import collect
from config.yamlfile import Fields
from hosts.implementations.base import ROLES, Declared, Implementation, InstallContext
from machine.errors import UserError
from topologies.endhosts import EndHostDefaults

CATALOGUE_FILE = Path(__file__).with_name("variants.yaml")

# Every module of hosts/implementations that defines IMPLEMENTATION is a scheme, by its name:
# adding one is adding its module (and its BPF source beside it, if it has one).
IMPLEMENTATIONS: dict[str, Implementation] = collect("hosts.implementations", "IMPLEMENTATION")


@dataclass
class RolePart:
    impl: Implementation
    params: dict


@dataclass(frozen=True)
class Mix:
    """A variant that only a share of the connections run: `fraction` of a workload's
    sending hosts get the variant's parts, the others variant `other` (Quick-Start Fig. 5's
    runs where half the flows use Quick-Start). Workloads that can split say so (`mixes`)."""
    fraction: float
    other: str


@dataclass
class Variant:
    name: str
    summary: str
    parts: dict[str, RolePart] = field(default_factory=dict)   # role -> part
    mix: Mix | None = None

    def describe(self) -> dict:
        out = {"summary": self.summary,
               "roles": {role: {"impl": p.impl.name, **p.params} for role, p in self.parts.items()}}
        if self.mix:
            out["mix"] = {"fraction": self.mix.fraction, "other": self.mix.other}
        return out

    def declared(self, role: str, defaults: EndHostDefaults) -> Declared:
        """What a node of `role` with this variant claims its connections run: its part's
        declaration, or the network's end-host defaults where the variant has no part."""
        part = self.parts.get(role)
        found = part.impl.declares(role, part.params, defaults) if part else None
        return found or Declared(cc=(defaults.cc,), iw=defaults.iw)

    def kernel_modules(self) -> list[str]:
        """startlab's kernel modules its parts load (machine/kmod.py)."""
        return sorted({m for role, part in self.parts.items() for m in part.impl.kernel_modules(role, part.params)})

    def unavailable(self) -> str | None:
        """Why this kernel cannot run this variant (None: it can): its first part that
        cannot, with that part's reason."""
        for role, part in self.parts.items():
            why = part.impl.unavailable(role, part.params)
            if why:
                return f"its {role} part ({part.impl.name}): {why}"
        return None

    def install(self, nodes_by_role: dict[str, list], contexts: dict[str, InstallContext]) -> None:
        """Install every part; on failure, remove what was installed and re-raise."""
        done = []
        try:
            for role, part in self.parts.items():
                for node in nodes_by_role.get(role, []):
                    part.impl.install(node, role, part.params, contexts[node.name])
                    done.append((role, part, node))
        except BaseException:
            for role, part, node in reversed(done):
                part.impl.remove(node, role, part.params, contexts[node.name])
            raise

    def endpoint_args(self, role: str, ctx: InstallContext) -> list[str] | None:
        """The user-space endpoint arguments of this variant's part for `role` (None: the
        variant has no such part there, its connections are the kernel's)."""
        part = self.parts.get(role)
        return part.impl.endpoint_args(role, part.params, ctx) if part else None

    def before_fetch(self, nodes_by_role: dict[str, list], contexts: dict[str, InstallContext]) -> dict[str, dict]:
        """{node name: what its part set} of the parts that act as the fetch starts."""
        found = {}
        for role, part in self.parts.items():
            for node in nodes_by_role.get(role, []):
                got = part.impl.before_fetch(node, role, part.params, contexts[node.name])
                if got is not None:
                    found[node.name] = got
        return found

    def counters(self, nodes_by_role: dict[str, list], contexts: dict[str, InstallContext],
                 role: str) -> dict[str, dict]:
        """{node name: counters} of the parts installed in `role` that keep counters."""
        part = self.parts.get(role)
        if part is None:
            return {}
        found = {node.name: part.impl.counters(node, role, part.params, contexts[node.name])
                 for node in nodes_by_role.get(role, [])}
        return {name: c for name, c in found.items() if c is not None}

    def remove(self, nodes_by_role: dict[str, list], contexts: dict[str, InstallContext]) -> None:
        errors = []
        for role, part in self.parts.items():
            for node in nodes_by_role.get(role, []):
                try:
                    part.impl.remove(node, role, part.params, contexts[node.name])
                except Exception as exc:
                    errors.append(f"{node.name}: {exc}")
        if errors:
            raise RuntimeError("removing variant parts failed: " + "; ".join(errors))


def parse_variant(path: Path | str, name: str, fields: Fields) -> Variant:
    """A variant from its YAML mapping, every bad field reported with file and line."""
    fields.unknown({"summary", "mix", *ROLES})
    variant = Variant(name=name, summary=fields.text("summary", ""))
    if fields.has("mix"):
        mix = fields.sub("mix")
        mix.unknown({"fraction", "other"})
        variant.mix = Mix(fraction=float(mix.number("fraction", low=0.0, high=1.0)), other=mix.text("other"))
    for role in ROLES:
        if not fields.has(role):
            continue
        part = fields.sub(role)
        impl_name = part.text("impl", choices=sorted(IMPLEMENTATIONS))
        impl = IMPLEMENTATIONS[impl_name]
        if role not in impl.roles:
            raise part.error("impl", f"{impl_name} has no part for role '{role}' "
                                     f"(it has: {', '.join(impl.roles)})")
        given = {k: v for k, v in part.data.items() if k != "impl"}
        try:
            params = impl.resolve(given)
        except KeyError as exc:
            key = exc.args[0]
            raise part.error(key, f"unknown parameter of {impl_name} "
                                  f"(known: {', '.join(impl.params)})") from None
        except ValueError as exc:
            key, _, problem = str(exc).partition(": ")
            raise part.error(key, problem) from None
        variant.parts[role] = RolePart(impl, params)
    return variant


def load_catalogue(path: Path = CATALOGUE_FILE) -> dict[str, Variant]:
    top = Fields(path, yamlfile.load(path), "")
    top.unknown({"format", "variants"})
    table = top.sub("variants")
    return {name: parse_variant(path, name, table.sub(name)) for name in table.data}


VARIANTS = load_catalogue()


def get_variant(name: str) -> Variant:
    if name not in VARIANTS:
        raise UserError(f"unknown variant '{name}' (choices: {', '.join(VARIANTS)})")
    return VARIANTS[name]
