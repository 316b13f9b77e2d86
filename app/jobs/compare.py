"""The Compare tab's plain functions: a conversation with the tuned actor and the reference side by side, blind
or not, streamed in lockstep; reward-model scores under each reply (blind: after the vote, with the names); votes
stored apart from the annotation data (store/compare.py); the win-rate table. The conversation lives in a
per-session state dict."""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

from annotation.response_html import response_html
from annotation.winrate import win_table
from store.compare import Vote, compare_votes, record_vote
from store.conversations import conversation_of, conversation_text, last_turn, messages_of
from store.db import StoreRef, read, write
from store.errors import UserError
from store.prompts import conversation_prompts, find_prompt
from store.runs import runs_of_kinds
from training.models import DEFAULT_MODEL, model_id
from training.registry import TRAINERS, policy_folder, run_config
from training.sampling.chat import ChatParams, Models, best_of_reply, model_folder, score_reply, stream_pair

VOTES = {"left": "left", "right": "right", "tie": "tie", "both_bad": "both_bad"}
BLIND_LINE = "Blind: the reward model's scores are shown with the names after your vote."
BLIND_NAMES_LINE = "Blind: the names are shown after your vote."


def best_of_ref(reference: str, n: int) -> str:
    """The contestant 'best-of-N of the reference' (N > 1): N replies of the reference, the reward model's pick."""
    return reference if n <= 1 else f"best-of-{n}:{reference}"


def split_best_of(ref: str) -> tuple[int, str]:
    """(N, model) of a side: (1, ref) for a plain model."""
    m = re.fullmatch(r"best-of-(\d+):(.+)", ref or "", flags=re.S)
    return (int(m.group(1)), m.group(2)) if m else (1, ref)


def model_name(ref: str) -> str:
    """The id stored with each reply: 'default:<name>' for the default model, else the resolved folder; a
    best-of-N side is 'best-of-N:' and its model's id."""
    n, base = split_best_of(ref)
    name = model_id(base) if base == DEFAULT_MODEL else str(model_folder(base).resolve())
    return f"best-of-{n}:{name}" if n > 1 else name


def tuned_runs(db: StoreRef) -> list[tuple[str, str]]:
    """(label, run folder) of the runs that saved a policy (PPO, DPO: training/registry.py), newest first."""
    kinds = [t.kind for t in TRAINERS.values() if t.policy]
    with read(db, create=False) as con:
        rows = runs_of_kinds(con, kinds)
    out = []
    for run_id, path in rows:
        if policy_folder(path) is not None:
            out.append((run_id, path))
            out += checkpoint_choices(run_id, path)
    return out


def checkpoint_choices(run_id: str, run: str) -> list[tuple[str, str]]:
    """A PPO run's evaluated checkpoints (training/rollouts/checkpoints.py) still on disk, the best one marked, besides
    the run's own actor: (label, folder)."""
    from pathlib import Path

    from training.rollouts.checkpoints import best_checkpoint, read_checkpoints

    rows = [r for r in read_checkpoints(run) if Path(r.get("actor", "")).is_dir()]
    best = best_checkpoint(rows)
    return [
        (f"{run_id} · step {r['step']}{' (best)' if r is best else ''}", r["actor"])
        for r in rows
        if Path(r["actor"]).resolve() != (Path(run) / "actor").resolve()
    ]


def owning_run(ref: str) -> str:
    """The run a checkpoint folder belongs to (RUN/checkpoints/actor-stepN, RUN/actor_last), else ref itself."""
    from pathlib import Path

    path = Path(ref)
    if path.parent.name == "checkpoints":
        return str(path.parent.parent)
    if path.name == "actor_last":
        return str(path.parent)
    return ref


REFERENCE, REWARD = " · reference", " · reward model"


def annotator_models(db: StoreRef) -> dict[str, str]:
    """What an annotator may compare, by the name they are shown (a server path never reaches them): each listed
    tuned run and checkpoint by its label, its reference and reward model as '<label> · reference' and
    '<label> · reward model', and the default model. name -> what the chat loads."""
    names = {DEFAULT_MODEL: DEFAULT_MODEL, "": ""}
    for label, path in tuned_runs(db):
        names[label] = path
        reference, reward = run_defaults(path)
        names[label + REFERENCE] = reference
        if reward:
            names[label + REWARD] = reward
    return names


def shown_names(text: str, names: dict[str, str]) -> str:
    """`text` (a reveal line, a win table's opponent) with each model's folder, in every form it is written (as
    given, resolved, as a vote stores it: `model_name`), replaced by the name an annotator knows it by."""
    from pathlib import Path

    forms: dict[str, str] = {}
    for name, ref in names.items():
        if not ref or ref == DEFAULT_MODEL:
            continue
        written = {ref, str(Path(ref).resolve())}
        try:
            written.add(model_name(ref))
        except Exception:  # noqa: BLE001 - a folder gone since: its other forms still go
            pass
        for form in written:
            forms.setdefault(form, name)
    for form in sorted(forms, key=len, reverse=True):  # a run's folder after its actor's, which it starts
        text = text.replace(form, forms[form])
    return text


def run_defaults(run: str) -> tuple[str, str]:
    """(reference, reward model) a tuned run was trained with: PPO's starting actor and reward model; a pairs
    trainer's (DPO's) reference, its SFT model unless it named another, and no reward model."""
    try:
        cfg = run_config(owning_run(run))
    except ValueError:
        return DEFAULT_MODEL, ""
    if "actor" in cfg:
        return cfg.get("actor", DEFAULT_MODEL), cfg.get("reward", "")
    return cfg.get("reference") or cfg.get("model", DEFAULT_MODEL), ""


def new_conversation(actor: str, reference: str, blind: bool, seed: int | None = None) -> dict:
    """Sides: actor and reference, shuffled when blind (the names show after the vote)."""
    if not actor or not reference:
        raise UserError("pick the actor (a PPO run or a model folder) and the reference")
    sides = [actor, reference]
    if blind and random.Random(seed).random() < 0.5:
        sides.reverse()
    return {
        "sides": sides,
        "roles": ["actor" if s == actor else "reference" for s in sides],
        "blind": blind,
        "history": [[], []],
        "replies": None,
        "prompt": None,
        "voted": False,
        "scores": None,  # the reward model's (left, right) scores of the last replies, once computed
    }


def start_from(actor: str, reference: str, blind: bool, prompt: str, seed: int | None = None) -> tuple[dict, str]:
    """(a conversation whose earlier turns, on both sides, are a stored conversation prompt's; the message to send,
    its last user turn): chatting from a prompt of the store (store/conversations.py)."""
    *before, last = messages_of(prompt)
    state = new_conversation(actor, reference, blind, seed)
    state["history"] = [list(before), list(before)]
    return state, last["content"]


def stored_conversations(db: StoreRef, limit: int = 200) -> list[tuple[str, int]]:
    """(label, prompt id) of the store's newest conversation prompts: '#id: its last turn' (shortened)."""
    with read(db) as con:
        rows = conversation_prompts(con, limit)
    short = lambda text: text if len(text) <= 80 else text[:79] + "…"  # noqa: E731
    return [(f"#{pid}: {short(last_turn(text))}", pid) for pid, text in rows]


def stored_conversation(db: StoreRef, prompt_id: object) -> str:
    """The text of a stored conversation prompt, by id; anything else is one line."""
    try:
        pid = int(prompt_id)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"no stored conversation {prompt_id!r}") from None
    with read(db) as con:
        text = find_prompt(con, pid)
    if text is None or conversation_of(text) is None:
        raise UserError(f"prompt {pid} is not a stored conversation")
    return text


class LocalChat:
    """The Compare tab's sampling and scoring in this process, over a Models cache: what the app's chat worker
    (app/jobs/chat_worker.py) runs in its own process, and what tests call directly."""

    def __init__(self, models: Models):
        self.models = models
        self.last_engines: list[str] = []  # what each side of the last pair sampled on ('vllm', 'hf')

    def pair(
        self, sides: list[str], histories: list[list[dict]], params: ChatParams, reward: str = ""
    ) -> Iterator[tuple[str, str]]:
        """(left text, right text) after each step of both replies to the histories' last message."""
        (left, a), (right, b) = (
            side_model(self.models, ref, h, params, reward) for ref, h in zip(sides, histories, strict=True)
        )
        self.last_engines = [a, b]
        for a, b, _, _ in stream_pair(left, right, histories[0], histories[1], params):
            yield a, b

    def scores(self, reward: str, contexts: list[list[dict]], replies: list[str]) -> tuple[float, float]:
        rm = self.models.reward(reward)
        return tuple(score_reply(rm, c, r) for c, r in zip(contexts, replies, strict=True))

    def release(self) -> int:
        return self.models.release()


def chat_engine(models) -> LocalChat:
    """An engine (pair, scores, release) for `models`: a Models cache is wrapped in a LocalChat."""
    return LocalChat(models) if isinstance(models, Models) else models


def respond(
    models, state: dict, message: str, params: ChatParams, reward: str = ""
) -> Iterator[tuple[list, list, dict]]:
    """Stream both replies to `message`; yields (left chat, right chat, state). Each side keeps its own history. A
    best-of-N side first samples its N replies and shows the reward model's pick whole; the other side streams.
    models: a Models cache, or an engine with `pair` (LocalChat, the app's chat worker)."""
    if not message.strip():
        raise UserError("type a message first")
    histories = [h + [{"role": "user", "content": message}] for h in state["history"]]
    # the last replies' scores go with them: they must never show under the new ones
    state = {**state, "replies": None, "scores": None, "prompt": message, "voted": False}
    # multi-turn: the two sides' earlier turns differ (a stored conversation's turns, shared, do not)
    state["multi_turn"] = state["history"][0] != state["history"][1]
    a = b = ""
    for a, b in chat_engine(models).pair(state["sides"], histories, params, reward):
        yield _chat(histories[0], a), _chat(histories[1], b), state
    state["history"] = [histories[0] + [_reply(a)], histories[1] + [_reply(b)]]
    state["replies"] = [a, b]
    state["params"] = {k: getattr(params, k) for k in ("temperature", "top_p", "top_k", "max_new_tokens", "seed")}
    yield state["history"][0], state["history"][1], state


def side_model(models: Models, ref: str, history: list[dict], params: ChatParams, reward: str) -> tuple:
    """(the chat model to stream from, or a best-of-N side's finished reply; the engine it samples on)."""
    n, base = split_best_of(ref)
    if n > 1 and not reward:
        raise UserError("best-of-N picks with a reward model: fill in the reward model field")
    model = models.causal(base)
    if n == 1:
        return model, model.engine
    return best_of_reply(model, models.reward(reward), history, params, n)[0], model.engine


def _reply(text: str) -> dict:
    return {"role": "assistant", "content": text}


def _chat(history: list[dict], partial: str) -> list[dict]:
    return history + [_reply(partial)]


def chat_html(history: list[dict]) -> list[dict]:
    """The messages as the chat panes show them: Markdown rendered here, every tag of the text itself escaped
    (annotation/response_html.py). The models keep seeing the raw text in the state's history."""
    return [{**m, "content": response_html(m["content"])} for m in history]


def scores_of(models, state: dict, reward: str) -> tuple[float, float] | None:
    """The reward model's score of each reply (None without a reward model or replies)."""
    if not reward or not state.get("replies"):
        return None
    return tuple(chat_engine(models).scores(reward, [h[:-1] for h in state["history"]], state["replies"]))


def vote(db: StoreRef, state: dict, choice: str, annotator: str) -> tuple[dict, str]:
    """Store the vote (once per reply pair); returns the state and the reveal line."""
    if choice not in VOTES:
        raise UserError(f"unknown vote {choice!r}")
    if not state.get("replies"):
        raise UserError("nothing to vote on yet: send a message and let both replies finish")
    if state.get("voted"):
        raise UserError("this pair of replies already has your vote; send another message")
    replies = [(text, model_name(ref)) for text, ref in zip(state["replies"], state["sides"], strict=True)]
    flags = ["blind"] if state["blind"] else []
    # each side's conversation before this exchange (its history ends with the message and the reply)
    context = [h[:-2] for h in state["history"]]
    prompt = voted_prompt(context, state["prompt"])
    if context[0] and prompt == state["prompt"]:
        # earlier turns the vote's prompt leaves out (they differ per side, or make no prompt): the context holds
        # each side's, and the flag says its pair lacks them
        flags.append("multi_turn")
    vote_row = Vote(
        annotator or "anonymous",
        prompt,
        replies,
        choice,
        state["params"],
        state["params"]["seed"],
        context,
        flags,
    )
    with write(db) as con:
        record_vote(con, vote_row)
    state = {**state, "voted": True}
    return state, reveal_line(state)


def voted_prompt(context: list[list[dict]], message: str) -> str:
    """What both replies answered, as the vote's pairs take it (`--with-votes`): the message, or the whole
    conversation (store/conversations.py) when both sides had the same earlier turns (a chat from a stored
    conversation, before the replies part ways)."""
    if context[0] and context[0] == context[1]:
        try:
            return conversation_text([*context[0], {"role": "user", "content": message}])
        except UserError:  # turns that are no prompt (two user turns in a row): the message alone
            return message
    return message


def reveal_line(state: dict) -> str:
    """After the vote: which side was which, with the reward model's score of each reply when there is one."""
    scores = state.get("scores") or (None, None)
    left, right = (
        f"**{role}** ({side})" + ("" if score is None else f", reward model score {score:.3f}")
        for role, side, score in zip(state["roles"], state["sides"], scores, strict=True)
    )
    return f"Left was {left}; right was {right}."


def scores_hidden(state: dict) -> bool:
    """Blind, the scores wait for the vote: a reviewer who sees 6.4 against -4.5 first votes on the reward model,
    and the vote goes back into the store as a human preference."""
    return state["blind"] and not state.get("voted")


def score_lines(state: dict | None) -> tuple[str, str]:
    """What shows under each reply: its reward-model score, unless there is none or it waits for the vote."""
    if not state or not state.get("scores") or scores_hidden(state):
        return "", ""
    left, right = (f"reward model score: **{x:.3f}**" for x in state["scores"])
    return left, right


def blind_line(state: dict | None) -> str:
    """The line under the chats while a blind pair waits for its vote: what the vote will reveal."""
    if not state or not state.get("replies") or not scores_hidden(state):
        return ""
    return BLIND_LINE if state.get("scores") else BLIND_NAMES_LINE


def win_rows(db: StoreRef, actor: str) -> list[list]:
    """[opponent, votes, wins, losses, ties, both bad, win rate, 95% CI] of the actor from stored votes."""
    if not actor:
        return []
    with read(db, create=False) as con:
        votes = compare_votes(con)
    rows = []
    for r in win_table(votes, model_name(actor)):
        rate = "" if r["win_rate"] is None else f"{r['win_rate']:.2f}"
        ci = "" if r["ci"] is None else f"{r['ci'][0]:.2f}-{r['ci'][1]:.2f}"
        rows.append([r["opponent"], r["votes"], r["wins"], r["losses"], r["ties"], r["both_bad"], rate, ci])
    return rows
