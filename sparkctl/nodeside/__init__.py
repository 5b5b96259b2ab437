"""Code that runs ON the nodes (standard library only): the probe and the readers it shares with the
role modules (links, GIDs, manifests, identity) through ``module_utils``."""
