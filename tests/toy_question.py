"""A toy question for tests/test_toy_question.py and the browser test, registered only by them (`register`, or
RLHF_QUESTIONS=tests.toy_question:CONFIDENCE for an app they start): how sure the annotator is of their order, 1
to 5. It has no table of its own, so its answer lands in ranking_answers and the pairs view carries it as
`answers`. Nothing outside tests/ names it."""

from annotation.questions import Question
from annotation.questions.base import choices_of
from store.errors import UserError

LEVELS = ["1", "2", "3", "4", "5"]


def _level(value: object) -> int:
    if isinstance(value, str) and value in LEVELS:  # the widget's choice
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 5:
        raise UserError(f"'confidence' must be a whole number from 1 to 5, got {value!r}")
    return value


def _from_ls(results: dict[str, dict], shown) -> int | None:
    got = choices_of(results.get("confidence"), "confidence")
    if not got:
        return None
    if len(got) != 1 or got[0] not in LEVELS:
        raise UserError(f"the confidence result holds {got!r}; give one of {', '.join(LEVELS)}")
    return int(got[0])


CONFIDENCE = Question(
    name="confidence",
    title="How sure are you of your order? (1-5, optional)",
    from_widget=lambda value, shown, campaign: (
        None if (value or {}).get("confidence") is None else _level(value["confidence"])
    ),
    from_native=lambda value, shown: _level(value),
    ls_controls=lambda k: (
        '  <Choices name="confidence" toName="prompt" choice="single">'
        + "".join(f'<Choice value="{v}"/>' for v in LEVELS)
        + "</Choices>\n"
    ),
    from_ls=_from_ls,
    pairs="none of its own: every pair of the ranking carries it in the pairs view's `answers`",
    ls_names="confidence",
    widget_choices=tuple(LEVELS),
)
