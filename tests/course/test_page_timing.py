"""The pages' timings (course/tools/page_timing.py), on a clock the test drives."""
from __future__ import annotations

import pytest
import torch

from course.tools.page_timing import fastest


class Machine:
    """A clock on which each call of a run costs its quiet time plus whatever load the script adds."""

    def __init__(self, quiet: dict[str, float], load: list[float]):
        self.now, self.quiet, self.load, self.calls = 0.0, quiet, list(load), []

    def clock(self) -> float:
        return self.now

    def run(self, key: str):
        def call():
            self.calls.append(key)
            self.now += self.quiet[key] + (self.load.pop(0) if self.load else 0.0)
        return call

    def runs(self) -> dict[str, object]:
        return {key: self.run(key) for key in self.quiet}


def test_runs_take_turns_after_one_untimed_call_and_each_keeps_its_fastest_time():
    machine = Machine({"a": 1.0, "b": 2.0}, load=[0, 0, 5, 0, 0, 7, 0, 0])  # two warm-ups, then rounds
    best = fastest(machine.runs(), clock=machine.clock)
    assert machine.calls == ["a", "b"] * 4
    assert best == {"a": 1.0, "b": 2.0}
    again = Machine({"a": 1.0}, load=[])
    fastest(again.runs(), rounds=2, warm_up=False, clock=again.clock)
    assert again.calls == ["a", "a"]


def test_a_claim_true_of_the_quiet_machine_survives_a_busy_start():
    # a is quietly 3x slower than b, but a busy first three rounds slow b down more than a
    machine = Machine({"a": 3.0, "b": 1.0}, load=[0, 0] + [0, 4] * 3)
    rounds_seen = []

    def claim(best):
        rounds_seen.append(dict(best))
        return best["a"] > 2 * best["b"]

    best = fastest(machine.runs(), claim, clock=machine.clock)
    assert len(rounds_seen) == 2  # judged after round 3 (false), then after round 4 (true)
    assert best == {"a": 3.0, "b": 1.0}
    assert not (rounds_seen[0]["a"] > 2 * rounds_seen[0]["b"])


def test_a_false_claim_stays_false_after_the_most_rounds():
    machine = Machine({"a": 1.0, "b": 1.0}, load=[])
    best = fastest(machine.runs(), lambda best: best["a"] > best["b"], most_rounds=7,
                   clock=machine.clock)
    assert machine.calls.count("a") == 1 + 7
    assert best == {"a": 1.0, "b": 1.0}


def test_torch_threads_are_set_while_timing_and_restored_even_when_a_run_raises():
    before = torch.get_num_threads()
    seen = []
    fastest({"x": lambda: seen.append(torch.get_num_threads())}, rounds=1)
    assert set(seen) == {1} and torch.get_num_threads() == before

    def broken():
        raise RuntimeError("the run itself fails")
    with pytest.raises(RuntimeError, match="the run itself fails"):
        fastest({"x": broken})
    assert torch.get_num_threads() == before


def test_nothing_to_time_or_rounds_out_of_order_is_refused():
    with pytest.raises(ValueError, match="at least one run"):
        fastest({})
    with pytest.raises(ValueError, match="rounds <= most_rounds"):
        fastest({"x": lambda: None}, rounds=5, most_rounds=2)
