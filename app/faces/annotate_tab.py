"""Annotate tab: one prompt and its K responses in this annotator's shuffled order; rank, submit, skip, undo.

The handlers below are plain functions of (values in, values out) over annotation.session; the tab only wires
them. The annotator is the login name under --auth, else the name typed in the page.

No `from __future__ import annotations` here: Gradio finds the `gr.Request` parameter by its evaluated annotation."""

from dataclasses import dataclass

from annotation.actions import store_stats
from annotation.questions import Campaign, Shown, from_widget
from annotation.ranker_view import is_shown_order, item_ids, ranks_from_value, widget_value
from annotation.response_html import prompt_html, response_html
from annotation.session import Progress, Task, next_task, progress, skip, submit_and_next, undo_last
from store.db import StoreRef
from store.errors import UserError

SHOWN_ORDER_WARNING = (
    "You kept the order exactly as shown. If that is your ranking, press Submit again; otherwise drag the "
    "responses (or focus one and press its rank number)."
)
PROMPT_HEADING = "<h3>Prompt</h3>\n"
ASK_AN_ADMIN = "Nothing to annotate yet: an admin loads prompts and samples responses in the Data tab."


@dataclass
class View:
    """Everything the tab shows after an action."""

    task: dict | None  # assignment_id and response_ids: what the next submit refers to
    prompt: str
    ranker: dict
    progress: str
    status: str
    confirm: bool = False  # the next Submit confirms a ranking left in the shown order
    guideline: str | None = None  # the campaign's guideline as HTML (None: leave what is shown)


def guideline_html(guideline: tuple[int, str] | None) -> str:
    """The guideline shown beside the ranker: Markdown rendered as the responses are (its own HTML escaped), open,
    under a summary with its version; '' before an admin sets one."""
    if guideline is None:
        return ""
    version, text = guideline
    return (
        f"<details open class='guideline'><summary>Guidelines (version {version})</summary>"
        f"{response_html(text)}</details>"
    )


def empty_store_line(db: StoreRef, admin: bool) -> str | None:
    """What has to happen first when the store has nothing to rank yet (no prompts, or none sampled); None once it
    has. An annotator (under --auth) has no Data tab: the line says who acts."""
    s = store_stats(db)
    if s["responses"]:
        return None
    if not admin:
        return ASK_AN_ADMIN
    if s["prompts"]:
        loaded = f"{s['prompts']} loaded prompt{'s' if s['prompts'] != 1 else ''}"
        return f"Nothing to annotate yet: press Sample pending prompts on the Data tab to sample the {loaded}."
    return (
        "Nothing to annotate yet: load the example prompts or add a prompt file on the Data tab, then sample responses."
    )


def _nothing_to_rank(ctx, admin: bool) -> str:
    more = "Sample more prompts on the Data tab." if admin else "An admin samples more in the Data tab."
    return empty_store_line(ctx.db, admin) or f"**Nothing left to rank.** {more}"


def _view(
    ctx, annotator: str, task: Task | None, status: str, counts: Progress | None = None, admin: bool = True
) -> View:
    p = (counts or progress(ctx.db, annotator, ctx.overlap)).line(waiting=admin or not ctx.gold_rate)
    if task is None:
        return View(None, _nothing_to_rank(ctx, admin), {"items": []}, p, status)
    ids = item_ids(len(task.response_ids))  # opaque: a store id would tell an old (gold) response from a new one
    return View(
        {
            "assignment_id": task.assignment_id,
            "response_ids": task.response_ids,
            "item_ids": ids,
            "guideline_version": task.guideline[0] if task.guideline else None,
        },
        task.prompt,
        widget_value(
            ids,
            task.responses,
            task.previous_ranks,
            ctx.ask_strength,
            ctx.allow_edits,
            task.previous_edit if ctx.allow_edits else None,  # an app restarted without --edits shows no box for it
            task.previous_tags,
            task.previous_answers,
        ),
        p,
        status,
        guideline=guideline_html(task.guideline),
    )


def on_load(ctx, annotator: str, admin: bool = True) -> View:
    return _view(ctx, annotator, next_task(ctx.db, annotator, ctx.overlap, gold_rate=ctx.gold_rate), "", admin=admin)


def on_submit(ctx, annotator: str, task: dict | None, value: dict, confirmed: bool, admin: bool = True) -> View:
    if not task:
        return on_load(ctx, annotator, admin)
    ranks = ranks_from_value(value, task["item_ids"])
    shown = Shown(texts=[], ranks=ranks, item_ids=task["item_ids"])  # the texts: checked when stored
    answers = from_widget(value, shown, Campaign(ask_strength=ctx.ask_strength, allow_edits=ctx.allow_edits))
    if is_shown_order(ranks) and not confirmed:
        view = _view_same(ctx, annotator, task, value, SHOWN_ORDER_WARNING, admin)
        view.confirm = True
        return view
    nxt, counts = submit_and_next(
        ctx.db,
        annotator,
        task["assignment_id"],
        ranks,
        ctx.overlap,
        ctx.gold_rate,
        answers,
        task.get("guideline_version"),
    )
    return _view(ctx, annotator, nxt, "Saved. Next prompt.", counts, admin)


def on_all_bad(ctx, annotator: str, task: dict | None, value: dict | None, admin: bool = True) -> View:
    """The All bad button: none of the shown responses is good (annotation/questions/all_bad.py). With an edit in the
    widget, the edit is ranked over them and they tie below it; without one, the task closes with no pairs, counted
    as all bad on the dashboard. The order and strengths on the widget are not an answer here."""
    if not task:
        return on_load(ctx, annotator, admin)
    ties = [1] * len(task["response_ids"])
    shown = Shown(texts=[], ranks=ties, item_ids=task["item_ids"])
    campaign = Campaign(ask_strength=ctx.ask_strength, allow_edits=ctx.allow_edits)
    answers = from_widget({**(value or {}), "strengths": None, "all_bad": True}, shown, campaign)
    version = task.get("guideline_version")
    if answers["edit"] is None:
        kept = [q for q, a in answers.items() if a is not None and q != "all_bad"]
        if kept:  # as a native line or Label Studio annotation saying the same is refused
            raise UserError(
                f"all bad without an edit ranks nothing, so it keeps no other answer ({', '.join(kept)}): clear "
                "them, or write an edit"
            )
        skip(ctx.db, annotator, task["assignment_id"], "", version, all_bad=True)
        nxt = next_task(ctx.db, annotator, ctx.overlap, gold_rate=ctx.gold_rate)
        return _view(ctx, annotator, nxt, "Saved as all bad. Next prompt.", admin=admin)
    nxt, counts = submit_and_next(
        ctx.db,
        annotator,
        task["assignment_id"],
        ties,
        ctx.overlap,
        ctx.gold_rate,
        answers,
        version,
    )
    return _view(ctx, annotator, nxt, "Saved as all bad, your edit ranked first. Next prompt.", counts, admin)


def _view_same(ctx, annotator: str, task: dict, value: dict, status: str, admin: bool = True) -> View:
    p = progress(ctx.db, annotator, ctx.overlap).line(waiting=admin or not ctx.gold_rate)
    return View(task, "", value, p, status)


def on_skip(ctx, annotator: str, task: dict | None, reason: str, admin: bool = True) -> View:
    if not task:
        return on_load(ctx, annotator, admin)
    skip(ctx.db, annotator, task["assignment_id"], reason, task.get("guideline_version"))
    nxt = next_task(ctx.db, annotator, ctx.overlap, gold_rate=ctx.gold_rate)
    return _view(ctx, annotator, nxt, f"Skipped ({reason.strip()}).", admin=admin)


def on_undo(ctx, annotator: str, admin: bool = True) -> View:
    task = undo_last(ctx.db, annotator, ctx.limits.max_undos_per_hour)
    if task.previous_all_bad:
        return _view(ctx, annotator, task, "Your last answer, All bad, is back: press All bad or rank.", admin=admin)
    return _view(ctx, annotator, task, "Your last answer is back: change it and submit again.", admin=admin)


def annotator_name(name: str | None, request=None) -> str:
    user = getattr(request, "username", None) if request is not None else None
    who = user or (name or "").strip()
    if not who:
        raise UserError("enter your name before ranking")
    return who


def _show(view: View) -> tuple:
    """The outputs of every action: task, prompt, ranker, progress, status, the shown-order confirmation, the
    guideline."""
    import gradio as gr

    # the prompt is someone's text, rendered as the responses are (annotation/response_html.py: Markdown, its own
    # HTML escaped, no images); a gr.Markdown would let its HTML and images through
    if view.task is None:  # what to do next, not a prompt
        prompt = response_html(view.prompt)
    else:
        prompt = gr.update() if view.prompt == "" else PROMPT_HEADING + prompt_html(view.prompt)
    guideline = gr.update() if view.guideline is None else view.guideline
    return view.task, prompt, view.ranker, view.progress, view.status, view.confirm, guideline


def _buttons() -> tuple:
    """(submit, all bad, skip reason, skip, undo) under the ranker."""
    import gradio as gr

    with gr.Row():
        submit_btn = gr.Button("Submit ranking", variant="primary", elem_id="annotate-submit")
        all_bad_btn = gr.Button("All bad", elem_id="annotate-all-bad")
        reason = gr.Dropdown(
            ["responses are identical", "cannot judge", "offensive prompt"],
            value="cannot judge",
            allow_custom_value=True,
            label="Skip reason",
            scale=1,
        )
        skip_btn = gr.Button("Skip", elem_id="annotate-skip")
        undo_btn = gr.Button("Undo last", elem_id="annotate-undo")
    return submit_btn, all_bad_btn, reason, skip_btn, undo_btn


def instructions(ctx) -> str:
    """How to rank, as the tab says it: the questions this app asks (strength, edits) included."""
    return (
        "Best first: drag the responses into order, or focus one (Tab) and press its rank number; "
        "equal numbers are a tie. Mark a response that is unsafe, factually wrong or off topic with its tag "
        "(click it, or press u, f, o or x on the focused response)."
        + (
            " Then, between each response and the next one down, say how much better it is: click a level, or "
            "Tab to the row and press 0 (negligibly or unsure), 1 (slightly), 2 (better) or 3 (significantly)."
            if ctx.ask_strength
            else ""
        )
        + (
            " If even the best response could be better, write your version under the responses (Start from the "
            "best copies it there): it is stored as a response of its own, ranked first."
            if ctx.allow_edits
            else ""
        )
        + " If none of them is good, press All bad"
        + (" (with your version written, it is ranked over all of them)." if ctx.allow_edits else ".")
    )


def build_annotate_tab(ctx, demo) -> None:
    import gradio as gr

    from app.faces.ranker_widget import ranker

    task_state = gr.State(None)
    confirm_state = gr.State(False)
    with gr.Row():
        name = gr.Textbox(
            label="Your name", placeholder="who is ranking?", scale=1, elem_id="annotator-name", visible=not ctx.auth
        )
        progress_md = gr.Markdown(elem_id="annotate-progress")
    start = gr.Button("Start / next prompt", elem_id="annotate-start")
    guideline = gr.HTML(elem_id="annotate-guideline")
    prompt_md = gr.HTML(elem_id="annotate-prompt")
    gr.Markdown(instructions(ctx))
    widget = ranker(elem_id="ranker")
    submit_btn, all_bad_btn, reason, skip_btn, undo_btn = _buttons()
    status_md = gr.Markdown(elem_id="annotate-status")
    outputs = [task_state, prompt_md, widget, progress_md, status_md, confirm_state, guideline]

    def guarded(fn, request, *args):
        try:
            return _show(fn(ctx, annotator_name(args[0], request), *args[1:], admin=ctx.is_admin(request)))
        except UserError as e:
            raise gr.Error(str(e)) from None

    # Gradio injects `request` by its annotation, so each handler spells out its inputs.
    def load(name, request: gr.Request):
        return guarded(on_load, request, name)

    def sub(name, task, value, confirmed, request: gr.Request):
        return guarded(on_submit, request, name, task, value, confirmed)

    def bad(name, task, value, request: gr.Request):
        return guarded(on_all_bad, request, name, task, value)

    def skp(name, task, why, request: gr.Request):
        return guarded(on_skip, request, name, task, why)

    def und(name, request: gr.Request):
        return guarded(on_undo, request, name)

    start.click(load, [name], outputs, api_name="annotate_next")
    if ctx.auth:  # the login is the annotator: the first prompt is there when the page opens
        demo.load(load, [name], outputs)
    else:  # no name typed yet: an empty store still says what to do first
        demo.load(
            lambda: response_html(empty_store_line(ctx.db, True) or ""), None, prompt_md, api_name="annotate_hint"
        )
    submit_btn.click(
        sub, [name, task_state, widget, confirm_state], outputs, api_name="annotate_submit", trigger_mode="once"
    )
    all_bad_btn.click(bad, [name, task_state, widget], outputs, api_name="annotate_all_bad", trigger_mode="once")
    skip_btn.click(skp, [name, task_state, reason], outputs, api_name="annotate_skip", trigger_mode="once")
    undo_btn.click(und, [name], outputs, api_name="annotate_undo")
