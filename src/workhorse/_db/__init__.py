"""Everything that speaks SQL: migrations and the named statements the Postgres driver runs."""
