"""Timings as the median of several runs with their range (issue 53): a benchmark's `run()` is called `n` times,
each call a whole run (its processes started afresh), and its rows are combined figure by figure: the median, with
every run's own row kept under "repeats" so the range of any figure can be read back. A ratio is each run's own
(both sides of it timed in that run), and the median of those."""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path


def median_of(runs: list) -> object:
    """The figure-by-figure median of runs of the same shape: numbers by their median, records and lists by their
    parts; anything else (a name, a flag, a line a run printed) is the first run's, the others' kept in their
    rows."""
    first = runs[0]
    if isinstance(first, bool) or not isinstance(first, int | float | dict | list):
        return first
    if isinstance(first, int | float):
        return statistics.median(runs)
    if isinstance(first, dict):
        return {k: median_of([r[k] for r in runs]) for k in first if all(k in r for r in runs)}
    if any(len(r) != len(first) for r in runs):
        raise ValueError(f"runs of different lengths cannot be combined: {[len(r) for r in runs]}")
    return [median_of(list(parts)) for parts in zip(*runs, strict=True)]


def repeated(run: Callable[[], list[dict]], n: int, keep: Path | None = None, made: dict | None = None) -> list[dict]:
    """`run()` n times: one row per row of a run, its figures the median over the runs, its runs' own rows under
    "repeats". keep: a file each run's rows are appended to as it ends, with `made` (the command, commit and
    machine): a sitting cut after some runs loses only the one it was in, and the next call with the same `made`
    runs only the rest (a kept run made otherwise is dropped, never mixed in). The file goes once all n are done."""
    if n < 1:
        raise ValueError("at least one run")
    runs = kept_runs(keep, made)[:n] if keep else []
    while len(runs) < n:
        runs.append(run())
        if keep:
            keep.parent.mkdir(parents=True, exist_ok=True)
            with keep.open("a") as f:
                f.write(json.dumps({"made": made, "rows": runs[-1]}) + "\n")
    if keep:
        keep.unlink(missing_ok=True)
    rows = median_of(runs)
    return [{**row, "repeats": [r[i] for r in runs]} for i, row in enumerate(rows)]


def spread(row: dict, *path: str) -> tuple[float, float] | None:
    """The lowest and highest of one figure over a row's runs (None for a row measured once)."""
    repeats = row.get("repeats")
    if not repeats:
        return None
    values = []
    for r in repeats:
        for key in path:
            r = r[key]
        values.append(r)
    return min(values), max(values)


def fig(row: dict, form: str, *path: str) -> str:
    """A figure of a row as `form` prints it, with its range over the row's runs where it ran more than once."""
    value = row
    for key in path:
        value = value[key]
    shown = form.format(value)
    low_high = spread(row, *path)
    return shown if low_high is None else f"{shown} ({form.format(low_high[0])}-{form.format(low_high[1])})"


def kept_runs(keep: Path, made: dict | None) -> list[list[dict]]:
    """The runs an earlier sitting kept in `keep` with the same `made`; a file from another command, commit or
    machine is removed (a half-written last line, from a kill mid-write, is not a run)."""
    if not keep.exists():
        return []
    runs = []
    for line in keep.read_text().splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("made") != made:
            keep.unlink()
            return []
        runs.append(entry["rows"])
    return runs
