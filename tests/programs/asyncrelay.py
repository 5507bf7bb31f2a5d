"""Short tasks one after another (tests/test_async.py): each task is freed
before the next is made, so the next one's coroutine is likely made at the
same address. Even tasks burn in burn_even, odd ones in burn_odd: a sample
of one task given to the next shows in the wrong function. argv[1]: the JSON
file for the coroutines' addresses; argv[2]: "sleep" to have each task wait
first (seen pending by a look), else it burns at once."""
import asyncio
import json
import sys
import time

BURST, TASKS = 0.03, 40


def burn_even(seconds):
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


def burn_odd(seconds):
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


async def relay(i, wait):
    if wait:
        await asyncio.sleep(0.015)
    (burn_odd if i % 2 else burn_even)(BURST)


async def main(wait):
    addresses = []
    for i in range(TASKS):
        task = asyncio.create_task(relay(i, wait), name=f"relay-{i}")
        addresses.append(id(task.get_coro()))
        await task
        del task                        # freed: its coroutine's memory is free for the next
    return addresses


if __name__ == "__main__":
    addresses = asyncio.run(main(len(sys.argv) > 2 and sys.argv[2] == "sleep"))
    with open(sys.argv[1], "w") as f:
        json.dump(addresses, f)
