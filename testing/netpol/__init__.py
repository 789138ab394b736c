"""NetworkPolicy proven by packets, as the upstream e2e suite does it: a truth table.

- :mod:`~podnet.testing.netpol.oracle`: the verdict the API's semantics give a connection
  (written from the API's documentation, never by calling core's resolver, so the two
  check each other);
- :mod:`~podnet.testing.netpol.matrix`: the matrix of verdicts and its printer (expected,
  observed, the differences marked);
- :mod:`~podnet.testing.netpol.prober`: servers in every pod's namespace and probes from
  every pod's namespace, with real packets;
- :mod:`~podnet.testing.netpol.cases`: the named policy cases over the three namespaces x,
  y, z with pods a, b, c each;
- :mod:`~podnet.testing.netpol.beds`: where a case is applied (the node bed's agents with
  nftables, the OVN bed) and probed.
"""
