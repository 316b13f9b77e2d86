"""Saving and loading the config dataclasses as the `config.json` of a run (so any run can be launched again as it
was); an unknown key is an error, never silently dropped."""

from __future__ import annotations

import json
import sys
import types
import typing
from dataclasses import asdict, fields
from pathlib import Path
from typing import TypeVar

MAX_CONFIG_BYTES = 1 << 20  # a config is a few hundred bytes; a huge file is refused before it is read

C = TypeVar("C", bound="ConfigFile")


class ConfigFile:
    KIND: typing.ClassVar[str] = ""  # the trainer's kind (training/registry.py), written as config.json's "kind"
    # settings earlier versions wrote that mean nothing now, with why: an old run's config.json still loads (so it
    # resumes), without them; any other unknown key is an error
    RETIRED: typing.ClassVar[dict[str, str]] = {}

    def as_json(self) -> dict:
        """What config.json holds (and the store's runs.config): the kind, then every setting."""
        kind = {"kind": self.KIND} if self.KIND else {}
        return {**kind, **asdict(self)}  # type: ignore[call-overload]

    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.as_json(), indent=2) + "\n")

    @classmethod
    def load(cls: type[C], path: str | Path) -> C:
        """The config in `path`: a JSON object of known settings, each of its field's type (ValueError if not), and
        a "kind" that names this config's trainer when there is one (runs made before kinds were recorded have
        none)."""
        raw = read_json_object(path)
        kind = raw.pop("kind", cls.KIND)
        hints = typing.get_type_hints(cls)
        for key in cls.RETIRED:
            raw.pop(key, None)
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"unknown setting {unknown[0]!r}")
        if kind != cls.KIND:
            raise ValueError(f"this is the config of a {kind!r} run, not of a {cls.KIND!r} run")
        for key, value in raw.items():
            if not _is_a(value, hints[key]):
                raise ValueError(f"setting {key!r} must be {_name(hints[key])}, got {json.dumps(value)[:40]}")
        return cls(**raw)


def positive_ints(text: str, flag: str) -> list[int]:
    """'2,1,2' -> [1, 2]: distinct positive whole numbers in increasing order; ValueError naming `flag` otherwise."""
    try:
        numbers = sorted({int(x) for x in text.split(",") if x.strip()})
    except ValueError:
        raise ValueError(f"{flag} takes numbers separated by commas, got {text!r}") from None
    if not numbers or numbers[0] < 1:
        raise ValueError(f"{flag} takes positive numbers, got {text!r}")
    return numbers


def read_json_object(path: str | Path, max_bytes: int = MAX_CONFIG_BYTES) -> dict:
    """A small JSON file holding one object (a config.json: a run's, a model's); ValueError with one line if the
    file is too big to be one, not UTF-8, not JSON, nested too deeply, holds an integer longer than Python converts
    (sys.get_int_max_str_digits()) or is not an object. (annotation/files.py's loads_json does the same for the
    files the annotation side reads; training imports nothing outside training.)"""
    size = Path(path).stat().st_size
    if size > max_bytes:
        raise ValueError(f"{size} bytes is not a config file (limit {max_bytes})")
    try:
        raw = json.loads(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        raise ValueError("not UTF-8 text") from None
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    except json.JSONDecodeError:
        raise
    except ValueError:  # the only other ValueError json.loads raises on a str: int() over the digit limit
        raise ValueError(f"a number has more than {sys.get_int_max_str_digits():,} digits") from None
    if not isinstance(raw, dict):
        raise ValueError(f"expected a JSON object, got {type(raw).__name__}")
    return raw


def _options(hint) -> tuple:
    union = isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union
    return typing.get_args(hint) if union else (hint,)


def _is_a(value: object, hint) -> bool:
    """JSON value vs a field's annotation: int, float, str, bool, list, dict, each optionally `| None`."""
    for t in _options(hint):
        t = typing.get_origin(t) or t
        if t is type(None) and value is None:
            return True
        if t is bool and isinstance(value, bool):
            return True
        if t is int and isinstance(value, int) and not isinstance(value, bool):
            return True
        if t is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return True
        if t in (str, list, dict) and isinstance(value, t):
            return True
    return False


def _name(hint) -> str:
    return " or ".join("null" if t is type(None) else getattr(t, "__name__", str(t)) for t in _options(hint))
