"""`rlhf`: every command calls the same plain function the app's buttons call (the commands: app/faces/cli_data.py,
app/faces/cli_campaign.py and app/faces/cli_runs.py).

Errors a user can cause are one line on stderr and exit status 1, never a traceback."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from app.faces import cli_campaign, cli_data, cli_runs
from app.faces.cli_runs import demo_config  # noqa: F401 (the demo's settings from its flags; tests read it here)
from store.errors import UserError
from training.models import ModelError


def build_parser() -> argparse.ArgumentParser:
    from store.db import default_db_path

    p = argparse.ArgumentParser(prog="rlhf", description="Preference annotation and RLHF, end to end.")
    p.add_argument("--db", default=default_db_path(), help="store file (default ./rlhf.duckdb or $RLHF_DB)")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cli_data.add_app_commands(sub)
    cli_data.add_data_commands(sub)
    cli_data.add_exchange_commands(sub)
    cli_runs.add_training_commands(sub)
    cli_runs.add_run_commands(sub)
    cli_campaign.add_campaign_commands(sub)
    cli_runs.add_demo_commands(sub)
    _db_after_the_command(p)
    return p


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


def main(argv: list[str] | None = None, store=None) -> int:
    """`rlhf ARGS`; returns the exit code. store: a Store to run on instead of the file --db names (the test suite's
    second backend, RLHF_TEST_STORE=memory)."""
    # what a command creates (the store and its write-ahead log, backups, snapshots, run folders, exports) is
    # readable by this user only: another local user of a shared host reads none of it
    umask = os.umask(0o077)
    try:
        from app.jobs.provenance import invoked

        invoked(sys.argv[1:] if argv is None else argv)  # what a results file this command writes says made it
        args = parse(argv)
        if os.environ.get("RLHF_QUESTIONS"):  # a team's own questions (annotation/questions/: load_questions)
            from annotation.questions import load_questions

            load_questions(os.environ["RLHF_QUESTIONS"])
        if store is not None and hasattr(args, "db"):
            args.db = store
        elif getattr(args, "db", None) is not None:  # one Store per command, passed down (store/db.py)
            from store.db import Store

            args.db = Store(args.db)
        args.func(args)
    except (UserError, ModelError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: everything written before this point is kept", file=sys.stderr)
        return 130
    finally:
        os.umask(umask)
    return 0


if __name__ == "__main__":
    sys.exit(main())
