"""What arrives when, and which fault comes when: drawn once from the seed, before anything runs.

Arrivals (``Arrival``), over the whole chaos phase, not one batch:

* ``bulk``: a quarter of the non-trickle jobs at t=0, sync and async, half short (1-5 ms) and
  half long (50-500 ms).
* ``steady``: small mixed batches (same bodies as the bulk) every 2-4 s, so the fleet holds
  running jobs whenever a fault comes.
* ``burst``: every ~30 s a burst of short (0.5-2 ms) jobs. Short bodies let a worker claim
  ahead of its slots (the worker prefetches while its bodies average under 50 ms), so a burst
  leaves jobs *claimed ahead*: held by a worker, leased, not started.
* ``trickle``: a 50 ms job every ~0.4 s, the arrival pattern that keeps an otherwise idle worker
  taking one job at a time.

Every job fails its first attempt with probability 5% (``fail``), and is retried. Bodies are
``sync`` or ``async``, and with ``--flow`` also ``steps`` (the async body between durable steps);
every job carries a tenant (one of ``soakapp.FLOW_TENANTS``), which only the ``--flow`` app reads.

Faults (``Fault``), every 3-7 s from t≈3 s to the end of the phase: ``sigkill``, ``sigstop``
(frozen 2-12 s), ``sigterm`` and ``terminate`` (``pg_terminate_backend`` of every queue session of
the fleet), weighted 3:3:2:3. On top: right after the first burst, and after half of the later
ones, a ``sigstop`` aimed at the worker holding the most jobs claimed ahead (``after_burst``); and,
when the server is the soak's own, a ``restart`` every ~2 minutes (at least one per run),
alternating ``fast`` and ``immediate``. Regular faults too close to a restart or a burst freeze are
dropped.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

TRICKLE_EVERY = 0.4  # seconds between trickle jobs
TRICKLE_MS = 50.0
BURST_EVERY = 30.0  # seconds between bursts, on average
STEADY_EVERY = (2.0, 4.0)
FAULT_GAP = (3.0, 7.0)
FREEZE_S = (2.0, 12.0)
RESTART_EVERY = 120.0
FAIL_SHARE = 0.05
FAULT_KINDS = ("sigkill", "sigstop", "sigterm", "terminate")
FAULT_WEIGHTS = (3, 3, 2, 3)
JOBS_PER_SECOND = 4000 / 360  # the outside soak: 4,000 jobs over 6 minutes
TENANTS = 5  # soakapp.FLOW_TENANTS (the plan imports nothing of the app)


@dataclass(frozen=True)
class JobSpec:
    n: int  # the job's number in this soak: its advisory-lock key
    body: str  # sync or async
    ms: float
    fail: bool  # raise on the first attempt

    def payload(self) -> dict[str, Any]:
        return {"n": self.n, "ms": self.ms, "fail": self.fail, "tenant": f"t{self.n % TENANTS}"}


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the chaos phase began
    batch: int
    source: str  # bulk, steady, burst, trickle
    jobs: tuple[JobSpec, ...]


@dataclass(frozen=True)
class Fault:
    at: float
    kind: str  # sigkill, sigstop, sigterm, terminate, restart
    freeze_s: float = 0.0
    after_burst: int | None = None  # a sigstop aimed at the holder of this burst's jobs
    mode: str = ""  # a restart's pg_ctl mode


@dataclass(frozen=True)
class Plan:
    arrivals: tuple[Arrival, ...]
    faults: tuple[Fault, ...]

    @property
    def jobs(self) -> int:
        return sum(len(a.jobs) for a in self.arrivals)


def default_jobs(seconds: float) -> int:
    return max(100, round(JOBS_PER_SECOND * seconds))


def make_plan(seconds: float, jobs: int, seed: int, *, restarts: bool, flow: bool = False) -> Plan:
    rng = random.Random(seed)
    shapes = _arrival_shapes(seconds, jobs, rng)
    arrivals = _numbered(shapes, rng, ("sync", "async", "steps") if flow else ("sync", "async"))
    faults = _faults(seconds, arrivals, rng, restarts=restarts)
    return Plan(tuple(arrivals), tuple(faults))


# A shape is (at, source, size); bodies and numbers are drawn once the order is known.
_Shape = tuple[float, str, int]


def _arrival_shapes(seconds: float, jobs: int, rng: random.Random) -> list[_Shape]:
    span = max(seconds - 2.0, 1.0)
    trickle = min(int(span / TRICKLE_EVERY), jobs // 4)
    rest = jobs - trickle
    bursts_total, steady_total = int(rest * 0.55), int(rest * 0.2)
    bulk = rest - bursts_total - steady_total
    shapes: list[_Shape] = [(0.0, "bulk", bulk)]
    shapes += [(1.0 + i * span / max(trickle, 1), "trickle", 1) for i in range(trickle)]
    shapes += _spread(_burst_times(seconds, rng), "burst", bursts_total)
    shapes += _spread(_steady_times(seconds, rng), "steady", steady_total)
    return sorted((s for s in shapes if s[2] > 0), key=lambda s: s[0])


def _burst_times(seconds: float, rng: random.Random) -> list[float]:
    count = max(2, round(seconds / BURST_EVERY))
    return [min(max(seconds * (i + 0.5) / count + rng.uniform(-2, 2), 2.0), seconds - 2.0) for i in range(count)]


def _steady_times(seconds: float, rng: random.Random) -> list[float]:
    times, t = [], 2.0
    while t < seconds - 2.0:
        times.append(t)
        t += rng.uniform(*STEADY_EVERY)
    return times


def _spread(times: list[float], source: str, total: int) -> list[_Shape]:
    if not times:
        return []
    size, extra = divmod(total, len(times))
    return [(t, source, size + (1 if i < extra else 0)) for i, t in enumerate(times)]


def _numbered(shapes: list[_Shape], rng: random.Random, bodies: tuple[str, ...]) -> list[Arrival]:
    arrivals, n = [], 0
    for batch, (at, source, size) in enumerate(shapes):
        specs = []
        for _ in range(size):
            n += 1
            specs.append(JobSpec(n, rng.choice(bodies), _body_ms(source, rng), rng.random() < FAIL_SHARE))
        arrivals.append(Arrival(at, batch, source, tuple(specs)))
    return arrivals


def _body_ms(source: str, rng: random.Random) -> float:
    if source == "trickle":
        return TRICKLE_MS
    if source == "burst":
        return rng.uniform(0.5, 2.0)
    return rng.uniform(1.0, 5.0) if rng.random() < 0.5 else rng.uniform(50.0, 500.0)


def _faults(seconds: float, arrivals: list[Arrival], rng: random.Random, *, restarts: bool) -> list[Fault]:
    special = _restarts(seconds, rng) if restarts else []
    bursts = [a for a in arrivals if a.source == "burst"]
    for i, burst in enumerate(bursts):
        if i == 0 or rng.random() < 0.5:
            special.append(Fault(burst.at, "sigstop", rng.uniform(*FREEZE_S), after_burst=burst.batch))
    special = [f for f in special if f.kind == "restart" or not _near(f.at, special, 3.0, "restart")]
    regular, t = [], 3.0 + rng.uniform(0, 2)
    while t < seconds - 1.0:
        kind = rng.choices(FAULT_KINDS, FAULT_WEIGHTS)[0]
        if not _near(t, special, 2.0):
            regular.append(Fault(t, kind, rng.uniform(*FREEZE_S) if kind == "sigstop" else 0.0))
        t += rng.uniform(*FAULT_GAP)
    return sorted(special + regular, key=lambda f: f.at)


def _restarts(seconds: float, rng: random.Random) -> list[Fault]:
    count = max(1, round(seconds / RESTART_EVERY))
    first = rng.choice(("fast", "immediate"))
    other = "immediate" if first == "fast" else "fast"
    faults = []
    for i in range(count):
        at = min(max(seconds * (i + 0.5) / count + rng.uniform(-3, 3), 5.0), max(seconds - 5.0, 5.0))
        faults.append(Fault(at, "restart", mode=first if i % 2 == 0 else other))
    return faults


def _near(t: float, faults: list[Fault], within: float, kind: str | None = None) -> bool:
    return any(abs(f.at - t) < within and (kind is None or f.kind == kind) for f in faults)
