"""Data tab: store counts, prompts (upload or the bundled examples), sampling, Label Studio import and export,
pairs download. Every button calls a plain function from annotation/ or store/."""

from __future__ import annotations

import tempfile
import time
from functools import partial
from pathlib import Path
from types import SimpleNamespace

from annotation.actions import (
    add_example_prompts,
    add_prompt_file,
    agreement,
    set_guideline_text,
    stats_lines,
    store_stats,
    write_ls_export,
    write_pairs_file,
)
from annotation.dashboard import HEADERS as ANNOTATOR_HEADERS
from annotation.dashboard import annotator_rows, over_time, table
from annotation.imports import import_labelstudio_file, import_labelstudio_url
from app.faces.handlers import admin_only
from app.faces.private_files import checked_dir, private_root, remove_own_dirs
from app.faces.rounds_ui import ROUND_HEADERS, rounds_rows
from app.jobs.sampling import run_sampling
from store.db import StoreRef, read
from store.errors import UserError
from store.guidelines import MAX_GUIDELINE_CHARS, current_guideline


def counts_markdown(db: StoreRef) -> str:
    s = store_stats(db)
    lines = stats_lines(s)
    if s["prompts"] == 0:
        lines.insert(0, "**The store is empty.** Load the bundled example prompts, then sample responses to rank.")
    return "\n".join(f"- {line}" if not line.startswith("**") else line for line in lines)


def annotators_view(db: StoreRef):
    """The dashboard's table and its answers-over-time plot (hidden until someone has answered)."""
    import gradio as gr
    import pandas as pd

    rows = annotator_rows(db)
    bucket, points = over_time(db)
    frame = pd.DataFrame(points, columns=["annotator", "time", "answers"])
    plot = gr.LinePlot(value=frame, visible=bool(points), y_title=f"answers per {bucket}")
    return table(rows), plot


def current_guideline_text(db: StoreRef) -> str:
    """The guideline's current text, to edit ('' before one is set)."""
    with read(db) as con:
        current = current_guideline(con)
    return current[1] if current else ""


def agreement_table(db: StoreRef) -> list[list]:
    return [[r["annotators"], r["shared_prompts"], round(r["mean_tau"], 3)] for r in agreement(db)]


# the Annotators table's columns (annotation/dashboard.py::HEADERS): the reasons to look at someone get the room
ANNOTATOR_WIDTHS = [
    *("8%", "19%", "5%", "4%", "4%", "4%", "8%", "7%", "4%", "5%"),
    *("5%", "5%", "4%", "5%", "4%", "4%", "5%"),
]

DOWNLOAD_AGE_S = 600  # Gradio copies a download into its own cache as it answers; ours can go soon after


def _out_dir(root: Path | None = None) -> Path:
    """A fresh folder for one download, under the process's private root (app/faces/private_files.py: mode 700, a
    name nobody could plant); download folders there older than DOWNLOAD_AGE_S are removed first (each download
    used to leave its copy in /tmp for good), and nothing else."""
    root = checked_dir(root or private_root() / "downloads")
    remove_own_dirs(root, "download-", DOWNLOAD_AGE_S, time.time())
    return Path(tempfile.mkdtemp(prefix="download-", dir=root))


def pairs_download(db: StoreRef, fmt: str) -> str:
    out = _out_dir() / f"pairs.{fmt}"
    write_pairs_file(db, out)
    return str(out)


def ls_export_download(db: StoreRef) -> list[str]:
    tasks, config, _ = write_ls_export(db, _out_dir())
    return [str(tasks), str(config)]


def sample_from_app(ctx, k: int, limit: int | None, progress=None) -> str:
    ctx.limits.check_sampling(int(k), ctx.sampling.max_new_tokens)
    with ctx.sampler(ctx.sampling) as sampler:
        report = run_sampling(
            ctx.db,
            sampler,
            k=int(k),
            limit=int(limit) if limit else None,  # 0 = all pending
            progress=(lambda done, total: progress(done / max(total, 1), desc=f"sampled {done}/{total} prompts"))
            if progress
            else None,
        )
    return report.line()


def add_prompts_upload(db: StoreRef, path: str | None) -> str:
    return add_prompt_file(db, path, source=Path(path).name) if path else "no file"


def _bucket_order(order: str) -> list[str] | None:
    return [b.strip() for b in order.split(",") if b.strip()] or None


def import_ls_upload(db: StoreRef, path: str | None, order: str) -> str:
    """An uploaded Label Studio export into the store; returns the import's one-line report."""
    if not path:
        return "no file"
    return import_labelstudio_file(db, path, bucket_order=_bucket_order(order)).line()


def pull_ls(db: StoreRef, url: str, project, key: str, order: str, allow_private: bool = False) -> str:
    """A running Label Studio project's annotations into the store; the token is used for this call only.
    allow_private: `rlhf ui --allow-private-address` (a Label Studio on the local network)."""
    if not url or not project:
        raise UserError("give the Label Studio URL and the project id")
    if project < 1:
        raise UserError(f"a Label Studio project id is a positive whole number, got {project}")
    buckets = _bucket_order(order)
    return import_labelstudio_url(db, url, int(project), key or "", buckets, allow_private).line()


def _labelstudio_section() -> SimpleNamespace:
    """Import an export file, pull from a running Label Studio, export Ranker tasks."""
    import gradio as gr

    gr.Markdown("### Label Studio")
    with gr.Row():
        with gr.Column():
            file = gr.File(
                label="Import an export (JSON, JSON_MIN, CSV, TSV)", file_types=[".json", ".csv", ".tsv"], height=120
            )
            buckets = gr.Textbox(label="Bucket order, best first (only for bucket rankers)", placeholder="good,ok,bad")
            import_btn = gr.Button("Import", elem_id="import-ls")
        with gr.Column():
            url = gr.Textbox(label="Or pull from a running Label Studio: URL", placeholder="http://127.0.0.1:8080")
            with gr.Row():
                # no `minimum`: the browser marks the empty box invalid (red) against it before anyone types;
                # pull_ls checks the id instead
                project = gr.Number(label="Project id", precision=0, value=None, elem_id="ls-project")
                key = gr.Textbox(label="Access token (used once, never stored)", type="password")
            pull_btn = gr.Button("Pull and import", elem_id="pull-ls")
        with gr.Column():
            export_btn = gr.Button("Export Ranker tasks for Label Studio", elem_id="export-ls")
            export_files = gr.File(
                label="tasks.json + label_config.xml", file_count="multiple", interactive=False, height=120
            )
    upload = {"file": file, "buckets": buckets, "import_btn": import_btn}
    pull = {"url": url, "project": project, "key": key, "pull_btn": pull_btn}
    return SimpleNamespace(**upload, **pull, export_btn=export_btn, export_files=export_files)


def _dashboard_section() -> SimpleNamespace:
    """The lead's view of the annotators: the per-annotator table, answers over time, pairwise agreement."""
    import gradio as gr

    gr.Markdown(
        "### Annotators (`rlhf annotators`): whom to look at and why, then how much (rankings, skips, all bad, "
        "edits, tags, the other questions' answers), how fast (median seconds a task, tasks an hour), agreement "
        "with the others (mean Kendall tau-b, on how many shared prompts), rankings under 2 s or left in the shown "
        "order, accuracy on gold prompts (on how many), and agreement with the newest reward model scored "
        "(`rlhf rm-agreement`)"
    )
    annotators_df = gr.Dataframe(
        headers=ANNOTATOR_HEADERS,
        interactive=False,
        elem_id="annotators",
        wrap=True,
        column_widths=ANNOTATOR_WIDTHS,
    )
    answers_plot = gr.LinePlot(
        x="time", y="answers", color="annotator", height=220, visible=False, elem_id="answers-over-time"
    )
    gr.Markdown("### Agreement between annotators (Kendall tau-b on shared prompts; run the app with --overlap 2)")
    agreement_df = gr.Dataframe(
        headers=["annotators", "shared prompts", "mean tau"], interactive=False, elem_id="agreement"
    )
    return SimpleNamespace(annotators=annotators_df, answers_plot=answers_plot, agreement=agreement_df)


def _guideline_section(ctx, demo, status) -> None:
    """The campaign's guideline: edit and save the next version (admins), loaded with the page."""
    import gradio as gr

    gr.Markdown(
        "### Guidelines (`rlhf guideline`): Markdown shown beside the ranker; each save is a new version, and each "
        "ranking records the version its annotator saw"
    )
    guideline_text = gr.Textbox(
        lines=6, max_lines=30, max_length=MAX_GUIDELINE_CHARS, label="Guideline", elem_id="guideline-text"
    )
    guideline_btn = gr.Button("Save as the next version", elem_id="guideline-save")

    def on_guideline(text, request):
        try:
            ctx.check_admin(request)
            return set_guideline_text(ctx.db, text or "", getattr(request, "username", None) or "admin")
        except UserError as e:
            raise gr.Error(str(e)) from None

    on_guideline.__annotations__ = {"request": gr.Request}  # Gradio finds the request by it (no string annotation)
    guideline_btn.click(on_guideline, [guideline_text], status, api_name="set_guideline")
    demo.load(admin_only(ctx, lambda: current_guideline_text(ctx.db), quiet=1), outputs=[guideline_text])


def build_data_tab(ctx, demo) -> None:
    import gradio as gr

    counts = gr.Markdown(elem_id="store-counts")
    status = gr.Textbox(label="Last action", interactive=False, elem_id="data-status")
    gr.Markdown("### Prompts and sampling")
    with gr.Row(equal_height=True):
        examples_btn = gr.Button("Load example prompts", elem_id="load-examples")
        k = gr.Number(value=4, precision=0, minimum=2, maximum=ctx.limits.max_k, label="K responses per prompt")
        limit = gr.Number(value=0, precision=0, minimum=0, label="At most this many prompts (0 = all pending)")
        sample_btn = gr.Button("Sample pending prompts", variant="primary", elem_id="sample")
    prompts_file = gr.File(label="Add prompts (.txt, .jsonl, .csv)", file_types=[".txt", ".jsonl", ".csv"], height=120)
    ls = _labelstudio_section()
    board = _dashboard_section()
    _guideline_section(ctx, demo, status)
    gr.Markdown("### Rounds (`rlhf rounds`; start the next one from the Train tab)")
    rounds_df = gr.Dataframe(headers=ROUND_HEADERS, interactive=False, elem_id="rounds-table", wrap=True)
    gr.Markdown("### Pairs for reward-model training")
    with gr.Row(equal_height=True):
        fmt = gr.Radio(["jsonl", "parquet", "csv"], value="jsonl", label="Format")
        pairs_btn = gr.Button("Download pairs", elem_id="download-pairs")
    pairs_file = gr.File(label="Pairs", interactive=False, height=80)

    refresh = admin_only(ctx, lambda: (counts_markdown(ctx.db), agreement_table(ctx.db)), quiet=2)
    shown = [counts, board.agreement]

    def on_sample(k_value, limit_value, progress=gr.Progress()):  # noqa: B008 (Gradio injects it)
        return sample_from_app(ctx, k_value, limit_value, progress)

    demo.load(refresh, outputs=shown, api_name="counts")
    dashboard = admin_only(ctx, lambda: annotators_view(ctx.db), quiet=2)
    demo.load(dashboard, outputs=[board.annotators, board.answers_plot], api_name="annotators")
    demo.load(admin_only(ctx, lambda: rounds_rows(ctx.db), quiet=1), outputs=[rounds_df], api_name="counts_by_round")
    pull = partial(pull_ls, ctx.db, allow_private=ctx.allow_private_address)
    for trigger, fn, inputs, outputs, name in [
        (examples_btn.click, lambda: add_example_prompts(ctx.db), [], status, "load_examples"),
        (prompts_file.upload, partial(add_prompts_upload, ctx.db), [prompts_file], status, "add_prompts"),
        (ls.import_btn.click, partial(import_ls_upload, ctx.db), [ls.file, ls.buckets], status, "import_ls"),
        (ls.pull_btn.click, pull, [ls.url, ls.project, ls.key, ls.buckets], status, "pull_ls"),
        (pairs_btn.click, lambda f: pairs_download(ctx.db, f), [fmt], pairs_file, "download_pairs"),
        (ls.export_btn.click, lambda: ls_export_download(ctx.db), [], ls.export_files, "export_ls"),
    ]:
        trigger(admin_only(ctx, fn), inputs, outputs, api_name=name).then(refresh, None, shown).then(
            dashboard, None, [board.annotators, board.answers_plot]
        )

    # Sampling runs one at a time (it holds the model); the rest of the app keeps answering meanwhile. The status box
    # shows the runtime, not Gradio's spinner over it: a browser on the app's own CPU (`make run`) draws the spinner
    # on the cores that sample (bench/sample_click.py times the button as it is drawn).
    sample_btn.click(
        admin_only(ctx, on_sample), [k, limit], status, api_name="sample", concurrency_limit=1, show_progress="minimal"
    ).then(refresh, None, shown)
