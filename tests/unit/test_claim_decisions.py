"""The claim loop's decisions, as pure functions: which claim to send, what an answer teaches,
and how long to sleep with nothing to claim. No database, no loop, no clock."""

from __future__ import annotations

import math

import pytest

from workhorse.worker.claimer import SWEEP_EVERY, Choice, ClaimState, choose, idle_wait


def test_a_worker_that_never_swept_sweeps_right_after_a_lean_wake() -> None:
    """(Its wake-ups open saying a due time changed, so its first claim is a sweep anyway.)"""
    state = ClaimState()
    choice = choose(state, now=100.0, may_rest=True, notified=True, due_changed=False)
    assert choice.lean_wake and choice.stale and not choice.sweep
    assert state.answered(choice, got=0, wanted=4, now=100.0, next_due=None)  # owes the sweep now
    assert choose(state, now=100.0, may_rest=True, notified=False, due_changed=False).sweep


def test_an_idle_worker_woken_for_a_due_job_sends_the_lean_claim() -> None:
    state = ClaimState(swept_at=99.5, due_at=None)
    choice = choose(state, now=100.0, may_rest=True, notified=True, due_changed=False)
    assert choice == Choice(sweep=False, lean_wake=True, stale=False)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"due_changed": True}, "a due time changed"),
        ({"may_rest": False}, "the wake-ups do not say what is due"),
        ({"notified": False}, "no notify: a settle or a timer woke it"),
    ],
)
def test_the_lean_wake_gives_way_to_a_sweep(change: dict[str, bool], why: str) -> None:
    asked = {"may_rest": True, "notified": True, "due_changed": False} | change
    choice = choose(ClaimState(swept_at=99.5), now=100.0, **asked)
    assert choice.sweep and not choice.lean_wake, why


def test_an_owed_sweep_or_a_named_time_that_came_beats_the_lean_wake() -> None:
    owed = choose(ClaimState(swept_at=99.5, owed=True), now=100.0, may_rest=True, notified=True, due_changed=False)
    came = choose(ClaimState(swept_at=99.5, due_at=99.9), now=100.0, may_rest=True, notified=True, due_changed=False)
    assert owed.sweep and came.sweep


def test_while_claims_come_back_full_the_lean_claim_serves_with_a_sweep_every_second() -> None:
    busy = ClaimState(full=True, swept_at=100.0)
    assert not choose(busy, now=100.0 + SWEEP_EVERY / 2, may_rest=True, notified=False, due_changed=False).sweep
    assert choose(busy, now=100.0 + SWEEP_EVERY, may_rest=True, notified=False, due_changed=False).sweep


def test_a_sweep_records_when_to_look_next() -> None:
    state = ClaimState(owed=True)
    owes = state.answered(Choice(True, False, True), got=0, wanted=4, now=50.0, next_due=2.5)
    assert not owes and not state.owed and not state.full
    assert (state.swept_at, state.due_at) == (50.0, 52.5)
    state.answered(Choice(True, False, True), got=4, wanted=4, now=51.0, next_due=None)
    assert state.full and state.due_at is None


def test_a_short_lean_claim_owes_a_sweep_unless_it_was_a_fresh_notify() -> None:
    after_full = ClaimState(full=True, swept_at=10.0)
    assert after_full.answered(Choice(False, False, False), got=1, wanted=4, now=10.2, next_due=None)
    assert after_full.owed and after_full.swept_at == 10.0  # a lean claim teaches no due time
    lean_wake = ClaimState(swept_at=10.0)
    assert not lean_wake.answered(Choice(False, True, False), got=1, wanted=4, now=10.2, next_due=None)
    stale_wake = ClaimState(swept_at=10.0)
    assert stale_wake.answered(Choice(False, True, True), got=1, wanted=4, now=11.5, next_due=None)


def test_idle_wait() -> None:
    assert idle_wait(poll=30.0, free=True, due_at=None, now=0.0, stalled=False, beat=10.0) == 30.0
    assert idle_wait(poll=30.0, free=True, due_at=4.0, now=1.0, stalled=False, beat=10.0) == 3.0
    assert idle_wait(poll=30.0, free=True, due_at=0.5, now=1.0, stalled=False, beat=10.0) == 0.005  # never spins
    # No slot free: the due time cannot be acted on (a slot freeing wakes the loop) ...
    assert idle_wait(poll=30.0, free=False, due_at=4.0, now=1.0, stalled=False, beat=10.0) == 30.0
    # ... unless claiming is paused for want of a landed renewal: look again every half beat.
    assert idle_wait(poll=30.0, free=False, due_at=None, now=1.0, stalled=True, beat=10.0) == 5.0
    assert not math.isinf(idle_wait(poll=2.0, free=False, due_at=None, now=0.0, stalled=True, beat=10.0))
