"""A demo that outlives a session: each finished stage's outputs in DEMO/stages.json, so `rlhf demo --resume DEMO`
skips what is done and goes on from the first stage that is not.

The default-model demo takes hours on a CPU (sampling, a reward-model ensemble, PPO, RLOO, DPO, best-of-16): more
than one sitting. A stage is done when its outputs are written here (atomically, after the stage returned); a stage
cut short is run again, except a training run that checkpoints (the reward model, PPO, RLOO): its run folder is
recorded when it starts, and a resumed demo continues that run from its last checkpoint (`resume_run`) instead of
starting over (a demo started before the reward stage recorded its run trains its reward model again).
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
    """The demo folder's record of finished stages ({"done": {name: {"value", "seconds"}}, "started": {name: run}})
    and of the sittings that ran them ({"sittings": [{command, commit, date, machine, cpu, "stages": [name]}]}): a
    demo resumed across sessions names the command and commit each of its stages ran at."""

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

    def begin_sitting(self, made: dict) -> None:
        """This sitting's command, commit, date and machine (app/jobs/provenance.py), before any stage runs."""
        self.state.setdefault("sittings", []).append({**made, "stages": []})
        write_json_atomic(self.path, self.state)

    def sittings(self) -> list[dict]:
        return self.state.get("sittings", [])  # none in a demo from before 2026-12-07's record of them

    def finish(self, name: str, value: Any, seconds: float) -> None:
        self.state["done"][name] = {"value": value, "seconds": round(seconds, 1)}
        self.state["started"].pop(name, None)
        if self.sittings():
            self.state["sittings"][-1]["stages"].append(name)
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
    return cls(**{**legacy(cls), **saved["config"]}), bool(saved["quick"]), int(saved["seeds"])


def legacy(cls: type) -> dict:
    """What a settings file written before a setting existed ran with (DemoConfig's LEGACY; {} for another class)."""
    from app.studies.demo_config import LEGACY, DemoConfig

    return dict(LEGACY) if cls is DemoConfig else {}


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


# `rlhf demo --fork DEMO`: a new demo on DEMO's prompts, rankings and reward model, training what follows afresh.
# A trial of other PPO (or DPO) settings then costs the training it changes, not the sampling and the reward model
# (an hour of the default-model demo here), and every trial meets the same reward model: a controlled comparison.
# A stage whose settings are all unchanged is kept too, so a study added to a finished demo (--campaign) runs alone.
KEPT_STAGES = ("set-up", "sampling", "reward")
KEPT_SETTINGS = (  # what the kept stages were made with: a fork may not change them
    "model",
    "reward_base",
    "n_prompts",
    "split",
    "split_seed",
    "evaluate_on",
    "heldout",
    "taste",
    "annotators",
    "k",
    "max_new_tokens",
    "min_new_tokens",
    "dtype",
    "rm_epochs",
    "rm_ensemble",
    "rm_lr",
    "seed",
    "rounds",
)
PPO_STAGES = ("ppo", "evaluation", "checkpoints and best-of-N")
PPO_SETTINGS = (
    "ppo_epochs",
    "ppo_steps",
    "actor_lr",
    "critic_lr",
    "kl_ctl",
    "save_every",
    "ppo_settings",
    "best_of",
    "engine",
)
DPO_SETTINGS = ("dpo_lr", "dpo_beta", "dpo_epochs")
SNAPSHOT_SETTINGS = {"dpo": DPO_SETTINGS, "kto": ("kto_lr", "kto_beta", "dpo_epochs")}  # on the RM's snapshot
OWN_SETTINGS = {  # a method on prompts' own, beside PPO's
    "rloo": ("method_steps", "rloo_settings"),
    "rloo_pairwise": ("method_steps", "rloo_settings"),
    "online_dpo": ("method_steps", "online_dpo_lr", "online_dpo_beta"),
}
BIG_FILE = 1 << 20  # weights are linked, not copied; every smaller file is copied (and may be rewritten)


def kept_stages(done: dict, cfg: Any, parent: Any) -> tuple[list[str], list[str]]:
    """(the stages of DEMO a fork with settings cfg keeps as they are, the finished training runs it keeps to sample
    and judge again). Always the first three; PPO, its evaluation and checkpoints where no PPO setting changed; DPO
    where PPO's stages are kept and no DPO setting changed (its run alone where only PPO changed: its verdict
    against PPO is judged again); RLOO, RLOO on win fractions and online DPO (PPO's settings, and online DPO's own)
    where PPO's stages are kept and their own settings did not change. The campaign study runs again
    where it is on (its reward models are its own)."""
    same = lambda names: all(getattr(cfg, k) == getattr(parent, k) for k in names)  # noqa: E731
    methods = {m.strip() for m in cfg.methods.split(",")}
    stages = list(KEPT_STAGES)
    ppo = same(PPO_SETTINGS) and all(name in done for name in PPO_STAGES)
    stages += list(PPO_STAGES) if ppo else []
    runs = [done["reward"]["value"][1]]  # the reward stage's value: [config, run name, final metrics]
    for name, settings in SNAPSHOT_SETTINGS.items():
        if name in done and name in methods and same(settings):
            stages += [name] if ppo else []
            runs += [done[name]["value"][0][f"{name}_run"]]  # a method stage's value: [results, held-out samples]
    if ppo:
        runs += [done["ppo"]["value"]]
        for name in ("rloo", "rloo_pairwise", "online_dpo"):  # demo_methods.ON_PROMPTS: PPO's settings, PPO's steps
            if name in done and name in methods and same(OWN_SETTINGS.get(name, ())):
                stages.append(name)
                runs += [done[name]["value"][0][f"{name}_run"]]
    return stages, runs


def fork_settings(source: Path, cls: type, given: dict) -> tuple[Any, Any, bool]:
    """(the fork's config: DEMO's settings with those given on the command line, DEMO's config, quick). One error
    line when DEMO has not finished the kept stages or a given setting would change what they were made with."""
    if not (source / SETTINGS_FILE).is_file():
        raise UserError(f"{source} is not a demo folder to fork (no {SETTINGS_FILE})")
    parent, quick, _ = load_settings(source, cls, {})
    if parent.rounds > 1:
        raise UserError(f"{source} is a rounds study: --fork takes a demo")
    changed = [name for name in KEPT_SETTINGS if name in given and given[name] != getattr(parent, name)]
    if changed:
        flags = ", ".join("--" + name.replace("_", "-") for name in changed)
        raise UserError(
            f"--fork keeps {source.name}'s prompts, rankings and reward model, made with its settings; drop {flags}"
        )
    missing = [name for name in KEPT_STAGES if not Stages(source).done(name)]
    if missing:
        raise UserError(f"{source.name} has not finished its {missing[0]} stage: go on with --resume {source}")
    if "ppo_settings" in given:  # on top of DEMO's, as on top of a preset's
        from app.studies.demo_common import merged_ppo_settings

        given = {**given, "ppo_settings": merged_ppo_settings(parent.ppo_settings, given["ppo_settings"])}
    return dataclasses.replace(parent, **given), parent, quick


def _copy_tree(src: Path, dst: Path, old: str, new: str) -> None:
    """src's files into dst: big ones hard-linked (copied where the file system cannot), the others copied with
    the folder `old` named `new` in them (a run's config names its own folder and its snapshot)."""
    import os
    import shutil

    for path in sorted(src.rglob("*")):
        to = dst / path.relative_to(src)
        if path.is_dir():
            to.mkdir(parents=True, exist_ok=True)
            continue
        to.parent.mkdir(parents=True, exist_ok=True)
        if path.stat().st_size >= BIG_FILE:
            try:
                os.link(path, to)
                continue
            except OSError:
                pass
            shutil.copy2(path, to)
        elif path.suffix == ".json":
            to.write_text(path.read_text().replace(old, new))
        else:
            shutil.copy2(path, to)


def fork_demo(source: Path, folder: Path, cfg: Any, parent: Any) -> list[str]:
    """Fill the new demo `folder` with what DEMO's stages a fork keeps (kept_stages: recorded done in its
    stages.json, with DEMO's folder named `folder` in them; a kept training run of a stage that runs again recorded
    as started, so it is sampled, not trained), their files (the runs, the snapshots, the tiny models of --quick,
    the held-out prompts) and a copy of DEMO's store that knows only the runs kept. Returns
    the stages kept."""
    import shutil

    from store.db import copy_store, write
    from store.runs import keep_runs

    source, folder = source.resolve(), folder.resolve()
    old, new = str(source), str(folder)
    done = Stages(source).state["done"]
    stages, runs = kept_stages(done, cfg, parent)
    runs = [run for run in runs if (source / "runs" / run).is_dir()]
    for name in ("snapshots", "models", *(f"runs/{run}" for run in runs)):
        if (source / name).is_dir():
            _copy_tree(source / name, folder / name, old, new)
    for name in ("heldout_prompts.txt", "split.json"):  # split.json: demos from 2026-12-07 on
        if (source / name).is_file():
            shutil.copy2(source / name, folder / name)
    copy_store(source / "store.duckdb", folder / "store.duckdb")
    with write(str(folder / "store.duckdb")) as con:
        keep_runs(con, runs, old, new)
    state = json.loads(json.dumps({"done": {k: done[k] for k in stages}, "started": {}}).replace(old, new))
    for name in ("dpo", "kto", "rloo", "rloo_pairwise", "online_dpo"):
        key = f"{name}_run"
        if name in done and name not in stages and done[name]["value"][0][key] in runs:
            state["started"][name] = done[name]["value"][0][key]
    state["forked"] = {"from": old, "kept": stages}
    write_json_atomic(folder / STAGES_FILE, state)
    return stages
