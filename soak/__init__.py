"""``make soak``: a chaos soak of real worker processes, verified by a ledger of its own.

``python -m soak.run --help`` for the options; the design is described in ``soak/run.py``.
Modules: ``run`` (the command and its phases), ``plan`` (arrivals and faults drawn from the seed),
``fleet`` (the worker processes and the signals they get), ``chaos`` (the conductor that injects
faults and keeps the event log), ``sampler`` (the registry sampler), ``enqueue`` (the arrivals),
``verify`` (the ledger analysis and the report), ``soakapp`` (the app the workers run: job bodies
that write the ledger), ``procfs`` (process states and sockets read from /proc), ``sql`` (every
statement).
"""
