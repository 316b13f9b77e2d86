"""A demo that outlives a session: each finished stage's outputs in DEMO/stages.json, so `rlhf demo --resume DEMO`
skips what is done and goes on from the first stage that is not.

The default-model demo takes hours on a CPU (sampling, a reward-model ensemble, PPO, RLOO, DPO, best-of-16): more
than one sitting. A stage is done when its outputs are written here (atomically, after the stage returned); a stage
cut short is run again, except a training run that checkpoints (PPO, RLOO): its run folder is recorded when it
starts, and a resumed demo continues that run from its last checkpoint (`resume_run`) instead of starting over.
DEMO/demo.json keeps the settings the demo started with, so a resumed demo cannot mix two configurations."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from store.errors import UserError
from training.runs import write_json_atomic

STAGES_FILE = "stages.json"
SETTINGS_FILE = "demo.json"


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise UserError(f"cannot read {path}: {e}") from None


class Stages:
    """The demo folder's record of finished stages ({"done": {name: {"value", "seconds"}}, "started": {name: run}})."""

    def __init__(self, folder: Path):
        self.path = folder / STAGES_FILE
        self.state = _read(self.path) if self.path.exists() else {"done": {}, "started": {}}

    def done(self, name: str) -> bool:
        return name in self.state["done"]

    def value(self, name: str) -> Any:
        return self.state["done"][name]["value"]

    def seconds(self) -> dict[str, float]:
        """Each finished stage's wall time, in the order they finished (across sessions)."""
        return {name: d["seconds"] for name, d in self.state["done"].items()}

    def finish(self, name: str, value: Any, seconds: float) -> None:
        self.state["done"][name] = {"value": value, "seconds": round(seconds, 1)}
        self.state["started"].pop(name, None)
        write_json_atomic(self.path, self.state)

    def start(self, name: str, run: Path) -> None:
        """A training run this stage launched: a resumed demo continues it rather than starting another."""
        self.state["started"][name] = run.name
        write_json_atomic(self.path, self.state)

    def started(self, name: str, runs: Path) -> Path | None:
        run = self.state["started"].get(name)
        return runs / run if run and (runs / run).is_dir() else None


def run_stage(
    stages: Stages,
    name: str,
    fn: Callable[[], Any],
    log: Callable[[str], None],
    encode: Callable[[Any], Any] = lambda v: v,
    decode: Callable[[Any], Any] = lambda v: v,
    clock: Callable[[], float] | None = None,
) -> Any:
    """fn's value, computed now (then kept in stages.json as encode(value)) or kept from before (decode(kept))."""
    import time

    clock = clock or time.time
    if stages.done(name):
        log(f"{name}: done before ({stages.state['done'][name]['seconds']:.0f} s), kept")
        return decode(stages.value(name))
    t = clock()
    value = fn()
    stages.finish(name, encode(value), clock() - t)
    log(f"{name}: {stages.state['done'][name]['seconds']:.0f} s")
    return value


def save_settings(folder: Path, cfg: Any, quick: bool, seeds: int) -> None:
    write_json_atomic(folder / SETTINGS_FILE, {"config": dataclasses.asdict(cfg), "quick": quick, "seeds": seeds})


def load_settings(folder: Path, cls: type, given: dict) -> tuple[Any, bool, int]:
    """(config, quick, seeds) a demo folder started with; settings given beside --resume are refused, because a demo
    half run with one configuration and half with another answers nothing."""
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise UserError(f"--resume takes the demo's settings from {folder / SETTINGS_FILE}; drop {flags}")
    if not (folder / SETTINGS_FILE).is_file():
        raise UserError(f"{folder} is not a demo folder to resume (no {SETTINGS_FILE})")
    saved = _read(folder / SETTINGS_FILE)
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(saved["config"]) - known)
    if unknown:
        raise UserError(f"{folder / SETTINGS_FILE} has settings this version does not know: {', '.join(unknown)}")
    return cls(**saved["config"]), bool(saved["quick"]), int(saved["seeds"])


def prepared_run(
    stages: Stages | None, name: str, runs: Path, prepare: Callable[[], Path], resumable: bool = True
) -> tuple[Path, str]:
    """The stage's training run and how to go on with it: "new" (prepared now, and recorded as started),
    "resume" (an earlier sitting's run, continued from its last checkpoint) or "finished" (trained before the
    sitting ended; only what follows the training runs). A trainer that does not checkpoint starts over."""
    from training.runs import read_status

    if stages is not None and (run := stages.started(name, runs)) is not None:
        state = read_status(run).get("state")
        if state == "finished":
            return run, "finished"
        if resumable:
            return run, "resume"
    run = prepare()
    if stages is not None:
        stages.start(name, run)
    return run, "new"


def train_run(kind: str, run: Path, mode: str, on_metrics: Callable[[dict], None], log: Callable[[str], None]) -> dict:
    """Train a prepared run through the launcher as prepared_run said; returns its final status."""
    from app.jobs.training import resume_run, run_training
    from training.runs import read_status

    if mode == "finished":
        log(f"{run.name}: trained before, kept")
        return read_status(run)
    if mode == "resume":
        log(f"{run.name}: goes on from its last checkpoint (it had logged step {read_status(run).get('step', 0)})")
        return resume_run(run, on_metrics=on_metrics)
    return run_training(kind, run, on_metrics=on_metrics)
