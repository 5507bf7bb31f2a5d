"""Thousands of short asyncio tasks for about 2 s (tests/test_async.py: the
size of an --async --timeline trace), and one named task, "ticker", that
counts its own steps and times them: written to the JSON file argv[1]."""
import asyncio
import json
import sys
import time

STEPS, BURN = 20, 0.003
truth = {"ticker_running": 0.0}


async def short():
    await asyncio.sleep(0.001)
    s = 0
    for k in range(200):
        s += k
    await asyncio.sleep(0)
    return s


async def ticker():
    for _ in range(STEPS):
        t = time.perf_counter()
        while time.perf_counter() - t < BURN:
            pass
        truth["ticker_running"] += time.perf_counter() - t
        await asyncio.sleep(0.05)


async def main():
    tick = asyncio.create_task(ticker(), name="ticker")
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < 2.0:
        await asyncio.gather(*(asyncio.create_task(short(), name=f"short-{n + i}")
                               for i in range(200)))
        n += 200
    await tick
    truth["tasks"] = n + 1
    truth["ticker_steps"] = STEPS + 1


asyncio.run(main())
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
