"""A new site: `sparkctl bootstrap` (first contact) and `sparkctl init`, which reads the reachable
nodes (and the switch's cabling, through LLDP) and writes a commented inventory that
`sparkctl validate` accepts.

For init: ``facts`` types what ``nodeside.discover`` reports; ``propose`` turns it into a site
(pure); ``text`` renders the files (pure); ``hostkeys`` pins the nodes' keys; ``files`` diffs,
validates and writes; ``init`` runs the whole of it with its collaborators handed in. The shipped
example (`init --example`) is found by ``sparkctl.resources.example_dir``, re-exported here.
"""

from __future__ import annotations

from sparkctl.resources import example_dir

__all__ = ["example_dir"]
