"""Edits (Llama 3's edited > chosen > rejected; store/edits.py): the annotator's correction of the response they
ranked best becomes a response of its own, ranked above every shown one. Pairs: the edit over each shown response,
as any ranked item (K more pairs from the ranking view)."""

from __future__ import annotations

from annotation.questions.base import Campaign, Question, Shown, kept_in_ranking
from store.errors import UserError

MAX_EDIT_CHARS = 20_000  # the longest edit a server takes (as long as a prompt may be: annotation/prompt_files.py)


def edit_problem(edit: str, ranks: list[int], texts: list[str], ties_ok: bool = False) -> str | None:
    """Why `edit` cannot go with this ranking of these shown texts (None: it can). ranks and texts in shown order.
    ties_ok: an all-bad answer's edit, over shown responses that tie (annotation/questions/all_bad.py)."""
    if len(edit) > MAX_EDIT_CHARS:
        return f"the edit has {len(edit):,} characters; the most is {MAX_EDIT_CHARS:,}"
    if not ties_ok and ranks.count(min(ranks)) != 1:
        return "rank one response best to edit it (the best rank is tied)"
    same = next((i for i, t in enumerate(texts) if t.strip() == edit), None)
    if same is not None:
        return f"the edit is the same as response {same + 1}: change it, or clear it"
    return None


def from_widget(value: dict | None, shown: Shown, campaign: Campaign) -> str | None:
    """The annotator's edit of the best response (None: none, or only blanks); an edit where the campaign takes
    none, or one that is not text, is a UserError."""
    edit = (value or {}).get("edit") or ""
    if not isinstance(edit, str):
        raise UserError("the ranking widget sent an unreadable edit; reload the page")
    if not edit.strip():
        return None
    if not campaign.allow_edits:
        raise UserError("this campaign takes no edits of the responses (the app was started without --edits)")
    return edit


def from_native(value: object, shown: Shown) -> str | None:
    if not isinstance(value, str):
        raise UserError("'edit' must be the text of the corrected best response")
    if not value.strip():
        return None
    # the tie rule is the ranking's, checked once every answer is in (RankingIn.problem): all bad ties them
    if problem := edit_problem(value.strip(), shown.ranks, shown.texts, ties_ok=True):
        raise UserError(problem)
    return value.strip()


def ls_controls(k: int) -> str:
    return (
        '  <Header value="Correct the best response (optional): write it as it should have been"/>\n'
        f'  <TextArea name="edit" toName="prompt" rows="4" maxSubmissions="1" maxLength="{MAX_EDIT_CHARS}"/>\n'
    )


def from_ls(results: dict[str, dict], shown: Shown) -> str | None:
    result = results.get("edit")
    if result is None:
        return None
    text = (result.get("value") or {}).get("text")
    if isinstance(text, str):
        text = [text]
    if not isinstance(text, list) or not all(isinstance(t, str) for t in text):
        raise UserError("the edit result holds no text")
    return from_native("\n".join(text), shown)


def check(edit: object, shown: Shown, answers: dict) -> str | None:
    """The edit against the ranking once every answer is in: one best response to correct, unless all bad tied
    them below it (annotation/questions/all_bad.py); not one of the shown texts."""
    return edit_problem(str(edit).strip(), shown.ranks, shown.texts, ties_ok=bool(answers.get("all_bad")))


QUESTION = Question(
    name="edit",
    title="Correct the best response (optional)",
    from_widget=from_widget,
    from_native=from_native,
    ls_controls=ls_controls,
    from_ls=from_ls,
    pairs="a response of its own (model 'edit') ranked above every shown one: K more pairs from the ranking view",
    ls_names=r"edit",
    ls_kind="textarea",
    write=kept_in_ranking,
    check=check,
)
