"""A node that left the cluster: what podnet made for it goes back before its record does.

A deleted Node is not a deleted instance: the machine may be kept, or join again. So the
NodeNetwork (the node's pool record) carries the finalizer ``podnet.io/release`` from its
first write, and while the node is gone (no Node, or one being deleted) each pass of its
key, until nothing is left:

- reads the node's pool afresh once (inventory, records, last recorded pool), every
  address of the inventory no record owns counted as the pool's: nobody hands it out any
  more, so it is given back now rather than after the leaked-address expiry. An instance
  the cloud no longer has (its inventory answers ``not_found``) took its addresses with
  it: only the interfaces the record lists are left to delete. So is a node the provider
  refuses for good by a field of the Node (a reference node with no podCIDR that the
  cloud never read): a Node that left cannot be fixed, and waiting would keep the record
  for ever (a warning lists the addresses the record names);
- gives back the idle addresses (and invalid halves), a batch per ``podnet_pool_shrink``,
  once older than the minimum address lifetime. An address a PodNetwork still names is
  its record's: the pod network reconciler releases it (the node is gone, its pods no
  longer run there) and gives it back to this pool, which wakes this key; it is never
  given back twice, and one the cloud no longer has counts as given back;
- once no address is left, takes every interface the provider manages (never a primary,
  trunk or unpooled one) through the ENI machine: ``dispose`` (recorded as Disposing in
  one status write before the provider acts, so that a restart finishes off an interface
  the inventory no longer lists), ``podnet_interface_dispose`` until the cloud says it is
  gone (an ECS ENI is detached, then deleted), then ``gone``;
- nothing left: the finalizer comes off (and the record is deleted, if nobody did), the
  pool is dropped and the provider told (``podnet_node_removed``).

The record is the only word that something on the machine is podnet's: a node that left
with no record (its leave finished, or the record forced away by hand) has nothing given
back, whatever an in-memory pool or the cloud shows; the audit reports what is left.

A controller stopped half way converges: the finalizer stays, and the next leader's
garbage collector queues the node of every record whose node is gone. A cloud error,
throttling included, is a wait: the key comes back after a backoff of its own, with no
failed transition and no failed reconcile.

A record being deleted while a node of its name runs on the same machine (its
``spec.instanceId`` is the Node's ``providerID``: the old Node's garbage collection after
the machine registered again, or ``kubectl delete``) is not let go: no other record can
name the pool while it exists (a record's name is its node's), and letting it go first
would leave a moment when nothing names the addresses podnet made (a crash and the Node's
deletion in it leaked them). It goes on recording the pool, and goes when the node
leaves, as any record does. A record naming another machine than the one running under
its name (being deleted or not) first has the old machine's share given back, from a
pool of its own; then it goes, and the next pass writes one for the new machine, for
which nothing was made meanwhile.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from random import Random

import attrs

from podnet.core.caches import Caches
from podnet.core.clock import Clock
from podnet.core.cluster.port import NODE_NETWORK, Conflict, NotFound
from podnet.core.errors import ErrorKind
from podnet.core.gateway import ProviderGateway
from podnet.core.ledger import Ledger
from podnet.core.models import FINALIZER, InterfaceState, NodeInfo, NodeNetwork
from podnet.core.placement import Placement
from podnet.core.pool import SHRINKING, Address, NodePool, Pools, ShrinkPlan
from podnet.core.poolservice import PoolService
from podnet.core.reconcile.result import DONE, Result
from podnet.core.records import RecordWriter
from podnet.hookspecs.types import CloudInterface, Inventory, NodeContext

log = logging.getLogger("podnet.nodeleave")

#: the first wait after a cloud error, doubled each time in a row, up to the cap
_WAIT = 0.2
_WAIT_CAP = 60.0


class NodeLeave:
    """The passes of nodes that left; keyed as the node pool reconciler is (node name).
    Takes the parts it uses: the caches, the writer of the NodeNetworks, the provider
    gateway, which provider and policy serve what, the node pools, the ledger (who still
    holds an address of a node that left), the service that reads, records and moves the
    pools' interfaces, the clock, a seeded random source
    (jitter), and what to call once a node is gone for good (``removed``: its pools
    dropped and its providers told)."""

    def __init__(self, *, caches: Caches, records: RecordWriter, gateway: ProviderGateway,
                 placement: Placement, pools: Pools, ledger: Ledger, service: PoolService,
                 clock: Clock, random: Random, removed: Callable[[str, str | None], None]
                 ) -> None:
        self.caches = caches
        self.records = records
        self.gateway = gateway
        self.placement = placement
        self.pools = pools
        self.ledger = ledger
        self.service = service
        self.clock = clock
        self.random = random
        self._removed = removed
        #: nodes whose pool was read afresh since they began to leave
        self._read: set[str] = set()
        #: node -> cloud errors in a row (the wait doubles with each)
        self._errors: dict[str, int] = {}
        #: node -> the pool of the machine a record named when another took its name
        self._old: dict[str, NodePool] = {}
        #: nodes this process saw leave and gave back in full
        self.released = 0

    # --- entry points -----------------------------------------------------------------

    def reconcile(self, name: str, node: NodeInfo | None) -> Result:
        """One pass for node ``name``, gone (``node`` None) or being deleted."""
        nn = self.caches.node_networks.get(name)
        provider = nn.spec.provider if nn is not None else next(
            (p.provider for p in self.pools.all() if p.node == name), None)
        if (provider is None or provider not in self.placement.providers
                or not self.placement.providers[provider].uses_node_pool):
            if nn is not None and provider not in self.placement.providers:
                log.warning("node %s left the cluster; its provider %s is not configured "
                            "here: what it made for the node cannot be given back", name,
                            provider)
            return self._done(name, nn, provider)
        if nn is None:
            # no record names anything of the node's any more (its leave finished, or
            # someone forced it away): its pool is what the cloud shows, which may be
            # anyone's now. Given back on the pool's word, an address planted after the
            # leave would be taken from whoever planted it; the audit reports them
            held = sum(p.total() for p in self.pools.all() if p.node == name)
            if held:
                log.warning("node %s left the cluster and no NodeNetwork records its pool "
                            "on %s: the %d addresses this process saw in it are not given "
                            "back (`podnet audit` reports them)", name, provider, held)
            return self._done(name, None, provider)
        seen = node or self.service.last_seen.get(name) or _from_record(name, nn)
        return self._release(seen, nn, provider, self.pools.get(provider, name))

    def returned(self, name: str) -> None:
        """Node ``name`` runs again on its machine (registered again before its leave was
        done): what the leave read of its pool is stale from now on (the pool grows and
        shrinks again), so a later leave reads it afresh."""
        self._read.discard(name)
        self._errors.pop(name, None)

    def same_machine(self, node: NodeInfo, nn: NodeNetwork) -> bool:
        """Whether record ``nn`` names the machine ``node`` runs on (``spec.instanceId``
        is the Node's ``providerID``): both are written once and never lag, unlike the
        Node's uid, which a Node registered again changes."""
        return not nn.spec.instance_id or nn.spec.instance_id == node.provider_id

    def another_machine(self, node: NodeInfo, nn: NodeNetwork) -> Result:
        """Record ``nn`` names another machine than the one ``node`` runs on: the old
        one's share goes back first, from a pool of its own (the new machine's pods never
        get its addresses), all of it: nothing runs on the old machine any more, whatever
        a record still names. Then the record goes, and the next pass writes one for the
        new machine (nothing was made for it meanwhile: nothing is lost in between)."""
        providers = self.placement.providers
        if nn.spec.provider not in providers or not providers[nn.spec.provider].uses_node_pool:
            self._let_go(nn, delete=True)
            return Result(requeue_after=0.0)
        pool = self._old.setdefault(node.name, NodePool(node.name, nn.spec.provider))
        result = self._release(_from_record(node.name, nn), nn, nn.spec.provider, pool,
                               old_machine=True)
        return result if result.requeue_after is not None else Result(requeue_after=0.0)

    # --- the pass ---------------------------------------------------------------------

    def _release(self, node: NodeInfo, nn: NodeNetwork | None, provider: str, pool: NodePool,
                 *, old_machine: bool = False) -> Result:
        name = node.name
        if name not in self._read or not pool.synced:
            try:
                inventory = self.service.inventory(node, nn, provider)
            except Exception as exc:
                kind = self.gateway.classify(provider, exc)
                if kind is ErrorKind.FATAL and _of_the_node(exc):
                    # the provider can never read this node (it refuses a field of the
                    # Node, and a Node that left cannot be fixed): waiting would keep the
                    # record for ever; what its record lists is all that can go back
                    log.warning("node %s left the cluster and %s cannot read it (%s): "
                                "only what its record lists is given back; addresses it "
                                "recorded: %s", name, provider, exc, _recorded_ips(nn))
                elif kind is not ErrorKind.NOT_FOUND:
                    return self._wait(name, provider, "reading its inventory", exc)
                # the instance is gone, and its addresses with it
                inventory = _recorded_inventory(nn)
            if name not in self._read:
                log.info("node %s left the cluster: giving back what podnet made for it "
                         "on %s", name, provider)
            self.service.rebuild(node, nn, provider, pool, inventory, leaving=True)
            self._read.add(name)
        self.ledger.left_node(pool, everyone=old_machine)
        policy = self.placement.policy(provider)
        now = self.clock.monotonic()
        ctx = self.caches.context(node, nn)
        with pool.lock:
            owned = [a for a in pool.addresses.values()
                     if a.owner is not None and a.owner != SHRINKING]
            idle = [a for a in pool.addresses.values() if a.owner is None]
        young = [a.added_at + policy.min_ip_lifetime - now for a in idle
                 if now - a.added_at < policy.min_ip_lifetime]
        victims = [a for a in idle if now - a.added_at >= policy.min_ip_lifetime]
        if victims:
            return self._shrink(name, provider, pool, ctx, victims, policy.max_batch_size,
                                policy.refill_period)
        if owned or young:
            # their records give them back (and queue this key); the youngest wait for
            # the cloud to know them before a "not found" on delete may be believed
            waits = [*young, policy.refill_period if owned else policy.min_ip_lifetime]
            return Result(requeue_after=max(0.01, min(waits)))
        if self.placement.providers[provider].manages_interfaces:
            result = self._dispose(node, nn, provider, pool, ctx)
            if result is not None:
                return result
        if not old_machine:
            return self._done(name, nn, provider)
        # the old machine's share is back: its record goes, and the node's pool is read
        # again (from the new machine's inventory) before it serves
        if nn is not None:
            self._let_go(nn, delete=True)
        stale = self.pools.find(provider, name)
        if stale is not None:
            stale.invalidate()
        del self._old[name]
        self._read.discard(name)
        self._errors.pop(name, None)
        log.info("node %s: what podnet made for its old machine is given back", name)
        return DONE

    def _shrink(self, name: str, provider: str, pool: NodePool, ctx: NodeContext,
                victims: list[Address], batch: int, stalled: float) -> Result:
        """Give ``victims`` back, a batch a call; at once again while that goes on, after
        ``stalled`` seconds when a call gave nothing back (a hot loop otherwise: the same
        idle addresses chosen again on every pass)."""
        wait = self.gateway.admit(provider)
        if wait:
            return Result(requeue_after=wait)
        chosen = tuple(victims[:batch])
        plan = ShrinkPlan(victims=chosen, excess=len(victims))
        with pool.lock:
            # idle a moment ago; a record may have claimed one since (it cannot on a gone
            # node, but the pool's rule holds): only idle ones leave
            plan = ShrinkPlan(victims=tuple(a for a in chosen if a.owner is None),
                              excess=len(victims))
            entries = pool.shrinking(plan)
        if not entries:
            return Result(requeue_after=stalled)
        try:
            gone = self.gateway.pool_shrink(provider, ctx, entries)
        except Exception as exc:
            # the cloud may have done it (a lost answer): read what is left again
            pool.invalidate()
            return self._wait(name, provider, "giving its addresses back", exc)
        pool.shrunk(plan, gone or ())
        self._errors.pop(name, None)
        if not gone:
            log.warning("node %s left the cluster: %s gave none of %s back; trying again "
                        "in %g s", name, provider, ", ".join(e.address for e in entries),
                        stalled)
        return Result(requeue_after=0.0 if gone else stalled)

    def _dispose(self, node: NodeInfo, nn: NodeNetwork | None, provider: str, pool: NodePool,
                 ctx: NodeContext) -> Result | None:
        """Every interface podnet may delete, deleted; None once none is left."""
        left = [itf for itf in pool.interfaces.values()
                if not (itf.primary or itf.trunk or not itf.pooled)]
        if not left:
            return None
        moved = False
        for itf in left:
            if itf.state in (InterfaceState.READY, InterfaceState.INHIBITED):
                self.service.eni(node, provider, itf, "dispose")
                moved = True
            elif itf.state is InterfaceState.INITIALIZING:
                self.service.eni(node, provider, itf, "fail")
                moved = True
        if nn is not None and moved:
            # one write before the provider acts: a restart between an ENI's detach and
            # its delete still knows to finish it off (one the record still lists once
            # it is gone is found gone again: no write for each)
            self.service.write(nn, pool)
        for itf in left:
            wait = self.gateway.admit(provider)
            if wait:
                return Result(requeue_after=wait)
            try:
                done = self.gateway.interface_dispose(provider, ctx, CloudInterface(
                    id=itf.id, mac=itf.mac, subnet=itf.subnet, primary=itf.primary,
                    trunk=itf.trunk, pooled=itf.pooled))
            except Exception as exc:
                return self._wait(node.name, provider, f"deleting {itf.id}", exc)
            if not done:
                # detaching: asked again in a moment (the cloud does it asynchronously)
                return Result(requeue_after=_WAIT * (1 + self.random.random()))
            self.service.eni(node, provider, itf, "gone")
            pool.interface_gone(itf.id)
        self._errors.pop(node.name, None)
        return Result(requeue_after=0.0)

    # --- the end ----------------------------------------------------------------------

    def _done(self, name: str, nn: NodeNetwork | None, provider: str | None) -> Result:
        """Nothing of podnet's is left for the node: its record and pool go."""
        if nn is not None:
            self._let_go(nn, delete=True)
        self._removed(name, provider)
        if name in self._read:
            self.released += 1
            log.info("node %s: everything podnet made for it is given back", name)
        self._read.discard(name)
        self._errors.pop(name, None)
        return DONE

    def _let_go(self, nn: NodeNetwork, *, delete: bool = False) -> None:
        """The finalizer off; with ``delete``, the record deleted if nobody did.
        Each step may be redone after a crash; a conflict is retried from a fresh read."""
        records = self.records
        current = self.caches.node_networks.get(nn.metadata.name) or nn
        if FINALIZER in current.metadata.finalizers:
            meta = attrs.evolve(current.metadata, finalizers=tuple(
                f for f in current.metadata.finalizers if f != FINALIZER))
            try:
                current = records.update(NODE_NETWORK, attrs.evolve(current, metadata=meta))
            except NotFound:
                return
        if delete and current.metadata.deletion_timestamp is None:
            try:
                records.delete(NODE_NETWORK, current)
            except (NotFound, Conflict):
                pass  # gone already, or a newer record: the next pass looks again

    def _wait(self, name: str, provider: str, what: str, exc: BaseException) -> Result:
        """A cloud error while node ``name`` leaves: waited out, with a backoff."""
        errors = self._errors.get(name, 0) + 1
        self._errors[name] = errors
        kind = self.gateway.classify(provider, exc)
        delay = min(_WAIT_CAP, _WAIT * 2 ** (errors - 1)) * (1 + self.random.random())
        log.info("node %s left the cluster; %s failed (%s), tried again in %.1fs: %s", name,
                 what, kind.value, delay, exc)
        return Result(requeue_after=delay)


def _from_record(name: str, nn: NodeNetwork | None) -> NodeInfo:
    """The node as its record knows it (after a restart, the Node long gone): its name,
    the Node's uid and its ``providerID``."""
    if nn is None:
        return NodeInfo(name=name, uid="")
    uid = next((o.uid for o in nn.metadata.owner_references if o.kind == "Node"), "")
    return NodeInfo(name=name, uid=uid, provider_id=nn.spec.instance_id)


def _of_the_node(exc: BaseException) -> bool:
    """Whether a provider's error names a field of the Node (``spec.podCIDR``, a label):
    not the provider's configuration, which the operator can still fix."""
    field = getattr(exc, "field", None)
    return isinstance(field, str) and field.startswith(("spec.", "metadata."))


def _recorded_ips(nn: NodeNetwork | None) -> str:
    ips = [ip.address for itf in (nn.status.interfaces if nn is not None else ())
           for ip in itf.ips]
    return ", ".join(ips) or "none"


def _recorded_inventory(nn: NodeNetwork | None) -> Inventory:
    """An instance the cloud no longer has: no address is left on it; the interfaces its
    record lists (an ENI detached with the instance's end) may still be."""
    interfaces = tuple(
        CloudInterface(id=itf.id, mac=itf.mac, subnet=itf.subnet, primary=itf.primary,
                       trunk=itf.trunk, pooled=itf.pooled)
        for itf in (nn.status.interfaces if nn is not None else ()))
    return Inventory(interfaces=interfaces, max_interfaces=max(1, len(interfaces)))


__all__ = ["NodeLeave"]
