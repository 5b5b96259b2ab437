#!/bin/sh
# Rendered by sparkctl: fabric ports of example on the lab switch crs812. Edits are overwritten; change the inventory instead.
set -eu
# spark-0
ip link set dev qsfp56-dd-1-1 mtu 9216
ip link set dev qsfp56-dd-1-1 up
# spark-1
ip link set dev qsfp56-dd-2-1 mtu 9216
ip link set dev qsfp56-dd-2-1 up
# spark-2
ip link set dev qsfp56-dd-3-1 mtu 9216
ip link set dev qsfp56-dd-3-1 up
# spark-3
ip link set dev qsfp56-dd-4-1 mtu 9216
ip link set dev qsfp56-dd-4-1 up
