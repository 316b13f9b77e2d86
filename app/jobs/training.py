"""`rlhf train-rm` / `rlhf train-ppo` (and the app's Train tab): freeze the data (a store snapshot, a pairs file,
the store's prompts or a prompts file), write the run folder and its config, launch through the DeepSpeed launcher,
and follow the run until it ends. A prompts file is read here, by the reader `rlhf prompts add` uses, and handed to
the ranks as a frozen .jsonl copy: training never parses a user's prompt file itself."""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import json
import os
import secrets
import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from annotation.prompt_files import read_prompts as read_prompt_file
from store.db import StoreRef, read, write
from store.durable import rename_durably
from store.errors import UserError
from store.prompts import all_prompts
from store.runs import record_run, run_by_id
from store.snapshot import freeze_pairs_file, freeze_snapshot, freeze_unpaired_file, record_snapshot, split_of
from training.config_file import ConfigFile
from training.launcher import host_failures, launch
from training.models import DataError, resolve_model
from training.pairwise.data_types import load_unpaired, read_data_file, snapshot_type, takes_snapshot
from training.pairwise.pairs import load_pairs
from training.pairwise.pairs_config import round_numbers
from training.registry import kind_of, trainer
from training.rollouts.prompt_data import read_prompts
from training.rollouts.prompts_config import PromptsConfig
from training.runs import STOP_FILE, read_metrics, read_status, write_json_atomic


def new_run_dir(runs_dir: Path, kind: str) -> Path:
    stamp = dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    folder = runs_dir / f"{trainer(kind).prefix}-{stamp}-{secrets.token_hex(2)}"
    folder.mkdir(parents=True)
    return folder


def _check_snapshot(data: str, kind: str) -> None:
    """The snapshot holds data the trainer takes (pairs; or unpaired rows for a trainer on unpaired data, which
    reads pairs through the conversion) and at least one training row."""
    wants = trainer(kind).data
    try:
        has = snapshot_type(data)
        if has == "unpaired" and wants == "pairs":
            raise UserError(f"{trainer(kind).title} trains on pairs; {Path(data).name} holds unpaired rows")
        train, _ = load_pairs(data) if wants == "pairs" else load_unpaired(data)
    except DataError as e:
        raise UserError(str(e)) from None
    if not train:
        raise UserError("no training rows: every prompt landed in the eval split; add more prompts")


def _frozen_data_file(path: Path, cfg: ConfigFile, snapshots: Path) -> tuple[Path, dict]:
    """A data file (--pairs: pairs, or unpaired rows for a trainer on unpaired data) read, checked and frozen as a
    snapshot under `snapshots`, as prompts files are."""
    try:
        kind, rows = read_data_file(path, trainer(cfg.KIND).data)
    except DataError as e:
        raise UserError(str(e)) from None
    origin = {"file": str(path.resolve()), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    freeze = freeze_pairs_file if kind == "pairs" else freeze_unpaired_file
    return freeze(snapshots, rows, origin, eval_fraction=cfg.eval_fraction, seed=cfg.seed)


def _local(ref: str) -> str:
    return ref if ref in ("", "default") else str(Path(ref).resolve())


def _under_gold(db: StoreRef, threshold: float) -> dict | None:
    """What a snapshot leaves out for --min-gold-accuracy (annotators never scored on gold are kept)."""
    if not threshold:
        return None
    from annotation.gold import below, scores

    return {"min_gold_accuracy": threshold, "annotators": below(scores(db), threshold)}


def left_out_line(data: str) -> str:
    """The line that says what a snapshot left out for --min-gold-accuracy ('' when nothing was asked)."""
    try:
        left = json.loads((Path(data) / "manifest.json").read_text()).get("left_out")
    except (OSError, ValueError):
        return ""
    if not left:
        return ""
    who = ", ".join(left["annotators"]) or "nobody"
    return (
        f"left out {left['pairs_removed']} pairs of {len(left['annotators'])} annotators under gold accuracy "
        f"{left['min_gold_accuracy']:g}: {who}"
    )


def prepare_pairs_run(db: StoreRef, cfg: ConfigFile, runs_dir: Path, pairs: str | None = None) -> Path:
    """A run that trains on a snapshot (pairs: the reward model, DPO; unpaired rows: KTO): check the inputs, freeze
    the data (a snapshot of the store, or the data file given), write RUN/config.json and record the run; returns
    the run folder."""
    try:
        cfg.check()
    except ValueError as e:
        raise UserError(str(e)) from None
    for ref in (cfg.model, getattr(cfg, "reference", "")):
        if ref:
            resolve_model(ref)  # a bad --model fails here, in one line, before anything starts
    snapshot_id, data, frozen = None, None, None
    if pairs and cfg.rounds:
        raise UserError("--rounds picks pairs from the store by round; a pairs file has no rounds")
    if pairs and cfg.with_votes:
        raise UserError("--with-votes takes the votes from the store; a pairs file has none")
    if pairs and cfg.min_gold_accuracy:
        raise UserError("--min-gold-accuracy scores the store's annotators; a pairs file has none")
    if pairs and Path(pairs).is_dir():  # a snapshot folder is taken as it is
        data = str(Path(pairs).resolve())
    elif pairs:  # a pairs file is frozen before the store is opened: the store is held only for the record
        frozen = _frozen_data_file(Path(pairs), cfg, runs_dir.parent / "snapshots")
    else:  # frozen on a read connection: annotators keep submitting while the files are written
        left_out = _under_gold(db, cfg.min_gold_accuracy)
        with read(db) as con:
            frozen = freeze_snapshot(
                con,
                runs_dir.parent / "snapshots",
                eval_fraction=cfg.eval_fraction,
                seed=cfg.seed,
                rounds=round_numbers(cfg.rounds),
                with_votes=cfg.with_votes,
                left_out=left_out,
                thumbs=trainer(cfg.KIND).data == "unpaired",
            )
    if frozen:
        data = str(frozen[0].resolve())  # the ranks run in the run folder
    _check_snapshot(data, cfg.KIND)
    with write(db) as con:
        if frozen:
            snapshot_id = record_snapshot(con, *frozen)
        run = new_run_dir(runs_dir, cfg.KIND)
        cfg = dataclasses.replace(cfg, data=data, model=_local(cfg.model), output_dir=str(run.resolve()))
        if hasattr(cfg, "reference"):  # a trainer with a frozen reference model (DPO)
            cfg = dataclasses.replace(cfg, reference=_local(cfg.reference))
        cfg.save(run / "config.json")
        record_run(con, run.name, cfg.KIND, str(run.resolve()), cfg.as_json(), snapshot_id)
    return run


def pause(proc, seconds: float) -> None:
    """Wait `seconds`, or less if the launcher `proc` exits first (None: no process of ours to watch)."""
    if proc is None:
        time.sleep(seconds)
        return
    try:
        proc.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        pass


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
        pause(proc, poll_s)  # for the next metrics rows
    status = read_status(run)
    if proc.returncode != 0 and status.get("state") not in ("failed", "stopped", "finished"):
        # the ranks died before they could say so: record it, so the run never shows as running or unknown
        error = f"the launcher exited with {proc.returncode}; see {run / 'train.log'}"
        status = {**status, "state": "failed", "error": error}
        write_json_atomic(run / "status.json", status)
    return status


def recorded_run(db: StoreRef, name: str, runs_dir: str | Path) -> Path:
    """The folder of a run the store recorded under `runs_dir`, named by its id (or by that folder, as `rlhf runs`
    prints it). Anything else is refused, everywhere a run is named (Resume, Stop, the run view, next round; the
    CLI's --resume and stop): resuming a folder makes DeepSpeed unpickle its checkpoint files, so a planted folder
    would run its code."""
    name = (name or "").strip()
    if not name:
        raise UserError("name a run: its id, as `rlhf runs` lists it (click a row in the Train tab)")
    with read(db, create=False) as con:
        row = run_by_id(con, name)
        if row is None and os.sep in name:  # a folder: only the run recorded at exactly that folder
            row = run_by_id(con, Path(name).name)
            row = row if row is not None and Path(row.path).resolve() == Path(name).resolve() else None
    if row is None:
        raise UserError(f"no run {name!r} in the store: name one `rlhf runs` lists")
    path, root = Path(row.path).resolve(), Path(runs_dir).resolve()
    if not path.is_relative_to(root):
        raise UserError(f"run {row.run_id} is not under the runs folder {runs_dir} (--runs-dir)")
    return path


def run_kind(run: Path) -> str:
    """The trainer kind the run's config.json records (training/registry.py)."""
    try:
        return kind_of(run)
    except ValueError as e:
        raise UserError(str(e)) from None


def split_prompts(db: StoreRef, side: str, eval_fraction: float = 0.1, seed: int = 0) -> list[str]:
    """The store's prompts on one side ("train" or "eval") of the snapshot split, in the order they were added."""
    with read(db, create=False) as con:
        texts = [t for _, t in all_prompts(con)]
    return [t for t in texts if split_of(t, eval_fraction, seed) == side]


def store_prompts(db: StoreRef, out: Path, eval_fraction: float = 0.1, seed: int = 0) -> Path:
    """The store's prompts on the train side of the snapshot split (the held-out ones stay unseen by PPO), as
    RUN/prompts.jsonl: the run keeps its own frozen copy."""
    kept = split_prompts(db, "train", eval_fraction, seed)
    if not kept:
        raise UserError("the store has no prompts for PPO: add some with `rlhf prompts add` or pass --prompts")
    out.write_text(_prompts_jsonl(kept))
    return out


def store_eval_prompts(db: StoreRef, out: Path) -> str:
    """The store's held-out prompts as RUN/eval_prompts.jsonl (its path), or "" when it has none."""
    kept = split_prompts(db, "eval")
    if not kept:
        return ""
    out.write_text(_prompts_jsonl(kept))
    return str(out.resolve())


def heldout_prompts(db: StoreRef) -> list[str]:
    """The store's held-out prompts (the eval side of the split, never trained on): where policies are compared."""
    kept = split_prompts(db, "eval")
    if not kept:
        raise UserError("the store has no held-out prompts: add prompts with `rlhf prompts add` or pass --prompts")
    return kept


def _prompts_jsonl(texts: list[str]) -> str:
    """The form the ranks read (training.rollouts.prompt_data.read_prompts): one {"prompt": text} per line,
    ASCII-escaped."""
    return "".join(json.dumps({"prompt": t}) + "\n" for t in texts)


def frozen_prompts(prompts: str, snapshots: Path) -> str:
    """What a run given `--prompts PATH` trains on. A snapshot folder is taken as it is. A prompts file is read by
    `rlhf prompts add`'s reader (.txt, .jsonl or .csv; the same size and length limits, the same error lines) and
    frozen as SNAPSHOTS/prompts-<sha256>.jsonl: named by its content, so runs on the same prompts name the same
    file, and editing the source later changes no run."""
    path = Path(prompts)
    if path.is_dir():
        try:
            read_prompts(str(path))
        except DataError as e:
            raise UserError(str(e)) from None
        return str(path.resolve())
    if not path.exists():
        raise UserError(f"{prompts}: no such prompts file or snapshot folder")
    body = _prompts_jsonl(read_prompt_file(path))
    out = snapshots / f"prompts-{hashlib.sha256(body.encode()).hexdigest()[:16]}.jsonl"
    if not out.is_file():
        tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
        try:
            snapshots.mkdir(parents=True, exist_ok=True)
            tmp.write_text(body)
            tmp.chmod(0o444)  # read-only, as the store's snapshots are
            rename_durably(tmp, out)  # whole or not at all, on disk before its name
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise UserError(f"cannot write the prompts under {snapshots}: {e.strerror}") from None
    return str(out.resolve())


def continued_actor(cfg: PromptsConfig) -> PromptsConfig:
    """A trainer on prompts that continues an earlier run (the next round): `--actor RUN` starts from RUN's policy,
    and a policy saved by a run on prompts (RUN/actor, RUN/actor_last, RUN/checkpoints/actor-stepN) keeps that run's
    reference as the KL anchor unless --reference names another, so every round stays anchored to the SFT model."""
    from training.registry import policy_folder, run_config

    if cfg.actor == "default" or not Path(cfg.actor).is_dir():
        return cfg
    path = Path(cfg.actor)
    if (path / "status.json").is_file() and _on_prompts(path):
        folder = policy_folder(path)
        if folder is None:
            raise UserError(f"--actor {cfg.actor}: this run saved no policy (did it finish?)")
        path = folder
    for run in (path.parent, path.parent.parent):
        if cfg.reference or not (run / "status.json").is_file() or not _on_prompts(run):
            continue
        earlier = run_config(run)
        cfg = dataclasses.replace(cfg, reference=earlier.get("reference") or earlier.get("actor", ""))
        break
    return dataclasses.replace(cfg, actor=str(path))


def kind_of_or_none(run: Path) -> str | None:
    try:
        return kind_of(run)
    except ValueError:
        return None


def _on_prompts(run: Path) -> bool:
    """`run` is a run folder of a trainer on prompts (PPO, RLOO, ...)."""
    kind = kind_of_or_none(run)
    return kind is not None and trainer(kind).data == "prompts"


def prepare_prompts_run(db: StoreRef, cfg: PromptsConfig, runs_dir: Path, prompts: str | None = None) -> Path:
    """A run that trains on prompts (PPO, RLOO, ...): check the settings and the models and files they name, write
    RUN/config.json (and RUN/prompts.jsonl from the store when no prompts file is given; a prompts file is frozen by
    `frozen_prompts`) and record the run; returns the run folder."""
    try:
        cfg.check()
        cfg = cfg.resolved()
    except ValueError as e:  # ModelError and DataError included
        raise UserError(str(e)) from None
    cfg = continued_actor(cfg)
    resolve_model(cfg.actor)
    if cfg.reference:
        resolve_model(cfg.reference)
    source = frozen_prompts(prompts, runs_dir.parent / "snapshots") if prompts else None
    held = frozen_prompts(cfg.eval_prompts, runs_dir.parent / "snapshots") if cfg.eval_prompts else ""
    run = new_run_dir(runs_dir, cfg.KIND)
    try:
        if not source:
            source = str(store_prompts(db, run / "prompts.jsonl").resolve())
            if not held and (cfg.save_every or cfg.keep_best):  # checkpoints are judged on the held-out prompts
                held = store_eval_prompts(db, run / "eval_prompts.jsonl")
        cfg = dataclasses.replace(
            cfg,
            actor=_local(cfg.actor),
            reference=_local(cfg.reference),
            prompts=source,
            eval_prompts=held,
            output_dir=str(run.resolve()),
        )
        cfg.save(run / "config.json")
        with write(db) as con:
            record_run(con, run.name, cfg.KIND, str(run.resolve()), cfg.as_json(), None)
    except BaseException:
        shutil.rmtree(run, ignore_errors=True)  # nothing half-made stays behind
        raise
    return run


def prepare_run(db: StoreRef, cfg: ConfigFile, runs_dir: Path, data: str | None = None) -> Path:
    """Any trainer's run, by the data its registry entry trains on: `data` is a snapshot or pairs file for a trainer
    on pairs (None: a new snapshot of the store), a prompts file or snapshot folder for one on prompts (None: the
    store's prompts)."""
    prepare = prepare_pairs_run if takes_snapshot(trainer(cfg.KIND).data) else prepare_prompts_run
    return prepare(db, cfg, runs_dir, data)


def run_training(
    kind: str,
    run: Path,
    num_accelerators: int = 1,
    hostfile: str | None = None,
    on_metrics: Callable[[dict], None] | None = None,
) -> dict:
    proc = launch(kind, run, num_accelerators, hostfile)
    status = follow(run, proc, on_metrics)
    if hostfile and status.get("state") == "failed":  # name the host the launcher could not reach, if it says
        log = (run / "train.log").read_text(errors="replace") if (run / "train.log").is_file() else ""
        failures = host_failures(log)
        if failures:
            status = {**status, "error": f"{status.get('error', 'failed')}; hosts: {', '.join(failures)}"}
    return status


def resume_run(
    run: Path, num_accelerators: int = 1, hostfile: str | None = None, on_metrics: Callable[[dict], None] | None = None
) -> dict:
    """Launch an existing run folder again; training continues from its last checkpoint."""
    kind = run_kind(run)
    if read_status(run).get("state") == "finished":
        raise UserError(f"run {run.name} already finished")
    (run / STOP_FILE).unlink(missing_ok=True)
    return run_training(kind, run, num_accelerators, hostfile, on_metrics)
