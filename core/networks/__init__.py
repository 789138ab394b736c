"""The networks an operator declares as objects (Subnet, IPPool, SecurityGroup): their
wire form (:mod:`.wire`), the checks one object or a set of them must pass
(:mod:`.checks`), what is usable per provider (:mod:`.catalog`), which Subnet and pool a
pod network takes (:mod:`.select`), how full each is (:mod:`.usage`) and the reconciler
that keeps their finalizers and status (:mod:`.reconciler`).

This package's ``__init__`` imports nothing: the converter reads :mod:`.wire` while the
rest of the package reads the converter.
"""
