"""The agent's locks by key: exclusive per key, and gone once nobody wants them (an agent
lives as long as its node and sees every container that ever ran there)."""

from __future__ import annotations

import threading

from podnet.node.locks import KeyedLocks


def test_a_key_is_held_by_one_request_at_a_time_and_its_lock_goes_after() -> None:
    locks = KeyedLocks()
    inside = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def first() -> None:
        with locks.hold("c1"):
            order.append("first in")
            inside.set()
            release.wait(10)
            order.append("first out")

    def second() -> None:
        inside.wait(10)
        with locks.hold("c1"):
            order.append("second in")

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    inside.wait(10)
    release.set()
    for t in threads:
        t.join(10)
    assert order == ["first in", "first out", "second in"]
    assert len(locks) == 0


def test_many_keys_leave_no_lock_behind() -> None:
    locks = KeyedLocks()
    for i in range(10_000):
        with locks.hold(f"container-{i}", f"ns/pod-{i}"):
            assert len(locks) == 2
    assert len(locks) == 0


def test_keys_taken_in_one_order_never_deadlock() -> None:
    locks = KeyedLocks()
    errors: list[BaseException] = []

    def worker(keys: tuple[str, ...]) -> None:
        try:
            for _ in range(2000):
                with locks.hold(*keys):
                    pass
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(keys,))
               for keys in (("a", "b"), ("b", "a"), ("b", "c", "a"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not any(t.is_alive() for t in threads), "two requests wait for each other"
    assert not errors and len(locks) == 0


def test_a_failing_request_gives_its_locks_back() -> None:
    locks = KeyedLocks()
    try:
        with locks.hold("c1"):
            raise RuntimeError("plug failed")
    except RuntimeError:
        pass
    assert len(locks) == 0
    with locks.hold("c1"):  # not left locked
        pass
