"""A person's spelling of a job id (issue 16): a unique prefix stands for the job; an ambiguous
one is refused naming the candidates; a prefix no job has is JOB_NOT_FOUND."""

from __future__ import annotations

import pytest

from workhorse import App, ConfigurationError, JobContext, JobNotFoundError


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
