"""``workhorse export``: the page files written and their shape, the summary (for a person and
with --json), and the refusals: a DIR that holds anything or cannot be written, a bad tenant,
state or page size (each with nothing written and no directory left behind)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from clikit import as_json, human, invoke, refused, refused_human

from workhorse import App, JobContext
from workhorse.cli import cli


class Seeded:
    def __init__(self, app: App, work: Any) -> None:
        self.app, self.work = app, work

    def jobs(self, tenant: str | None, count: int, **options: Any) -> list[str]:
        return [self.work.enqueue_sync({"t": tenant, "i": i}, **options).id for i in range(count)]


@pytest.fixture
def seeded(database_url: str, schema: str) -> Iterator[Seeded]:
    """An app on this test's schema (migrated) with a job whose tenant is the payload's ``t``."""
    app = App(database_url, schema=schema)
    app.migrate_sync()

    @app.job(name="export.work", tenant=lambda p: p["t"] if p["t"] is not None else "nobody")
    async def work(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    @app.job(name="export.untenanted", tenant="none")
    async def untenanted(ctx: JobContext, payload: dict[str, Any]) -> None:
        return None

    seed = Seeded(app, work)
    seed.untenanted = untenanted  # type: ignore[attr-defined]
    yield seed
    asyncio.run(app.close())


def pages_in(out: Path) -> list[dict[str, Any]]:
    names = sorted(p.name for p in out.iterdir())
    assert names == [f"page-{n:06d}.json" for n in range(1, len(names) + 1)], names
    return [json.loads((out / name).read_text(encoding="utf-8")) for name in names]


def test_export_writes_one_json_document_a_page(database_url: str, schema: str, seeded: Seeded, tmp_path: Path) -> None:
    mine = seeded.jobs("acme", 5)
    for other in ("acme-2", "acm", "ACME"):
        seeded.jobs(other, 2)
    seeded.untenanted.enqueue_sync({})  # type: ignore[attr-defined]
    out = tmp_path / "exports" / "acme"  # its parent is missing too

    result = invoke(database_url, schema, "export", "--tenant", "acme", "--out", str(out), "--page-size", "2")
    assert result.exit_code == 0, result.output

    documents = pages_in(out)
    assert len(documents) == 3
    newest = sorted(mine, reverse=True)
    for number, document in enumerate(documents, 1):
        assert set(document) == {"tenant", "state", "page", "jobs", "next"}
        assert (document["tenant"], document["state"], document["page"]) == ("acme", None, number)
        assert [j["id"] for j in document["jobs"]] == newest[(number - 1) * 2 : number * 2]
        for job in document["jobs"]:
            assert job["tenant"] == "acme" and job["payload"]["t"] == "acme"
            assert job["name"] == "export.work" and job["state"] == "ready"
            assert "steps" not in job
    assert [d["next"] for d in documents] == [newest[1], newest[3], None]
    assert "exported 5 jobs of tenant acme" in result.stdout
    assert f"3 pages in {out}" in result.stdout


def test_export_json_summary_and_the_state_filter(
    database_url: str, schema: str, seeded: Seeded, tmp_path: Path
) -> None:
    seeded.jobs("acme", 3)
    delayed = seeded.jobs("acme", 2, delay="1h")
    seeded.jobs("acme-2", 2, delay="1h")
    out = tmp_path / "delayed"
    out.mkdir()  # an empty directory is taken

    result = invoke(
        database_url, schema, "export", "--tenant", "acme", "--state", "delayed", "--out", str(out), "--json"
    )
    assert result.exit_code == 0, result.output
    assert as_json(result) == {"tenant": "acme", "pages": 1, "jobs": 2, "out": str(out)}
    (document,) = pages_in(out)
    assert (document["state"], document["next"]) == ("delayed", None)
    assert [j["id"] for j in document["jobs"]] == sorted(delayed, reverse=True)


def test_a_tenant_with_no_jobs_writes_one_empty_page(
    database_url: str, schema: str, seeded: Seeded, tmp_path: Path
) -> None:
    seeded.jobs("acme-2", 2)
    out = tmp_path / "none"
    result = invoke(database_url, schema, "export", "--tenant", "acme", "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert as_json(result) == {"tenant": "acme", "pages": 1, "jobs": 0, "out": str(out)}
    assert pages_in(out) == [{"tenant": "acme", "state": None, "page": 1, "jobs": [], "next": None}]


# -- refusals --------------------------------------------------------------------------------------


def test_a_directory_that_holds_anything_is_refused(
    database_url: str, schema: str, seeded: Seeded, tmp_path: Path
) -> None:
    seeded.jobs("acme", 2)
    out = tmp_path / "used"
    out.mkdir()
    (out / "notes.txt").write_text("mine")

    error = refused(
        invoke(database_url, schema, "export", "--tenant", "acme", "--out", str(out), "--json"), "EXPORT_DIR_INVALID"
    )
    assert str(out) in error["cause"] and "not empty" in error["cause"] and "notes.txt" in error["cause"]
    assert "new directory" in error["fix"]
    refused_human(human(schema, "export", "--tenant", "acme", "--out", str(out)), "EXPORT_DIR_INVALID")
    assert sorted(p.name for p in out.iterdir()) == ["notes.txt"]  # nothing written beside it
    assert (out / "notes.txt").read_text() == "mine"

    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / ".keep").write_text("")
    refused(
        invoke(database_url, schema, "export", "--tenant", "acme", "--out", str(hidden), "--json"), "EXPORT_DIR_INVALID"
    )

    earlier = tmp_path / "earlier"  # a finished export is not written over either
    assert invoke(database_url, schema, "export", "--tenant", "acme", "--out", str(earlier)).exit_code == 0
    before = pages_in(earlier)
    refused(
        invoke(database_url, schema, "export", "--tenant", "acme", "--out", str(earlier), "--json"),
        "EXPORT_DIR_INVALID",
    )
    assert pages_in(earlier) == before


def test_a_directory_that_cannot_be_written_is_refused(
    database_url: str, schema: str, seeded: Seeded, tmp_path: Path
) -> None:
    seeded.jobs("acme", 1)
    a_file = tmp_path / "a-file"
    a_file.write_text("x")

    error = refused(
        invoke(database_url, schema, "export", "--tenant", "acme", "--out", str(a_file), "--json"), "EXPORT_DIR_INVALID"
    )
    assert "is not a directory" in error["cause"]
    assert a_file.read_text() == "x"

    under_a_file = a_file / "out"
    error = refused(
        invoke(database_url, schema, "export", "--tenant", "acme", "--out", str(under_a_file), "--json"),
        "EXPORT_DIR_INVALID",
    )
    assert "cannot be written" in error["cause"] and str(under_a_file) in error["cause"]


@pytest.mark.parametrize(
    ("args", "code"),
    [
        (["--tenant", ""], "CONFIG_INVALID"),
        (["--tenant", "x" * 201], "CONFIG_INVALID"),
        (["--tenant", "acme", "--state", "bogus"], "STATE_UNKNOWN"),
        (["--tenant", "acme", "--page-size", "0"], "PAGE_LIMIT_INVALID"),
        (["--tenant", "acme", "--page-size", "201"], "PAGE_LIMIT_INVALID"),
    ],
)
def test_bad_arguments_are_refused_with_no_directory_left(
    database_url: str, schema: str, seeded: Seeded, tmp_path: Path, args: list[str], code: str
) -> None:
    seeded.jobs("acme", 1)
    out = tmp_path / "never"
    error = refused(invoke(database_url, schema, "export", *args, "--out", str(out), "--json"), code)
    assert error["cause"] and error["fix"]
    assert not out.exists()


def test_tenant_and_out_are_required(database_url: str, schema: str, tmp_path: Path) -> None:
    result = invoke(database_url, schema, "export", "--out", str(tmp_path / "x"))
    assert result.exit_code == 2 and "--tenant" in result.output
    result = invoke(database_url, schema, "export", "--tenant", "acme")
    assert result.exit_code == 2 and "--out" in result.output


def test_help_lists_export_with_an_example() -> None:
    assert "\n  export " in CliRunner().invoke(cli, ["--help"]).stdout
    text = CliRunner().invoke(cli, ["export", "--help"]).stdout
    assert "Example" in text and "--tenant" in text and "--page-size" in text
