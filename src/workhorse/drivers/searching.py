"""A search's page (``ListFilter.payload`` / ``.error``): a walk of at most SEARCH_SCAN rows in id
order from the cursor, the hits among them, and where the next page goes on
(``admin_sql.search_page`` is the statement; the memory driver refuses searches)."""

from __future__ import annotations

from workhorse.types import Job, Page

SEARCH_SCAN = 10_000  # rows a search page examines at most


def searched_page(
    jobs: list[Job], *, limit: int, after: str | None, before: str | None, walked_to: str | None, walked: int
) -> Page:
    """A search's page from its hits (newest first, or oldest first when read ``before`` a cursor)
    and its walk: ``walked`` rows examined, the last of them ``walked_to``. A full page goes on
    after its last hit; a walk that spent its budget (SEARCH_SCAN) goes on after the last row it
    examined, so the next page searches the rows beyond; a walk that ran out of rows ends there."""
    full = len(jobs) == limit
    spent = walked >= SEARCH_SCAN and walked_to is not None
    if before is not None:
        jobs = jobs[::-1]
        onward = jobs[0].id if full and jobs else walked_to if spent else None
        return Page(jobs, next=jobs[-1].id if jobs else before, prev=onward, scanned=walked)
    onward = jobs[-1].id if full and jobs else walked_to if spent else None
    back = (jobs[0].id if jobs else after) if after is not None else None
    return Page(jobs, next=onward, prev=back, scanned=walked)
