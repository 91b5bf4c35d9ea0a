"""A person's spelling of a job id (issues 16 and 29): its short form (the last 12 digits) or a
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
    """Issue 29: the short form `ls` prints (the last 12 hex digits, which jobs made together do
    not share) is the job for every command; two jobs sharing one (odds of about 1 in 560 among a
    million jobs) are refused as ambiguous, naming both; the prefix lookup still works."""

    @app.job(name="s", tenant="none")
    async def s(ctx: JobContext, payload: int) -> int:
        return payload

    refs = await s.enqueue_many(list(range(50)))
    tails = {short_id(r.id) for r in refs}
    assert len(tails) == 50 and all(len(t) == 12 for t in tails)
    for ref in refs[:3]:
        assert await app.admin.resolve(short_id(ref.id)) == ref.id
        assert await app.admin.resolve(short_id(ref.id).upper()) == ref.id
    assert await app.admin.resolve(refs[7].id.replace("-", "")[:20]) == refs[7].id  # a long prefix, as before

    # two jobs with one tail: made so by hand (the generator's 48 random bits never do in a test)
    twin = refs[0].id[:-12] + "0" * 11 + "1"
    other = "01900000-0000-7000-8000-" + "0" * 11 + "1"
    monkeypatch.setattr(jobs_module, "new_job_id", iter([twin, other]).__next__)
    first, second = await s.enqueue(1), await s.enqueue(2)
    assert (first.id, second.id) == (twin, other)
    with pytest.raises(ConfigurationError) as caught:
        await app.admin.resolve("000000000001")
    assert caught.value.code == "JOB_ID_AMBIGUOUS"
    assert twin in caught.value.cause and other in caught.value.cause and "whole id" in caught.value.fix
    assert await app.admin.resolve(twin) == twin  # the whole id always works

    # a 12-digit spelling no job ends with is read as a prefix
    head = refs[3].id.replace("-", "")
    unique = next(n for n in range(12, 33) if sum(r.id.replace("-", "").startswith(head[:n]) for r in refs) == 1)
    if unique == 12:
        assert await app.admin.resolve(head[:12]) == refs[3].id
    with pytest.raises(JobNotFoundError):
        await app.admin.resolve("abcdefabcdef" if not any(t == "abcdefabcdef" for t in tails) else "fedcbafedcba")
