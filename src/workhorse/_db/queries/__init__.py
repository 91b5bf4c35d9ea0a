"""Named SQL statements, one module per table group. ``{schema}`` is filled in by the driver."""
