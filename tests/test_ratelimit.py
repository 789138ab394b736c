from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable

import pytest

from podnet.core.clock import FakeClock
from podnet.core.cluster.port import NAMESPACE, NODE, POD, POD_NETWORK
from podnet.core.engine import Engine, EngineOptions
from podnet.core.errors import ErrorKind
from podnet.core.models import NodeInfo
from podnet.core.plugin import new_plugin_manager
from podnet.core.policy import QUEUE_ITEM_BACKOFF, QUEUE_RATE, Backoff, RateLimit
from podnet.core.ratelimit import (
    CloudLimiter,
    CloudWait,
    ItemBackoff,
    MaxOfRateLimiter,
    TokenBucket,
    defer_cloud_waits,
    deferrable,
    deferring_cloud_waits,
)
from podnet.hookspecs.types import NodeContext
from podnet.plugins.bbc.demo import provider_for, register_nodes, start_simulator
from podnet.plugins.bbc.provider import DEFAULT_TYPE_LABEL, classify
from podnet.plugins.bbc.sim import BbcSimulator
from podnet.plugins.ecs.demo import INSTANCE_TYPE, EcsWorld, instance_id_for, node_name
from podnet.sim.memory import InMemoryCluster


def test_bucket_burst_is_free_then_debt_is_spaced_one_over_rate() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, burst=3, clock=clock)
    assert [bucket.reserve() for _ in range(3)] == [0.0, 0.0, 0.0]
    waits = [bucket.reserve() for _ in range(4)]
    assert waits == pytest.approx([0.1, 0.2, 0.3, 0.4])
    assert bucket.waits == 4
    assert bucket.waited_seconds == pytest.approx(1.0)


def test_bucket_reserve_many_tokens_at_once() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=2.0, burst=2, clock=clock)
    assert bucket.reserve(2) == 0.0
    assert bucket.reserve(3) == pytest.approx(1.5)


def test_try_acquire_never_waits_and_refills_over_fake_time() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, burst=2, clock=clock)
    assert bucket.try_acquire()
    assert bucket.try_acquire()
    assert not bucket.try_acquire()
    clock.advance(0.05)
    assert not bucket.try_acquire()
    clock.advance(0.05)
    assert bucket.try_acquire()
    assert not bucket.try_acquire()
    # Refill never exceeds the burst.
    clock.advance(100.0)
    assert bucket.available() == pytest.approx(2.0)
    assert bucket.waits == 0


def test_try_acquire_fails_while_in_debt() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, burst=1, clock=clock)
    bucket.reserve()
    assert bucket.reserve() == pytest.approx(0.1)
    clock.advance(0.1)
    # The debt is repaid, but no token has been saved yet.
    assert not bucket.try_acquire()
    clock.advance(0.1)
    assert bucket.try_acquire()


def test_acquire_advances_fake_clock_by_the_wait() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=4.0, burst=1, clock=clock)
    start = clock.monotonic()
    assert bucket.acquire() == 0.0
    assert clock.monotonic() == start
    assert bucket.acquire() == pytest.approx(0.25)
    assert clock.monotonic() == pytest.approx(start + 0.25)
    assert bucket.acquire() == pytest.approx(0.25)
    assert clock.monotonic() == pytest.approx(start + 0.5)
    assert bucket.waits == 2
    assert bucket.waited_seconds == pytest.approx(0.5)


def test_bucket_from_policy_and_validation() -> None:
    clock = FakeClock()
    bucket = TokenBucket.from_policy(RateLimit(rate=5.0, burst=7), clock)
    assert (bucket.rate, bucket.burst) == (5.0, 7)
    assert bucket.available() == 7.0
    with pytest.raises(ValueError):
        TokenBucket(rate=0.0, burst=1, clock=clock)
    with pytest.raises(ValueError):
        TokenBucket(rate=1.0, burst=0, clock=clock)
    with pytest.raises(ValueError):
        bucket.reserve(0)


def test_bucket_is_thread_safe() -> None:
    clock = FakeClock()
    bucket = TokenBucket(rate=10.0, burst=50, clock=clock)
    results: list[float] = []
    lock = threading.Lock()

    def worker() -> None:
        for _ in range(25):
            wait = bucket.reserve()
            with lock:
                results.append(wait)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    # 200 reservations on a frozen clock: 50 free, then 150 distinct slots 0.1 s apart.
    assert sorted(results) == pytest.approx([0.0] * 50 + [0.1 * i for i in range(1, 151)])


def test_item_backoff_grows_and_caps() -> None:
    backoff = ItemBackoff(QUEUE_ITEM_BACKOFF)
    delays = [backoff.when("a") for _ in range(5)]
    assert delays == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert backoff.failures("a") == 5
    for _ in range(40):
        last = backoff.when("a")
    assert last == 1000.0
    # Keys are independent.
    assert backoff.when("b") == pytest.approx(0.005)


def test_item_backoff_forget_resets() -> None:
    backoff = ItemBackoff(Backoff(base=1.0, factor=3.0, cap=100.0))
    assert [backoff.when("k") for _ in range(3)] == [1.0, 3.0, 9.0]
    backoff.forget("k")
    assert backoff.failures("k") == 0
    assert backoff.when("k") == 1.0
    backoff.forget("never-seen")


def test_max_of_takes_the_slower_limit() -> None:
    clock = FakeClock()
    limiter = MaxOfRateLimiter(
        ItemBackoff(Backoff(base=0.01, factor=2.0, cap=10.0)),
        TokenBucket(rate=1.0, burst=2, clock=clock),
    )
    # Burst free: per-item backoff decides.
    assert limiter.when("a") == pytest.approx(0.01)
    assert limiter.when("b") == pytest.approx(0.01)
    # Bucket empty: its debt (1 s, then 2 s) dominates the tiny per-item delay.
    assert limiter.when("c") == pytest.approx(1.0)
    assert limiter.when("a") == pytest.approx(2.0)
    assert limiter.failures("a") == 2
    limiter.forget("a")
    assert limiter.failures("a") == 0
    # Time repays the debt; a key with a long backoff is then limited by its own delay.
    clock.advance(100.0)
    for _ in range(9):
        limiter.item.when("d")
    assert limiter.when("d") == pytest.approx(5.12)


def test_default_limiter_matches_controller_runtime() -> None:
    clock = FakeClock()
    limiter = MaxOfRateLimiter.default(clock)
    assert limiter.item.backoff == QUEUE_ITEM_BACKOFF
    assert (limiter.bucket.rate, limiter.bucket.burst) == (QUEUE_RATE.rate, QUEUE_RATE.burst)
    assert limiter.when("x") == pytest.approx(0.005)


# --- every cloud call through a bucket per (provider, API): issue 13, 11e --------------


def _burst(calls: int, threads: int, one: Callable[[int], object]) -> list[BaseException]:
    """``calls`` calls of ``one`` from ``threads`` threads at once; the errors raised."""
    errors: list[BaseException] = []
    lock = threading.Lock()
    todo = iter(range(calls))

    def work() -> None:
        while True:
            with lock:
                i = next(todo, None)
            if i is None:
                return
            try:
                one(i)
            except Exception as exc:
                with lock:
                    errors.append(exc)

    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return errors


def _engine(plugin: object, provider: str, rate: RateLimit,
            overrides: tuple[tuple[str, RateLimit], ...] = ()) -> Engine:
    pm = new_plugin_manager()
    pm.register(plugin, name=provider)
    policy = {"cloud_rate": rate, "cloud_rates": overrides}
    return Engine(InMemoryCluster(), pm, options=EngineOptions(
        default_provider=provider, policies={provider: policy}))


def test_bbc_reads_take_their_apis_bucket_so_the_cloud_never_throttles_them() -> None:
    """A burst of inventory reads (``vpcPort``: the read verify and inventory make) and
    subnet reads against a BBC simulator that allows 5 calls/s per API: podnet's own
    per-API bucket, set to that limit (a smaller burst), keeps every one of them under
    it — zero throttled answers. Before, only grow/shrink/dispose went through a bucket
    and these reads were answered RateLimit."""
    sim = start_simulator(rate=5.0)  # the engine hands podnet_cloud_limiter its buckets
    try:
        names = [f"node-{i:04d}" for i in range(3)]
        register_nodes(sim, names)
        plugin = provider_for(sim, subnets=["sbn-demo-a"])
        engine = _engine(plugin, "bbc", RateLimit(rate=5.0, burst=2))
        assert "bbc" in engine.gateway.self_limited
        nodes = [NodeContext(node=NodeInfo(name=n, uid=n, provider_id=f"bbc://{n}"))
                 for n in names]
        errors = _burst(12, 4, lambda i: plugin.podnet_node_inventory(
            provider="bbc", node=nodes[i % len(nodes)]))
        errors += _burst(8, 4, lambda i: plugin._subnet("sbn-demo-a", fresh=True))
        assert errors == []
        assert sim.calls["vpcPort"] == 12 and sim.calls["getSubnet"] == 8
        assert sim.throttled == Counter(), sim.throttled
        buckets = engine.gateway.cloud_limiters["bbc"].buckets()
        assert buckets["vpcPort"].waits > 0 and buckets["getSubnet"].waits > 0
    finally:
        sim.stop()


def test_a_throttled_answer_is_still_classified_throttled() -> None:
    """A cloud limit lower than podnet's bucket still answers RateLimit: the provider
    classifies it ``throttled`` (core backs off on it), and a per-API override applies
    to its API only."""
    sim = start_simulator(rate=1.0)
    try:
        register_nodes(sim, ["node-0000"])
        plugin = provider_for(sim)
        engine = _engine(plugin, "bbc", RateLimit(rate=1.0, burst=1),
                         overrides=(("vpcPort", RateLimit(rate=100.0, burst=10)),))
        limiter = engine.gateway.cloud_limiters["bbc"]
        assert limiter.bucket("vpcPort").rate == 100.0 and limiter.bucket("getSubnet").rate == 1
        node = NodeContext(node=NodeInfo(name="node-0000", uid="u", provider_id="bbc://node-0000"))
        errors = _burst(4, 1, lambda i: plugin.podnet_node_inventory(provider="bbc", node=node))
        assert errors and sim.throttled["vpcPort"] == len(errors)
        assert {classify(e) for e in errors} == {ErrorKind.THROTTLED}
    finally:
        sim.stop()


def test_ecs_reads_and_attach_polls_take_their_actions_bucket() -> None:
    """The same for ECS: a burst of inventories (DescribeInstanceTypes once, then
    DescribeNetworkInterfaces per call) against a simulator allowing 5 calls/s per action
    is never throttled once the provider takes core's per-action buckets."""
    world = EcsWorld(nodes=2, rate=5.0)
    names = [node_name(i) for i in range(2)]
    try:
        engine = _engine(world.plugin, "ecs", RateLimit(rate=5.0, burst=2))
        assert "ecs" in engine.gateway.self_limited
        nodes = [NodeContext(node=NodeInfo(
            name=n, uid=n, labels={"node.kubernetes.io/instance-type": INSTANCE_TYPE},
            provider_id=f"cn-hangzhou.{instance_id_for(n)}")) for n in names]
        errors = _burst(12, 4, lambda i: world.plugin.podnet_node_inventory(
            provider="ecs", node=nodes[i % len(nodes)]))
        assert errors == []
        assert world.sim.calls["DescribeNetworkInterfaces"] == 12
        assert world.sim.throttled == Counter(), world.sim.throttled
    finally:
        world.close()


@pytest.mark.parametrize("backoff", [QUEUE_ITEM_BACKOFF, Backoff(base=2.0, factor=2.0, cap=60.0),
                                     Backoff(base=1e-300, factor=1e10, cap=1e300)])
@pytest.mark.parametrize("failures", [1024, 1025, 5000, 10**9])
def test_backoff_saturates_at_its_cap_for_any_failure_count(backoff: Backoff,
                                                            failures: int) -> None:
    # a key failing for hours passes 1,024 failures; 2.0 ** 1024 overflows a float
    assert backoff.delay(failures) == backoff.cap


def test_backoff_below_the_cap_is_unchanged_and_never_decreases() -> None:
    backoff = Backoff(base=0.005, factor=2.0, cap=1000.0)
    delays = [backoff.delay(n) for n in range(1, 2000)]
    assert delays[:3] == [0.005, 0.01, 0.02]
    assert delays == sorted(delays) and delays[-1] == 1000.0


def test_a_key_failing_thousands_of_times_keeps_getting_a_capped_delay() -> None:
    limiter = MaxOfRateLimiter.default(FakeClock())
    delays = [limiter.when("k") for _ in range(3000)]
    assert limiter.failures("k") == 3000
    assert max(delays[-1000:]) >= QUEUE_ITEM_BACKOFF.cap
    # the shared bucket's debt grows linearly with the retries: no overflow there either
    assert delays[-1] == pytest.approx(max(QUEUE_ITEM_BACKOFF.cap, (3000 - QUEUE_RATE.burst)
                                           / QUEUE_RATE.rate))


# --- a token's wait is a requeue on a worker, not a sleep (issue 32, P2) ---------------


def _on_a_deferring_thread(body: Callable[[], object]) -> None:
    """``body`` on a thread of its own that defers cloud waits, as an engine worker
    does (the setting is the thread's: the test's own thread keeps sleeping)."""
    failures: list[BaseException] = []

    def run() -> None:
        defer_cloud_waits()
        try:
            body()
        except BaseException as exc:  # carried to the test's thread
            failures.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failures:
        raise failures[0]


def test_a_deferred_call_keeps_its_slot_and_nothing_sleeps() -> None:
    """On a deferring thread, the first call of a ``deferrable`` scope whose token is not
    there raises CloudWait with the wait, and the fake clock does not move (nobody
    slept). The owner coming back at the slot takes it without a second token; another
    owner queues behind it; a later call of a scope that already called waits as before
    (nothing half-done); off a deferring thread, the same scope sleeps as before."""
    clock = FakeClock()
    limiter = CloudLimiter(RateLimit(rate=1.0, burst=1), clock)
    start = clock.monotonic()

    def body() -> None:
        with deferrable("a"):
            assert limiter.acquire("read") == 0.0  # the burst's token
        with deferrable("b"), pytest.raises(CloudWait) as waited:
            limiter.acquire("read")
        assert waited.value.retry_after == pytest.approx(1.0)
        assert waited.value.kind is ErrorKind.THROTTLED
        assert clock.monotonic() == start
        with deferrable("c"), pytest.raises(CloudWait) as behind:
            limiter.acquire("read")
        assert behind.value.retry_after == pytest.approx(2.0)  # after b's slot
        clock.advance(1.0)
        with deferrable("b"):
            assert limiter.acquire("read") == 0.0  # its slot: no new token taken
        assert limiter.bucket("read").available() == pytest.approx(-1.0)  # c's only
        with deferrable("d"):
            assert limiter.acquire("write") == 0.0
            assert limiter.acquire("write") == pytest.approx(1.0)  # slept: not the first
        assert clock.monotonic() == pytest.approx(start + 2.0)

    _on_a_deferring_thread(body)
    with deferrable("e"):  # this thread does not defer: it sleeps for its token
        assert limiter.acquire("other") == 0.0
        before = clock.monotonic()
        with deferrable("f"):
            assert limiter.acquire("other") == pytest.approx(1.0)
        assert clock.monotonic() == pytest.approx(before + 1.0)


def test_deferring_for_a_block_counts_the_calls_put_off_and_ends_with_the_block() -> None:
    """``deferring_cloud_waits`` (a thread that drives an engine by hand): inside the
    block a scope's first call whose token is not there is put off and counted; after
    the block the same thread sleeps for its token again (and, holding its thread,
    trades for the put-off call's sooner slot: counted too)."""
    clock = FakeClock()
    limiter = CloudLimiter(RateLimit(rate=1.0, burst=1), clock)
    assert limiter.acquire("read") == 0.0
    with deferring_cloud_waits(), deferrable("a"), pytest.raises(CloudWait):
        limiter.acquire("read")
    assert limiter.deferred == 1
    before = clock.monotonic()
    with deferrable("b"):
        # slept, holding its thread: it takes a's sooner slot, a the later one
        assert limiter.acquire("read") == pytest.approx(1.0)
    assert clock.monotonic() == pytest.approx(before + 1.0)
    assert (limiter.deferred, limiter.traded) == (1, 1)


def _bbc_node(name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "labels": {DEFAULT_TYPE_LABEL: "BBC"}},
            "spec": {"providerID": f"cce://{name}"}}


def _one_read_token(sim: BbcSimulator, clock: FakeClock, names: list[str]
                    ) -> tuple[InMemoryCluster, Engine]:
    """An engine on BBC nodes ``names`` whose pool reads share a bucket of one token
    (vpcPort, 1/s) while every other call has plenty; the nodes made, no pod yet."""
    register_nodes(sim, names)
    pm = new_plugin_manager()
    pm.register(provider_for(sim, subnets=["sbn-demo-a"]), name="bbc")
    cluster = InMemoryCluster(clock=clock)
    policy = {"cloud_rate": RateLimit(rate=1000.0, burst=1000),
              "cloud_rates": (("vpcPort", RateLimit(rate=1.0, burst=1)),)}
    engine = Engine(cluster, pm, clock=clock, options=EngineOptions(
        default_provider="bbc", policies={"bbc": policy}))
    cluster.create(NAMESPACE, {"metadata": {"name": "default"}})
    for name in names:
        cluster.create(NODE, _bbc_node(name))
    return cluster, engine


def test_a_node_waiting_for_its_read_does_not_hold_back_another_nodes_grow() -> None:
    """Two BBC nodes whose pool reads share a bucket of one token (vpcPort, 1/s) while
    grows have plenty: the second node's read waits for its slot as a requeue, and in
    the same pass the first node grows and its pod is routed, the fake clock unmoved
    (before, the worker slept a second on the read, every other key behind it). At the
    slot the second node is read once (the slot reserved for it) and its pod routed."""
    sim = start_simulator()
    clock = FakeClock()
    try:
        names = ["node-0000", "node-0001"]
        cluster, engine = _one_read_token(sim, clock, names)
        for name in names:
            cluster.create(POD, {
                "metadata": {"name": f"pod-on-{name}", "namespace": "default"},
                "spec": {"nodeName": name, "containers": [{"name": "c", "image": "i"}]},
                "status": {"phase": "Running"}})
        start = clock.monotonic()

        def phases() -> dict[str, str | None]:
            return {pn["spec"]["nodeName"]: pn.get("status", {}).get("phase")
                    for pn in cluster.list(POD_NETWORK, "default").items}

        def body() -> None:
            engine.start()
            engine.run_until_idle()
            assert clock.monotonic() == start  # no worker slept on a token
            routed = [n for n, phase in phases().items() if phase == "Routed"]
            assert len(routed) == 1, phases()
            assert sim.calls["vpcPort"] == 1
            engine.run_until_idle(advance=10.0)
            assert set(phases().values()) == {"Routed"}, phases()
            assert sim.calls["vpcPort"] == 2  # each node read once

        _on_a_deferring_thread(body)
    finally:
        sim.stop()


def test_a_node_back_for_its_read_slot_goes_before_the_pods_ready_then() -> None:
    """The second node's read, put off to its slot, comes back before the pods that
    became ready meanwhile (a burst's 1,000 pod keys held the slots of 40 reads back by
    seconds, the bucket idle): at the slot, the next key a worker takes is its node's."""
    sim = start_simulator()
    clock = FakeClock()
    try:
        names = ["node-0000", "node-0001"]
        cluster, engine = _one_read_token(sim, clock, names)

        def body() -> None:
            engine.start()
            engine.run_until_idle()
            assert sim.calls["vpcPort"] == 1  # the second node's read waits for its slot
            for i in range(5):
                cluster.create(POD, {
                    "metadata": {"name": f"pod-{i}", "namespace": "default"},
                    "spec": {"nodeName": names[0], "containers": [{"name": "c", "image": "i"}]},
                    "status": {"phase": "Running"}})
            engine.pump()
            assert len(engine.queue) >= 5
            clock.advance(1.0)
            assert engine.step()
            assert sim.calls["vpcPort"] == 2

        _on_a_deferring_thread(body)
    finally:
        sim.stop()


def test_a_call_holding_its_worker_takes_a_put_off_slot_once() -> None:
    """A call that waits holding its worker (an ENI's attach poll) trades its slot for
    the earliest one a put-off call holds: it waits 1 s, not 2, and the put-off call,
    back at its old time, is put off once more to the later slot. That slot is not
    traded again: the next holding call waits for its own."""
    clock = FakeClock()
    limiter = CloudLimiter(RateLimit(rate=1.0, burst=1), clock)
    start = clock.monotonic()

    def body() -> None:
        with deferrable("a"):
            assert limiter.acquire("read") == 0.0
        with deferrable("b"), pytest.raises(CloudWait) as waited:
            limiter.acquire("read")
        assert waited.value.retry_after == pytest.approx(1.0)
        with deferrable("create"):
            assert limiter.acquire("attach") == 0.0  # called: the scope's next call holds
            assert limiter.acquire("read") == pytest.approx(1.0)  # b's slot, not 2.0
        assert clock.monotonic() == pytest.approx(start + 1.0)
        with deferrable("b"), pytest.raises(CloudWait) as again:
            limiter.acquire("read")
        assert again.value.retry_after == pytest.approx(1.0)  # the slot it was given
        assert limiter._acquire_holding("read") == pytest.approx(2.0)  # b's kept now
        with deferrable("b"):
            assert limiter.acquire("read") == 0.0  # its slot passed: no new token
        assert clock.monotonic() == pytest.approx(start + 3.0)

    _on_a_deferring_thread(body)


def test_a_call_put_off_to_its_slot_is_measured_as_waiting_not_as_an_error() -> None:
    """Waiting is not failing: the second node's read, put off to its slot (nothing was
    called), is a ``waiting`` outcome of the provider-call histogram, never ``error``."""
    from podnet.core.metrics import Metrics

    sim = start_simulator()
    clock = FakeClock()
    try:
        _, engine = _one_read_token(sim, clock, ["node-0000", "node-0001"])
        metrics = Metrics()
        engine.metrics = metrics  # as the controller's host does

        def body() -> None:
            engine.start()
            engine.run_until_idle()
            assert sim.calls["vpcPort"] == 1  # the second node's read waits for its slot
            text = metrics.render().decode()
            calls = [line for line in text.splitlines()
                     if line.startswith("podnet_provider_hook_duration_seconds_count")
                     and 'hook="node_inventory"' in line]
            assert any('outcome="waiting"' in line for line in calls), calls
            assert not any('outcome="error"' in line for line in calls), calls

        _on_a_deferring_thread(body)
    finally:
        sim.stop()
