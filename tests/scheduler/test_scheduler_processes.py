"""Real `workhorse scheduler` / `workhorse worker` subprocesses electing one leader.

Every test keeps a Finisher running: fired jobs are marked done at once, so the live-key unique
index cannot absorb a second fire of an occurrence. Only the watermark and the epoch fence can.
"""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta

import psycopg
import pytest
from schedkit import HERE, Finisher, Spawn, leader_pid, log_of, occurrences, sql, wait_for

pytestmark = pytest.mark.process
FAST = ("--lease", "3s", "--interval", "1s")


def assert_each_once(url: str, schema: str, *, contiguous: bool) -> list[datetime]:
    fired = occurrences(url, schema)
    assert len(fired) == len(set(fired)), f"an occurrence fired twice: {fired}"
    (count,) = sql(url, f"select fired from {schema}.tasks where name = 'tick'")[0]
    assert count == len(fired), "every watermark move inserted exactly one job"
    stamps = [datetime.fromisoformat(f) for f in fired]
    if contiguous:
        gaps = {b - a for a, b in itertools.pairwise(stamps)}
        assert gaps <= {timedelta(seconds=1)}, f"missed occurrences: {fired}"
    return stamps


def terminate(*procs: subprocess.Popen[bytes]) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    for proc in procs:
        assert proc.wait(timeout=15) == 0, log_of(proc)


def test_two_schedulers_fire_each_occurrence_exactly_once(spawn: Spawn, database_url: str, schema: str) -> None:
    with Finisher(database_url, schema):
        a, b = spawn("scheduler", *FAST), spawn("scheduler", *FAST)
        wait_for(lambda: len(occurrences(database_url, schema)) >= 6, 20, "six occurrences")
        terminate(a, b)
    stamps = assert_each_once(database_url, schema, contiguous=True)
    assert len(stamps) >= 6
    logs = log_of(a) + log_of(b)
    assert logs.count("leading (epoch") >= 1
    assert "released the lease" in logs


def test_a_frozen_leader_that_resumes_cannot_fire(spawn: Spawn, database_url: str, schema: str) -> None:
    with Finisher(database_url, schema):
        a = spawn("scheduler", *FAST)
        wait_for(lambda: leader_pid(database_url, schema) == a.pid, 15, "the first scheduler to lead")
        b = spawn("scheduler", *FAST)
        wait_for(lambda: "standing for election" in log_of(b), 15, "the second scheduler to start")
        time.sleep(0.5)

        a.send_signal(signal.SIGSTOP)  # frozen mid-leadership: it still believes it leads
        frozen_at = time.monotonic()
        wait_for(lambda: leader_pid(database_url, schema) == b.pid, 10, "the standby to take over")
        assert time.monotonic() - frozen_at <= 3 + 1.5, "replaced within one lease (and a round)"
        before = len(occurrences(database_url, schema))
        wait_for(lambda: len(occurrences(database_url, schema)) >= before + 2, 10, "the new leader to fire")

        a.send_signal(signal.SIGCONT)  # it resumes with a plan made under its old epoch
        wait_for(lambda: "lost leadership" in log_of(a), 10, "the old leader to learn it lost")
        time.sleep(1.5)
        assert leader_pid(database_url, schema) == b.pid
        terminate(a, b)
    assert_each_once(database_url, schema, contiguous=False)
    assert "fenced out" in log_of(a) or "was not fired" in log_of(a) or "lost leadership" in log_of(a)


def test_sigterm_hands_over_at_once_and_a_killed_leader_is_replaced_within_its_lease(
    spawn: Spawn, database_url: str, schema: str
) -> None:
    slow = ("--lease", "6s", "--interval", "3s")
    with Finisher(database_url, schema):
        a = spawn("scheduler", *slow)
        wait_for(lambda: leader_pid(database_url, schema) == a.pid, 15, "the first scheduler to lead")
        b, c = spawn("scheduler", *slow), spawn("scheduler", *slow)
        wait_for(lambda: all("standing for election" in log_of(p) for p in (b, c)), 15, "the standbys to start")
        time.sleep(1.0)  # their LISTEN sessions connect

        a.send_signal(signal.SIGTERM)
        assert a.wait(timeout=10) == 0, log_of(a)
        stepped_down = time.monotonic()
        wait_for(lambda: leader_pid(database_url, schema) in (b.pid, c.pid), 5, "a standby to take over")
        handover = time.monotonic() - stepped_down
        assert handover < 1.5, f"took {handover:.1f}s: a released lease is taken at once, not after 3-6 s"
        assert "released the lease" in log_of(a)

        successor = b if leader_pid(database_url, schema) == b.pid else c
        survivor = c if successor is b else b
        successor.kill()  # no goodbye: the lease must run out
        killed_at = time.monotonic()
        wait_for(lambda: leader_pid(database_url, schema) == survivor.pid, 10, "the last standby to take over")
        replaced = time.monotonic() - killed_at
        assert replaced <= 6 + 0.5, f"replaced after {replaced:.1f}s; the lease is 6s"
        terminate(survivor)
    assert_each_once(database_url, schema, contiguous=False)


def test_the_worker_runs_the_scheduler_role_unless_told_not_to(spawn: Spawn, database_url: str, schema: str) -> None:
    plain = spawn("worker", "--no-scheduler")
    both = spawn("worker")
    wait_for(
        lambda: sql(database_url, f"select count(*) from {schema}.jobs where state = 'done'")[0][0] >= 2,  # type: ignore[operator]
        20,
        "fired jobs to be run",
    )
    assert leader_pid(database_url, schema) == both.pid
    terminate(plain, both)
    assert sql(database_url, f"select pid, expires_at <= now() from {schema}.leaders") == [(both.pid, True)]
    done = sql(database_url, f"select result, payload->>'scheduled_at' from {schema}.jobs where state = 'done'")
    assert all(result == stamp for result, stamp in done), done
    assert "standing for election" not in log_of(plain)
    assert "standing for election" in log_of(both) and "released the lease" in log_of(both)


# -- what an idle scheduler costs the database ---------------------------------------------------------

STARTUP = 5.0  # seconds of start-up burst before the steady state
WATCH = 19.0  # seconds from start: the start-up rounds, then one whole 15 s gap to the next round
BUDGET_PER_MINUTE = 6


def statement_times(admin_url: str, name: str, seconds: float) -> list[tuple[str, float, str]]:
    """(role, seconds since the call, statement head) of each statement workhorse connections ran
    on database ``name``: pg_stat_activity sampled every 20 ms, a statement seen as a new query_start.

    One statement sent with the extended protocol is three messages (Parse, Bind, Execute), and
    the server stamps query_start anew for each. On a loaded machine planning can take tens of
    milliseconds, so a sample can catch a statement at Parse and the next at Execute: a new
    query_start on a backend last seen *active* on the same statement, without an idle sample
    between, is the same statement."""
    seen: set[tuple[int, object]] = set()
    active: dict[int, tuple[object, str]] = {}  # pid -> (query_start, head) last seen running
    found: list[tuple[str, float, str]] = []
    started = time.monotonic()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        while time.monotonic() - started < seconds:
            rows = conn.execute(
                "select pid, application_name, query_start, state, left(ltrim(query), 40) from pg_stat_activity "
                "where datname = %s and application_name like 'workhorse:%%' and query_start is not null",
                (name,),
            ).fetchall()
            for pid, role, query_start, state, text in rows:
                head = " ".join(text.split())
                running = active.get(pid)
                if state == "active":
                    active[pid] = (query_start, head)
                else:
                    active.pop(pid, None)
                if (pid, query_start) in seen:
                    continue
                seen.add((pid, query_start))
                if running is not None and running[1] == head and query_start - running[0] < timedelta(seconds=0.2):
                    continue  # a later protocol message of the statement already counted
                found.append((role, time.monotonic() - started, head))
            time.sleep(0.02)
    return found


def test_an_idle_scheduler_stays_within_six_statements_a_minute(database_url: str, dedicated_database: str) -> None:
    """A leader with nothing due: after its start-up (schema check, the election round, the
    registration round) it issues ONE statement per 15 s round and nothing else. Watching one
    whole gap after start-up proves the cadence; a faster one fails the gap check."""
    name = psycopg.conninfo.conninfo_to_dict(dedicated_database)["dbname"]
    env = {
        **os.environ,
        "WORKHORSE_DATABASE_URL": dedicated_database,
        "WORKHORSE_TEST_SCHEMA": "workhorse",
        "SCHEDAPP_MODE": "idle",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    command = [sys.executable, "-m", "workhorse", "--app", "schedapp:app"]
    subprocess.run([*command, "migrate"], env=env, cwd=HERE, check=True, capture_output=True)
    scheduler = subprocess.Popen(
        [*command, "scheduler"], env=env, cwd=HERE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    try:
        seen = statement_times(database_url, name, WATCH)
    finally:
        scheduler.send_signal(signal.SIGTERM)
        _, stderr = scheduler.communicate(timeout=20)
    assert scheduler.returncode == 0, stderr.decode()
    assert b"leading (epoch 1)" in stderr
    # Start-up is one burst (the schema check, the election round, at once the registration
    # round); under load its statements can spread over a few seconds, so the steady state is
    # everything after STARTUP seconds. Over the rest of the watch, rounds come every 15 s.
    assert seen, "no statement seen at all: the sampling is broken"
    steady = [(role, t, head) for role, t, head in seen if t > seen[0][1] + STARTUP]
    assert steady, seen
    assert {role for role, _, _ in steady} == {"workhorse:scheduler"}, "a leader holds no LISTEN session"
    # Besides its rounds a leader rescues lapsed leases (workhorse.leader.rescue) every fourth round: at
    # start-up, then a minute later, past the watch. One seen in the steady state is counted apart.
    rescues = [t for _, t, head in steady if head.startswith("with lapsed as")]
    assert len(rescues) <= 1, rescues
    steady = [(role, t, head) for role, t, head in steady if not head.startswith("with lapsed as")]
    assert all(head.startswith("with lease as") for _, _, head in steady), "one statement per round, nothing else"
    # The cadence is the gap between rounds: a start-up round that a loaded machine delayed past
    # STARTUP can share the window with the next round, 15 s later, without the scheduler breaking
    # its budget; two rounds closer than 60/BUDGET seconds do break it. A round is one statement,
    # or two at once when a loaded machine let the lease lapse: the re-election round is followed
    # at once by the registration round (the log then says epoch 2).
    times = [t for _, t, _ in steady]
    rounds: list[list[float]] = []
    for t in times:
        if rounds and t - rounds[-1][-1] < 1.0:
            rounds[-1].append(t)
        else:
            rounds.append([t])
    per_round = 2 if b"leading (epoch 2)" in stderr else 1
    gaps = [later[0] - earlier[0] for earlier, later in itertools.pairwise(rounds)]
    print(f"idle scheduler: {len(steady)} statement(s) after start-up in rounds {rounds}")
    log_tail = stderr.decode()[-1500:]
    assert all(len(r) <= per_round for r in rounds), f"{rounds}: more statements a round than {per_round}\n{log_tail}"
    least = 60 / BUDGET_PER_MINUTE
    assert all(gap >= least for gap in gaps), f"{rounds}: two rounds closer than {least:.0f} s\n{log_tail}"
