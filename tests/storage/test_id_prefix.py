"""A person's spelling of a job id (issues 16 and 29): its short form (12 digits) or a
unique prefix stands for the job; an ambiguous one is refused naming the candidates; one no job
has is JOB_NOT_FOUND."""

from __future__ import annotations

import pytest

from workhorse import App, ConfigurationError, JobContext, JobNotFoundError
from workhorse import jobs as jobs_module
from workhorse.ids import short_id


async def test_a_unique_prefix_is_the_job_and_a_shared_one_is_refused(app: App) -> None:
    @app.job(name="p", tenant="none")
    async def p(ctx: JobContext, payload: int) -> int:
        return payload

    refs = [await p.enqueue(i) for i in range(3)]
    ids = [r.id for r in refs]
    whole = ids[0]
    assert await app.admin.resolve(whole) == whole  # a whole id as it is
    # the shortest prefix of ids[0] no other id shares (UUIDv7: jobs made together share the time part)
    n = next(n for n in range(4, 33) if not any(i.replace("-", "")[:n] == whole.replace("-", "")[:n] for i in ids[1:]))
    unique = whole.replace("-", "")[:n]
    assert await app.admin.resolve(unique) == whole
    assert await app.admin.resolve(unique.upper()) == whole
    shared = whole.replace("-", "")[:4]
    if all(i.replace("-", "").startswith(shared) for i in ids):
        with pytest.raises(ConfigurationError) as caught:
            await app.admin.resolve(shared)
        assert caught.value.code == "JOB_ID_AMBIGUOUS"
        assert all(i in caught.value.cause for i in ids) and "--id-prefix" in caught.value.fix
    nobody = "ffff" if not whole.startswith("ffff") else "0000"
    with pytest.raises(JobNotFoundError):
        await app.admin.resolve(nobody)
    assert await app.admin.resolve("abc") == "abc"  # too short to stand for a job: passed on
    assert await app.admin.resolve("not-an-id") == "not-an-id"


async def test_the_short_id_is_the_job_and_a_shared_one_is_refused(app: App, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 29: the short form `ls` prints (the low 24 bits of the id's millisecond, its counter
    and three random digits: 12 digits jobs made together never share) is the job for every
    command, in any period of the table; two jobs sharing one are refused as ambiguous, naming
    both; the prefix lookup still works."""

    @app.job(name="s", tenant="none")
    async def s(ctx: JobContext, payload: int) -> int:
        return payload

    refs = await s.enqueue_many(list(range(50)))  # one process, one or two milliseconds
    tails = {short_id(r.id) for r in refs}
    assert len(tails) == 50 and all(len(t) == 12 for t in tails)
    for ref in refs[:3]:
        assert await app.admin.resolve(short_id(ref.id)) == ref.id
        assert await app.admin.resolve(short_id(ref.id).upper()) == ref.id
    assert await app.admin.resolve(refs[7].id.replace("-", "")[:20]) == refs[7].id  # a long prefix, as before

    # Jobs of earlier periods (2**24 ms each) are found too, and two sharing one short id (the same
    # millisecond offset, counter and random digits, in periods apart) are refused, naming both.
    base = refs[0].id
    digits, head = base.replace("-", ""), int(base[:6], 16)
    older = dashed(f"{head - 3:06x}{digits[6:]}")  # three periods (14 hours) before: the same short id
    oldest = dashed(f"{head - 900:06x}{digits[6:17]}abc{digits[20:]}")  # six months before, its own short id
    monkeypatch.setattr(jobs_module, "new_job_id", iter([older, oldest]).__next__)
    assert ((await s.enqueue(1)).id, (await s.enqueue(2)).id) == (older, oldest)
    assert short_id(older) == short_id(base)
    with pytest.raises(ConfigurationError) as caught:
        await app.admin.resolve(short_id(base))
    assert caught.value.code == "JOB_ID_AMBIGUOUS"
    assert base in caught.value.cause and older in caught.value.cause and "whole id" in caught.value.fix
    assert await app.admin.resolve(short_id(oldest)) == oldest
    assert await app.admin.resolve(base) == base  # the whole id always works

    # a 12-digit spelling no job has as a short id is read as a prefix
    digits = refs[3].id.replace("-", "")
    unique = next(n for n in range(12, 33) if sum(r.id.replace("-", "").startswith(digits[:n]) for r in refs) == 1)
    if unique == 12:
        assert await app.admin.resolve(digits[:12]) == refs[3].id
    with pytest.raises(JobNotFoundError):
        await app.admin.resolve("abcdefabcdef" if "abcdefabcdef" not in tails else "fedcbafedcba")


def dashed(digits: str) -> str:
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"
