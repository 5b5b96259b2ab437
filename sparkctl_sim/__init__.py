"""The rank simulator: a stand-in for one SGLang 0.5.23 rank, written with the standard library only.

It is started with exactly the argv and environment a real rank gets (``sparkctl-sim-rank serve
<sglang argv>``), rendezvouses with its peers over TCP, serves the same HTTP endpoints and answers the
qualification suite with a small deterministic "model". It runs on the lab nodes' system python3, so
nothing here may import anything outside the standard library. See ``docs/simulator.md``.
"""

from __future__ import annotations

SIM_TAG = "[sparkctl-sim-rank] SIMULATOR"
SGLANG_VERSION = "0.5.23"
