"""Test support: real server processes (kvd or Debian's redis-server), a raw RESP socket, tool lookup."""
