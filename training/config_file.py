"""Saving and loading the config dataclasses as the `config.json` of a run (so any run can be launched again as it
was); an unknown key is an error, never silently dropped."""

from __future__ import annotations

import json
from dataclasses import asdict, fields
from pathlib import Path
from typing import TypeVar

C = TypeVar("C", bound="ConfigFile")


class ConfigFile:
    def save(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=2) + "\n")  # type: ignore[call-overload]

    @classmethod
    def load(cls: type[C], path: str | Path) -> C:
        raw = json.loads(Path(path).read_text())
        known = {f.name for f in fields(cls)}  # type: ignore[arg-type]
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(f"{path}: unknown setting {unknown[0]!r}")
        return cls(**raw)
