"""Staging: the checkpoint fanned out over the fabric and the per-rank Engram shards packed on NVMe.

The modules here split in two groups:

* node side, standard library only (they also run on the nodes, shipped to Ansible as
  ``ansible.module_utils.sparkctl.stage``, a symlink to this directory beside one to ``nodeside``,
  whose manifest reader they use):
  ``safetensors`` (header reader), ``dsv41en1`` (the packed-shard format, packer and verifier),
  ``manifest`` (file digests, the idempotence key), ``transfer`` (the fabric chain agent),
  ``fanout`` (who pulls from whom);
* controller side: ``progress`` (live per-node bars, or lines without a terminal, of every long
  step's progress document, ``sparkctl.nodeside.progress``) — it imports rich.

Keep this ``__init__`` free of imports: Ansible packs it with every stage module.
"""
