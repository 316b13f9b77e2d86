"""The app's side of rounds (app/jobs/rounds.py): the Data tab's rounds table and the Train tab's "Start the next round"
row, which samples the next round from the selected run's policy. Plain functions, then the wiring."""

from __future__ import annotations

from app.faces.limits import ServeLimits
from app.jobs.round_config import RoundConfig
from store.db import read
from store.errors import UserError
from store.rounds import list_rounds

ROUND_HEADERS = ["round", "policy", "mixed in", "selection", "prompts", "rankings", "pairs", "labels spent", "runs"]


def rounds_rows(db) -> list[list]:
    """One row per round for the Data tab, the same numbers as `rlhf rounds`."""
    with read(db) as con:
        rounds = list_rounds(con)
    return [
        [
            r["round"],
            r["policy"],
            r["previous_policy"] or "",
            r["selection"],
            r["prompts"],
            r["rankings"],
            r["pairs"],
            r["labels_spent"],
            ", ".join(run for run, _ in r["runs"]),
        ]
        for r in rounds
    ]


def start_next_round(
    db,
    run: str,
    k,
    mix_previous,
    select: str,
    n,
    limits: ServeLimits | None = None,
    runs_dir: str = "runs",
    samplers=None,
) -> str:
    """The Train tab's button: the next round from the selected run's policy; one line saying what it stored."""
    from app.jobs.rounds import start_round
    from app.jobs.training import recorded_run

    if not run:
        raise UserError("select a PPO or DPO run in the table first: its policy samples the next round")
    cfg = RoundConfig(policy=run, k=int(k or 0), mix_previous=int(mix_previous or 0), select=select, n=int(n or 0))
    (limits or ServeLimits()).check_sampling(cfg.k + cfg.mix_previous, cfg.max_new_tokens)
    cfg.policy = str(recorded_run(db, run, runs_dir))  # the run the table names, never a typed folder
    r = start_round(db, cfg, log=lambda _line: None, samplers=samplers)
    mixed = f" and {r['previous_policy']}" if r["previous_policy"] else ""
    return (
        f"Round {r['round']} started: {r['prompts']} of {r['candidates']} prompts, {r['responses']} responses from "
        f"{r['policy']}{mixed}. Rank them in the Annotate tab."
    )


def build_next_round(ctx, selected, action) -> None:
    """The Train tab's row under the runs table."""
    import gradio as gr

    from annotation.selection import RULES
    from app.faces.handlers import admin_only

    with gr.Accordion("Next round: the selected run's policy samples new responses to rank", open=True):
        with gr.Row(equal_height=True):
            k = gr.Number(value=4, precision=0, minimum=1, label="K from the policy", elem_id="round-k")
            mix = gr.Number(value=1, precision=0, minimum=0, label="+ M from the previous round's policy")
            select = gr.Dropdown(list(RULES), value="random", label="Choose prompts by", elem_id="round-select")
            n = gr.Number(value=0, precision=0, minimum=0, label="Prompts (0 = every unasked one)", elem_id="round-n")
            button = gr.Button("Start the next round", elem_id="next-round")
    button.click(
        admin_only(
            ctx,
            lambda *a: start_next_round(
                ctx.db, *a, limits=ctx.limits, runs_dir=ctx.runs.runs_dir, samplers=ctx.sampler
            ),
        ),
        [selected, k, mix, select, n],
        [action],
        api_name="start_round",
        concurrency_limit=1,
    )
