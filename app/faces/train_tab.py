"""Train tab: one form per trainer of the registry (training/registry.py: reward model, PPO, DPO), generated from its
config dataclass, buttons that start runs through the same functions as the CLI, and a live view (runs table,
status, plots, log tail, samples) polled every 2 s from the run folders, redrawn only when they changed. Every handler
is a plain function over app/jobs/train_view.py.

No `from __future__ import annotations` here: Gradio finds the `gr.SelectData` parameter by its evaluated
annotation."""

import functools
import hashlib
import os
from pathlib import Path
from types import SimpleNamespace

from app.faces.config_form import build_form, config_from_form, form_values_from_file
from app.faces.handlers import admin_only
from app.faces.rounds_ui import build_next_round
from app.jobs.train_view import log_tail, plot_frames, runs_rows, samples_rows, snapshot_choices
from app.jobs.train_view import status_line as run_status_line
from store.errors import UserError
from training.pairwise.data_types import takes_snapshot
from training.registry import TRAINERS

RM_SKIP, PPO_SKIP = TRAINERS["reward"].form_skip, TRAINERS["ppo"].form_skip
PLOTS = max(len(t.plots) for t in TRAINERS.values())
RUN_HEADERS = ["run", "kind", "started", "state", "step", "headline", "folder"]


def plot_updates(run: Path | None) -> list:
    """One LinePlot value per plot slot: (title, DataFrame of step/value) or hidden."""
    import gradio as gr
    import pandas as pd

    frames = plot_frames(run) if run else {}
    out = []
    for i in range(PLOTS):
        if i < len(frames):
            key, points = list(frames.items())[i]
            df = pd.DataFrame(points, columns=["step", "value"])
            out.append(gr.LinePlot(value=df, x="step", y="value", title=key, visible=True))
        else:
            out.append(gr.LinePlot(visible=False))
    return out


def button_of(spec) -> tuple[str, str, str]:
    """A trainer's start button, from its registry entry: (label, elem_id, api name). A trainer on pairs trains
    ("Train reward model", train-rm), one on prompts runs ("Run PPO", run-ppo); the id follows its command."""
    name = spec.title if spec.title.isupper() else spec.title.lower()
    verb, stem = ("Train", "train") if takes_snapshot(spec.data) else ("Run", "run")
    elem_id = f"{stem}-{spec.command.removeprefix('train-')}"
    return f"{verb} {name}", elem_id, elem_id.replace("-", "_")


def form_title(spec) -> str:
    """The accordion around a trainer's form: its title and what it is."""
    return f"{spec.title} settings ({spec.summary})"


def build_train_tab(ctx, demo) -> None:
    ui = SimpleNamespace(**_trainer_forms(), **_run_view(ctx))
    _wire(ctx, demo, ui)


def _trainer_forms() -> dict:
    """The data and prompts pickers, one form per trainer (each can load a config.json), and the start buttons."""
    import gradio as gr

    with gr.Row(equal_height=True):
        data = gr.Dropdown(label="Data for the reward model and DPO", choices=[("current store", "")], value="")
        prompts = gr.Textbox(label="PPO prompts file (empty: the store's prompts, train split)", value="")
    forms, config_files, buttons = {}, {}, {}
    for kind, spec in TRAINERS.items():
        with gr.Accordion(form_title(spec), open=False):
            config_files[kind] = gr.File(
                label="Load a config.json", file_types=[".json"], height=80, elem_id=f"{spec.form_prefix}config-file"
            )
            forms[kind] = build_form(spec.config, spec.form_skip, prefix=spec.form_prefix)
    with gr.Row():
        for kind, spec in TRAINERS.items():
            label, elem_id, _ = button_of(spec)
            buttons[kind] = gr.Button(label, elem_id=elem_id)
        chain_btn = gr.Button(chain_label(CHAIN_DEFAULT), variant="primary", elem_id="rm-then-policy")
        chain_method = gr.Dropdown(
            label="then", choices=chain_choices(), value=CHAIN_DEFAULT, elem_id="chain-method", scale=0
        )
        chain_dpo = gr.Checkbox(label="then DPO from the same snapshot", value=False, elem_id="chain-dpo")
    pickers = {"data": data, "prompts": prompts, "forms": forms, "config_files": config_files}
    chain = {"chain_btn": chain_btn, "chain_method": chain_method, "chain_dpo": chain_dpo}
    return {**pickers, "buttons": buttons, **chain}


# the one-click path's policy method: RLOO, the method chosen on the validation split (docs/evaluation.md, "Declared
# runs"); the "then" menu offers the others
CHAIN_DEFAULT = "rloo"


def chain_choices() -> list[tuple[str, str]]:
    """The trainers on prompts the one-click path can run after the reward model: (title, kind)."""
    return [(spec.title, kind) for kind, spec in TRAINERS.items() if spec.data == "prompts"]


def chain_label(kind: str) -> str:
    return f"Reward model then {TRAINERS[kind].title}"


def _run_view(ctx) -> dict:
    """The runs table, the selected run's buttons (stop, resume, next round), its status, plots, samples and log."""
    import gradio as gr

    action = gr.Markdown(elem_id="train-action")
    gr.Markdown("### Runs")
    table = gr.Dataframe(headers=RUN_HEADERS, interactive=False, elem_id="runs-table", wrap=True)
    with gr.Row(equal_height=True):
        selected = gr.Textbox(label="Run (click a row)", elem_id="selected-run", scale=4)
        stop_btn = gr.Button("Stop", elem_id="stop-run", scale=1)
        resume_btn = gr.Button("Resume", elem_id="resume-run", scale=1)
    build_next_round(ctx, selected, action)
    status = gr.Markdown(elem_id="run-status")
    with gr.Row():
        plots = [gr.LinePlot(visible=False, height=220, elem_id=f"plot-{i}") for i in range(PLOTS)]
    samples = gr.Dataframe(
        headers=["step", "score", "response", "prompt"], interactive=False, wrap=True, elem_id="run-samples"
    )
    log = gr.Textbox(label="Log (tail)", lines=12, max_lines=12, interactive=False, elem_id="run-log")
    run = {"action": action, "table": table, "selected": selected, "stop_btn": stop_btn, "resume_btn": resume_btn}
    return {**run, "status": status, "plots": plots, "samples": samples, "log": log}


def start_run(runs, forms: dict, which: str, data_value, prompts_value, method, with_dpo, *values) -> tuple[str, str]:
    """Start `which` (a trainer, or "chain": reward model then `method`, a trainer on prompts, then DPO if asked)
    from the forms' values, which arrive in the forms' order; returns (the line to show, the run folder)."""
    if which == "chain" and method not in {kind for _, kind in chain_choices()}:
        raise UserError(f"the one-click path runs a trainer on prompts, not {method!r}")
    cfg, at = {}, 0
    for kind, comps in forms.items():
        spec = TRAINERS[kind]
        cfg[kind] = config_from_form(spec.config, spec.form_skip, list(values[at : at + len(comps)]))
        at += len(comps)
    data_value, prompts_value = data_value or None, prompts_value or None
    if which == "chain":
        dpo = cfg["dpo"] if with_dpo else None
        run = runs.start_chain(cfg["reward"], cfg[method], data_value, prompts_value, dpo)
    else:
        run = runs.start(cfg[which], data_value if takes_snapshot(TRAINERS[which].data) else prompts_value)
    return f"started {run.name}", run.name


def view_key(rows: list, status: str, run: Path | None) -> str:
    """What the run views are drawn from: the runs table, the run's status line and the run folder's files (name,
    size, modification time). The same key as a page's last draw means there is nothing new to show it."""
    files = []
    if run is not None and run.is_dir():
        for entry in os.scandir(run):
            try:
                if entry.is_file():
                    stat = entry.stat()
                    files.append((entry.name, stat.st_size, stat.st_mtime_ns))
            except OSError:  # removed between the listing and the stat: the next tick sees it gone
                continue
    return hashlib.sha256(repr((rows, status, str(run), sorted(files))).encode()).hexdigest()


def refresh_view(ctx, run_path: str, seen: str | None = None) -> list:
    """The runs table, and the selected run's status line, samples, log tail and plots; then the views' key
    (view_key). When the key is `seen`, the page's last draw, every view is left as it is (gr.skip): an open page
    whose runs do not change costs a small request every 2 s and no redraw of its plots."""
    import gradio as gr

    ctx.runs.poll()
    try:  # only a run the store recorded (a typed folder shows nothing)
        run = ctx.runs.find(run_path) if run_path else None
    except UserError:
        run = None
    rows = runs_rows(ctx.db)
    status = run_status_line(run) if run else ""
    key = view_key(rows, status, run)
    if key == seen:
        return [*(gr.skip() for _ in range(4 + PLOTS)), key]
    return [
        rows,
        status,
        samples_rows(run) if run else [],
        log_tail(run) if run else "",
        *plot_updates(run),
        key,
    ]


def _wire(ctx, demo, ui) -> None:
    """Every event of the tab; each answers admins only (app/faces/handlers.py::admin_only): a run can be started, and a
    run's log read."""
    import gradio as gr

    runs = ctx.runs

    def refresh(run_path: str):  # the views' endpoint keeps its name, /refresh; it always draws
        return refresh_view(ctx, run_path)

    def refresh_if_changed(run_path: str, seen: str | None):  # the timer's: draws only what changed since `seen`
        return refresh_view(ctx, run_path, seen)

    def choices():
        return gr.Dropdown(choices=snapshot_choices(ctx.db))

    def on_select(rows, evt: gr.SelectData):
        row = evt.index[0]
        return rows.iloc[row, 0] if hasattr(rows, "iloc") else rows[row][0]  # the run's id

    inputs = [ui.data, ui.prompts, ui.chain_method, ui.chain_dpo, *(c for comps in ui.forms.values() for c in comps)]
    ui.chain_method.change(lambda kind: gr.Button(value=chain_label(kind)), [ui.chain_method], [ui.chain_btn])
    seen = gr.State(None)  # the key of this page's last draw (refresh_view)
    views = [ui.table, ui.status, ui.samples, ui.log, *ui.plots, seen]
    clicks = [(ui.buttons[kind], kind, button_of(spec)[2]) for kind, spec in TRAINERS.items()]
    clicks.append((ui.chain_btn, "chain", "rm_then_policy"))
    view = admin_only(ctx, refresh, quiet=len(views))
    for btn, which, name in clicks:
        start = admin_only(ctx, functools.partial(start_run, runs, ui.forms, which))
        btn.click(start, inputs, [ui.action, ui.selected], api_name=name).then(view, [ui.selected], views)
    ui.stop_btn.click(admin_only(ctx, lambda name: runs.stop(name)), [ui.selected], [ui.action], api_name="stop_run")
    resume = admin_only(ctx, lambda name: f"resumed {runs.resume(name).name}")
    ui.resume_btn.click(resume, [ui.selected], [ui.action], api_name="resume_run")
    for kind, comps in ui.forms.items():
        values = functools.partial(form_values_from_file, TRAINERS[kind].config, TRAINERS[kind].form_skip)
        ui.config_files[kind].upload(admin_only(ctx, values), [ui.config_files[kind]], comps)
    select = admin_only(ctx, on_select, quiet=1)
    ui.table.select(select, [ui.table], [ui.selected], api_visibility="private")  # a click only
    ui.selected.change(view, [ui.selected], views, show_progress="hidden")
    tick = admin_only(ctx, refresh_if_changed, quiet=len(views))
    gr.Timer(2.0).tick(tick, [ui.selected, seen], views, show_progress="hidden", api_visibility="private")
    demo.load(admin_only(ctx, choices, quiet=1), None, [ui.data]).then(view, [ui.selected], views)
