"""Best good: is the response the annotator ranked best good as it is? A ranking says which response is better, not
whether any is good (InstructGPT's labelers also rated each output on its own); this answer is that absolute
judgement, as a thumbs up (yes) or down (no) on the best-ranked response, the unpaired data KTO trains on (TRL's
unpaired preference type). It keeps no table of its own: the answer is a `ranking_answers` row, which the `thumbs`
view reads (migration 0018). Pairs: none of its own."""

from __future__ import annotations

from annotation.questions.base import Campaign, Question, Shown, choices_of
from store.errors import UserError

CHOICES = ("yes", "no")  # the widget's buttons and Label Studio's choices


def _answer(value: object, where: str) -> bool | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return value
    if value in CHOICES:
        return value == "yes"
    raise UserError(f"{where} must be yes or no (true or false), got {value!r:.40}")


def from_widget(value: dict | None, shown: Shown, campaign: Campaign) -> bool | None:
    return _answer((value or {}).get("best_good"), "'is the best response good as it is?'")


def from_native(value: object, shown: Shown) -> bool | None:
    return _answer(value, "'best_good'")


def ls_controls(k: int) -> str:
    return (
        '  <Header value="Is the response you ranked best good as it is? (optional)"/>\n'
        '  <Choices name="best_good" toName="prompt" choice="single" showInline="true">'
        + "".join(f'<Choice value="{c}"/>' for c in CHOICES)
        + "</Choices>\n"
    )


def from_ls(results: dict[str, dict], shown: Shown) -> bool | None:
    got = choices_of(results.get("best_good"), "best_good")
    if len(got) > 1:
        raise UserError(f"the best_good result holds {got!r}; give one of yes, no")
    return _answer(got[0], "the best_good result") if got else None


def check(good: object, shown: Shown, answers: dict) -> str | None:
    """Yes says the response ranked first needs nothing: not with an edit of it, nor when none is good."""
    if good and answers.get("all_bad"):
        return "the best response cannot be good as it is when none of them is good (all bad): clear one of the two"
    if good and answers.get("edit"):
        return "the best response cannot be good as it is and corrected by your edit: clear one of the two"
    return None


QUESTION = Question(
    name="best_good",
    title="Is the response you ranked best good as it is?",
    from_widget=from_widget,
    from_native=from_native,
    ls_controls=ls_controls,
    from_ls=from_ls,
    pairs="none: a thumbs up (yes) or down (no) on each response ranked best (not an edit), in the thumbs view",
    ls_names=r"best_good",
    ls_kind="choices",
    widget_choices=CHOICES,
    to_widget=lambda good: "yes" if good else "no",
    check=check,
)
