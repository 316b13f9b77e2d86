"""Preference strength (Llama 2's four levels, store/strengths.py): how much better each group of equal rank is than
the next one down, best first. Pairs: each pair gets the largest step between its two responses (pair_strengths,
the `strength` column of the pairs view), which `rlhf train-rm --margin-from strength` trains on."""

from __future__ import annotations

from annotation.questions.base import Campaign, Question, Shown, Written, choices_of
from store.errors import UserError
from store.protocol import Connection
from store.rankings import add_strengths
from store.strengths import LEVELS, steps_problem


def from_widget(value: dict | None, shown: Shown, campaign: Campaign) -> list[int] | None:
    """The strengths the annotator gave with the ranks (None: none, or a campaign that does not ask); some but not
    all of them is a UserError, as is anything but a level 0..3 for each step."""
    if not campaign.ask_strength:
        return None
    given = (value or {}).get("strengths") or []
    if not any(s is not None for s in given):
        return None
    if any(s is None for s in given) or len(given) != len(set(shown.ranks)) - 1:
        raise UserError("say how much better for every step between your ranks (0-3), or for none")
    if problem := steps_problem(shown.ranks, list(given)):
        raise UserError(f"the strengths do not fit the ranking: {problem}; reload the page")
    return list(given)


def from_native(value: object, shown: Shown) -> list[int]:
    if not isinstance(value, list):
        raise UserError(f"'strengths' must be a list of levels 0..{len(LEVELS) - 1}")
    if problem := steps_problem(shown.ranks, value):
        raise UserError(problem)
    return value


def ls_controls(k: int) -> str:
    """One single-choice question per step between neighbouring ranks (k - 1 of them), each optional."""
    choices = "".join(f'<Choice value="{level}"/>' for level in LEVELS)
    return "".join(
        f'  <Header value="Ranked {i} against ranked {i + 1}: how much better? (optional)"/>\n'
        f'  <Choices name="strength_{i}" toName="answers" choice="single" showInline="true">{choices}</Choices>\n'
        for i in range(1, k)
    )


def from_ls(results: dict[str, dict], shown: Shown) -> list[int] | None:
    """strength_1 .. strength_{steps}: all of them or none (a partial answer is refused, as in the Annotate tab)."""
    steps = len(set(shown.ranks)) - 1
    given = [choices_of(results.get(f"strength_{i}"), f"strength_{i}") for i in range(1, steps + 1)]
    if not any(given):
        return None
    if not all(len(g) == 1 and g[0] in LEVELS for g in given):
        raise UserError(f"give one strength ({', '.join(LEVELS)}) for each of the {steps} steps, or none")
    return [LEVELS.index(g[0]) for g in given]


def write(con: Connection, written: Written, steps: list[int]) -> None:
    """Each ordered pair's strength (pair_strengths): the largest step between its two shown responses."""
    add_strengths(con, [(written.ranking_id, written.response_ids, written.ranks, steps)])


def check(steps: object, ranks: list[int]) -> str | None:
    return steps_problem(ranks, steps)


QUESTION = Question(
    name="strengths",
    title="How much better is each response than the next one down?",
    from_widget=from_widget,
    from_native=from_native,
    ls_controls=ls_controls,
    from_ls=from_ls,
    pairs="each pair: the largest step between its two responses (pair_strengths; the pairs view's strength)",
    ls_names=r"strength_[1-9][0-9]*",
    ls_kind="choices",
    write=write,
    check=check,
)
