"""Agreement with the current reward model (issue 30's dashboard): score every ranked response of the store with a
recorded reward run, in chunks (each chunk one write, so a stopped scoring goes on where it stopped and the store
never holds half a chunk), then each annotator's share of pairs the model orders as they did (store/rm_scores.py).

A low share beside a good gold accuracy says the model learned something the annotator does not do; a low share
beside a poor gold accuracy and a low agreement with the others says the annotator is the noise."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.jobs.training import recorded_run, run_kind
from store.db import StoreRef, read, write
from store.errors import UserError
from store.rm_scores import add_scores, rm_agreement, unscored
from store.runs import runs_of_kinds
from training.models import ModelError, reward_folder
from training.registry import run_config

CHUNK = 256  # responses scored between two writes


def newest_reward_run(db: StoreRef, runs_dir: str | Path) -> str:
    """The id of the newest reward run the store recorded under `runs_dir` that has a model (a finished one)."""
    with read(db, create=False) as con:
        runs = runs_of_kinds(con, ["reward"])
    root = Path(runs_dir).resolve()
    for run_id, path in runs:
        if Path(path).resolve().is_relative_to(root) and (Path(path) / "model" / "config.json").is_file():
            return run_id
    raise UserError(f"no finished reward run under {runs_dir} in the store: train one (`rlhf train-rm`) first")


def score_store(
    db: StoreRef,
    run_name: str,
    runs_dir: str | Path,
    dtype: str = "fp32",
    chunk: int = CHUNK,
    progress: Callable[[int], None] | None = None,
) -> tuple[str, int]:
    """Score the ranked responses the run has not scored yet; returns (run id, responses scored now)."""
    from training.pairwise.scoring import load_scorer

    run = recorded_run(db, run_name, runs_dir)
    if run_kind(run) != "reward":
        raise UserError(f"run {run.name} is a {run_kind(run)} run, not a reward model")
    try:
        model = reward_folder(str(run))
    except ModelError as e:
        raise UserError(str(e)) from None
    max_length = int(run_config(run).get("max_length", 512))
    done, score = 0, None
    while True:
        with read(db, create=False) as con:
            todo = unscored(con, run.name, chunk)
        if not todo:
            return run.name, done
        score = score or load_scorer(model, dtype, max_length)  # loaded once, when there is something to score
        scores = score([p for _, p, _ in todo], [[t] for _, _, t in todo])
        with write(db) as con:
            add_scores(con, run.name, [rid for rid, _, _ in todo], [s[0] for s in scores])
        done += len(todo)
        if progress is not None:
            progress(done)


def agreement_lines(db: StoreRef, run_id: str) -> list[str]:
    """One line per annotator: their share of pairs the run's model orders as they did, on how many pairs."""
    with read(db, create=False) as con:
        by = rm_agreement(con, run_id)
    if not by:
        return [f"no scored pairs for {run_id}"]
    width = max(map(len, by))
    return [f"{a.ljust(width)}  {share:6.1%} of {n} pairs" for a, (share, n) in sorted(by.items())]
