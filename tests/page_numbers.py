"""Numbers on a rendered results page that are not in its results file (issue 53).

A page's measured figures sit in its tables and its bullet lines; each must be a number of the JSON it was rendered
from, as the renderers print them: itself, as a percentage, in millions, its inverse (a rate as an interval), clipped
to [0, 1] (an interval of a proportion), or the total of a record's figures (a memory total). Each is compared at the
precision the page prints. Samples quoted from a model and the checks' thresholds are not measurements."""

from __future__ import annotations

import re

# a number not inside a word, a version or a path, with a unit of ratios or millions after it ("1.37x", "2.5M"); a
# minus only where it starts the number (not in "72.1%-81.8%")
NUMBER = re.compile(r"(?:(?<=[\s|(])-)?(?<![\w.:/])\d[\d,]*(?:\.\d+)?(?=[xM]?(?![\w/:]|\.\d))")
# the same words on every page (an interval's level, chance) and dates
CONSTANTS = re.compile(r"95% (?:CI|interval)|(?:above|below|over|against|holds) 50%|\d{4}-\d\d-\d\d( \d\d:\d\d)?")


def figures(data: object) -> set[float]:
    """Every number in a results file: leaves, numbers inside strings, and each record's total."""
    out: set[float] = set()
    if isinstance(data, bool):
        return out
    if isinstance(data, int | float):
        out.add(float(data))
    elif isinstance(data, str):
        out |= {float(m.group(0).replace(",", "")) for m in NUMBER.finditer(data)}
    elif isinstance(data, dict):
        values = [v for v in data.values() if isinstance(v, int | float) and not isinstance(v, bool)]
        if len(values) > 1:
            out.add(float(sum(values)))
        for v in data.values():
            out |= figures(v)
    elif isinstance(data, list):
        for v in data:
            out |= figures(v)
    return out


def _forms(v: float) -> tuple[float, ...]:
    return (v, v * 100, min(max(v, 0.0), 1.0) * 100, v / 1e6) + ((1 / v,) if v else ())


def printed_from(token: str, known: set[float]) -> bool:
    """Whether `token` as printed is one of `known` in one of its printed forms, at the token's precision."""
    text = token.replace(",", "")
    decimals = len(text.split(".")[1]) if "." in text else 0
    value, slack = float(text), 0.5 * 10**-decimals + 1e-9
    return any(abs(f - value) <= slack for v in known for f in _forms(v))


def measured_lines(page: str) -> list[tuple[int, str]]:
    """The lines that hold measurements: table rows (not a table's head or rule, without the first cell, the row's
    label: a step, a seed, an N) and bullets, without quoted samples or the checks' PASS/FAIL lines."""
    lines = page.splitlines()
    rule = re.compile(r"^\|[\s|:-]+\|?$")
    out = []
    for i, line in enumerate(lines):
        if line.startswith("|"):
            if rule.match(line) or (i + 1 < len(lines) and rule.match(lines[i + 1])):
                continue
            line = "|" + line.split("|", 2)[-1]
        elif not line.startswith("- ") or ": '" in line or line.startswith(("- PASS", "- FAIL")):
            continue
        out.append((i + 1, line))
    return out


def not_in_source(page: str, data: object) -> list[str]:
    """'line N: TOKEN' for every number on the page's measured lines that its results file does not hold."""
    known = figures(data)
    out = []
    for n, line in measured_lines(page):
        for m in NUMBER.finditer(CONSTANTS.sub("", line)):
            if not printed_from(m.group(0), known):
                out.append(f"line {n}: {m.group(0)} in {line[:90]!r}")
    return out
