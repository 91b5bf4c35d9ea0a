"""The verdict, from the ledger and the conductor's event log, never from the queue's own account
of who ran what. Pure functions over the rows read at the end.

**Runs.** A run is a ``start`` row and, normally, its end row (same ``run_id``). A run with no
end row ends, for the checks below, when its process died (its SIGKILL, else its observed exit);
a run whose process lived on with no end row is *open* (reported; it ends at infinity).

**Lost.** A job is lost when it is not terminal (``done`` or ``dead``) at the end, or ``done``
with no ``ok`` end row in the ledger. A ``done`` job whose ``ok`` row is for an attempt other
than the queue's final one is listed apart (``final_attempt_unrecorded``).

**Concurrent duplicates and frozen overlaps.** Two runs of one job overlap when the later one
starts before the earlier one ended. Two independent detections:

* *interval*: from the ledger's times alone, every pair of runs of a job;
* *lock*: the body's ``pg_try_advisory_lock`` found the job's lock held, and the holder's
  ``/proc`` state was read at that moment.

An overlap is a *frozen overlap* (reported, not a failure) when the earlier run's process was
stopped (SIGSTOP) at any moment between the earlier run's start and the later run's start: its
lease lapsed while it was frozen, the queue rightly handed the job on, and the frozen body (or,
after the thaw, the few milliseconds before its worker cancels it) is a zombie. A lock holder in
state ``stopped`` is the same case. Any other overlap is a *concurrent duplicate*: both
processes live and the queue gave one job to two of them at once. A lock held by a process that
is ``gone`` (its session not yet ended by the server) is counted as ``stale_locks``, not a duplicate,
and a lock still held by a live holder whose work had ended by the ledger's times (it was
writing its end row) as ``lock_after_work``. A freeze that falls between a body's end and its
unlock shows as a lock-found frozen overlap whose work did not overlap (``overlap_s`` 0).
False positives are kept out by the design of the ledger: the lock is taken before the start row
and released after the end row, and the next run of a job can only be claimed once the previous
body returned (it is settled after that) or its lease lapsed; end rows carry the moment the
work stopped, not the moment the row was written. False negatives: a restart ends every ledger
session and releases their locks, so a duplicate right after a restart is caught by the
interval check only.

**Stale starts.** Start rows whose lease was not this run's at the moment the row was written
(the job's row was not ``running`` under this worker and attempt, or its ``lease_expires_at`` had
passed). A freeze between the worker's check and the insert can make one legitimately, so they
are reported and listed, never a failure. Each start row also says when the worker called the
body (``entered_at``): ``stale_starts_called_after_thaw`` counts those called after their own
worker's last thaw, which no freeze in between explains (a thawed worker starting the jobs it had
claimed ahead, whose leases lapsed while it was stopped). For a sync body the call happens on a
pool thread after the worker's decision to start it, so a freeze between the two also shows as
"called after the thaw"; the details name the body kind.

**Reruns and their causes.** Every run of a job after its first, classified by the previous
run (``prev``) and what happened between ``prev``'s start and this run's start, first match wins:
``failed_once`` (``prev`` ended ``fail``, the deliberate failure), ``after_sigkill`` (``prev``'s
process was SIGKILLed), ``after_freeze`` (``prev``'s process, or this run's, was stopped),
``after_sigterm`` (``prev``'s process was SIGTERMed: a drain should hand back, so rare),
``after_exit`` (``prev``'s process exited on its own), ``after_restart``, ``after_session_terminated``
(for these two, from a visibility window before ``prev``'s start: a session ended while idle is
found dead when next used), else ``unexplained``. ``reruns_after_completed_body`` counts those
whose ``prev`` ended ``ok``: the body had finished, so only its settle was missing; those whose
worker was neither killed nor frozen are listed (``completed_body_rerun``): a settle that should
have been retried to success.

**Durable steps** (``--flow``): a steps job whose replayed step answered something other than
what it recorded writes a ``mismatch`` row (``step_mismatches``, a failure).

**Recovery times** (seconds, per fault kind, p50 and max over the faults of that kind), measured
from the fault (for a restart: from the moment the server accepted connections again):
``first_done``: to the next ``ok`` end row of any job; ``held_done``: to the moment every job the
victim held at the fault (its ``running`` rows, claimed-ahead ones included; for a termination or a
restart, every running job) was done: its first ``ok`` end row after the fault (anywhere, the
victim included), or its ``finished_at`` when it was already through its body or ended ``dead``.
Faults whose victim held nothing have no ``held_done``; ``n`` says how many faults each figure covers.
"""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

from soak.events import Event
from soak.fleet import Member

FAULT_KINDS = ("sigkill", "sigstop", "sigterm", "terminate", "restart")
DETAILS_SHOWN = 20


@dataclass
class Run:
    run_id: str
    job_id: str
    attempt: int
    pid: int
    start: float
    entered: float | None
    lock_ok: bool
    holder_pid: int | None
    holder_state: str | None
    lease_ok: bool
    lease_detail: str
    end: float | None = None
    event: str | None = None
    end_eff: float = math.inf


@dataclass(frozen=True)
class Inputs:
    jobs: list[dict[str, Any]]
    ledger: list[dict[str, Any]]
    events: list[Event]
    members: list[Member]
    visibility: float
    t0: float  # the chaos phase's start, server clock: details show times relative to it


def runs_of(inputs: Inputs) -> dict[str, list[Run]]:
    """Runs per job, by start time, each with its effective end."""
    runs: dict[str, Run] = {}
    ends: dict[str, dict[str, Any]] = {}
    for row in inputs.ledger:
        if row["event"] == "mismatch":  # a steps job's replay answered wrong: a row of its own, no run
            continue
        if row["event"] == "start":
            runs[row["run_id"]] = Run(
                row["run_id"],
                row["job_id"],
                row["attempt"],
                row["pid"],
                row["at"],
                row["entered_at"],
                bool(row["lock_ok"]),
                row["holder_pid"],
                row["holder_state"],
                bool(row["lease_ok"]),
                row["lease_detail"] or "",
            )
        else:
            ends[row["run_id"]] = row
    members = {m.pid: m for m in inputs.members}
    by_job: dict[str, list[Run]] = defaultdict(list)
    for run in runs.values():
        end = ends.get(run.run_id)
        if end is not None:
            run.end, run.event, run.end_eff = end["at"], end["event"], end["at"]
        elif (member := members.get(run.pid)) is not None and member.died_at is not None:
            run.end_eff = member.died_at
        by_job[run.job_id].append(run)
    for job_runs in by_job.values():
        job_runs.sort(key=lambda r: r.start)
    return by_job


# -- lost -------------------------------------------------------------------------------------


def lost_jobs(jobs: list[dict[str, Any]], by_job: dict[str, list[Run]]) -> tuple[list[dict[str, Any]], list[str]]:
    """The lost jobs (with why), and the done jobs whose ok row is for another attempt."""
    lost, unrecorded = [], []
    for job in jobs:
        runs = by_job.get(job["id"], [])
        ok_attempts = {r.attempt for r in runs if r.event == "ok"}
        if job["state"] not in ("done", "dead"):
            lost.append({"job": job["id"], "n": job["n"], "state": job["state"], "runs": len(runs)})
        elif job["state"] == "done" and not ok_attempts:
            lost.append({"job": job["id"], "n": job["n"], "state": "done", "why": "no ok run in the ledger"})
        elif job["state"] == "done" and job["attempt"] not in ok_attempts:
            unrecorded.append(job["id"])
    return lost, unrecorded


# -- overlaps ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Overlap:
    job_id: str
    first: str  # run id (or "pid:<holder>" when the lock holder's run is not in the ledger)
    second: str
    kind: str  # duplicate, frozen or lock_after_work
    found_by: str  # interval or lock
    pids: tuple[int | None, int]
    at: float
    seconds: float  # how long their work overlapped (0: only the lock did; inf: the first run never ended)


def overlaps(by_job: dict[str, list[Run]], members: dict[int, Member]) -> tuple[list[Overlap], int]:
    """Every overlap, by either detection (one entry per pair of runs), and the stale locks."""
    found: dict[tuple[str, str], Overlap] = {}
    stale_locks = 0
    for job_id, runs in by_job.items():
        for i, first in enumerate(runs):
            for second in runs[i + 1 :]:
                if second.start < first.end_eff:
                    kind = _overlap_kind(first, second, members)
                    found[(first.run_id, second.run_id)] = Overlap(
                        job_id,
                        first.run_id,
                        second.run_id,
                        kind,
                        "interval",
                        (first.pid, second.pid),
                        second.start,
                        min(first.end_eff, second.end_eff) - second.start,
                    )
        for second in runs:
            if second.lock_ok or second.holder_state in (None, "released", "foreign"):
                continue
            if second.holder_state == "gone":
                stale_locks += 1
                continue
            first_run = _holder_run(runs, second)
            key = (first_run.run_id if first_run else f"pid:{second.holder_pid}", second.run_id)
            if key in found:
                continue
            end = first_run.end_eff if first_run else math.inf
            if second.holder_state == "stopped":
                kind = "frozen"
            elif end <= second.start:
                kind = "lock_after_work"  # the holder's work had ended; it had not let go of the lock yet
            else:
                kind = _lock_kind(first_run, second, members)
            pids = (second.holder_pid, second.pid)
            found[key] = Overlap(job_id, key[0], key[1], kind, "lock", pids, second.start, max(end - second.start, 0.0))
    return list(found.values()), stale_locks


def _overlap_kind(first: Run, second: Run, members: dict[int, Member]) -> str:
    member = members.get(first.pid)
    return "frozen" if member is not None and member.stopped_during(first.start, second.start) else "duplicate"


def _holder_run(runs: list[Run], second: Run) -> Run | None:
    earlier = [r for r in runs if r.pid == second.holder_pid and r.start <= second.start and r is not second]
    return earlier[-1] if earlier else None


def _lock_kind(first: Run | None, second: Run, members: dict[int, Member]) -> str:
    holder = members.get(second.holder_pid) if second.holder_pid is not None else None
    since = first.start if first is not None else second.start - 3600
    if holder is not None and holder.stopped_during(since, second.start):
        return "frozen"
    return "duplicate"


# -- reruns -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Disturbances:
    """What the conductor did, as the rerun causes need it."""

    members: dict[int, Member]
    restarts: list[tuple[float, float]]  # (start, server back)
    terminations: list[float]
    visibility: float

    @classmethod
    def of(cls, members: dict[int, Member], events: list[Event], visibility: float) -> Disturbances:
        restarts = [(e.t, float(e.detail.get("up_at", e.t))) for e in events if e.kind == "restart"]
        return cls(members, restarts, [e.t for e in events if e.kind == "terminate"], visibility)


@dataclass
class Reruns:
    causes: Counter[str]
    after_ok: Counter[str]  # the same, for reruns whose previous body had completed
    unexplained: list[tuple[Run, Run]]
    settle_missed: list[tuple[Run, Run, str]]  # completed body, worker neither killed nor frozen


def rerun_causes(by_job: dict[str, list[Run]], seen: Disturbances) -> Reruns:
    found = Reruns(Counter(), Counter(), [], [])
    for runs in by_job.values():
        for prev, cur in itertools.pairwise(runs):
            cause = _cause(prev, cur, seen)
            found.causes[cause] += 1
            if prev.event == "ok":
                found.after_ok[cause] += 1
                if cause not in ("after_sigkill", "after_freeze"):
                    found.settle_missed.append((prev, cur, cause))
            if cause == "unexplained":
                found.unexplained.append((prev, cur))
    return found


def _cause(prev: Run, cur: Run, seen: Disturbances) -> str:
    if prev.event == "fail":
        return "failed_once"
    a, b = prev.start, cur.start
    was, now = seen.members.get(prev.pid), seen.members.get(cur.pid)
    if was is not None and was.killed_at is not None and a <= was.killed_at <= b:
        return "after_sigkill"
    if (was is not None and was.stopped_during(a, b)) or (now is not None and now.stopped_during(a, b)):
        return "after_freeze"
    if was is not None and was.termed_at is not None and a <= was.termed_at <= b:
        return "after_sigterm"
    if was is not None and was.exited_at is not None and a <= was.exited_at <= b:
        return "after_exit"
    # A connection a restart or a termination ended is found dead only when next used: look back a
    # visibility window before prev's start (a settle on a connection killed while idle, say).
    since = a - seen.visibility
    if any(start <= b and up >= since for start, up in seen.restarts):
        return "after_restart"
    if any(since <= t <= b for t in seen.terminations):
        return "after_session_terminated"
    return "unexplained"


# -- recovery ---------------------------------------------------------------------------------


def recovery(inputs: Inputs, by_job: dict[str, list[Run]]) -> dict[str, dict[str, Any]]:
    ok_ends = sorted(r.end for runs in by_job.values() for r in runs if r.event == "ok" and r.end is not None)
    finished = {j["id"]: j["finished_at"] for j in inputs.jobs}
    first_done: dict[str, list[float]] = defaultdict(list)
    held_done: dict[str, list[float]] = defaultdict(list)
    unfinished: Counter[str] = Counter()
    for e in chaos_events(inputs.events):
        ref = float(e.detail.get("up_at", e.t))
        i = bisect.bisect_right(ok_ends, ref)
        if i < len(ok_ends):
            first_done[e.kind].append(ok_ends[i] - ref)
        held = e.detail.get("held")
        if not held:  # unknown (the query failed), or the victim held nothing: no such recovery
            continue
        times = [_done_after(by_job.get(job, []), finished.get(job), e.t) for job in held]
        if any(t is None for t in times):
            unfinished[e.kind] += 1
        done = [t for t in times if t is not None]
        held_done[e.kind].append(max([ref, *done]) - ref)
    out: dict[str, dict[str, Any]] = {}
    for kind in FAULT_KINDS:
        if first_done.get(kind) or held_done.get(kind):
            out[kind] = {
                "first_done": _p50_max(first_done.get(kind, [])),
                "held_done": _p50_max(held_done.get(kind, [])),
            }
            if unfinished[kind]:
                out[kind]["held_never_done"] = unfinished[kind]
    return out


def _done_after(runs: list[Run], finished_at: float | None, t: float) -> float | None:
    later = [r.end for r in runs if r.event == "ok" and r.end is not None and r.end > t]
    if later:
        return min(later)
    return finished_at


def _p50_max(values: list[float]) -> dict[str, float | int | None]:
    if not values:
        return {"n": 0, "p50": None, "max": None}
    return {"n": len(values), "p50": round(statistics.median(values), 3), "max": round(max(values), 3)}


def chaos_events(events: list[Event]) -> list[Event]:
    """The injected faults (not the end-of-soak SIGTERMs, which carry a ``why``)."""
    return [e for e in events if e.kind in FAULT_KINDS and "why" not in e.detail]


# -- the report -------------------------------------------------------------------------------


def analyse(inputs: Inputs) -> tuple[dict[str, Any], dict[str, Any]]:
    """The summary (for the JSON line) and the details (for stderr and report.json)."""
    members = {m.pid: m for m in inputs.members}
    by_job = runs_of(inputs)
    lost, unrecorded = lost_jobs(inputs.jobs, by_job)
    found, stale_locks = overlaps(by_job, members)
    seen = Disturbances.of(members, inputs.events, inputs.visibility)
    reruns = rerun_causes(by_job, seen)
    all_runs = [r for runs in by_job.values() for r in runs]
    stale = [r for r in all_runs if not r.lease_ok]
    open_runs = [r for r in all_runs if r.end is None and math.isinf(r.end_eff)]
    faults = Counter(e.kind for e in chaos_events(inputs.events))
    freezes = [e for e in chaos_events(inputs.events) if e.kind == "sigstop"]
    states = Counter(j["state"] for j in inputs.jobs)
    bodies = {j["id"]: j["body"] for j in inputs.jobs}
    duplicates = [o for o in found if o.kind == "duplicate"]
    summary = {
        "jobs": len(inputs.jobs),
        "done": states.get("done", 0),
        "dead": states.get("dead", 0),
        "dead_by_error": dict(Counter(str(j.get("error_type")) for j in inputs.jobs if j["state"] == "dead")),
        "lost": len(lost),
        "concurrent_duplicates": len(duplicates),
        "frozen_overlaps": sum(1 for o in found if o.kind == "frozen"),
        "stale_starts": len(stale),
        "stale_starts_called_after_thaw": sum(1 for r in stale if called_after_thaw(r, members)),
        "stale_locks": stale_locks,
        "lock_after_work": sum(1 for o in found if o.kind == "lock_after_work"),
        "runs": len(all_runs),
        "open_runs": len(open_runs),
        "final_attempt_unrecorded": len(unrecorded),
        "step_mismatches": sum(1 for row in inputs.ledger if row["event"] == "mismatch"),
        "reruns": dict(sorted(reruns.causes.items())),
        "reruns_after_completed_body": dict(sorted(reruns.after_ok.items())),
        "faults": {k: faults.get(k, 0) for k in FAULT_KINDS},
        "freezes_after_burst": sum(1 for e in freezes if "after_burst" in e.detail),
        "freezes_with_claimed_ahead": sum(1 for e in freezes if e.detail.get("claimed_ahead")),
        "recovery_s": recovery(inputs, by_job),
    }
    details = {
        "lost": lost[:DETAILS_SHOWN],
        "concurrent_duplicates": [_overlap(o, inputs, members) for o in duplicates[:DETAILS_SHOWN]],
        "frozen_overlaps": [_overlap(o, inputs, members) for o in found if o.kind == "frozen"][:DETAILS_SHOWN],
        "stale_starts": [_stale(r, inputs, members) | {"body": bodies.get(r.job_id)} for r in stale[:DETAILS_SHOWN]],
        "unexplained_reruns": [_pair(p, c, inputs, members) for p, c in reruns.unexplained[:DETAILS_SHOWN]],
        "completed_body_rerun": [
            _pair(p, c, inputs, members) | {"cause": why} for p, c, why in reruns.settle_missed[:DETAILS_SHOWN]
        ],
        "open_runs": [_run(r, inputs, members) for r in open_runs[:DETAILS_SHOWN]],
        "final_attempt_unrecorded": unrecorded[:DETAILS_SHOWN],
        "dead": [
            {k: j.get(k) for k in ("id", "n", "body", "attempt", "error_type", "error_message")}
            for j in inputs.jobs
            if j["state"] == "dead"
        ][:DETAILS_SHOWN],
    }
    return summary, details


def _seq(members: dict[int, Member], pid: int | None) -> int | None:
    member = members.get(pid) if pid is not None else None
    return None if member is None else member.seq


def _run(r: Run, inputs: Inputs, members: dict[int, Member]) -> dict[str, Any]:
    end = None if r.end is None else round(r.end - inputs.t0, 3)
    return {
        "job": r.job_id,
        "attempt": r.attempt,
        "worker": _seq(members, r.pid),
        "pid": r.pid,
        "start": round(r.start - inputs.t0, 3),
        "end": end,
        "event": r.event,
    }


def _overlap(o: Overlap, inputs: Inputs, members: dict[int, Member]) -> dict[str, Any]:
    seconds = None if math.isinf(o.seconds) else round(o.seconds, 4)
    return {
        "job": o.job_id,
        "found_by": o.found_by,
        "workers": [_seq(members, p) for p in o.pids],
        "pids": list(o.pids),
        "at": round(o.at - inputs.t0, 3),
        "overlap_s": seconds,
    }


def last_freeze(run: Run, members: dict[int, Member]) -> list[float] | None:
    """The freeze of the run's own worker that ended last before its start row, if any."""
    member = members.get(run.pid)
    ended = [s for s in member.stops if s[1] <= run.start] if member is not None else []
    return max(ended, key=lambda s: s[1]) if ended else None


def called_after_thaw(run: Run, members: dict[int, Member]) -> bool:
    """Did the worker call this body after its own last thaw (not before the freeze came)?"""
    freeze = last_freeze(run, members)
    return freeze is not None and run.entered is not None and run.entered >= freeze[1]


def _stale(r: Run, inputs: Inputs, members: dict[int, Member]) -> dict[str, Any]:
    """A stale start, with when the worker called the body and its own last freeze: called before
    the freeze, the start row was late because of it; called after the thaw, the worker started a
    run it could have known was lost."""
    freeze = last_freeze(r, members)
    shown = None if freeze is None else [round(t - inputs.t0, 3) for t in freeze]
    entered = None if r.entered is None else round(r.entered - inputs.t0, 3)
    return _run(r, inputs, members) | {"entered": entered, "own_freeze": shown, "lease": r.lease_detail}


def _pair(prev: Run, cur: Run, inputs: Inputs, members: dict[int, Member]) -> dict[str, Any]:
    return {"prev": _run(prev, inputs, members), "rerun": _run(cur, inputs, members) | {"lease_ok": cur.lease_ok}}
