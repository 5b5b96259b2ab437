"""Serving: the verbs `up`, `down`, `logs`, `bundle` and what they stand on — node facts, the
cluster verdict, preflight, the boot watch (readiness gates), the memory guard and redaction.

* ``up``, ``down``: ``Up(cluster, doc, tools, out).run()`` and ``Down(...)``; ``tools``
  (``tools.Tools``: runner, SSH fleet, HTTP client, run directory, the question, qualify, the kit
  reference, the memory guard) and ``out`` (``tools.Output``) are what they touch and tell.
  ``logs``, ``bundle``: the journals and the support tarball. ``admin``: what an admin's `up`,
  `down` and `status` mean to the supervisor; ``supervisor``, ``events``, ``watchunit``: `watch`.
* ``probe``: one SSH round per node runs ``sparkctl.nodeside.probe``; ``collect`` parses the facts.
* ``http``: rank 0's API (``/health``, ``/ready``, ``/v1/models``), its base URL and auth header.
* ``verdict``: ``snapshot(cluster, doc, fleet, http)``, the facts of every node and of rank 0's
  API plus a verdict ``ready | degraded | down`` with reasons (``sparkctl status``).
* ``preflight``: every check on every node, reported together (``sparkctl up`` refuses to start
  on any failure).
* ``bootwatch``: ``BootWatch(...).run()`` runs, after the units started, the gates in order (unit
  active, worker /health, rank 0 /ready, /server_info, log markers, one chat completion, optional
  qualify), with the memory guard sampling MemAvailable on every node every ~2 s. A failed gate
  raises ``GateFailure`` naming the gate, the node and its log tail.
* ``redact``: secrets out of text that leaves a node.

SGLang facts behind the gates (reference/sglang-contract.md §1.4, §4): a worker's /health is a
dummy that answers 200 once its scheduler finished init, only rank 0 serves the API and /ready,
and a dead peer is noticed by nothing but a watchdog, so every unit's state is watched as well.
"""
