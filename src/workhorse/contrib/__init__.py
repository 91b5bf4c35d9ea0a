"""Integrations with other frameworks, each imported only by those who use it."""
