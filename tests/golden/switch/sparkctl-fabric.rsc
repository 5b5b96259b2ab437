# Rendered by sparkctl: RoCE fabric of example on crs812 (RouterOS >= 7.23). Edits are overwritten; change the inventory instead.
# Import with `/import file-name=sparkctl-fabric.rsc`; safe to import again.

# Spark ports: forced 200G (autonegotiation may settle at 100G), L2MTU before MTU.
/interface ethernet
set "qsfp56-dd-1-1" auto-negotiation=no speed=200G-baseCR4 comment="sparkctl: spark-0"
set "qsfp56-dd-1-1" l2mtu=9216
set "qsfp56-dd-1-1" mtu=9216
set "qsfp56-dd-2-1" auto-negotiation=no speed=200G-baseCR4 comment="sparkctl: spark-1"
set "qsfp56-dd-2-1" l2mtu=9216
set "qsfp56-dd-2-1" mtu=9216
set "qsfp56-dd-3-1" auto-negotiation=no speed=200G-baseCR4 comment="sparkctl: spark-2"
set "qsfp56-dd-3-1" l2mtu=9216
set "qsfp56-dd-3-1" mtu=9216
set "qsfp56-dd-4-1" auto-negotiation=no speed=200G-baseCR4 comment="sparkctl: spark-3"
set "qsfp56-dd-4-1" l2mtu=9216
set "qsfp56-dd-4-1" mtu=9216

# One bridge, hardware-offloaded: a single L2 domain for the fabric subnets.
/interface bridge
:if ([:len [find name=sparkctl-fabric]] = 0) do={ add name=sparkctl-fabric protocol-mode=none comment="sparkctl RoCE fabric" }
# A Spark port already in another bridge (the default one holds every port out of the box)
# is moved out of it, never left there: that would join the fabric to the management LAN.
# Each move is reported (`sparkctl: moving ...`); sparkctl applies this under a revert armed
# on the switch, in case the port carried management.
/interface bridge port
:foreach p in=[find where interface="qsfp56-dd-1-1" and bridge!=sparkctl-fabric] do={ :put ("sparkctl: moving qsfp56-dd-1-1 out of bridge " . [get $p bridge]); remove $p }
:if ([:len [find interface="qsfp56-dd-1-1" bridge=sparkctl-fabric]] = 0) do={ add bridge=sparkctl-fabric interface="qsfp56-dd-1-1" hw=yes }
:foreach p in=[find where interface="qsfp56-dd-2-1" and bridge!=sparkctl-fabric] do={ :put ("sparkctl: moving qsfp56-dd-2-1 out of bridge " . [get $p bridge]); remove $p }
:if ([:len [find interface="qsfp56-dd-2-1" bridge=sparkctl-fabric]] = 0) do={ add bridge=sparkctl-fabric interface="qsfp56-dd-2-1" hw=yes }
:foreach p in=[find where interface="qsfp56-dd-3-1" and bridge!=sparkctl-fabric] do={ :put ("sparkctl: moving qsfp56-dd-3-1 out of bridge " . [get $p bridge]); remove $p }
:if ([:len [find interface="qsfp56-dd-3-1" bridge=sparkctl-fabric]] = 0) do={ add bridge=sparkctl-fabric interface="qsfp56-dd-3-1" hw=yes }
:foreach p in=[find where interface="qsfp56-dd-4-1" and bridge!=sparkctl-fabric] do={ :put ("sparkctl: moving qsfp56-dd-4-1 out of bridge " . [get $p bridge]); remove $p }
:if ([:len [find interface="qsfp56-dd-4-1" bridge=sparkctl-fabric]] = 0) do={ add bridge=sparkctl-fabric interface="qsfp56-dd-4-1" hw=yes }
/interface bridge settings
set use-ip-firewall=no

# QoS: DSCP 26 (RoCE) -> class 3 lossless, DSCP 48 (CNP) -> class 6 strict.
/interface ethernet switch qos profile
:if ([:len [find name=sparkctl-roce]] = 0) do={ add name=sparkctl-roce traffic-class=3 }
:if ([:len [find name=sparkctl-cnp]] = 0) do={ add name=sparkctl-cnp traffic-class=6 }
/interface ethernet switch qos map ip
:if ([:len [find dscp=26]] = 0) do={ add dscp=26 profile=sparkctl-roce }
:if ([:len [find dscp=48]] = 0) do={ add dscp=48 profile=sparkctl-cnp }
/interface ethernet switch qos tx-manager queue
set [find traffic-class=3] schedule=high-priority-group weight=1 ecn=yes
set [find traffic-class=6] schedule=strict-priority
/interface ethernet switch qos priority-flow-control
:if ([:len [find name=sparkctl-pfc3]] = 0) do={ add name=sparkctl-pfc3 traffic-class=3 rx=yes tx=yes }
/interface ethernet switch qos port
set "qsfp56-dd-1-1" trust-l3=keep pfc=sparkctl-pfc3 egress-rate-queue3=200G
set "qsfp56-dd-2-1" trust-l3=keep pfc=sparkctl-pfc3 egress-rate-queue3=200G
set "qsfp56-dd-3-1" trust-l3=keep pfc=sparkctl-pfc3 egress-rate-queue3=200G
set "qsfp56-dd-4-1" trust-l3=keep pfc=sparkctl-pfc3 egress-rate-queue3=200G
/interface ethernet switch
set [find] qos-hw-offloading=yes
# Advertise the PFC settings to the hosts (DCBX over LLDP).
/ip neighbor discovery-settings
set lldp-dcbx=yes
