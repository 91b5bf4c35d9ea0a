"""Windows (issue 16): the worker and the scheduler refuse to start there, by name, with a fix."""

from __future__ import annotations

import pytest

from workhorse import App, ConfigurationError
from workhorse._service import check_platform


def test_the_long_running_roles_refuse_windows_by_name() -> None:
    with pytest.raises(ConfigurationError) as caught:
        check_platform("worker", "win32")
    assert caught.value.code == "PLATFORM_UNSUPPORTED"
    assert "Windows" in caught.value.cause and "SIGTERM" in caught.value.cause
    assert "Linux" in caught.value.fix
    check_platform("worker", "linux")  # and elsewhere nothing is said
    check_platform("scheduler", "darwin")


async def test_a_worker_on_windows_refuses_before_it_claims(monkeypatch: pytest.MonkeyPatch) -> None:
    app = App(driver="memory")

    @app.job(name="w", tenant="none")
    async def w(ctx: object, payload: None) -> None: ...

    await w.enqueue(None)
    monkeypatch.setattr("workhorse._service.sys.platform", "win32")
    with pytest.raises(ConfigurationError) as caught:
        await app.worker().run(burst=True)
    assert caught.value.code == "PLATFORM_UNSUPPORTED"
    job = (await app.list_jobs()).jobs[0]
    assert (job.state, job.attempt) == ("ready", 0)
