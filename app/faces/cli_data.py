"""`rlhf`'s commands on the store's data: the app and its logins, prompts, sampling, imports and exports, and the
lead's campaign tools. Each calls the same plain function the app's buttons call (app/faces/cli.py parses)."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from app.faces.config_args import add_dataclass_args, dataclass_from_args
from app.faces.limits import ServeLimits
from store.errors import UserError
from training.models import resolve_model
from training.sampling.generation import SamplingConfig


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
    from store.db import read
    from store.prompts import pending_count
    from training.sampling.generation import open_sampler

    config = dataclass_from_args(SamplingConfig, args)
    resolve_model(config.model)  # a bad --model is an error even when there is nothing to sample
    with read(args.db) as con:
        prompts = pending_count(con, args.limit)
    if not prompts:
        print("no prompts without responses: nothing to sample (add prompts with `rlhf prompts add`)")
        return
    with open_sampler(config, sequences=prompts * args.k) as sampler:
        report = run_sampling(args.db, sampler, k=args.k, limit=args.limit, progress=_progress_bar("sampling"))
    print(report.line())


def cmd_best_of_n(args: argparse.Namespace) -> None:
    """`rlhf best-of-n`: best-of-N of a policy under a reward model, for each N (training/sampling/best_of_n.py)."""
    from annotation.prompt_files import read_prompts
    from app.jobs.training import heldout_prompts
    from training.sampling import best_of_n
    from training.sampling.generation import open_sampler

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
    with open_sampler(config, sequences=len(prompts) * max(ns)) as sampler:
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
        summary = import_labelstudio_url(
            args.db, args.url, args.project, key, bucket_order=buckets, allow_private=args.allow_private_address
        )
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
        allowed_origins=args.allowed_origins,
        allow_private_address=args.allow_private_address,
        limits=dataclass_from_args(ServeLimits, args),
        session_hours=args.session_hours,
        ssl_keyfile=args.ssl_keyfile,
        ssl_certfile=args.ssl_certfile,
        warm_engine=args.warm_engine,
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


def add_app_commands(sub) -> None:
    """The app and its logins."""
    s = sub.add_parser("ui", help="start the Gradio app")
    s.add_argument("--host", default="127.0.0.1")
    s.add_argument("--port", type=int, default=7860)
    s.add_argument("--auth", help="file of user:password lines; the login becomes the annotator id")
    s.add_argument(
        "--admins", help="with --auth: logins (comma-separated) that may use the Data and Train tabs; others annotate"
    )
    s.add_argument("--model", default="default", help="SFT model used by the app's sampling")
    s.add_argument(
        "--warm-engine",
        action="store_true",
        help="start the Sample button's engine at launch, not on the first click (it stays up until a training run "
        "needs the memory)",
    )
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
    s.add_argument(
        "--allowed-origins",
        help="pages of these origins may call the app besides its own (comma-separated, e.g. a reverse proxy's "
        "https://labels.example.com); the app's own origin is exactly its scheme, host and port",
    )
    s.add_argument(
        "--allow-private-address",
        action="store_true",
        help="the Data tab's Label Studio pull may reach a private-range address (link-local and metadata never)",
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


def add_data_commands(sub) -> None:
    """The store, its prompts, sampling and best-of-N."""
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


def add_exchange_commands(sub) -> None:
    """Rankings in (native, TRL, scores, Label Studio) and tasks and pairs out."""
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
    s.add_argument(
        "--allow-private-address",
        action="store_true",
        help="--url may be at a private-range address (10/8, 172.16/12, 192.168/16); link-local and cloud "
        "metadata addresses are never pulled from",
    )
    s.add_argument("--config", help="the project's labeling config XML (names the Pairwise fields, the List)")
    s.add_argument("--bucket-order", help="Ranker buckets best first, comma-separated (same bucket = tie)")
    s.set_defaults(func=cmd_import_ls)

    s = sub.add_parser("export-ls", help="write Label Studio Ranker tasks + labeling config to folder OUT")
    s.add_argument("out")
    s.add_argument("--seed", type=int, default=0, help="seed of the per-task item shuffle")
    s.set_defaults(func=cmd_export_ls)

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
