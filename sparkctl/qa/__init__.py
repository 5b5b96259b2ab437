"""Qualification and benchmarking of a running cluster through rank 0's OpenAI-compatible API.

- ``qualify``: fixed checks (plain text, arithmetic at C8, images, structured JSON, tool round trip,
  needle ladder, greedy determinism), evidence saved per check. ``run_qualify`` is what ``up`` calls.
- ``bench``: the concurrency ladder with the published timing definitions, compared with the
  profile's published figures; ``plot`` draws it.
"""
