"""The Train tab's plain functions: start reward-model and PPO runs (or one after the other), watch them, stop and
resume them; the runs table, a run's status, log tail, plot data and samples, all read from the run folders.

The app starts runs through the same functions as `rlhf train-rm` / `rlhf train-ppo` (app/jobs/training.py) and the
same DeepSpeed launcher; each run is its own process session, so it survives an app restart, and the runs table
is rebuilt from the store and the run folders."""

from __future__ import annotations

import dataclasses
import json
import threading
from pathlib import Path

from app.jobs.training import frozen_prompts, launch, pause, prepare_run, recorded_run, run_kind
from store.db import StoreRef, read
from store.errors import UserError
from store.runs import list_runs
from store.snapshot import list_snapshots
from training.config_file import ConfigFile
from training.dpo.config import DPOConfig
from training.precision import with_resolved_dtype
from training.registry import TRAINERS, kind_of, run_config, step_rows, trainer
from training.reward.config import RewardConfig
from training.rollouts.prompts_config import PromptsConfig
from training.runs import STOP_FILE, effective_status, read_metrics, read_status, request_stop, write_json_atomic

RM_PLOTS = trainer("reward").plots
PPO_PLOTS = trainer("ppo").plots


class Runs:
    """The training processes this app started: reaped as they end, and a launcher that died without a word
    has its run marked failed (a run is never shown 'running' forever)."""

    def __init__(self, db: StoreRef, runs_dir: Path, num_accelerators: int = 1, on_launch=None):
        self.db = db
        self.on_launch = on_launch  # called before each launch (the app frees its models)
        self.runs_dir = runs_dir
        self.num_accelerators = num_accelerators
        self.procs: dict[Path, object] = {}
        self._lock = threading.Lock()

    def _launch(self, kind: str, run: Path) -> Path:
        with self._lock:  # the check and the launch together: two clicks at once start one run
            self.check_free(run)
            (run / STOP_FILE).unlink(missing_ok=True)
            if self.on_launch:
                self.on_launch()
            self.procs[run] = launch(kind, run, self.num_accelerators)
        return run

    def check_free(self, run: Path | None = None) -> None:
        """One training at a time on this machine: a run of this app's, or one the store records as starting or
        running (the CLI's too), makes a start or resume wait. Two runs would share the CPU cores or the GPU's
        memory and both crawl, or one die out of memory."""
        alive = [r for r, proc in self.procs.items() if proc.poll() is None and r != run]
        if not alive:
            with read(self.db, create=False) as con:
                alive = [Path(path) for _, _, path, _ in list_runs(con) if Path(path) != run]
            alive = [r for r in alive if effective_status(r).get("state") in ("starting", "running")]
        if alive:
            state = effective_status(alive[0]).get("state", "running")
            raise UserError(
                f"run {alive[0].name} is {state}: one training at a time here (stop it, or wait until it ends)"
            )

    def start(self, cfg: ConfigFile, data: str | None = None) -> Path:
        """Any trainer's run (app/jobs/training.py::prepare_run): `data` is a snapshot or pairs file for a trainer on
        pairs, a prompts file for one on prompts; None: the store's."""
        cfg, _ = with_resolved_dtype(cfg)  # the run's config.json, and its status line, name the dtype picked
        self.check_free()  # before a snapshot and a run folder are made for nothing
        return self._launch(cfg.KIND, prepare_run(self.db, cfg, self.runs_dir, data))

    def start_chain(
        self,
        rm: RewardConfig,
        ppo: PromptsConfig,
        data: str | None = None,
        prompts: str | None = None,
        dpo: DPOConfig | None = None,
    ) -> Path:
        """The reward model now; a trainer on prompts (`ppo`: PPO's config, or RLOO's, online DPO's) on it once it
        finishes; then, with `dpo`, DPO from the reward model's own snapshot, so both policies learn from the same
        pairs (a thread waits; one run at a time on the machine). Returns the reward run."""
        try:  # refuse a bad policy or DPO setting now, not after the reward model has trained
            dataclasses.replace(ppo, reward="(the reward run)").check()
            if dpo is not None:
                dpo.check()
        except ValueError as e:
            raise UserError(str(e)) from None
        if prompts:  # a bad prompts file is refused now, not after the reward model has trained
            prompts = frozen_prompts(prompts, self.runs_dir.parent / "snapshots")
        rm_run = self.start(rm, data)

        def then_the_rest():
            if not self._wait(rm_run):
                return
            ppo_run = self.start(dataclasses.replace(ppo, reward=str(rm_run)), prompts)
            if dpo is not None and self._wait(ppo_run):
                self.start(dpo, run_config(rm_run)["data"])  # the reward model's snapshot

        threading.Thread(target=then_the_rest, daemon=True, name=f"chain-{rm_run.name}").start()
        return rm_run

    def _wait(self, run: Path) -> bool:
        """Block until the run ends; True if it finished."""
        while effective_status(run).get("state") in ("starting", "running") or self._alive(run):
            pause(self.procs.get(run), 1.0)  # a run this app started: back as soon as its launcher exits
            self.poll()
        return read_status(run).get("state") == "finished"

    def _alive(self, run: Path) -> bool:
        proc = self.procs.get(run)
        return proc is not None and proc.poll() is None

    def find(self, name: str | Path) -> Path:
        """A run this store recorded under the runs folder, by id or folder (app/jobs/training.py::recorded_run)."""
        return recorded_run(self.db, str(name), self.runs_dir)

    def stop(self, name: str | Path) -> str:
        run = self.find(name)
        if effective_status(run).get("state") not in ("starting", "running"):
            raise UserError(f"run {run.name} is not running")
        request_stop(run)
        return f"asked {run.name} to stop after its current step (it keeps a checkpoint; Resume continues it)"

    def resume(self, name: str | Path) -> Path:
        run = self.find(name)
        state = effective_status(run).get("state")
        if state in ("starting", "running", "finished"):
            raise UserError(f"run {run.name} is {state}; only a stopped or failed run resumes")
        return self._launch(run_kind(run), run)

    def poll(self) -> None:
        """Reap ended launchers; one that exited non-zero while its status still says running failed."""
        with self._lock:
            for run, proc in list(self.procs.items()):
                if proc.poll() is None:
                    continue
                del self.procs[run]
                status = read_status(run)
                if proc.returncode != 0 and status.get("state") in ("starting", "running"):
                    error = f"the launcher exited with {proc.returncode}; see {run / 'train.log'}"
                    write_json_atomic(run / "status.json", {**status, "state": "failed", "error": error})


def runs_rows(db: StoreRef) -> list[list]:
    """[run, kind, started, state, step, headline, folder] for every recorded run, newest first."""
    with read(db, create=False) as con:
        runs = list_runs(con)
    rows = []
    for run_id, kind, path, created in runs:
        status = effective_status(path)
        final = status.get("final") or {}
        headline = (TRAINERS[kind].headline(final) if kind in TRAINERS else "") or status.get("error", "")
        step = f"{status.get('step', 0)}/{status.get('total_steps', '?')}"
        rows.append([run_id, kind, created[:19], status.get("state", "unknown"), step, headline, path])
    return rows


def log_tail(run: Path, lines: int = 40) -> str:
    """The last lines of train.log, without DeepSpeed's and transformers' progress-bar noise."""
    path = run / "train.log"
    if not path.exists():
        return ""
    with path.open("rb") as f:
        f.seek(max(0, path.stat().st_size - 64_000))
        text = f.read().decode("utf-8", "replace")
    kept = [ln for ln in text.replace("\r", "\n").splitlines() if ln.strip() and "it/s]" not in ln]
    return "\n".join(kept[-lines:])


def plot_frames(run: Path) -> dict[str, list[tuple[int, float]]]:
    """{metric: [(step, value), ...]} for the metrics the run's trainer plots (training/registry.py). A metric that
    a training step logs is read from the step rows (one per step: the final line repeats the last); one that only
    evaluations log (eval/...) from every row that has it."""
    try:
        kind = kind_of(run)
    except ValueError:
        return {}
    rows = [r for r in read_metrics(run) if "step" in r]
    steps = step_rows(kind, rows)
    frames = {
        k: [(r["step"], r[k]) for r in (steps if any(k in r for r in steps) else rows) if k in r]
        for k in trainer(kind).plots
    }
    # a metric the run does not log (no held-out judge, no evaluated checkpoints) gets no empty plot, once it has
    # logged a step
    return {k: v for k, v in frames.items() if v or not steps}


def samples_rows(run: Path, n: int = 6) -> list[list]:
    """The latest logged completions: [step, score, response, prompt (its end: the template's start repeats)]."""
    path = run / "samples.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines()[-n:]]
    return [[r["step"], r["score"], r["response"], r["prompt"].strip()[-160:]] for r in reversed(rows)]


def _config_dtype(run: Path) -> str:
    try:
        return str(run_config(run).get("dtype", ""))
    except ValueError:
        return ""


def status_line(run: Path) -> str:
    s = effective_status(run)
    parts = [f"**{run.name}**: {s.get('state', 'unknown')}, step {s.get('step', 0)}/{s.get('total_steps', '?')}"]
    dtype = _config_dtype(run)
    if dtype:
        parts.append(dtype)
    if s.get("error"):
        parts.append(f"error: {s['error']}")
    if s.get("alarm"):  # the over-optimisation watch fired (training/watch.py)
        parts.append(f"⚠ over-optimisation alarm: {s['alarm']}")
    if s.get("state") == "finished":
        parts.append(f"output: {run / saved_output(run)}")
    return " · ".join(parts)


def saved_output(run: Path) -> str:
    """The folder inside a run that holds its saved weights, as its trainer names it (training/registry.py: a reward
    model's model/, PPO's and RLOO's actor/, DPO's policy/)."""
    from training.registry import kind_of, trainer

    try:
        return trainer(kind_of(run)).output
    except ValueError:  # no readable config.json: name what is there
        return next((name for name in ("model", "policy", "actor") if (run / name).exists()), "model")


def snapshot_choices(db: StoreRef) -> list[tuple[str, str]]:
    """('current store', '') then the earlier snapshots, newest first: (label, folder)."""
    with read(db, create=False) as con:
        snapshots = list_snapshots(con)
    return [("current store (a new snapshot)", "")] + [
        (f"snapshot {s.snapshot_id} ({s.created_at[:19]})", s.path) for s in snapshots if Path(s.path).is_dir()
    ]
