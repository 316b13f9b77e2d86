"""`rlhf`: every command calls the same plain function the app's buttons call.

Errors a user can cause are one line on stderr and exit status 1, never a traceback."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
from pathlib import Path

from app.faces.config_args import add_dataclass_args, dataclass_from_args, given_args
from app.faces.limits import ServeLimits
from app.jobs.round_config import RoundConfig
from app.studies.demo_config import QUICK, ROUNDS, DemoConfig
from store.errors import UserError
from training.generation import SamplingConfig
from training.models import ModelError, resolve_model
from training.precision import with_resolved_dtype
from training.registry import TRAINERS


def cmd_init(args: argparse.Namespace) -> None:
    from store.db import init_store, latest_version

    before, after = init_store(args.db)
    state = "created" if before == 0 else ("migrated" if before != after else "up to date")
    print(f"store {args.db}: {state} (schema version {after}, latest {latest_version()})")


def cmd_prompts_add(args: argparse.Namespace) -> None:
    from annotation.actions import add_prompt_file

    print(add_prompt_file(args.db, args.file))


def cmd_sample(args: argparse.Namespace) -> None:
    from app.jobs.sampling import run_sampling
    from store.db import connect
    from store.prompts import pending_prompts
    from training.generation import open_sampler

    config = dataclass_from_args(SamplingConfig, args)
    resolve_model(config.model)  # a bad --model is an error even when there is nothing to sample
    with connect(args.db) as con:
        if not pending_prompts(con, 1):
            print("no prompts without responses: nothing to sample (add prompts with `rlhf prompts add`)")
            return
    with open_sampler(config) as sampler:
        report = run_sampling(args.db, sampler, k=args.k, limit=args.limit, progress=_progress_bar("sampling"))
    print(report.line())


def cmd_best_of_n(args: argparse.Namespace) -> None:
    """`rlhf best-of-n`: best-of-N of a policy under a reward model, for each N (training/best_of_n.py)."""
    from pathlib import Path

    from annotation.prompt_files import read_prompts
    from app.jobs.training import heldout_prompts
    from training import best_of_n
    from training.generation import open_sampler

    try:
        ns = best_of_n.parse_ns(args.n)
    except ValueError as e:
        raise UserError(str(e)) from None
    args.model = args.policy
    config = dataclass_from_args(SamplingConfig, args)
    prompts = read_prompts(args.prompts) if args.prompts else heldout_prompts(args.db)
    from training.models import reward_folder

    reward_folder(args.reward)  # a bad --reward is one error line before any sampling
    out = Path(args.out)
    with open_sampler(config) as sampler:
        rows = best_of_n.run(sampler, args.reward, prompts, ns, out, seed=config.seed)
    line = f"{sampler.dtype_line}, {sampler.engine_line}"
    print(f"best-of-n of {args.policy} under {args.reward} on {len(prompts)} prompts ({line}):")
    for r in rows:
        print(f"  n={r['n']}: mean score {r['score_mean']:.3f}, KL <= {r['kl_bound']:.3f} nats")
    print(f"wrote {out} (rankings by the reward model: `rlhf import {out}` reads it)")


def _progress_bar(desc: str):
    from tqdm import tqdm

    state = {}

    def update(done: int, total: int) -> None:
        if "bar" not in state:
            state["bar"] = tqdm(total=total, desc=desc, unit="prompt", file=sys.stderr)
        state["bar"].n = done
        state["bar"].refresh()
        if done >= total:
            state["bar"].close()

    return update


def cmd_import(args: argparse.Namespace) -> None:
    from annotation.imports import import_preferences

    print(import_preferences(args.db, args.file, args.format, args.annotator).line())


def cmd_import_ls(args: argparse.Namespace) -> None:
    from annotation.imports import import_labelstudio_file, import_labelstudio_url

    buckets = [b.strip() for b in args.bucket_order.split(",")] if args.bucket_order else None
    if args.url:
        if args.project is None or args.file:
            raise UserError("a live pull takes --url URL --project ID and no FILE")
        key = os.environ.get("LABEL_STUDIO_API_KEY", "")
        summary = import_labelstudio_url(args.db, args.url, args.project, key, bucket_order=buckets)
    elif args.file:
        summary = import_labelstudio_file(args.db, args.file, config=args.config, bucket_order=buckets)
    else:
        raise UserError("give a Label Studio export FILE, or --url URL --project ID")
    print(summary.line())


def cmd_export_ls(args: argparse.Namespace) -> None:
    from annotation.actions import write_ls_export

    tasks, config, n = write_ls_export(args.db, args.out, seed=args.seed)
    print(f"wrote {n} tasks to {tasks} and the labeling config to {config}")


def cmd_pairs(args: argparse.Namespace) -> None:
    from annotation.actions import stats_lines, store_stats, write_pairs_file

    if not args.out and not args.stats:
        raise UserError("give --out FILE.jsonl|.parquet|.csv and/or --stats")
    if args.out and args.format in ("trl", "openrlhf"):
        from annotation.actions import write_trl_pairs

        chat = args.format == "openrlhf"
        print(write_trl_pairs(args.db, args.out, args.drop_flagged, args.with_votes, conversational=chat))
    elif args.out:
        print(write_pairs_file(args.db, args.out, drop_flagged=args.drop_flagged, with_votes=args.with_votes))
    if args.stats:
        s = store_stats(args.db)
        print(json.dumps(s, indent=2) if args.json else "\n".join(stats_lines(s)))


def _progress(kind: str):
    """Print the trainer's progress line (training/registry.py) for each metrics row that has one."""
    from training.registry import trainer

    line = trainer(kind).progress

    def show(row: dict) -> None:
        text = line(row)
        if text:
            print(text, flush=True)

    return show


def cmd_train(args: argparse.Namespace) -> None:
    """`rlhf train-rm`, `rlhf train-dpo`, `rlhf train-ppo`, ...: any trainer in the registry, on its kind of data
    (preference pairs: a snapshot of the store or --pairs; prompts: the store's or --prompts)."""
    from pathlib import Path

    from app.jobs.training import left_out_line, prepare_run, recorded_run, resume_run, run_training
    from training.registry import run_config, trainer

    spec = trainer(args.config_class.KIND)
    show = _progress(spec.kind)
    if args.resume:
        run = recorded_run(args.db, args.resume, args.runs_dir)
        status = resume_run(run, args.num_accelerators, args.hostfile, on_metrics=show)
    else:
        cfg, dtype_line = with_resolved_dtype(dataclass_from_args(spec.config, args))
        data = args.pairs if spec.data == "pairs" else args.prompts
        run = prepare_run(args.db, cfg, Path(args.runs_dir), data)
        print(f"run {run.name}: {run}, {dtype_line}", flush=True)
        if getattr(cfg, "min_gold_accuracy", 0):
            print(left_out_line(run_config(run).get("data", "")), flush=True)
        status = run_training(spec.kind, run, args.num_accelerators, args.hostfile, on_metrics=show)
    if status.get("state") == "stopped":
        print(f"run {run.name} stopped at step {status.get('step')}; continue it with --resume {run}")
        return
    if status.get("state") != "finished":
        raise UserError(f"run {run.name} {status.get('state')}: {status.get('error', 'see ' + str(run))}")
    print(f"run {run.name} finished; {'policy' if spec.policy else 'model'} in {run / spec.output}")
    if spec.kind == "reward" and not args.pairs:
        from app.jobs.rounds import fresh_pairs, fresh_pairs_line

        fresh = fresh_pairs(args.db, run)
        if fresh:
            print(fresh_pairs_line(fresh))


def demo_folder(args: argparse.Namespace) -> tuple[DemoConfig, Path]:
    """A new demo folder with its settings written (a bad setting is one line, before the folder exists), or with
    --resume the folder of a demo that stopped and the settings it started with (sets args.quick and args.seeds)."""
    from app.studies.demo import check, new_demo_dir
    from app.studies.demo_stages import load_settings, save_settings

    if args.resume and args.fork:
        raise UserError("--resume goes on with a demo, --fork starts one from another: give one of them")
    if args.resume:  # finished stages are kept (app/studies/demo_stages.py)
        given = given_args(DemoConfig, args) | ({"quick": True} if args.quick else {})
        given |= {"seeds": args.seeds} if args.seeds is not None else {}
        folder = Path(args.resume)
        cfg, args.quick, args.seeds = load_settings(folder, DemoConfig, given)
        if cfg.rounds > 1:
            raise UserError("the rounds study does not resume yet: start it again")
        print(f"demo {folder.name}: resuming {folder}", flush=True)
        return cfg, folder
    if args.fork:
        return fork_folder(args)
    cfg = demo_config(args)
    check(cfg)
    args.seeds = 1 if args.seeds is None else args.seeds
    if not 1 <= args.seeds <= 20:
        raise UserError(f"--seeds takes 1 to 20 seeds, got {args.seeds}")
    folder = new_demo_dir(Path(args.runs_dir))
    save_settings(folder, cfg, args.quick, args.seeds)
    print(f"demo {folder.name}: {folder} (if it stops, go on with --resume {folder})", flush=True)
    return cfg, folder


def fork_folder(args: argparse.Namespace) -> tuple[DemoConfig, Path]:
    """rlhf demo --fork DEMO: a new demo folder holding DEMO's set-up, sampling and reward stages and every later
    stage whose settings are unchanged (demo_stages.kept_stages), with DEMO's settings and those given here."""
    from app.studies.demo import check, new_demo_dir
    from app.studies.demo_stages import fork_demo, fork_settings, save_settings

    if args.quick or args.seeds is not None:
        raise UserError(
            "--fork takes --quick and the seed from the demo it forks: drop " + ("--quick" if args.quick else "--seeds")
        )
    source = Path(args.fork)
    cfg, parent, args.quick = fork_settings(source, DemoConfig, given_args(DemoConfig, args))
    check(cfg)
    args.seeds = 1
    folder = new_demo_dir(Path(args.runs_dir))
    try:
        save_settings(folder, cfg, args.quick, 1)
        kept = fork_demo(source, folder, cfg, parent)
    except BaseException:  # a fork cut short (a full disk, ^C) leaves no half demo behind; its source is untouched
        shutil.rmtree(folder, ignore_errors=True)
        raise
    print(f"demo {folder.name}: {folder}, forked from {source}, keeping {', '.join(kept)}", flush=True)
    print(f"(if it stops, go on with --resume {folder})", flush=True)
    return cfg, folder


def cmd_demo(args: argparse.Namespace) -> None:
    from app.studies.demo import run_demo
    from app.studies.demo_report import headline

    cfg, folder = demo_folder(args)
    if cfg.rounds > 1:
        from app.studies.demo_rounds import answer_lines, run_rounds_study

        if args.seeds == 1:
            results = run_rounds_study(cfg, folder, quick=args.quick, log=lambda line: print(line, flush=True))
            print("\n".join(answer_lines(results)) + f"\nreport: {folder / 'report.md'}")
            return
        from app.studies.demo_seeds import SEEDS_REPORT, verdicts, write_combined

        runs = []
        for seed in range(cfg.seed, cfg.seed + args.seeds):  # each seed a whole study in FOLDER/seed-S
            (folder / f"seed-{seed}").mkdir(exist_ok=True)
            runs.append(
                run_rounds_study(dataclasses.replace(cfg, seed=seed), folder / f"seed-{seed}", args.quick, print)
            )
            print("\n".join(answer_lines(runs[-1])), flush=True)
        combined = write_combined(runs, folder)
        print("\n".join(verdicts(combined)) + f"\nover {args.seeds} seeds: {folder / SEEDS_REPORT}")
        return
    if args.seeds == 1:
        results = run_demo(cfg, folder, quick=args.quick, log=lambda line: print(line, flush=True))
        print("\n".join(headline(results)))
        failed = [name for name, ok in results["checks"].items() if not ok]
    else:  # each seed a whole demo in FOLDER/seed-S, then the claims over seeds (app/studies/demo_seeds.py)
        from app.studies.demo_seeds import SEEDS_REPORT, verdicts, write_combined

        runs, failed = [], []
        for seed in range(cfg.seed, cfg.seed + args.seeds):
            (folder / f"seed-{seed}").mkdir(exist_ok=True)
            r = run_demo(dataclasses.replace(cfg, seed=seed), folder / f"seed-{seed}", args.quick, print)
            print("\n".join(headline(r)), flush=True)
            runs.append(r)
            failed += [f"seed {seed}: {name}" for name, ok in r["checks"].items() if not ok]
        combined = write_combined(runs, folder)
        print("\n".join(verdicts(combined)) + f"\nover {args.seeds} seeds: {folder / SEEDS_REPORT}")
    if failed:
        raise UserError(f"the demo finished but {len(failed)} check(s) failed: {'; '.join(failed)}")


def cmd_demo_seeds(args: argparse.Namespace) -> None:
    from pathlib import Path

    from app.studies.demo_seeds import SEEDS_REPORT, read_results, verdicts, write_combined

    combined = write_combined(read_results(args.demos), Path(args.out))
    print("\n".join(verdicts(combined)))
    print(f"{len(combined['seeds'])} seeds ({', '.join(map(str, combined['seeds']))}): {Path(args.out) / SEEDS_REPORT}")


def demo_config(args: argparse.Namespace) -> DemoConfig:
    """The flags given on the command line win over the quick preset (or, for a rounds study, the rounds preset),
    which wins over the defaults (`--quick --dtype bf16` runs in bf16, `--quick --model default` on the default
    model, `--rounds 3 --label-budget 240` spends 240 labels). --ppo-settings goes on top of the preset's."""
    from app.studies.demo_common import merged_ppo_settings

    given = given_args(DemoConfig, args)
    preset = QUICK if args.quick else ROUNDS if given.get("rounds", 1) > 1 else {}
    base = DemoConfig(**preset)
    if "ppo_settings" in given:
        given["ppo_settings"] = merged_ppo_settings(base.ppo_settings, given["ppo_settings"])
    return dataclasses.replace(base, **given)


def cmd_backup(args: argparse.Namespace) -> None:
    from store.backup import backup

    m = backup(args.db, args.out)
    print(f"backed up {args.db} to {args.out}: " + ", ".join(f"{t} {n}" for t, n in m["rows"].items() if n))


def cmd_restore(args: argparse.Namespace) -> None:
    from store.backup import restore

    m = restore(args.backup, args.db)
    print(f"restored {args.backup} (made {m['created_at']}) into {args.db}: {sum(m['rows'].values())} rows")


def cmd_stop(args: argparse.Namespace) -> None:
    from app.jobs.training import recorded_run
    from training.runs import effective_status, request_stop

    run = recorded_run(args.db, args.run, args.runs_dir)
    state = effective_status(run).get("state")
    if state not in ("starting", "running"):
        raise UserError(f"run {run.name} is {state}, not running")
    request_stop(run)
    print(f"asked run {run.name} to stop: it checkpoints at the end of its current step (resume with --resume)")


def cmd_runs(args: argparse.Namespace) -> None:
    from store.db import connect
    from store.runs import list_runs
    from training.registry import TRAINERS
    from training.runs import effective_status

    with connect(args.db, create=False) as con:
        runs = list_runs(con)
    if not runs:
        print("no runs yet: start one with `rlhf train-rm` or `rlhf train-ppo`")
    for run_id, kind, path, created in runs:
        status = effective_status(path)
        final = status.get("final") or {}
        headline = TRAINERS[kind].headline(final) if kind in TRAINERS else ""
        headline = f", {headline}" if headline else ""
        step = f"step {status.get('step', 0)}/{status.get('total_steps', '?')}"
        error = f" ({status['error']})" if status.get("error") else ""
        print(f"{run_id}  {kind}  {created[:19]}  {status.get('state')}{error}  {step}{headline}  {path}")


def cmd_undone(args: argparse.Namespace) -> None:
    """`rlhf undone`: every answer the Annotate tab's Undo took back, with who, when and what it was."""
    from store.assignments import undone
    from store.db import connect

    with connect(args.db, create=False) as con:
        rows = undone(con, args.annotator)
    if args.json:
        for r in rows:
            print(json.dumps(dataclasses.asdict(r)))
        return
    if not rows:
        print("nothing undone" + (f" by {args.annotator}" if args.annotator else ""))
    for r in rows:
        what = (
            f"skip ({r.skip_reason})"
            if r.skipped
            else "ranks " + " ".join(f"{i}:{k}" for i, k in zip(r.response_ids, r.ranks, strict=True))
        )
        what = f"all bad: {what}" if r.all_bad else what
        print(f"{r.undone_at}  {r.annotator}  prompt {r.prompt_id}  ranking {r.ranking_id} of {r.ranked_at}  {what}")


def cmd_annotators(args: argparse.Namespace) -> None:
    """`rlhf annotators`: the lead's dashboard (annotation/dashboard.py): per annotator, how much, how fast, how
    well they agree with the others, and why to look at their work."""
    from annotation.dashboard import annotator_rows, as_json, text_table

    rows = annotator_rows(args.db)
    if args.json:
        print(json.dumps(as_json(rows), indent=1))
    elif not rows:
        print("no answers yet")
    else:
        print(text_table(rows))


def cmd_guideline(args: argparse.Namespace) -> None:
    """`rlhf guideline [--set FILE]`: set the campaign's guideline from a Markdown file, or show it."""
    from annotation.actions import guideline_lines, set_guideline_text
    from store.guidelines import MAX_GUIDELINE_CHARS

    if args.set is None:
        print("\n".join(guideline_lines(args.db)))
        return
    path = Path(args.set)
    if not path.is_file():
        raise UserError(f"no guideline file at {path}")
    if path.stat().st_size > 4 * MAX_GUIDELINE_CHARS:
        raise UserError(
            f"{path} is {path.stat().st_size:,} bytes; a guideline is at most {MAX_GUIDELINE_CHARS:,} characters"
        )
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UserError(f"{path} is not UTF-8 text") from None
    except OSError as e:
        raise UserError(f"cannot read {path}: {e.strerror or e}") from None
    print(set_guideline_text(args.db, text, args.by))


def cmd_rm_agreement(args: argparse.Namespace) -> None:
    """`rlhf rm-agreement [--reward RUN]`: score the ranked responses with a reward run (the newest finished one by
    default), then print each annotator's agreement with it; the dashboard shows the same."""
    from app.jobs.rm_agreement import agreement_lines, newest_reward_run, score_store

    name = args.reward or newest_reward_run(args.db, args.runs_dir)
    run_id, n = score_store(args.db, name, args.runs_dir, args.dtype, progress=lambda d: print(f"scored {d}"))
    print(f"{run_id}: {n} responses scored now")
    print("\n".join(agreement_lines(args.db, run_id)))


def cmd_gold_add(args: argparse.Namespace) -> None:
    from annotation.gold import mark

    print(mark(args.db, args.ranking_ids, args.annotator or "", args.by))


def cmd_gold_list(args: argparse.Namespace) -> None:
    """`rlhf gold list`: the gold prompts, whose ranking each is and who marked it."""
    from store.db import connect
    from store.gold import gold_list

    with connect(args.db, create=False) as con:
        rows = gold_list(con)
    if args.json:
        print(json.dumps([dataclasses.asdict(r) for r in rows], indent=1))
        return
    if not rows:
        print("no gold prompts: mark some with `rlhf gold add RANKING_ID ...` or `--annotator NAME`")
    for r in rows:
        print(
            f"prompt {r.prompt_id}  ranking {r.ranking_id} by {r.annotator}  marked by {r.marked_by} {r.marked_at[:19]}"
        )


def cmd_gold_remove(args: argparse.Namespace) -> None:
    from store.db import write
    from store.gold import unmark_gold

    with write(args.db) as con:
        n = unmark_gold(con, args.prompt_ids)
    print(f"gold: {n} prompt{'s' if n != 1 else ''} unmarked")


def cmd_rounds(args: argparse.Namespace) -> None:
    from store.db import connect
    from store.rounds import list_rounds

    with connect(args.db, create=False) as con:
        rounds = list_rounds(con)
    if not rounds:
        print("no rounds yet: sample (rlhf sample) or start one (rlhf round start --policy MODEL)")
    for r in rounds:
        print(round_line(r))


def round_line(r: dict) -> str:
    """One round of `rlhf rounds` (and the Data tab's table): its counts, who won its mixed rankings, its runs."""
    mixed = f" + {r['previous_policy']} (previous)" if r["previous_policy"] else ""
    wins = ", ".join(f"{m}: {w:g}" for m, w in r["wins"].items()) if r["previous_policy"] else ""
    runs = ", ".join(f"{kind} {run}" for run, kind in r["runs"]) or "none"
    return (
        f"round {r['round']}  {r['selection']}  policy {r['policy']}{mixed}  {r['prompts']} prompts, "
        f"{r['responses']} responses, {r['rankings']} rankings, {r['pairs']} pairs, {r['labels_spent']} rankings "
        f"so far{'  first place: ' + wins if wins else ''}  runs: {runs}"
    )


def cmd_round_start(args: argparse.Namespace) -> None:
    from app.jobs.rounds import start_round

    r = start_round(args.db, dataclass_from_args(RoundConfig, args))
    mixed = f" + responses of {r['previous_policy']}" if r["previous_policy"] else ""
    print(
        f"round {r['round']} started: {r['prompts']} of {r['candidates']} candidate prompts, {r['responses']} "
        f"responses from {r['policy']}{mixed} ({r['duplicates']} identical to another); rank them in the Annotate tab"
    )


def cmd_ui(args: argparse.Namespace) -> None:
    from app.faces.ui import launch

    launch(
        db=args.db,
        host=args.host,
        port=args.port,
        auth=args.auth,
        model=args.model,
        overlap=args.overlap,
        gold_rate=args.gold_rate,
        ask_strength=not args.no_strength,
        allow_edits=args.edits,
        runs_dir=args.runs_dir,
        admins=args.admins,
        allowed_hosts=args.allowed_hosts,
        limits=dataclass_from_args(ServeLimits, args),
        session_hours=args.session_hours,
        ssl_keyfile=args.ssl_keyfile,
        ssl_certfile=args.ssl_certfile,
    )


def cmd_user_add(args: argparse.Namespace) -> None:
    """`rlhf user add NAME --file FILE`: NAME's argon2 hash into the users file `rlhf ui --auth` reads."""
    import getpass

    from app.faces.logins import add_user

    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            raise UserError("the two passwords differ; nothing written")
    new = add_user(args.file, args.name, password)
    print(f"{'added' if new else 'updated'} {args.name} in {args.file} (argon2id hash; the file is mode 600)")


def add_launch_args(s: argparse.ArgumentParser) -> None:
    s.add_argument("--runs-dir", default="runs", help="where run folders go (default ./runs)")
    s.add_argument(
        "--resume",
        metavar="RUN",
        help="continue a stopped or killed run from its last checkpoint: its id (`rlhf runs`), or its folder; "
        "only runs the store recorded under --runs-dir",
    )
    s.add_argument(
        "--num-accelerators",
        "--num-gpus",
        type=int,
        default=1,
        dest="num_accelerators",
        help="ranks on this machine (CPU: processes; GPU: GPUs)",
    )
    s.add_argument("--hostfile", help="DeepSpeed hostfile for several machines")


def build_parser() -> argparse.ArgumentParser:
    from store.db import default_db_path

    p = argparse.ArgumentParser(prog="rlhf", description="Preference annotation and RLHF, end to end.")
    p.add_argument("--db", default=default_db_path(), help="store file (default ./rlhf.duckdb or $RLHF_DB)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_data_commands(sub)
    _add_training_commands(sub)
    _add_store_and_run_commands(sub)
    _add_demo_commands(sub)
    _db_after_the_command(p)
    return p


def _add_data_commands(sub) -> None:
    """The app, the store's prompts, sampling, best-of-N, and the imports and exports."""
    s = sub.add_parser("ui", help="start the Gradio app")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=7860)
    s.add_argument("--auth", help="file of user:password lines; the login becomes the annotator id")
    s.add_argument(
        "--admins", help="with --auth: logins (comma-separated) that may use the Data and Train tabs; others annotate"
    )
    s.add_argument("--model", default="default", help="SFT model used by the app's sampling")
    s.add_argument("--overlap", type=int, default=1, help="annotators per prompt (2+ measures agreement)")
    s.add_argument(
        "--gold-rate", type=float, default=0.0, help="share of each annotator's tasks drawn from gold prompts (0-0.5)"
    )
    s.add_argument(
        "--no-strength", action="store_true", help="do not ask how much better each response is (Llama 2's levels)"
    )
    s.add_argument(
        "--edits", action="store_true", help="annotators may correct the best response; the edit is ranked first"
    )
    s.add_argument("--runs-dir", default="runs", help="where the Train tab's run folders go (default ./runs)")
    s.add_argument(
        "--allowed-hosts",
        help="more names the Host header may carry, comma-separated (a reverse proxy's name; '*' = any); "
        "loopback names and the --host address are always allowed",
    )
    s.add_argument("--session-hours", type=float, default=12.0, help="a login lasts this long (default 12)")
    s.add_argument("--ssl-keyfile", help="serve HTTPS with this private key (with --ssl-certfile)")
    s.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (with --ssl-keyfile)")
    add_dataclass_args(s, ServeLimits)
    s.set_defaults(func=cmd_ui)

    s = sub.add_parser("user", help="manage the logins of `rlhf ui --auth FILE`")
    us = s.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    a = us.add_parser("add", help="add a login (or set its password) as an argon2 hash; the file is kept at mode 600")
    a.add_argument("name")
    a.add_argument("--file", required=True, help="the users file (created if missing)")
    a.add_argument("--password-stdin", action="store_true", help="read the password from stdin, not a prompt")
    a.set_defaults(func=cmd_user_add)

    s = sub.add_parser("init", help="create or migrate the store")
    s.set_defaults(func=cmd_init)

    s = sub.add_parser("prompts", help="manage prompts")
    ps = s.add_subparsers(dest="prompts_command", required=True, metavar="ACTION")
    a = ps.add_parser("add", help="load prompts from .txt (one per line), .jsonl (prompt) or .csv (prompt column)")
    a.add_argument("file")
    a.set_defaults(func=cmd_prompts_add)

    s = sub.add_parser("sample", help="sample K responses for every prompt that has none yet")
    s.add_argument("--k", type=int, default=4, help="responses per prompt (default: 4)")
    s.add_argument("--limit", type=int, help="sample at most this many prompts")
    add_dataclass_args(s, SamplingConfig)
    s.set_defaults(func=cmd_sample)

    s = sub.add_parser("best-of-n", help="best-of-N of a policy under a reward model, for each N (PPO's baseline)")
    s.add_argument("--policy", default="default", help="the policy sampled: 'default' or a model folder")
    s.add_argument("--reward", required=True, help="a reward run folder or a reward-model folder")
    s.add_argument("--n", default="1,2,4,8,16", help="the Ns, separated by commas (default: 1,2,4,8,16)")
    s.add_argument("--prompts", help="a prompts file (.txt/.jsonl/.csv; default: the store's held-out prompts)")
    s.add_argument("--out", default="best-of-n.jsonl", help="the output file (native ranking format + picks)")
    add_dataclass_args(s, SamplingConfig, skip=("model",))
    s.set_defaults(func=cmd_best_of_n)

    s = sub.add_parser(
        "import",
        help="import rankings: native JSONL, TRL preference pairs, or responses with scores (a file or folder)",
    )
    s.add_argument("file", help=".jsonl, .json, .parquet, or a folder datasets' save_to_disk wrote")
    s.add_argument(
        "--format",
        default="auto",
        choices=["auto", "native", "trl", "scores"],
        help="the rows' shape (auto: told by each row's fields)",
    )
    s.add_argument("--annotator", default="", help="who the rows are by, where a row does not say (default: the file)")
    s.set_defaults(func=cmd_import)

    s = sub.add_parser("import-ls", help="import Label Studio results (a JSON/JSON_MIN/CSV/TSV file, or --url)")
    s.add_argument("file", nargs="?")
    s.add_argument("--url", help="a running Label Studio; the key comes from LABEL_STUDIO_API_KEY")
    s.add_argument("--project", type=int, help="project id for --url")
    s.add_argument("--config", help="the project's labeling config XML (names the Pairwise fields, the List)")
    s.add_argument("--bucket-order", help="Ranker buckets best first, comma-separated (same bucket = tie)")
    s.set_defaults(func=cmd_import_ls)

    s = sub.add_parser("export-ls", help="write Label Studio Ranker tasks + labeling config to folder OUT")
    s.add_argument("out")
    s.add_argument("--seed", type=int, default=0, help="seed of the per-task item shuffle")
    s.set_defaults(func=cmd_export_ls)


def _add_training_commands(sub) -> None:
    """One command per trainer in the registry: `rlhf train-rm`, `rlhf train-dpo`, `rlhf train-ppo`, ..."""
    for spec in TRAINERS.values():
        if spec.data == "pairs":
            s = sub.add_parser(
                spec.command,
                help=f"{spec.title} ({spec.summary}) on DeepSpeed, from preference pairs (a snapshot or --pairs)",
            )
            s.add_argument("--pairs", help="a pairs .jsonl/.parquet or a snapshot folder instead of the store")
        else:
            s = sub.add_parser(
                spec.command,
                help=f"{spec.title} ({spec.summary}) on DeepSpeed, from prompts (the store's or --prompts)",
            )
            s.add_argument(
                "--prompts", help="prompts .txt/.jsonl/.csv (read as `prompts add` reads them) or a snapshot folder"
            )
        add_launch_args(s)
        add_dataclass_args(s, spec.config, skip=spec.form_skip)
        s.add_argument("--config", help="settings from a config.json (a run's, or the app's); flags given here win")
        s.set_defaults(config_class=spec.config, func=cmd_train)


def _add_demo_commands(sub) -> None:
    """The demo (with --resume and --fork) and the combination of its seeds."""
    s = sub.add_parser("demo", help="the whole loop with a scripted annotator on the bundled prompts, and a report")
    s.add_argument("--quick", action="store_true", help="tiny models and a few dozen prompts (minutes; for CI)")
    s.add_argument("--runs-dir", default="runs", help="where the demo folder goes (default ./runs)")
    s.add_argument("--seeds", type=int, help="run the demo for seeds --seed, --seed + 1, ... and combine (default 1)")
    s.add_argument("--resume", metavar="FOLDER", help="go on with a demo that stopped, keeping its finished stages")
    s.add_argument(
        "--fork",
        metavar="FOLDER",
        help="a new demo on FOLDER's prompts, rankings and reward model, its settings with those given here (PPO's,"
        " DPO's, --methods, --campaign), keeping every stage they leave unchanged: trials meet one reward model",
    )
    add_dataclass_args(s, DemoConfig, given_only=True)
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser(
        "demo-seeds", help="combine demos (or rounds studies) run with different seeds into one report over seeds"
    )
    s.add_argument("demos", nargs="+", help="demo folders (or their results.json)")
    s.add_argument("--out", required=True, help="folder for seeds.json and seeds.md")
    s.set_defaults(func=cmd_demo_seeds)


def _add_store_and_run_commands(sub) -> None:
    """Backup and restore, runs and rounds, and the pairs' export."""
    s = sub.add_parser("backup", help="copy the whole store to a new folder (Parquet + manifest), all or nothing")
    s.add_argument("out")
    s.set_defaults(func=cmd_backup)

    s = sub.add_parser("restore", help="rebuild a store from a backup folder into --db (never overwrites a store)")
    s.add_argument("backup")
    s.set_defaults(func=cmd_restore)

    s = sub.add_parser("stop", help="stop a running training run after its current step (checkpointed, resumable)")
    s.add_argument("run", help="the run's id (`rlhf runs`), or its folder")
    s.add_argument("--runs-dir", default="runs", help="where run folders go (default ./runs)")
    s.set_defaults(func=cmd_stop)

    s = sub.add_parser("runs", help="list training runs with status and headline metrics")
    s.set_defaults(func=cmd_runs)

    s = sub.add_parser("undone", help="list the answers annotators undid (who, when, the ranking as it was)")
    s.add_argument("--annotator", help="only this annotator's")
    s.add_argument("--json", action="store_true", help="one JSON object a line")
    s.set_defaults(func=cmd_undone)

    s = sub.add_parser("gold", help="gold prompts: rankings trusted as their prompt's answer, mixed into the queue")
    gs = s.add_subparsers(dest="gold_command", required=True, metavar="ACTION")
    a = gs.add_parser("add", help="mark rankings as their prompts' gold answers")
    a.add_argument("ranking_ids", nargs="*", type=int, help="ranking ids (`rlhf pairs` and the store name them)")
    a.add_argument("--annotator", help="also mark this annotator's latest ranking of every prompt they ranked")
    a.add_argument("--by", default="admin", help="who marks them (recorded)")
    a.set_defaults(func=cmd_gold_add)
    a = gs.add_parser("list", help="list the gold prompts")
    a.add_argument("--json", action="store_true", help="print JSON")
    a.set_defaults(func=cmd_gold_list)
    a = gs.add_parser("remove", help="unmark gold prompts")
    a.add_argument("prompt_ids", nargs="+", type=int)
    a.set_defaults(func=cmd_gold_remove)

    s = sub.add_parser("guideline", help="show the annotators' guideline, or set a new version (--set FILE.md)")
    s.add_argument("--set", metavar="FILE", help="a Markdown file: the next version of the guideline")
    s.add_argument("--by", default="admin", help="who sets it (kept with the version)")
    s.set_defaults(func=cmd_guideline)

    s = sub.add_parser(
        "rm-agreement", help="score ranked responses with a reward run; each annotator's agreement with it"
    )
    s.add_argument("--reward", default="", help="a reward run's id (default: the newest finished one)")
    s.add_argument("--runs-dir", default="runs", help="where run folders are (only runs recorded under it)")
    s.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="the reward model's precision")
    s.set_defaults(func=cmd_rm_agreement)

    s = sub.add_parser("annotators", help="per annotator: answers, speed, agreement, flags, and whom to look at")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_annotators)

    s = sub.add_parser("rounds", help="list annotation rounds: policy, prompts, rankings, pairs, runs")
    s.set_defaults(func=cmd_rounds)

    s = sub.add_parser("round", help="annotation rounds")
    rs = s.add_subparsers(dest="round_command", required=True, metavar="ACTION")
    a = rs.add_parser("start", help="sample the next round from a policy, on prompts chosen by --select")
    add_dataclass_args(a, RoundConfig)
    a.set_defaults(func=cmd_round_start)

    s = sub.add_parser("pairs", help="expand rankings to chosen/rejected pairs")
    s.add_argument("--out", help="FILE.jsonl, FILE.parquet or FILE.csv (CSV cells never start a formula)")
    s.add_argument("--stats", action="store_true", help="print counts")
    s.add_argument("--json", action="store_true", help="with --stats: print JSON")
    s.add_argument("--drop-flagged", action="store_true", help="leave out rankings flagged as suspicious")
    s.add_argument("--with-votes", action="store_true", help="also the Compare tab's decided votes, a pair each")
    s.add_argument(
        "--format",
        default="store",
        choices=["store", "trl", "openrlhf"],
        help="store: every column of the pairs view; trl: prompt/chosen/rejected for TRL (also .jsonl, .parquet, "
        "or a folder: a datasets dataset); openrlhf: the same, always as messages (OpenRLHF's "
        "--apply_chat_template)",
    )
    s.set_defaults(func=cmd_pairs)


def _db_after_the_command(parser: argparse.ArgumentParser) -> None:
    """Every command also takes --db after its name (`rlhf pairs --stats --db my.duckdb`). Its default is
    SUPPRESS, so a command that is not given one keeps the value from before the command (or the default)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                sub.add_argument(
                    "--db", default=argparse.SUPPRESS, help="store file (also accepted before the command)"
                )
                _db_after_the_command(sub)


def parse(argv: list[str] | None) -> argparse.Namespace:
    """Parse twice when --config FILE is given: the file's settings become the defaults, so the command line's
    own flags still override them (and the app's saved config launches identically here)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "config", None) and hasattr(args, "config_class"):
        try:
            cfg = args.config_class.load(args.config)
        except (OSError, ValueError, TypeError) as e:
            raise UserError(f"cannot read config {args.config}: {str(e).splitlines()[0][:200]}") from None
        sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices[args.command]
        skip = ("output_dir", "data", "prompts")  # the data source is always chosen explicitly
        sub.set_defaults(**{k: v for k, v in dataclasses.asdict(cfg).items() if k not in skip})
        args = parser.parse_args(argv)
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse(argv)
        if getattr(args, "db", None) is not None:  # one Store per command, passed down (store/db.py)
            from store.db import Store

            args.db = Store(args.db)
        args.func(args)
    except (UserError, ModelError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: everything written before this point is kept", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
