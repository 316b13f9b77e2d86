"""Config dataclasses -> argparse flags, so the CLI help and the app's forms come from one source."""

from __future__ import annotations

import argparse
import dataclasses

_TYPES = {"int": int, "float": float, "str": str, "bool": bool}


def add_dataclass_args(
    parser: argparse.ArgumentParser, cls: type, skip: tuple[str, ...] = (), given_only: bool = False
) -> None:
    """One `--field-name` flag per field, with its type, default and help from the field metadata.

    given_only: every flag defaults to None instead, so the command can tell the flags the user gave from the
    ones left out (a preset fills in only those; see `given_args`)."""
    for f in dataclasses.fields(cls):
        if f.name in skip:
            continue
        flag = "--" + f.name.replace("_", "-")
        kind = f.type if isinstance(f.type, type) else _TYPES[str(f.type)]
        help_text = f"{f.metadata.get('help', '')} (default: {f.default})"
        default = None if given_only else f.default
        if kind is bool:
            parser.add_argument(
                flag, dest=f.name, action=argparse.BooleanOptionalAction, default=default, help=help_text
            )
        else:
            parser.add_argument(flag, dest=f.name, type=kind, default=default, help=help_text)


def given_args(cls: type, args: argparse.Namespace) -> dict:
    """The fields of `cls` whose flags were given on the command line (added with given_only=True)."""
    return {f.name: v for f in dataclasses.fields(cls) if (v := getattr(args, f.name, None)) is not None}


def dataclass_from_args(cls: type, args: argparse.Namespace):
    return cls(**{f.name: getattr(args, f.name) for f in dataclasses.fields(cls) if hasattr(args, f.name)})
