"""Storage drivers: the contract (base), PostgreSQL and memory."""
