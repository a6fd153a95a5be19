"""``BatchedCalls``: calls share batches, each gets its own outcome, no lane is ever lost."""

from __future__ import annotations

from typing import Any

import anyio
import anyio.lowlevel
import pytest

from helix_agents.stores.sqlite.batched import BatchedCall, BatchedCalls

TIMEOUT = 5


class Runner:
    """A ``run_batch`` that doubles numbers, records its batches, and can be held."""

    def __init__(self) -> None:
        self.batches: list[list[Any]] = []
        self.running = 0
        self.most_at_once = 0
        self.release: anyio.Event | None = None  # set: batches wait for it
        self.started = anyio.Event()
        self.wanted = 0  # when this many batches run at once, ``reached`` is set
        self.reached = anyio.Event()

    async def __call__(self, calls: list[BatchedCall]) -> None:
        self.batches.append([call.args[0] for call in calls])
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        if self.wanted and self.running >= self.wanted:
            self.reached.set()
        self.started.set()
        try:
            if self.release is not None:
                await self.release.wait()
            await anyio.lowlevel.checkpoint()  # as a worker thread's hop: the loop runs meanwhile
            for call in calls:
                (value,) = call.args
                if value < 0:
                    call.error = ValueError(f"negative: {value}")
                else:
                    call.result = value * 2
        finally:
            self.running -= 1


async def _call_all(batched: BatchedCalls, values: list[int]) -> dict[int, Any]:
    results: dict[int, Any] = {}

    async def one(value: int) -> None:
        try:
            results[value] = await batched.call(value)
        except ValueError as exc:
            results[value] = exc

    async with anyio.create_task_group() as tg:
        for value in values:
            tg.start_soon(one, value)
    return results


async def test_concurrent_calls_share_batches_and_each_gets_its_own_result() -> None:
    runner = Runner()
    batched = BatchedCalls(runner, lanes=4, max_batch=16)
    with anyio.fail_after(TIMEOUT):
        results = await _call_all(batched, list(range(300)))
    assert results == {value: value * 2 for value in range(300)}
    ran = sorted(value for batch in runner.batches for value in batch)
    assert ran == list(range(300))  # each call ran once
    assert len(runner.batches) < 300 / 4
    assert max(len(batch) for batch in runner.batches) <= 16
    assert runner.most_at_once <= 4


async def test_a_lone_call_runs_at_once_in_a_batch_of_one() -> None:
    runner = Runner()
    batched = BatchedCalls(runner, lanes=4, max_batch=16)
    with anyio.fail_after(TIMEOUT):
        assert await batched.call(21) == 42
    assert runner.batches == [[21]]


async def test_an_error_reaches_only_its_own_caller() -> None:
    runner = Runner()
    batched = BatchedCalls(runner, lanes=2, max_batch=8)
    with anyio.fail_after(TIMEOUT):
        results = await _call_all(batched, [1, -3, 5, 7, 9])
    assert isinstance(results[-3], ValueError)
    assert {key: value for key, value in results.items() if key != -3} == {
        1: 2,
        5: 10,
        7: 14,
        9: 18,
    }


async def test_a_batch_that_fails_as_a_whole_fails_each_of_its_calls() -> None:
    async def broken(calls: list[BatchedCall]) -> None:
        await anyio.lowlevel.checkpoint()
        raise OSError("no thread")

    batched = BatchedCalls(broken, lanes=2, max_batch=8)
    failures: list[BaseException] = []

    async def one(value: int) -> None:
        with pytest.raises(OSError, match="no thread") as raised:
            await batched.call(value)
        failures.append(raised.value)

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            for value in range(20):
                tg.start_soon(one, value)
    assert len(failures) == 20


async def test_a_caller_cancelled_while_queued_is_withdrawn_and_no_lane_is_lost() -> None:
    runner = Runner()
    runner.release = anyio.Event()
    batched = BatchedCalls(runner, lanes=1, max_batch=4)
    results: dict[int, Any] = {}

    async def one(value: int) -> None:
        results[value] = await batched.call(value)

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg:
            tg.start_soon(one, 0)
            await runner.started.wait()  # the only lane is busy: the next calls queue
            async with anyio.create_task_group() as doomed:
                for value in (100, 101):
                    doomed.start_soon(one, value)
                await anyio.sleep(0.01)
                doomed.cancel_scope.cancel()
            tg.start_soon(one, 1)
            await anyio.sleep(0.01)
            runner.release.set()
        assert results == {0: 0, 1: 2}
        assert all(100 not in batch and 101 not in batch for batch in runner.batches)
        # The lane came back: a later burst is served, one batch at a time.
        runner.release = None
        later = await _call_all(batched, list(range(10, 30)))
    assert later == {value: value * 2 for value in range(10, 30)}
    assert runner.most_at_once == 1


async def test_a_leader_cancelled_mid_batch_still_hands_every_result_over() -> None:
    runner = Runner()
    runner.release = anyio.Event()
    batched = BatchedCalls(runner, lanes=1, max_batch=64)
    results: dict[int, Any] = {}

    async def one(value: int) -> None:
        results[value] = await batched.call(value)

    with anyio.fail_after(TIMEOUT):
        async with anyio.create_task_group() as tg, anyio.create_task_group() as leader:
            leader.start_soon(one, 0)
            for value in range(1, 10):
                tg.start_soon(one, value)
            await runner.started.wait()  # the leader runs one batch holding them all
            leader.cancel_scope.cancel()
            runner.release.set()
    assert runner.batches == [list(range(10))]
    assert {value: results[value] for value in range(1, 10)} == {
        value: value * 2 for value in range(1, 10)
    }


async def test_under_churn_every_call_gets_its_result_and_every_lane_comes_back() -> None:
    """Short batches of uneven length: leaders finish in any order and hand lanes on."""
    runner = Runner()
    pauses = iter([0, 3, 1, 2] * 1000)

    async def uneven(calls: list[BatchedCall]) -> None:
        for _ in range(next(pauses)):
            await anyio.lowlevel.checkpoint()
        await runner(calls)

    batched = BatchedCalls(uneven, lanes=4, max_batch=3)
    with anyio.fail_after(TIMEOUT):
        for _ in range(5):
            results = await _call_all(batched, list(range(200)))
            assert results == {value: value * 2 for value in range(200)}
        # All four lanes are still there: four held batches run at once.
        release = runner.release = anyio.Event()
        runner.wanted = 4
        async with anyio.create_task_group() as tg:
            for value in range(40):
                tg.start_soon(batched.call, value)
            try:
                await runner.reached.wait()
            finally:
                release.set()  # a held batch is shielded: it must end even if this failed
