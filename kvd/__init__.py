"""kvd: a Redis-protocol daemon that keeps LLM KV-cache chunks in RAM and on disk."""

__version__ = "0.1.0"
