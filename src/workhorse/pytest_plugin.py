"""The pytest plugin of workhorse.testing (entry point ``workhorse``)."""
