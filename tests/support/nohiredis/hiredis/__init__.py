"""Put this directory first on PYTHONPATH to hide the real hiredis: redis-py then uses its pure-Python parsers."""

raise ImportError("hiredis is hidden for this test run (tests/support/nohiredis)")
