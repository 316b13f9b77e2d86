"""`rlhf`'s commands for a lead running a labeling campaign: the annotators' dashboard, agreement with the reward
model, gold prompts, the guideline, and the answers undone (app/faces/cli.py parses)."""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

from store.errors import UserError


def cmd_undone(args: argparse.Namespace) -> None:
    """`rlhf undone`: every answer the Annotate tab's Undo took back, with who, when and what it was."""
    from app.faces.terminal import shown
    from store.assignments import undone
    from store.db import read

    with read(args.db, create=False) as con:
        rows = undone(con, args.annotator)
    if args.json:
        for r in rows:
            print(json.dumps(dataclasses.asdict(r)))
        return
    if not rows:
        print("nothing undone" + (f" by {shown(args.annotator)}" if args.annotator else ""))
    for r in rows:
        what = (
            f"skip ({shown(r.skip_reason)})"
            if r.skipped
            else "ranks " + " ".join(f"{i}:{k}" for i, k in zip(r.response_ids, r.ranks, strict=True))
        )
        what = f"all bad: {what}" if r.all_bad else what
        who = shown(r.annotator)
        print(f"{r.undone_at}  {who}  prompt {r.prompt_id}  ranking {r.ranking_id} of {r.ranked_at}  {what}")


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
    from store.db import read
    from store.gold import gold_list

    with read(args.db, create=False) as con:
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


def add_campaign_commands(sub) -> None:
    """The lead's tools: the dashboard, gold prompts, the guideline, undone answers."""
    s = sub.add_parser("annotators", help="per annotator: answers, speed, agreement, flags, and whom to look at")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.set_defaults(func=cmd_annotators)

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

    s = sub.add_parser("undone", help="list the answers annotators undid (who, when, the ranking as it was)")
    s.add_argument("--annotator", help="only this annotator's")
    s.add_argument("--json", action="store_true", help="one JSON object a line")
    s.set_defaults(func=cmd_undone)
