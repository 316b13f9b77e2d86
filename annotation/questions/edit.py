"""Edits (Llama 3's edited > chosen > rejected; store/edits.py): the annotator's correction of the response they
ranked best becomes a response of its own, ranked above every shown one. Pairs: the edit over each shown response,
as any ranked item (K more pairs from the ranking view)."""

from __future__ import annotations

from annotation.questions.base import Campaign, Question, Shown, kept_in_ranking
from store.edits import MAX_EDIT_CHARS, edit_problem
from store.errors import UserError


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
)
