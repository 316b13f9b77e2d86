"""`rlhf`'s commands on runs: training (one command per trainer), the demo and its seeds, backups, runs and
annotation rounds (app/faces/cli.py parses)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
from pathlib import Path

from app.faces.config_args import add_dataclass_args, dataclass_from_args, given_args
from app.jobs.round_config import RoundConfig
from app.studies.demo_config import QUICK, ROUNDS, DemoConfig
from store.errors import UserError
from training.pairwise.data_types import takes_snapshot
from training.precision import with_resolved_dtype
from training.registry import TRAINERS


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
    from app.jobs.training import left_out_line, prepare_run, recorded_run, resume_run, run_training
    from training.registry import run_config, trainer

    spec = trainer(args.config_class.KIND)
    show = _progress(spec.kind)
    if args.resume:
        run = recorded_run(args.db, args.resume, args.runs_dir)
        status = resume_run(run, args.num_accelerators, args.hostfile, on_metrics=show)
    else:
        cfg, dtype_line = with_resolved_dtype(dataclass_from_args(spec.config, args))
        data = args.pairs if takes_snapshot(spec.data) else args.prompts
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
    from app.studies.demo_seeds import SEEDS_REPORT, read_results, verdicts, write_combined

    combined = write_combined(read_results(args.demos), Path(args.out), tuple(args.chose_settings))
    print("\n".join(verdicts(combined)))
    print(f"{len(combined['seeds'])} seeds ({', '.join(map(str, combined['seeds']))}): {Path(args.out) / SEEDS_REPORT}")
    if args.readme:
        from app.studies.demo_seeds import write_readme

        readme = Path(args.readme)
        write_readme(readme, combined, os.path.relpath(Path(args.out).resolve(), readme.resolve().parent))
        print(f'{readme}: its "Does it learn?" paragraph rewritten from {Path(args.out) / "seeds.json"}')


def cmd_demo_trials(args: argparse.Namespace) -> None:
    from app.studies.demo_seeds import read_results
    from app.studies.demo_trials import TRIALS_REPORT, write_trials

    t = write_trials(read_results(args.demos), Path(args.out))
    c = t["chosen"]
    print(f"chosen on validation: {c['name']} from {c['trial']}" if c else "chosen on validation: none")
    print(f"{len(t['rows'])} trained policies: {Path(args.out) / TRIALS_REPORT}")


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
    from store.db import read
    from store.runs import list_runs
    from training.registry import TRAINERS
    from training.runs import effective_status

    with read(args.db, create=False) as con:
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


def cmd_rounds(args: argparse.Namespace) -> None:
    from store.db import read
    from store.rounds import list_rounds

    with read(args.db, create=False) as con:
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


def add_training_commands(sub) -> None:
    """One command per trainer in the registry: `rlhf train-rm`, `rlhf train-dpo`, `rlhf train-ppo`, ..."""
    for spec in TRAINERS.values():
        if takes_snapshot(spec.data):
            rows = "preference pairs" if spec.data == "pairs" else "unpaired thumbs (or pairs split by net wins)"
            s = sub.add_parser(
                spec.command,
                help=f"{spec.title} ({spec.summary}) on DeepSpeed, from {rows} (a snapshot or --pairs)",
            )
            files = "a pairs" if spec.data == "pairs" else "a pairs or unpaired (prompt, completion, label)"
            s.add_argument("--pairs", help=f"{files} .jsonl/.parquet or a snapshot folder instead of the store")
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


def add_demo_commands(sub) -> None:
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
    s.add_argument(
        "--chose-settings",
        type=lambda text: [int(x) for x in text.split(",") if x.strip()],
        default=[],
        metavar="SEEDS",
        help="seeds whose numbers chose the settings (e.g. 0,1): shown apart, left out of the means over seeds",
    )
    s.add_argument(
        "--readme",
        metavar="README",
        help='also rewrite README\'s "Does it learn?" paragraph (its marked block) from this combination',
    )
    s.set_defaults(func=cmd_demo_seeds)

    s = sub.add_parser(
        "demo-trials",
        help="settings tried on the validation split: a demo and its forks side by side, and the protocol's choice",
    )
    s.add_argument("demos", nargs="+", help="the base demo folder, then its forks (or their results.json)")
    s.add_argument("--out", required=True, help="folder for trials.json and trials.md")
    s.set_defaults(func=cmd_demo_trials)


def add_run_commands(sub) -> None:
    """Backup and restore, training runs and annotation rounds."""
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

    s = sub.add_parser("rounds", help="list annotation rounds: policy, prompts, rankings, pairs, runs")
    s.set_defaults(func=cmd_rounds)

    s = sub.add_parser("round", help="annotation rounds")
    rs = s.add_subparsers(dest="round_command", required=True, metavar="ACTION")
    a = rs.add_parser("start", help="sample the next round from a policy, on prompts chosen by --select")
    add_dataclass_args(a, RoundConfig)
    a.set_defaults(func=cmd_round_start)
