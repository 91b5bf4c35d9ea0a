"""Declaration refusals: every one names what was wrong and how to fix it, and registers nothing."""

from __future__ import annotations

import pytest

from workhorse import App, ConfigurationError, JobContext, WorkhorseError


async def body(ctx: JobContext, payload: object) -> None:
    return None


def test_a_job_without_a_tenant_is_refused() -> None:
    app = App(driver="memory")
    with pytest.raises(ConfigurationError) as refused:
        app.job()(body)
    assert refused.value.code == "JOB_TENANT_REQUIRED"
    assert "tenant='none'" in refused.value.fix
    with pytest.raises(ConfigurationError) as bare:
        app.job(body)
    assert bare.value.code == "JOB_TENANT_REQUIRED"
    assert app.jobs == {}


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"tenant": "everyone"}, "tenant expected a callable"),
        ({"tenant": "none", "retry": 3}, "retry expected a workhorse.Retry"),
        ({"tenant": "none", "timeout": "forever"}, "timeout expected"),
        ({"tenant": "none", "timeout": 0}, "timeout expected a positive"),
        ({"tenant": "none", "priority": 1.5}, "priority"),
        ({"tenant": "none", "queue": ""}, "queue of job"),
    ],
)
def test_bad_options_are_refused(options: dict[str, object], match: str) -> None:
    app = App(driver="memory")
    with pytest.raises(ConfigurationError, match=match):
        app.job(**options)(body)  # type: ignore[arg-type]


def test_two_jobs_under_one_name_are_refused() -> None:
    app = App(driver="memory")
    app.job(name="same", tenant="none")(body)

    async def other(ctx: JobContext, payload: object) -> None:
        return None

    with pytest.raises(ConfigurationError) as refused:
        app.job(name="same", tenant="none")(other)
    assert refused.value.code == "JOB_NAME_TAKEN"


def test_default_name_is_module_and_qualname() -> None:
    app = App(driver="memory")
    handle = app.job(tenant="none")(body)
    assert handle.name == f"{__name__}.body"


def test_app_option_refusals() -> None:
    for driver in ("redis", 42, object()):  # a driver is a name, a PostgresDriver or a MemoryDriver
        with pytest.raises(ConfigurationError) as refused:
            App(driver=driver)  # type: ignore[arg-type]
        assert refused.value.code == "CONFIG_INVALID" and "a MemoryDriver" in refused.value.cause
    with pytest.raises(ConfigurationError):
        App(schema="Bad-Name")
    with pytest.raises(ConfigurationError):
        App(schema="s" * 49)  # "<schema>_jobs" must stay a valid NOTIFY channel
    with pytest.raises(ConfigurationError):
        App(driver="memory", max_payload_bytes=0)


def test_worker_without_queues_is_refused() -> None:
    app = App(driver="memory")
    with pytest.raises(ConfigurationError) as refused:
        app.worker()
    assert refused.value.code == "WORKER_NO_QUEUES"


def test_every_error_carries_code_cause_fix() -> None:
    error = WorkhorseError("something broke", "do this", code="SOME_CODE")
    assert error.to_dict() == {"code": "SOME_CODE", "cause": "something broke", "fix": "do this"}
    assert "SOME_CODE" in str(error)
