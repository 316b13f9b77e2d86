"""Config dataclasses -> argparse flags, so the CLI help and the app's forms come from one source."""

from __future__ import annotations

import argparse
import dataclasses

_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def add_dataclass_args(parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = ()) -> None:
    """One `--field-name` flag per field, with its type, default and help from the field metadata."""
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = f.type if isinstance(f.type, type) else _TYPES[str(f.type)]
        help_text = f"{f.metadata.get('help', '')} (default: {f.default})"
        if kind is bool:
            parser.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=f.default, help=help_text
            )
        else:
            parser.add_argument(flag, dest=f.name, type=kind, default=f.default, help=help_text)


def dataclass_from_args(cls: type, args: argparse.Namespace):
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})
