"""Rules the import graph keeps: psycopg stays behind the driver, the worker's services never reach
back to the app or the worker's lifecycle, no circle of modules, no module past 900 lines.

The graph is read with ``ast`` from every file under ``src/workhorse``: type-only imports (under
``TYPE_CHECKING``) and imports inside functions count like any other, since each is a tie between
two modules all the same. ``from workhorse.x import y`` is a tie to ``workhorse.x.y`` when that is
a module, else to ``workhorse.x``.

Each rule carries an allow-list of what breaks it today, named so it reads as temporary: a file
that is not listed never joins it, and an entry goes when its file is fixed. The last test builds a
small package that breaks every rule, so each rule is known to be able to fail.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import workhorse

SRC = Path(workhorse.__file__).parent
PACKAGE = "workhorse"
MAX_LINES = 900  # a hard limit, not a target: split a module by concept, never to satisfy a count

# (a) Only the drivers, the SQL package, the embedded server and a feature's storage module (its
# ``postgres.py``, and the outbox's ``source.py``, its side in a source database) speak psycopg.
PSYCOPG = ("psycopg", "psycopg_pool")
MAY_IMPORT_PSYCOPG = ("drivers/", "_db/", "embedded/", "outbox/source.py", "backfill/postgres.py", "health/postgres.py")
# Files allowed to import psycopg elsewhere: none any more (the CLI's reachability check and the
# demo's cleanup went to drivers/direct.py). Keep it empty.
PSYCOPG_NOT_YET_BEHIND_THE_DRIVER: set[str] = set()

# (b) The worker's parts (the modules of the worker/ package) are handed what they need; only the
# lifecycle (worker/lifecycle.py, behind the worker/ face) knows the App and the Worker.
SERVICES = ("workhorse.worker.",)
LIFECYCLE = {"workhorse.worker", "workhorse.worker.lifecycle"}
REACHED_BACK_TO = {"workhorse.app", *LIFECYCLE}
# Parts that import workhorse.app or the lifecycle: none since the worker/ package. Keep it empty.
SERVICES_STILL_REACHING_BACK: set[str] = set()

# (c) No circle of modules at all. (The worker's, the last one, went with the worker/ package.)
WORKER_CIRCLE_UNTIL_THE_REBUILD: set[str] = set()

# (d) Files over MAX_LINES today, each with its line count as a ceiling: it may shrink, never grow
# past it. Lower a ceiling when a file shrinks; remove the entry once the file is under MAX_LINES.
LONG_FILES_TO_SPLIT: dict[str, int] = {}


# -- reading the tree ------------------------------------------------------------------------------


def _modules(root: Path) -> dict[str, Path]:
    """Every module of the package under ``root`` (a ``workhorse`` directory) by dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [root.name, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _imported_names(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """Every dotted name an import statement of the file names, with its line: ``import a.b`` names
    ``a.b``; ``from a import b`` names ``a.b``, which ``_graph`` reads as the module ``a.b`` or, when
    ``b`` is not a module, ``a`` (relative imports made absolute)."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join([*here, base] if base else here)
            for alias in node.names:
                yield f"{base}.{alias.name}", node.lineno


def _graph(root: Path) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (the longest module each imported name starts with)."""
    modules = _modules(root)
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for module, path in modules.items():
        for name, _line in _imported_names(module, path):
            target = name
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != module:
                edges[module].add(target)
    return edges


def _relative(root: Path, path: Path) -> str:
    return path.relative_to(root).as_posix()


# -- the rules, as findings ------------------------------------------------------------------------


def psycopg_importers(root: Path) -> dict[str, list[int]]:
    """Files outside MAY_IMPORT_PSYCOPG that import psycopg: file -> lines."""
    found: dict[str, list[int]] = {}
    for module, path in _modules(root).items():
        where = _relative(root, path)
        if where.startswith(MAY_IMPORT_PSYCOPG):
            continue
        for name, line in _imported_names(module, path):
            if name.split(".")[0] in PSYCOPG and line not in found.get(where, []):
                found.setdefault(where, []).append(line)
    return found


def services_reaching_back(root: Path) -> dict[str, set[str]]:
    """The worker's service modules that import the App or the lifecycle: file -> those modules."""
    modules = _modules(root)
    found: dict[str, set[str]] = {}
    for module, targets in _graph(root).items():
        if module.startswith(SERVICES) and module not in LIFECYCLE:
            back = targets & REACHED_BACK_TO
            if back:
                found[_relative(root, modules[module])] = back
    return found


def circles(root: Path) -> list[set[str]]:
    """Every loop of modules importing each other: the strongly connected components of two or more
    (Tarjan's algorithm, iterative)."""
    edges = _graph(root)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    for start in edges:
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _a_loop_through(component: set[str], edges: dict[str, set[str]]) -> list[str]:
    """One concrete loop inside a circle, to say which imports to look at: a -> b -> ... -> a."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(edges[node] & component):
                if child == start:
                    return [*paths[node], start]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    following.append(child)
        frontier = following
    return sorted(component)  # unreachable for a strongly connected component


def files_too_long(root: Path, ceilings: dict[str, int]) -> dict[str, tuple[int, int]]:
    """Files longer than their ceiling (MAX_LINES unless listed): file -> (lines, ceiling)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        where = _relative(root, path)
        lines = len(path.read_text().splitlines())
        ceiling = ceilings.get(where, MAX_LINES)
        if lines > ceiling:
            found[where] = (lines, ceiling)
    return found


# -- the tests -------------------------------------------------------------------------------------


def test_psycopg_stays_behind_the_driver() -> None:
    new = {f: lines for f, lines in psycopg_importers(SRC).items() if f not in PSYCOPG_NOT_YET_BEHIND_THE_DRIVER}
    assert new == {}, (
        "these files import psycopg, which only drivers/, _db/, embedded/ and a feature's storage module "
        f"may: go through the Driver (drivers/base.py) instead: {new}"
    )


def test_worker_services_do_not_reach_back_to_the_app_or_the_lifecycle() -> None:
    new = {f: back for f, back in services_reaching_back(SRC).items() if f not in SERVICES_STILL_REACHING_BACK}
    assert new == {}, (
        "a worker service imports the App or the worker's lifecycle; hand it what it needs (a driver, "
        f"a callback, a record) from the lifecycle instead: {new}"
    )


def test_no_circle_of_imports() -> None:
    edges = _graph(SRC)
    new = [" -> ".join(_a_loop_through(c, edges)) for c in circles(SRC) if not c <= WORKER_CIRCLE_UNTIL_THE_REBUILD]
    assert new == [], f"modules import each other in a circle (type-only and function-local imports count): {new}"


def test_no_file_grows_past_its_ceiling() -> None:
    found = files_too_long(SRC, LONG_FILES_TO_SPLIT)
    assert found == {}, (
        f"modules over {MAX_LINES} lines (or their ceiling): split them by concept; a listed file may "
        f"shrink, not grow: {found}"
    )


def test_each_rule_can_fail(tmp_path: Path) -> None:
    """A package that breaks every rule once: each finding names exactly the offender."""
    root = tmp_path / PACKAGE
    files = {
        "__init__.py": "from workhorse.app import App\n",
        "app.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from workhorse.worker import Worker\n",
        "jobs.py": "def later():\n    import psycopg_pool\n",
        "steps.py": "from workhorse.jobs import later\n",
        "retry.py": "from . import steps\n",
        "drivers/__init__.py": "",
        "drivers/postgres.py": "import psycopg\n",
        "worker/__init__.py": "from workhorse.worker.lifecycle import Worker\n",
        "worker/lifecycle.py": "from workhorse.app import App\n",
        "worker/settler.py": "from workhorse.worker import Worker\n",
        "worker/clock.py": "import time\n",
        "long.py": "x = 1\n" * (MAX_LINES + 1),
    }
    files["jobs.py"] += "from .retry import Retry\n"  # jobs -> retry -> steps -> jobs
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)

    assert psycopg_importers(root) == {"jobs.py": [2]}
    assert services_reaching_back(root) == {"worker/settler.py": {"workhorse.worker"}}
    found = sorted(map(sorted, circles(root)))
    assert found == [
        ["workhorse.app", "workhorse.worker", "workhorse.worker.lifecycle"],  # type-only imports count
        ["workhorse.jobs", "workhorse.retry", "workhorse.steps"],
    ]
    assert _a_loop_through(set(found[1]), _graph(root)) == [
        "workhorse.jobs",
        "workhorse.retry",
        "workhorse.steps",
        "workhorse.jobs",
    ]
    assert files_too_long(root, {}) == {"long.py": (MAX_LINES + 1, MAX_LINES)}
    assert files_too_long(root, {"long.py": MAX_LINES + 1}) == {}
