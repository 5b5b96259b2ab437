"""The node-side parts of sparkctl, as Ansible ships them to the nodes (``ansible.module_utils.sparkctl``).

The subpackages are symlinks to ``sparkctl/nodeside`` (and ``sparkctl/stage``): the same code under
the same relative names, so their relative imports (``from ..nodeside import manifests``) work in
both places. Keep this file free of imports: Ansible packs it with every module that uses them.
"""
