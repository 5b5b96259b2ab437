"""The local lab: four systemd-nspawn "Sparks" and a Linux switch container on one machine.

`topology` holds the wiring, `rootfs` the cached Debian tree, `inventory` the inventory writer,
`control` the up/down/status/chaos operations, `host` the subprocess and /proc helpers.
"""
