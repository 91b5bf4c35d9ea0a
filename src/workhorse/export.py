"""Exporting one tenant's jobs: ``app.admin.export`` reads them as pages, ``workhorse export``
writes each page to a directory as one JSON document.

The pieces here know no ``App``: the arguments' checks, the pages (keyset pages over the driver's
``list_jobs``, the same statement ``app.admin.list`` sends, filtered on the tenant by equality),
each page's document and file name, and writing a directory.

- **Only the tenant's rows, ever.** The filter is ``tenant = T`` (never a prefix, a pattern or a
  case-folded match), a missing tenant is refused rather than read as "any", and every row a
  driver answers is checked again before it is handed on (``EXPORT_TENANT_MISMATCH``).
- **Keyset pages, newest first**, as ``workhorse ls`` lists them. Each page is read one row
  beyond its size, so ``next`` is None on the last page exactly (an export of a multiple of the
  page size ends without an empty page) and there is always a first page (empty when the tenant
  has no jobs). Ids only fall from page to page: no job appears twice.
- **Not one snapshot.** Each page is its own statement: a job enqueued during the export is newer
  than the first page and is not in it, a job removed meanwhile is simply not read, and a job
  whose state changes between pages is in a ``state`` export or not as it stood when its page was
  read.
- **Jobs without their steps** (``Job.to_dict(with_steps=False)``, the shape ``ls --json`` prints).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

from workhorse._ports import DriverSource
from workhorse.errors import ConfigurationError, WorkhorseError
from workhorse.jobs import MAX_TENANT_LENGTH
from workhorse.storable import flaw
from workhorse.types import Job, ListFilter

MAX_EXPORT_PAGE = 200  # as app.admin.list's pages
DEFAULT_EXPORT_PAGE = 100
DIR_INVALID = "EXPORT_DIR_INVALID"
TENANT_MISMATCH = "EXPORT_TENANT_MISMATCH"
_PAGE_FILE = "page-{:06d}.json"
_FIX_DIR = "export into a new directory, or an empty one: workhorse export --tenant T --out ./export-2"


@dataclass(frozen=True)
class ExportPage:
    """One page of a tenant's jobs, newest first. ``number`` counts from 1; ``next`` is the
    cursor of the following page (an ``after=`` for ``app.admin.list``), None on the last one."""

    tenant: str
    state: str | None
    number: int
    jobs: list[Job]
    next: str | None

    @property
    def filename(self) -> str:
        return page_filename(self.number)

    def to_dict(self) -> dict[str, Any]:
        """The document of ``DIR/page-NNNNNN.json``."""
        return {
            "tenant": self.tenant,
            "state": self.state,
            "page": self.number,
            "jobs": [job.to_dict(with_steps=False) for job in self.jobs],
            "next": self.next,
        }


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote: ``pages`` files holding ``jobs`` jobs in ``out``."""

    tenant: str
    state: str | None
    pages: int
    jobs: int
    out: str

    def to_dict(self) -> dict[str, Any]:
        return {"tenant": self.tenant, "pages": self.pages, "jobs": self.jobs, "out": self.out}


ExportPages: TypeAlias = AsyncIterator[ExportPage]  # what app.admin.export answers


def page_filename(number: int) -> str:
    """``page-000001.json`` for page 1: six digits, so the names sort in page order."""
    return _PAGE_FILE.format(number)


def check_export(tenant: object, page_size: object) -> None:
    """Refuse what no export can be asked: a tenant that is not 1 to 200 characters of text (a
    missing one would mean every tenant's rows), or a page size outside 1..200."""
    if not isinstance(tenant, str) or not tenant or len(tenant) > MAX_TENANT_LENGTH or flaw(tenant):
        shown = repr(tenant) if not isinstance(tenant, str) or len(tenant) <= 60 else f"{tenant[:60]!r}..."
        length = f" ({len(tenant)} characters)" if isinstance(tenant, str) else ""
        raise ConfigurationError(
            cause=f"export expected tenant to be a tenant id, a non-empty string of at most {MAX_TENANT_LENGTH} "
            f"characters without NUL or lone surrogates (as a job's tenant function returns it), got {shown}{length}",
            fix="app.admin.export(tenant='acme')   # or: workhorse export --tenant acme --out ./acme-export",
        )
    if isinstance(page_size, bool) or not isinstance(page_size, int) or not 1 <= page_size <= MAX_EXPORT_PAGE:
        raise ConfigurationError(
            code="PAGE_LIMIT_INVALID",
            cause=f"page_size expected a whole number from 1 to {MAX_EXPORT_PAGE}, got {page_size!r}",
            fix=f"workhorse export --tenant {shlex.quote(tenant)} --out ./export --page-size {MAX_EXPORT_PAGE}",
        )


def state_fix(tenant: str) -> str:
    """The fix a refused ``state`` of an export names."""
    return f"workhorse export --tenant {shlex.quote(tenant)} --state dead --out ./export"


async def export_pages(source: DriverSource, *, tenant: str, state: str | None, page_size: int) -> ExportPages:
    """The tenant's jobs (in ``state``, when given) as pages of ``page_size``, newest first.
    The arguments are checked by the caller (``app.admin.export``)."""
    driver = source.driver
    filters = ListFilter(tenant=tenant, state=state)
    after: str | None = None
    number = 0
    while True:
        page = await driver.list_jobs(filters, limit=page_size + 1, after=after)
        jobs = page.jobs[:page_size]
        strangers = [job.id for job in jobs if job.tenant != tenant]
        if strangers:
            raise WorkhorseError(
                code=TENANT_MISMATCH,
                cause=f"the driver answered {len(strangers)} job(s) of another tenant for an export of {tenant!r} "
                f"(first: {strangers[0]}); the export stopped before handing any of them on",
                fix="report this as a bug in workhorse's driver, with the job id",
            )
        more = len(page.jobs) > page_size
        number += 1
        after = jobs[-1].id if more else None
        yield ExportPage(tenant=tenant, state=state, number=number, jobs=jobs, next=after)
        if after is None:
            return


def prepare_directory(out: str | os.PathLike[str]) -> tuple[Path, bool]:
    """The directory an export writes to, made ready: created (with its parents) when missing;
    refused (``EXPORT_DIR_INVALID``) when it exists and is not an empty directory, or cannot be
    written. Answers the path and whether it was created here."""
    path = Path(out)
    fix = _FIX_DIR
    if path.exists() or path.is_symlink():
        if not path.is_dir():
            raise WorkhorseError(
                code=DIR_INVALID, cause=f"the export directory {str(path)!r} exists and is not a directory", fix=fix
            )
        try:
            entries = sorted(entry.name for entry in path.iterdir())
        except OSError as error:
            raise _unwritable(path, error, fix) from error
        if entries:
            listed = ", ".join(entries[:3]) + (", ..." if len(entries) > 3 else "")
            raise WorkhorseError(
                code=DIR_INVALID,
                cause=f"the export directory {str(path)!r} is not empty ({len(entries)} entries: {listed}); "
                "an export never writes beside or over other files",
                fix=fix,
            )
        created = False
    else:
        try:
            path.mkdir(parents=True)
        except OSError as error:
            raise _unwritable(path, error, fix) from error
        created = True
    try:  # a probe file, removed at once: permissions, a read-only mount, whatever says no
        with tempfile.TemporaryFile(dir=path):
            pass
    except OSError as error:
        if created:
            with contextlib.suppress(OSError):
                path.rmdir()
        raise _unwritable(path, error, fix) from error
    return path, created


async def write_export(pages: AsyncIterator[ExportPage], out: str | os.PathLike[str]) -> ExportSummary:
    """Write every page to ``out`` (see ``prepare_directory``) as ``page-NNNNNN.json``, one JSON
    document each, each file complete or absent (written aside, then renamed). When the export
    fails before any page is written, a directory it created is removed again."""
    path, created = prepare_directory(out)
    tenant, state, count, jobs = "", None, 0, 0
    try:
        async for page in pages:
            tenant, state = page.tenant, page.state
            write_page(path, page)
            count, jobs = count + 1, jobs + len(page.jobs)
    except BaseException:
        if created and count == 0:
            with contextlib.suppress(OSError):
                path.rmdir()
        raise
    return ExportSummary(tenant=tenant, state=state, pages=count, jobs=jobs, out=str(path))


def write_page(directory: Path, page: ExportPage) -> Path:
    """One page's document as ``directory/page-NNNNNN.json``, written aside and renamed into place."""
    target = directory / page.filename
    aside = directory / f".{page.filename}.partial"
    text = json.dumps(page.to_dict(), indent=2, ensure_ascii=False, default=str) + "\n"
    try:
        aside.write_text(text, encoding="utf-8")
        os.replace(aside, target)
    except OSError as error:
        with contextlib.suppress(OSError):
            aside.unlink()
        raise _unwritable(directory, error, f"check free space and permissions, then {_FIX_DIR}") from error
    return target


def _unwritable(path: Path, error: OSError, fix: str) -> WorkhorseError:
    reason = error.strerror or type(error).__name__
    return WorkhorseError(
        code=DIR_INVALID, cause=f"the export directory {str(path)!r} cannot be written: {reason}", fix=fix
    )
