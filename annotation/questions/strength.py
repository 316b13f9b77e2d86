"""Preference strength (Llama 2's four levels): how much better each group of equal rank is than the next one down,
best first. A ranking of K responses in G groups of equal rank carries G - 1 steps. Pairs: each pair gets the
largest step between its two responses (A slightly better than B, B significantly better than C: A is
significantly better than C), kept per pair at write time (pair_strengths, migration 0011; the `strength` column
of the pairs view), which `rlhf train-rm --margin-from strength` trains on."""

from __future__ import annotations

from annotation.questions.base import Campaign, Question, Shown, Written, choices_of
from store.errors import UserError
from store.protocol import Connection
from store.rankings import add_pair_strengths

# level -> what the annotator said; Llama 2 (Touvron et al. 2023, section 3.2.1) asked the same four
LEVELS = ("negligibly better or unsure", "slightly better", "better", "significantly better")


def steps_problem(ranks: list[int], steps: list[int]) -> str | None:
    """Why `steps` cannot go with `ranks` (None: it can): one level in 0..3 per step between adjacent groups."""
    need = len(set(ranks)) - 1
    if len(steps) != need:
        return f"{len(steps)} strengths for {need} steps between the {need + 1} ranks given"
    bad = next((s for s in steps if isinstance(s, bool) or not isinstance(s, int) or not 0 <= s < len(LEVELS)), None)
    if bad is not None:
        return f"strength {bad!r} is not a level 0..{len(LEVELS) - 1} ({', '.join(LEVELS)})"
    return None


def strength_pairs(ranks: list[int], steps: list[int]) -> list[tuple[int, int, int]]:
    """(index of the better response, index of the worse, strength) for every pair the ranking orders, indices
    into `ranks`; the strength is the largest step between their groups."""
    groups = sorted(set(ranks))
    where = {r: g for g, r in enumerate(groups)}
    return [
        (i, j, max(steps[where[ranks[i]] : where[ranks[j]]]))
        for i in range(len(ranks))
        for j in range(len(ranks))
        if ranks[i] < ranks[j]
    ]


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


def write(con: Connection, answered: list[tuple[Written, list[int]]]) -> None:
    """Each ordered pair's strength (pair_strengths): the largest step between its two shown responses; one INSERT
    for every ranking of an import."""
    add_pair_strengths(
        con,
        [
            (w.ranking_id, w.response_ids[i], w.response_ids[j], level)
            for w, steps in answered
            for i, j, level in strength_pairs(w.ranks, steps)
        ],
    )


def check(steps: object, shown: Shown, answers: dict) -> str | None:
    return steps_problem(shown.ranks, steps)


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
