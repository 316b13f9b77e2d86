"""Config dataclasses -> Gradio form fields, so the Train tab's forms come from the same source as the CLI flags
(app/faces/config_args.py) and the run's config.json."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from store.errors import UserError

_KINDS = {"int": int, "float": float, "str": str, "bool": bool}


def _kind(f: dataclasses.Field) -> type:
    return f.type if isinstance(f.type, type) else _KINDS[str(f.type)]


def form_fields(cls: type, skip: tuple[str, ...] = ()) -> list[dataclasses.Field]:
    return [f for f in dataclasses.fields(cls) if f.name not in skip]


def build_form(cls: type, skip: tuple[str, ...] = (), prefix: str = "", per_row: int = 4) -> list:
    """One component per field (label = the field name, info = its help), in rows; returns them in field order."""
    import gradio as gr

    comps = []
    fields = form_fields(cls, skip)
    for i in range(0, len(fields), per_row):
        with gr.Row():
            for f in fields[i : i + per_row]:
                kind, info = _kind(f), f.metadata.get("help", "")
                elem_id = f"{prefix}{f.name}".replace("_", "-")
                if kind is bool:
                    comps.append(gr.Checkbox(value=f.default, label=f.name, info=info, elem_id=elem_id))
                elif kind in (int, float):
                    precision = 0 if kind is int else None
                    comps.append(
                        gr.Number(value=f.default, label=f.name, info=info, precision=precision, elem_id=elem_id)
                    )
                else:
                    comps.append(gr.Textbox(value=f.default, label=f.name, info=info, elem_id=elem_id))
    return comps


def config_from_form(cls: type, skip: tuple[str, ...], values: list):
    """The dataclass from the form's values (types restored; an empty number is the field's default)."""
    kwargs = {}
    for f, v in zip(form_fields(cls, skip), values, strict=True):
        kind = _kind(f)
        if v is None or (kind is not str and v == ""):
            v = f.default
        kwargs[f.name] = kind(v) if kind is not bool else bool(v)
    return cls(**kwargs)


def form_values_from_file(cls: type, skip: tuple[str, ...], path: str | Path) -> list:
    """A saved config.json (a run's, or one written by hand) -> the form's values; unknown keys are an error."""
    try:
        cfg = cls.load(path)
    except (OSError, ValueError, TypeError) as e:
        raise UserError(f"cannot read config {Path(path).name}: {str(e).splitlines()[0][:200]}") from None
    return [getattr(cfg, f.name) for f in form_fields(cls, skip)]
