"""Helpers shared by the unit and CLI tests, importable as ``support`` (pytest puts ``tests/`` on
``sys.path``: ``pythonpath`` in pyproject.toml's ``[tool.pytest.ini_options]``); no test edits
``sys.path`` or imports another test module (tests/unit/test_test_layout.py checks).

- ``runner``: the one fake ``runner.execute`` (plans recorded, events fed, results canned per
  playbook and per node, failures per host);
- ``nvml``: the one fake pynvml;
- ``gates_fakes``: a lab-shaped cluster on disk, a scripted fleet of nodes, a fake rank-0 API;
- ``serve_site``: that site wired into ``sparkctl.cli.common.tools()`` for the serving verbs;
- ``stage_fakes``: what the stage fast path's node check answers;
- ``node_tree``: a fake node's sysfs trees and Engram shards;
- ``published``: the publishers' launch flags, and argv split into (flag, values);
- ``sshd_fake``: an in-process SSH server;
- ``modrun``: one role module run through Ansible on localhost;
- ``synth_checkpoint``, ``synth_kit``: a synthetic checkpoint and serving kit
  (``tests/fixtures/synth_checkpoint.py`` is the same file, for the demo, the benchmark and the lab).
"""
