"""Compare tab: the tuned actor and the reference answer the same message side by side (streaming, same sampling
parameters and seed), each reply with its reward-model score; blind mode hides which is which, and the scores, until
the vote; votes are stored apart from the annotation data (store/compare.py) and feed a win-rate table. Messages
show as Markdown rendered on the server (their own HTML escaped). Handlers are the plain functions of
app/jobs/compare.py.

No `from __future__ import annotations` here: Gradio finds the `gr.Request` parameter by its evaluated annotation."""

import sys
from types import SimpleNamespace

from app.faces.chat_queue import CHAT
from app.faces.handlers import safe
from app.faces.limits import ServeLimits
from app.jobs.compare import (
    REFERENCE,
    REWARD,
    annotator_models,
    best_of_ref,
    blind_line,
    chat_html,
    new_conversation,
    respond,
    run_defaults,
    score_lines,
    scores_of,
    shown_names,
    start_from,
    stored_conversation,
    stored_conversations,
    tuned_runs,
    vote,
    win_rows,
)
from store.errors import UserError
from training.models import ModelError
from training.sampling.chat import ChatParams

# the send handler's inputs, in its parameters' order
SEND_INPUTS = "message state actor reference blind temperature top_p max_new seed reward best_of".split()
WIN_HEADERS = ["opponent", "votes", "wins", "losses", "ties", "both bad", "win rate", "95% CI"]


def build_compare_tab(ctx, demo, tab=None) -> None:
    ui = _layout(ctx.limits)
    _wire(ctx, demo, tab, ui, _handlers(ctx))


def _layout(limits: ServeLimits) -> SimpleNamespace:
    """The tab's components, top to bottom."""
    return SimpleNamespace(**_settings(limits), **_chats(limits))


def _settings(limits: ServeLimits) -> dict:
    """The models compared and the sampling settings, above the chats."""
    import gradio as gr

    with gr.Row(equal_height=True):
        actor = gr.Dropdown(
            label="Actor (a tuned run, or a model folder)", allow_custom_value=True, elem_id="cmp-actor"
        )
        reference = gr.Textbox(
            label="Reference (the SFT model, or another tuned run)", value="default", elem_id="cmp-reference"
        )
        # value "": an API caller may leave it out (compare_send's reward and best-of-N came after its first release)
        reward = gr.Textbox(
            label="Reward model for scores (a run or folder; empty = none)", value="", elem_id="cmp-reward"
        )
        blind = gr.Checkbox(
            label="Blind (sides shuffled; names and scores after the vote)", value=True, elem_id="cmp-blind"
        )
        best_of = gr.Number(
            label="Best-of-N of the reference (N replies, the reward model's pick; 1 = plain)",
            value=1,
            precision=0,
            minimum=1,
            maximum=limits.max_best_of,
            elem_id="cmp-best-of",
        )
    with gr.Row():
        temperature = gr.Number(label="temperature", value=0.8, minimum=0.01)
        top_p = gr.Number(label="top_p", value=0.95, minimum=0.01, maximum=1.0)
        max_new = gr.Number(label="max new tokens", value=128, precision=0, minimum=1, maximum=limits.max_new_tokens)
        seed = gr.Number(label="seed", value=0, precision=0)
    models = {"actor": actor, "reference": reference, "reward": reward, "blind": blind, "best_of": best_of}
    return {**models, "temperature": temperature, "top_p": top_p, "max_new": max_new, "seed": seed}


def _chats(limits: ServeLimits) -> dict:
    """The two chats with their scores, the message box, the vote and control buttons, the win-rate table."""
    import gradio as gr

    # messages arrive as HTML from chat_html (Markdown rendered, the text's own tags escaped) and Gradio's sanitizer
    # stays on behind it; no copy buttons, which would copy that HTML
    chat = dict(height=360, render_markdown=False, sanitize_html=True, buttons=[])
    with gr.Row():
        left = gr.Chatbot(label="A", elem_id="cmp-left", **chat)
        right = gr.Chatbot(label="B", elem_id="cmp-right", **chat)
    with gr.Row():
        left_score = gr.Markdown(elem_id="cmp-left-score")
        right_score = gr.Markdown(elem_id="cmp-right-score")
    start = gr.Dropdown(
        label="Start from a stored conversation (its earlier turns on both sides; its last turn to send)",
        choices=[],
        value=None,
        elem_id="cmp-start",
    )
    with gr.Row(equal_height=True):
        message = gr.Textbox(
            label="Message",
            placeholder="Ask both models",
            scale=5,
            elem_id="cmp-message",
            max_length=limits.max_message_chars,
        )
        send = gr.Button("Send", variant="primary", scale=1, elem_id="cmp-send")
    with gr.Row():
        vote_buttons = [
            gr.Button("A is better", interactive=False, elem_id="vote-left"),
            gr.Button("B is better", interactive=False, elem_id="vote-right"),
            gr.Button("Tie", interactive=False, elem_id="vote-tie"),
            gr.Button("Both are bad", interactive=False, elem_id="vote-both-bad"),
        ]
    with gr.Row():
        regenerate = gr.Button("Regenerate", elem_id="cmp-regenerate")
        stop = gr.Button("Stop", elem_id="cmp-stop")
        clear = gr.Button("Clear", elem_id="cmp-clear")
    reveal = gr.Markdown(elem_id="cmp-reveal")
    gr.Markdown("### Win rate of the actor (ties count half; 'both bad' left out)")
    wins = gr.Dataframe(headers=WIN_HEADERS, interactive=False, elem_id="cmp-wins")
    state = gr.State(None)
    last_message = gr.State("")
    chats = {"left": left, "right": right, "left_score": left_score, "right_score": right_score}
    buttons = {"send": send, "vote_buttons": vote_buttons, "regenerate": regenerate, "stop": stop, "clear": clear}
    states = {"state": state, "last_message": last_message}
    return {**chats, "start": start, "message": message, **buttons, "reveal": reveal, "wins": wins, **states}


def _voting(enabled: bool) -> list:
    """The four vote buttons, on or off."""
    import gradio as gr

    return [gr.Button(interactive=enabled) for _ in range(4)]


def _models(ctx, request, *values) -> list[str]:
    """What the chat loads for the values the page sent. An admin's are folders (or 'default'). An annotator
    (under --auth) compares the listed runs and what they were trained from, by name (app/jobs/compare.py
    `annotator_models`): never a folder typed in, and never shown one of the server's paths."""
    if ctx.is_admin(request):
        return list(values)
    names = annotator_models(ctx.db)
    bad = next((v for v in values if (v or "") not in names), None)
    if bad is not None:
        raise UserError(f"annotators compare the listed PPO runs only, not {bad}")
    return [names[v or ""] for v in values]


def _shown(ctx, request, text: str) -> str:
    """A line about models as the caller may read it: an annotator's names a run by its label, never its folder."""
    return text if ctx.is_admin(request) else shown_names(text, annotator_models(ctx.db))


def run_choices(ctx, request) -> list[tuple[str, str]]:
    """The runs to compare, as (label, value): the value a folder for an admin, the label itself for an
    annotator."""
    runs = tuned_runs(ctx.db)
    return runs if ctx.is_admin(request) else [(label, label) for label, _ in runs]


def _wins(ctx, request, actor: str) -> list[list]:
    """The actor's win table, its opponents named as the caller may read them."""
    rows = win_rows(ctx.db, actor)
    if ctx.is_admin(request) or not rows:
        return rows
    names = annotator_models(ctx.db)
    return [[shown_names(str(row[0]), names), *row[1:]] for row in rows]


class QuietChat:
    """The chat engine as an annotator uses it: a model that fails to load says only that, and the folder and the
    reason go to the app's log (an annotator learns nothing of the server's disk from an error)."""

    LINE = "that model could not be loaded; an admin can read why in the app's log"

    def __init__(self, chat):
        self.chat = chat

    def pair(self, *args):
        try:
            yield from self.chat.pair(*args)
        except (ModelError, ValueError, OSError) as e:
            raise self._quiet(e) from None

    def scores(self, *args):
        try:
            return self.chat.scores(*args)
        except (ModelError, ValueError, OSError) as e:
            raise self._quiet(e) from None

    def _quiet(self, e: Exception) -> ModelError:
        print(f"rlhf-studio: an annotator's chat failed: {e}", file=sys.stderr, flush=True)
        return ModelError(self.LINE)


def _engine(ctx, request):
    return ctx.chat if ctx.is_admin(request) else QuietChat(ctx.chat)


def _whole(value, what: str) -> int:
    """A number box's value as an int; anything else (None, text, inf) is one line, not a traceback."""
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"{what} must be a whole number, got {value!r}") from None


def _handlers(ctx) -> SimpleNamespace:
    """The tab's event handlers, over the plain functions of app/jobs/compare.py."""
    import gradio as gr

    def on_actor(run, request: gr.Request):
        (path,) = _models(ctx, request, run)
        if ctx.is_admin(request):
            ref, rm = run_defaults(path) if path else ("default", "")
            return ref, rm, win_rows(ctx.db, path)
        # an annotator reads the names of what the run was trained from, not their folders
        names = annotator_models(ctx.db)
        ref = run + REFERENCE if run and run + REFERENCE in names else "default"
        rm = run + REWARD if run and run + REWARD in names else ""
        return ref, rm, _wins(ctx, request, path)

    def on_send(msg, st, actor_v, ref_v, blind_v, t, p, n, s, rm_v, n_best, request: gr.Request):
        n, n_best = _whole(n, "max new tokens"), _whole(n_best or 1, "best-of-N")
        ctx.limits.check_chat(msg or "", n, n_best)  # before any model loads or any token is sampled
        actor_v, ref_v, rm_v = _models(ctx, request, actor_v, ref_v, rm_v)
        ref_v = best_of_ref(ref_v, n_best)
        if st is None or st.get("sides") != [actor_v, ref_v] and st.get("sides") != [ref_v, actor_v]:
            st = new_conversation(actor_v, ref_v, bool(blind_v))
        params = ChatParams(temperature=float(t), top_p=float(p), max_new_tokens=n, seed=int(s))
        names = ("A", "B") if st["blind"] else tuple(st["roles"])
        first = True
        for a, b, new in respond(_engine(ctx, request), st, msg, params, rm_v):
            if first:  # labels, cleared lines, vote buttons off: once
                left_chat = gr.Chatbot(chat_html(a), label=names[0])
                right_chat = gr.Chatbot(chat_html(b), label=names[1])
                yield left_chat, right_chat, new, "", "", "", "", *_voting(False), msg
                first = False
            else:  # then only the texts: a component update per token made Gradio rebuild its config (its JSON
                # schemas) each time, most of the app's CPU while a reply streamed
                yield chat_html(a), chat_html(b), new, *(gr.skip() for _ in range(9))

    def after_send(st, rm, request: gr.Request):
        (rm,) = _models(ctx, request, rm)
        if st:
            st = {**st, "scores": scores_of(_engine(ctx, request), st, rm)}
        return st, *score_lines(st), blind_line(st), *_voting(bool(st and st.get("replies")))

    def on_vote(choice):
        return _vote_handler(ctx, choice)

    def on_start(prompt_id, actor_v, ref_v, blind_v, n_best, request: gr.Request):
        """A stored conversation chosen: both chats show its earlier turns, the message box its last turn."""
        if prompt_id is None or prompt_id == "":
            return (gr.skip(),) * 11
        prompt = stored_conversation(ctx.db, prompt_id)
        actor_v, ref_v = _models(ctx, request, actor_v, ref_v)
        st, message = start_from(actor_v, best_of_ref(ref_v, _whole(n_best or 1, "best-of-N")), bool(blind_v), prompt)
        # a new conversation: the last one's scores, reveal line and vote buttons go with it
        return st, chat_html(st["history"][0]), chat_html(st["history"][1]), message, "", "", "", *_voting(False)

    return SimpleNamespace(
        on_actor=on_actor, on_send=on_send, after_send=after_send, on_vote=on_vote, on_start=on_start
    )


def _vote_handler(ctx, choice):
    """The handler of one vote button: the vote stored as a preference, the scores and the run's win table shown."""
    import gradio as gr

    def handler(st, actor_v, request: gr.Request):
        (actor_v,) = _models(ctx, request, actor_v)  # the win table below reads the actor's folder
        st, line = vote(ctx.db, st, choice, getattr(request, "username", None) or "anonymous")
        return st, _shown(ctx, request, line), *score_lines(st), *_voting(False), _wins(ctx, request, actor_v)

    return handler


def on_regenerate(st, last):
    if st and st.get("replies"):  # drop the last exchange, ask again with the next seed
        st = {**st, "history": [h[:-2] for h in st["history"]], "replies": None}
    return st, last


def on_clear():
    return None, [], [], "", "", "", *_voting(False)


def _wire(ctx, demo, tab, ui, h) -> None:
    """Every event of the tab; each is named compare_* (or vote_*): the annotator's part of the app."""
    import gradio as gr

    send_inputs = [getattr(ui, name) for name in SEND_INPUTS]
    # a new message clears the scores and the line under the chats with the vote's reveal
    send_outputs = [ui.left, ui.right, ui.state, ui.message, ui.reveal, ui.left_score, ui.right_score]
    send_outputs += [*ui.vote_buttons, ui.last_message]
    # every event here is named compare_* (or vote_*): the annotator's part of the app, next to annotate_*
    scores_out = [ui.state, ui.left_score, ui.right_score, ui.reveal, *ui.vote_buttons]
    # one reply pair sampled at a time, and a bounded share of the queue per login (app/faces/chat_queue.py)
    chat = {"concurrency_limit": 1, "concurrency_id": CHAT}
    event = ui.send.click(safe(h.on_send), send_inputs, send_outputs, api_name="compare_send", **chat)
    event.then(safe(h.after_send), [ui.state, ui.reward], scores_out, api_name="compare_scores")
    submit = ui.message.submit(safe(h.on_send), send_inputs, send_outputs, api_name="compare_send_enter", **chat)
    submit.then(safe(h.after_send), [ui.state, ui.reward], scores_out, api_name="compare_scores")
    regen = ui.regenerate.click(
        on_regenerate, [ui.state, ui.last_message], [ui.state, ui.message], api_name="compare_regenerate"
    ).then(lambda s: int(s) + 1, [ui.seed], [ui.seed], api_name="compare_next_seed")
    regen_event = regen.then(safe(h.on_send), send_inputs, send_outputs, api_name="compare_send_again", **chat)
    regen_event.then(safe(h.after_send), [ui.state, ui.reward], scores_out, api_name="compare_scores")
    ui.stop.click(None, cancels=[event, submit, regen_event])
    cleared = [ui.state, ui.left, ui.right, ui.left_score, ui.right_score, ui.reveal, *ui.vote_buttons]
    ui.clear.click(on_clear, None, cleared, api_name="compare_clear")
    for btn, choice in zip(ui.vote_buttons, ("left", "right", "tie", "both_bad"), strict=True):
        btn.click(
            safe(h.on_vote(choice)),
            [ui.state, ui.actor],
            [ui.state, ui.reveal, ui.left_score, ui.right_score, *ui.vote_buttons, ui.wins],
            api_name=f"vote_{choice}",
        )
    ui.actor.change(safe(h.on_actor), [ui.actor], [ui.reference, ui.reward, ui.wins], api_name="compare_actor")
    ui.start.input(
        safe(h.on_start),
        [ui.start, ui.actor, ui.reference, ui.blind, ui.best_of],
        [ui.state, ui.left, ui.right, ui.message, ui.left_score, ui.right_score, ui.reveal, *ui.vote_buttons],
        api_name="compare_start",
    )

    def list_runs(request: gr.Request):
        return gr.Dropdown(choices=run_choices(ctx, request))

    demo.load(list_runs, None, [ui.actor], api_name="compare_runs")
    list_starts = lambda: gr.Dropdown(choices=stored_conversations(ctx.db))  # noqa: E731
    demo.load(list_starts, None, [ui.start], api_name="compare_conversations")
    if tab is not None:  # runs finish while the page is open: list them again whenever the tab is opened
        tab.select(list_runs, None, [ui.actor], api_name="compare_runs")
        tab.select(list_starts, None, [ui.start], api_name="compare_conversations")
