"""YAML that remembers where each value came from, so errors can name file, line and field.

Researchers edit scenario and profile files by hand; an error that says
`scenarios/x.yaml:14: variants.bbr.server.cc: unknown congestion control 'bbrr'
(choices: cubic, reno, bbr)` is fixed in seconds, a traceback is not.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from machine.errors import UserError


class LineDict(dict):
    """A mapping from YAML with the line of each key (1-based) and of the mapping itself."""
    line: int = 0
    key_lines: dict

    def line_of(self, key: str) -> int:
        return self.key_lines.get(key, self.line)


class _Loader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    out = LineDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in out:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key '{key}'", key_node.start_mark)
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = key_node.start_mark.line + 1
    return out


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load(path: Path) -> Any:
    """Parse a YAML file into LineDicts; syntax errors become a UserError with the line."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise UserError(f"{path}:{line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} at offset {exc.start}); "
                        "save the file as UTF-8") from None
    try:
        return yaml.load(text, Loader=_Loader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 0
        raise UserError(f"{path}:{line}: YAML syntax: {exc.problem or exc}") from None
    except yaml.reader.ReaderError as exc:          # a character YAML does not allow
        line = text[:exc.position].count("\n") + 1
        raise UserError(f"{path}:{line}: YAML: character {exc.character!r} is not allowed") from None
    except yaml.YAMLError as exc:                  # any other, unmarked error: its first line
        raise UserError(f"{path}: YAML: {str(exc).splitlines()[0]}") from None
    except RecursionError:
        raise UserError(f"{path}: YAML nested too deeply") from None


class FieldError(UserError):
    """A bad value in a YAML file: where it is, which field, what was expected."""

    def __init__(self, path: Path | str, line: int, field: str, message: str):
        super().__init__(f"{path}:{line}: {field}: {message}")
        self.path, self.line, self.field = str(path), line, field


class Fields:
    """Typed access to one mapping of a YAML file, raising FieldError on bad values.

    `where` is the dotted path of the mapping (e.g. 'variants.bbr'); every error names
    the field in full so the user can find it without reading the code.
    """

    def __init__(self, path: Path | str, data: Any, where: str, parent_line: int = 0):
        if not isinstance(data, dict):
            raise FieldError(path, parent_line, where or "(top)", f"expected a mapping, got {type(data).__name__}")
        self.path, self.data, self.where = path, data, where
        self.line = getattr(data, "line", parent_line)

    def _name(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def line_of(self, key: str) -> int:
        return self.data.line_of(key) if isinstance(self.data, LineDict) else self.line

    def error(self, key: str, message: str) -> FieldError:
        return FieldError(self.path, self.line_of(key), self._name(key), message)

    def has(self, key: str) -> bool:
        return key in self.data

    def number(self, key: str, default: float | None = None, *, low: float | None = None,
               high: float | None = None, integer: bool = False) -> float:
        """A number within [low, high]; missing → default, or an error if there is none."""
        if key not in self.data:
            if default is None:
                raise FieldError(self.path, self.line, self._name(key), "missing (required)")
            return default
        value = self.data[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise self.error(key, f"expected a number, got {value!r}")
        if integer and value != int(value):
            raise self.error(key, f"expected a whole number, got {value!r}")
        if low is not None and value < low:
            raise self.error(key, f"{value} is below the minimum {low}")
        if high is not None and value > high:
            raise self.error(key, f"{value} is above the maximum {high}")
        return int(value) if integer else float(value)

    def text(self, key: str, default: str | None = None, choices: list[str] | None = None) -> str:
        if key not in self.data:
            if default is None:
                raise FieldError(self.path, self.line, self._name(key), "missing (required)")
            return default
        value = self.data[key]
        if not isinstance(value, str):
            raise self.error(key, f"expected text, got {value!r}")
        if choices is not None and value not in choices:
            raise self.error(key, f"'{value}' is not one of: {', '.join(choices)}")
        return value

    def flag(self, key: str, default: bool) -> bool:
        if key not in self.data:
            return default
        value = self.data[key]
        if not isinstance(value, bool):
            raise self.error(key, f"expected true or false, got {value!r}")
        return value

    def sub(self, key: str) -> "Fields":
        if key not in self.data:
            raise FieldError(self.path, self.line, self._name(key), "missing (required)")
        return Fields(self.path, self.data[key], self._name(key), self.line_of(key))

    def list(self, key: str, default: list | None = None) -> list:
        if key not in self.data:
            if default is None:
                raise FieldError(self.path, self.line, self._name(key), "missing (required)")
            return default
        value = self.data[key]
        if not isinstance(value, list) or not value:
            raise self.error(key, f"expected a non-empty list, got {value!r}")
        return value

    def unknown(self, allowed: set[str]) -> None:
        """Reject keys the code does not know: a typo must not be silently ignored."""
        for key in self.data:
            if key not in allowed:
                raise self.error(key, f"unknown field (known: {', '.join(sorted(allowed))})")
