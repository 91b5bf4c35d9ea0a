"""Storage, private to workhorse: the interface (base), PostgreSQL, and the memory test double."""
