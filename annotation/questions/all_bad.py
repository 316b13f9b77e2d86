"""All bad: none of the shown responses is good (Compare's "both bad", for a ranking task). Before, an annotator said
it as a skip with a free-text reason; now it is an outcome of its own, counted on the dashboard. Pairs: without an
edit, none (the answer is kept as a skip is, `rankings.all_bad`); with an edit, the edit over each shown response (K
pairs) and none among the shown, which tie below it."""

from __future__ import annotations

from annotation.questions.base import Campaign, Question, Shown, choices_of, kept_in_ranking
from store.errors import UserError
from store.rankings import RankingIn

ALL_BAD = "all bad"  # the reason an all-bad answer without an edit is kept under, unless the annotator wrote one
CHOICE = "None of these responses is good"


def from_widget(value: dict | None, shown: Shown, campaign: Campaign) -> bool | None:
    """The All bad button sets it in the value it sends; the widget alone never does."""
    got = (value or {}).get("all_bad")
    if got is None or got is False:
        return None
    if got is not True:
        raise UserError("the ranking widget sent an unreadable answer; reload the page")
    return True


def from_native(value: object, shown: Shown) -> bool | None:
    if not isinstance(value, bool):
        raise UserError("'all_bad' must be true or false")
    return value or None


def ls_controls(k: int) -> str:
    return (
        f'  <Choices name="all_bad" toName="prompt" choice="single" showInline="true">'
        f'<Choice value="{CHOICE}"/></Choices>\n'
    )


def from_ls(results: dict[str, dict], shown: Shown) -> bool | None:
    got = choices_of(results.get("all_bad"), "all_bad")
    if any(c != CHOICE for c in got):
        raise UserError(f"the all_bad result holds {got!r}; the one choice is {CHOICE!r}")
    return True if got else None


def settle(ranking: RankingIn) -> None:
    """What the answer does to the ranking it came with: without an edit it ranks nothing (a skip under ALL_BAD; no
    strengths or tags can go with it), with one the shown responses tie below the edit (no strengths between them)."""
    if not ranking.all_bad:
        return
    if ranking.edit is None:
        if ranking.tags is not None:
            raise UserError("an all-bad answer without an edit ranks nothing, so it keeps no tags")
        ranking.skipped, ranking.skip_reason, ranking.items, ranking.strengths = True, ALL_BAD, [], None
        return
    for it in ranking.items:
        it.rank = 1
    ranking.strengths = None


QUESTION = Question(
    name="all_bad",
    title="None of these responses is good",
    from_widget=from_widget,
    from_native=from_native,
    ls_controls=ls_controls,
    from_ls=from_ls,
    pairs="without an edit none (kept as a skip, counted as all bad); with an edit, the edit over each shown "
    "response and none among them (they tie)",
    ls_names=r"all_bad",
    ls_kind="choices",
    settle=settle,
    alone=True,
    write=kept_in_ranking,
)
