"""Parameters of plugins (implementations and workloads): default, accepted values, help.

One declaration serves validation (scenario and variant files, with file, line and field
on every error), `run.py list`, and the recorded metadata of every run.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Param:
    """A parameter with its default and accepted values.

    `kind` "variant" marks a parameter whose value names a variant (from the catalogue or
    the scenario's own), e.g. the variant a workload's competing flow runs.
    """
    default: object
    help: str
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    integer: bool = False
    kind: str = "value"

    @property
    def numeric(self) -> bool:
        """A number that may be swept (not a flag, not a choice)."""
        return (self.choices is None and self.kind == "value" and not isinstance(self.default, bool)
                and isinstance(self.default, (int, float)))

    def check(self, value) -> str | None:
        """None if `value` is acceptable, else what is wrong with it."""
        if self.choices is not None:
            return None if value in self.choices else f"'{value}' is not one of: {', '.join(map(str, self.choices))}"
        if isinstance(self.default, bool):
            return None if isinstance(value, bool) else f"expected true or false, got {value!r}"
        if isinstance(self.default, (int, float)):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                return f"expected a number, got {value!r}"
            if self.integer and value != int(value):
                return f"expected a whole number, got {value!r}"
            if self.low is not None and value < self.low:
                return f"{value} is below the minimum {self.low:g}"
            if self.high is not None and value > self.high:
                return f"{value} is above the maximum {self.high:g}"
            return None
        if isinstance(self.default, str) and not isinstance(value, str):
            return f"expected text, got {value!r}"
        return None

    def normalise(self, value):
        """The value as the code uses it (whole numbers as int)."""
        if self.integer and isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value)
        if isinstance(self.default, float) and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    def describe(self) -> str:
        """One line for `run.py list`: default and accepted values."""
        accepted = ""
        if self.choices is not None:
            accepted = f" (one of: {', '.join(map(str, self.choices))})"
        elif self.low is not None or self.high is not None:
            accepted = f" ({self.low if self.low is not None else '…':g} … {self.high if self.high is not None else '…':g})"
        return f"{self.help}; default {self.default!r}{accepted}"


def resolve(declared: dict[str, Param], given: dict) -> dict:
    """Defaults filled in and values normalised. An unknown name raises KeyError(name), a
    bad value ValueError("name: what is wrong")."""
    for key in given:
        if key not in declared:
            raise KeyError(key)
    out = {name: p.default for name, p in declared.items()}
    for key, value in given.items():
        problem = declared[key].check(value)
        if problem:
            raise ValueError(f"{key}: {problem}")
        out[key] = declared[key].normalise(value)
    return out
