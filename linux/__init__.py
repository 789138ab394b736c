"""Linux host networking for dataplanes (``podnet.linux``): network namespaces, veth
pairs and a pod's interface configured as its record says, through netlink (pyroute2).

For providers' ``podnet_plug`` hooks (the reference bridge network, OVN's integration
bridge, the cloud ENI dataplanes) and for the demo and the test kit. It imports nothing of
podnet but the provider contract (``podnet.hookspecs``): providers may use it.
"""
