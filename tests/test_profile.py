"""training/rollouts/profile.py: the parts of a step, each summed over the step, taken once."""

import itertools

import pytest

from training.rollouts import profile
from training.rollouts.profile import OFF, Clock


@pytest.fixture
def ticks(monkeypatch):
    """perf_counter reads 0, 1, 3, 6, 10, ...: each timed part lasts one second more than the one before."""
    values = itertools.accumulate(itertools.count())
    monkeypatch.setattr(profile.time, "perf_counter", lambda: next(values))


def test_parts_add_up_over_a_step_and_take_starts_afresh(ticks):
    clock = Clock("cpu")
    with clock.part("decode"):  # 0 -> 1
        pass
    with clock.part("actor_forward"):  # 3 -> 6
        pass
    with pytest.raises(ValueError), clock.part("decode"):  # 10 -> 15: a part that raises still counts
        raise ValueError
    assert clock.take() == {"perf/part/decode_s": 6, "perf/part/actor_forward_s": 3}
    assert clock.take() == {}


def test_a_clock_that_is_off_times_nothing(ticks):
    with OFF.part("decode"):
        pass
    assert OFF.take() == {}
    assert Clock("cpu").on  # on a CPU timing costs nothing: always on
