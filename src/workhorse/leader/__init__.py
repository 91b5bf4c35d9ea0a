"""The leader, one folder: the scheduler role, one leader across the fleet elected by a lease row,
and the duties it runs after each round it leads; cron tasks, which its rounds fire; and the rescue
of lapsed leases, which every worker runs too.

Cron lives here, not in a folder of its own: the statement that renews the lease is the one that
fires the tasks (the lease's epoch fences each fire), a round's records carry the fires, and the
cron duty plans by the election's timing; a cron/ beside leader/ would import it and be imported
back.

    scheduler  Scheduler: options, run/stop, signals, the loop of rounds, standing by, stepping down
               (``await Scheduler(app).run()`` until ``stop()`` or a signal)
    election   the lease-row election and its epoch fence, as this process sees it (pure)
    tasks      cron tasks as declared (``@app.task``): schedules, occurrences, catch-up (pure)
    cron       the cron duty: planning each round's fires, reading back what landed (pure)
    duty       the Duty protocol: what the leader runs after each round it leads
    folds      the counter folds duty (and the hourly fold of a task-less role)
    purge      the retention duty (and the purge of a task-less role)
    rescue     the rescue of lapsed leases: a worker's turns, and the leader's duty (LeaseRescue)
    store      RoundStore: where rounds go (DriverRoundStore over the driver's leadership role, or a test's own)
    stats      SchedulerStats
    report     TaskStatus, LeaderStatus, TasksReport, tasks_report: what `workhorse tasks` prints (app.admin.tasks)
    rounds     the records a round speaks (RoundRequest, RoundAnswer...) and LeadershipRole, the
               part of a driver that runs them
    postgres   PostgresLeadership: the PostgreSQL driver's part, each round one statement
    queries    the round, release, tasks and leader statements, and the rescue's

This face imports nothing: the driver's interface imports ``rounds``, and importing a package runs
its face first, so a face that pulled in the scheduler would pull in the driver half-made. Import
each name from its module (``from workhorse.leader.scheduler import Scheduler``).
"""
