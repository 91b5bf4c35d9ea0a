"""Job ids: UUIDv7, unique and increasing within a process, whether drawn one at a time or in a batch."""

from __future__ import annotations

import uuid

import pytest

from workhorse import ids


def _check(drawn: list[str]) -> None:
    assert drawn == sorted(drawn), "ids must increase in the order they were drawn"
    assert len(set(drawn)) == len(drawn)
    for text in drawn:
        parsed = uuid.UUID(text)
        assert (parsed.version, parsed.variant, str(parsed)) == (7, uuid.RFC_4122, text)


def test_single_and_batched_ids_interleave_in_order() -> None:
    drawn = [ids.new_job_id()]
    drawn += ids.new_job_ids(3)
    drawn.append(ids.new_job_id())
    drawn += ids.new_job_ids(0)
    drawn += ids.new_job_ids(1)
    drawn.append(ids.new_job_id())
    _check(drawn)
    assert len(drawn) == 7


def test_a_batch_larger_than_one_millisecond_of_counter_borrows_the_next(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids.time, "time_ns", lambda: 1_700_000_000_000 * 1_000_000)  # a frozen clock
    drawn = ids.new_job_ids(10_000) + [ids.new_job_id() for _ in range(5_000)] + ids.new_job_ids(3)
    _check(drawn)
    stamps = {uuid.UUID(text).int >> 80 for text in drawn}
    assert min(stamps) >= 1_700_000_000_000
    assert len(stamps) >= 15_003 // 0x1000  # each millisecond holds at most 4,096 ids
