"""The checked networks: every Subnet, IPPool and SecurityGroup with its verdict (Ready,
or the problem that keeps it from serving), and per provider what is usable now
(:class:`~podnet.hookspecs.networks.Networks`).

An :class:`Evaluation` is a pure function of the objects, what each provider answered
``podnet_subnet_parameters`` and which providers exist (:func:`evaluate`); the
:class:`Catalog` keeps the last one and makes a new one when something it depends on
changed.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping

import attrs

from podnet.core.networks.checks import (
    Declared,
    Problem,
    overlaps,
    pool_problem,
    pools_overlap,
)
from podnet.hookspecs.networks import (
    NETWORK_FINALIZER,
    IPPoolInfo,
    Networks,
    SecurityGroupInfo,
    SubnetInfo,
    SubnetRealization,
)


@attrs.frozen
class Parameters:
    """A provider's answer to ``podnet_subnet_parameters`` for one generation of a
    Subnet: what it realized, or the problem it found."""

    uid: str
    generation: int
    realization: SubnetRealization | None = None
    problem: Problem | None = None
    #: the provider could not answer now (transient) for a Subnet it accepted before:
    #: it stays as it was (``realization`` is that earlier answer) while core retries
    as_before: bool = False
    #: when (monotonic) it was asked: asked again PARAMETERS_RESYNC later
    asked_at: float = 0.0


@attrs.frozen
class Verdict:
    ready: bool
    reason: str
    message: str = ""

    @classmethod
    def of(cls, problem: Problem) -> Verdict:
        return cls(False, problem.reason, problem.message)


VALID = Verdict(True, "Valid", "")
_UNFINALIZED = Verdict(False, "Pending", f"waiting for the {NETWORK_FINALIZER} finalizer")


@attrs.frozen
class Evaluation:
    """Every object with its verdict, and what each provider may use."""

    subnets: Mapping[str, tuple[Declared, Verdict]] = attrs.field(factory=dict)
    pools: Mapping[str, tuple[Declared, Verdict]] = attrs.field(factory=dict)
    groups: Mapping[str, tuple[Declared, Verdict]] = attrs.field(factory=dict)
    #: provider -> its Ready Subnets (realized) and the Ready pools in them, and every
    #: Ready SecurityGroup (revision 0: the catalog numbers what it publishes)
    usable: Mapping[str, Networks] = attrs.field(factory=dict)
    #: providers that have any Subnet object (Ready or not)
    with_subnets: frozenset[str] = frozenset()

    def subnet(self, name: str) -> SubnetInfo | None:
        """The Ready Subnet ``name`` as providers see it, or None."""
        entry = self.subnets.get(name)
        if entry is None or not entry[1].ready:
            return None
        for nets in self.usable.values():
            found = nets.subnet(name)
            if found is not None:
                return found
        return None

    def networks(self, provider: str) -> Networks:
        return self.usable.get(provider) or Networks(
            security_groups=self._groups())

    def _groups(self) -> tuple[SecurityGroupInfo, ...]:
        return tuple(d.info for d, v in sorted(self.groups.values(), key=lambda e: e[0].name)
                     if v.ready and isinstance(d.info, SecurityGroupInfo))


def evaluate(subnets: Iterable[Declared], pools: Iterable[Declared], groups: Iterable[Declared],
             parameters: Mapping[str, Parameters], providers: Iterable[str],
             finalized: Collection[str] = frozenset()) -> Evaluation:
    """Each object's verdict and each provider's usable set. A Subnet or IPPool serves
    only once it carries the finalizer (``metadata.finalizers``, or its uid in
    ``finalized``: put on, its watch event not seen yet): an address handed out before
    would not hold it back from deletion."""
    known = set(providers)
    subnets, pools, groups = list(subnets), list(pools), list(groups)
    overlapping = overlaps(subnets)
    subnet_verdicts: dict[str, tuple[Declared, Verdict]] = {}
    realized: dict[str, SubnetInfo] = {}
    for d in subnets:
        info = d.info
        if d.problem is not None or not isinstance(info, SubnetInfo):
            verdict = Verdict.of(d.problem or Problem("InvalidSpec", "unreadable"))
        elif d.deleting:
            verdict = Verdict(False, "Terminating", f"Subnet {d.name} is being deleted")
        elif NETWORK_FINALIZER not in d.finalizers and d.uid not in finalized:
            verdict = _UNFINALIZED
        elif info.provider not in known:
            verdict = Verdict(False, "UnknownProvider",
                              f"spec.provider: no provider {info.provider!r} is registered "
                              f"(registered: {', '.join(sorted(known)) or 'none'})")
        elif d.name in overlapping:
            verdict = Verdict.of(overlapping[d.name])
        else:
            answer = parameters.get(d.name)
            if answer is None or (answer.uid, answer.generation) != (d.uid, d.generation):
                verdict = Verdict(False, "Pending", "the provider has not checked its "
                                  "parameters yet")
            elif answer.problem is not None and not answer.as_before:
                verdict = Verdict.of(answer.problem)
            else:
                verdict = VALID
                details = answer.realization.details if answer.realization else {}
                realized[d.name] = attrs.evolve(info, realized=dict(details))
        subnet_verdicts[d.name] = (d, verdict)
    pool_verdicts: dict[str, tuple[Declared, Verdict]] = {}
    ready_pools: list[IPPoolInfo] = []
    earlier: list[IPPoolInfo] = []
    for d in sorted(pools, key=lambda d: d.order):
        pool = d.info
        if d.problem is not None or not isinstance(pool, IPPoolInfo):
            verdict = Verdict.of(d.problem or Problem("InvalidSpec", "unreadable"))
        else:
            verdict = _pool_verdict(d, pool, subnet_verdicts, earlier, finalized)
            earlier.append(pool)
        if verdict.ready:
            assert isinstance(pool, IPPoolInfo)
            ready_pools.append(pool)
        pool_verdicts[d.name] = (d, verdict)
    group_verdicts: dict[str, tuple[Declared, Verdict]] = {}
    names = {d.name for d in groups if isinstance(d.info, SecurityGroupInfo)}
    for d in groups:
        group = d.info
        if d.problem is not None or not isinstance(group, SecurityGroupInfo):
            verdict = Verdict.of(d.problem or Problem("InvalidSpec", "unreadable"))
        else:
            verdict = VALID
            for side, rules in (("ingress", group.ingress), ("egress", group.egress)):
                for i, rule in enumerate(rules):
                    missing = [g for g in rule.groups if g not in names]
                    if missing and verdict.ready:
                        verdict = Verdict(False, "UnknownGroup",
                                          f"spec.{side}[{i}].groups: no SecurityGroup "
                                          f"{', '.join(missing)}")
        group_verdicts[d.name] = (d, verdict)
    ready_groups = tuple(d.info for d, v in sorted(group_verdicts.values(),
                                                   key=lambda e: e[0].name)
                         if v.ready and isinstance(d.info, SecurityGroupInfo))
    usable: dict[str, Networks] = {}
    for provider in sorted(known):
        mine = tuple(s for _, s in sorted(
            ((subnet_verdicts[n][0].order, s) for n, s in realized.items()
             if s.provider == provider), key=lambda e: e[0]))
        names_of = {s.name for s in mine}
        usable[provider] = Networks(
            subnets=mine, pools=tuple(p for p in ready_pools if p.subnet in names_of),
            security_groups=ready_groups)
    with_subnets = frozenset(d.info.provider for d in subnets
                             if isinstance(d.info, SubnetInfo))
    return Evaluation(subnets=subnet_verdicts, pools=pool_verdicts, groups=group_verdicts,
                      usable=usable, with_subnets=with_subnets)


def _pool_verdict(d: Declared, pool: IPPoolInfo,
                  subnets: Mapping[str, tuple[Declared, Verdict]],
                  earlier: list[IPPoolInfo], finalized: Collection[str]) -> Verdict:
    if d.deleting:
        return Verdict(False, "Terminating", f"IPPool {d.name} is being deleted")
    if NETWORK_FINALIZER not in d.finalizers and d.uid not in finalized:
        return _UNFINALIZED
    entry = subnets.get(pool.subnet)
    if entry is None:
        return Verdict(False, "SubnetNotFound", f"spec.subnet: no Subnet {pool.subnet}")
    subnet_d, subnet_verdict = entry
    if not isinstance(subnet_d.info, SubnetInfo):
        return Verdict(False, "SubnetNotReady", f"spec.subnet: Subnet {pool.subnet} is not "
                       f"Ready: {subnet_verdict.message}")
    outside = pool_problem(pool, subnet_d.info)
    if outside is not None:
        return Verdict.of(outside)
    for other in earlier:
        if other.subnet == pool.subnet and pools_overlap(pool, other):
            return Verdict(False, "Overlaps", f"spec.addresses: addresses overlap IPPool "
                           f"{other.name} of Subnet {pool.subnet}")
    if not subnet_verdict.ready:
        return Verdict(False, "SubnetNotReady", f"spec.subnet: Subnet {pool.subnet} is not "
                       f"Ready ({subnet_verdict.reason}: {subnet_verdict.message})")
    return VALID


class Catalog:
    """The last evaluation, made again when an object or a provider's answer changed.

    ``read``: the cached objects of each kind (the informers' values); ``providers``: the
    registered provider names."""

    def __init__(self, read: Callable[[], tuple[Iterable[Declared], Iterable[Declared],
                                                 Iterable[Declared]]],
                 providers: Callable[[], Iterable[str]]) -> None:
        self._read = read
        self._providers = providers
        self.parameters: dict[str, Parameters] = {}
        #: uids the finalizer was put on (their watch event may not be in yet)
        self.finalized: set[str] = set()
        self._lock = threading.Lock()
        self._revision = 0
        self._evaluated: tuple[int, Evaluation] | None = None

    def changed(self) -> None:
        with self._lock:
            self._revision += 1

    def mark_finalized(self, uid: str) -> None:
        with self._lock:
            self.finalized.add(uid)
            self._revision += 1

    def set_parameters(self, name: str, answer: Parameters | None) -> None:
        with self._lock:
            if answer is None:
                self.parameters.pop(name, None)
            else:
                self.parameters[name] = answer
            self._revision += 1

    def evaluation(self) -> Evaluation:
        done = self._evaluated  # the common case, read without the lock: nothing changed
        if done is not None and done[0] == self._revision:
            return done[1]
        with self._lock:
            done = self._evaluated
            if done is not None and done[0] == self._revision:
                return done[1]
            revision = self._revision
            params = dict(self.parameters)
            finalized = frozenset(self.finalized)
        subnets, pools, groups = self._read()
        result = evaluate(subnets, pools, groups, params, self._providers(), finalized)
        with self._lock:
            if self._evaluated is None or self._evaluated[0] <= revision:
                self._evaluated = (revision, result)
        return result
