"""`rlhf train-rm` (and later the app's Train button): snapshot the store or take a pairs file, write the run
folder and its config, launch through the DeepSpeed launcher, and follow the run until it ends."""

from __future__ import annotations

import dataclasses
import datetime as dt
import secrets
import time
from collections.abc import Callable
from pathlib import Path

from store.db import write
from store.errors import StoreError
from store.runs import latest_snapshot_id, record_run
from store.snapshot import write_snapshot
from training.launcher import launch
from training.models import resolve_model
from training.reward.config import RewardConfig
from training.reward.data import DataError, load_pairs
from training.runs import read_metrics, read_status, write_json_atomic


def new_run_dir(runs_dir: Path, kind: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = runs_dir / f"{kind}-{stamp}-{secrets.token_hex(2)}"
    folder.mkdir(parents=True)
    return folder


def _check_pairs(data: str, cfg: RewardConfig) -> None:
    try:
        train, _ = load_pairs(data, cfg.eval_fraction, cfg.seed)
    except DataError as e:
        raise StoreError(str(e)) from None
    if not train:
        raise StoreError("no training pairs: every prompt landed in the eval split; add more prompts")


def prepare_reward_run(db: str, cfg: RewardConfig, runs_dir: Path, pairs: str | None = None) -> Path:
    """Check the inputs, freeze the data, write RUN/config.json and record the run; returns the run folder."""
    try:
        cfg.check()
    except ValueError as e:
        raise StoreError(str(e)) from None
    resolve_model(cfg.model)  # a bad --model fails here, in one line, before anything starts
    snapshot_id = None
    data = str(Path(pairs).resolve()) if pairs else None
    if data:  # a pairs file is read before the store is opened, so the store is held only for the record
        _check_pairs(data, cfg)
    with write(db) as con:
        if not data:
            folder = write_snapshot(con, runs_dir.parent / "snapshots", eval_fraction=cfg.eval_fraction, seed=cfg.seed)
            data, snapshot_id = str(folder), latest_snapshot_id(con)
            _check_pairs(data, cfg)
        run = new_run_dir(runs_dir, "rm")
        model = cfg.model if cfg.model == "default" else str(Path(cfg.model).resolve())
        cfg = dataclasses.replace(cfg, data=data, model=model, output_dir=str(run.resolve()))
        cfg.save(run / "config.json")
        record_run(con, run.name, "reward", str(run.resolve()), dataclasses.asdict(cfg), snapshot_id)
    return run


def follow(run: Path, proc, on_metrics: Callable[[dict], None] | None = None, poll_s: float = 1.0) -> dict:
    """Wait for the launcher to exit, passing each new metrics row on; returns the final status."""
    seen = 0
    while True:
        done = proc.poll() is not None
        rows = read_metrics(run)
        for row in rows[seen:]:
            if on_metrics:
                on_metrics(row)
        seen = len(rows)
        if done:
            break
        time.sleep(poll_s)
    status = read_status(run)
    if proc.returncode != 0 and status.get("state") != "failed":
        # the ranks died before they could say so: record it, so the run never shows as running or unknown
        error = f"the launcher exited with {proc.returncode}; see {run / 'train.log'}"
        status = {**status, "state": "failed", "error": error}
        write_json_atomic(run / "status.json", status)
    return status


def run_reward(
    db: str,
    cfg: RewardConfig,
    runs_dir: Path,
    pairs: str | None = None,
    num_accelerators: int = 1,
    hostfile: str | None = None,
    on_metrics: Callable[[dict], None] | None = None,
) -> tuple[Path, dict]:
    run = prepare_reward_run(db, cfg, runs_dir, pairs)
    proc = launch("reward", run, num_accelerators, hostfile)
    return run, follow(run, proc, on_metrics)


def resume_reward(
    run: Path, num_accelerators: int = 1, hostfile: str | None = None, on_metrics: Callable[[dict], None] | None = None
) -> dict:
    """Launch an existing run folder again; training continues from its last checkpoint."""
    if not (run / "config.json").is_file():
        raise StoreError(f"{run} is not a run folder: no config.json")
    if read_status(run).get("state") == "finished":
        raise StoreError(f"run {run.name} already finished")
    proc = launch("reward", run, num_accelerators, hostfile)
    return follow(run, proc, on_metrics)
