"""pg_array: the array parameters of the claim and the settle, as PostgreSQL's text input."""

from __future__ import annotations

import psycopg

from workhorse.drivers.postgres_work import pg_array

AWKWARD = [
    "plain",
    'a "quoted" word',
    "back\\slash and \\\\ two",
    "comma, {braces} and spaces  ",
    "NULL",
    "",
    "new\nline\ttab é ☃",
    None,
    '{"result": "json \\" text", "n": [1, 2]}',
]


def test_every_value_comes_back_as_it_went(database_url: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        texts = conn.execute("select unnest(%s::text[])", (pg_array(AWKWARD),)).fetchall()
        assert [row[0] for row in texts] == AWKWARD
        numbers = conn.execute(
            "select unnest(%s::int[]), unnest(%s::float8[])", (pg_array([1, -2, None]), pg_array([0.5, None, 1e-05]))
        ).fetchall()
        assert numbers == [(1, 0.5), (-2, None), (None, 1e-05)]
        docs = conn.execute("select unnest(%s::jsonb[])", (pg_array(['{"a": "x\\"y"}', None]),)).fetchall()
        assert [row[0] for row in docs] == [{"a": 'x"y'}, None]
        assert conn.execute("select cardinality(%s::text[])", (pg_array([]),)).fetchone() == (0,)
