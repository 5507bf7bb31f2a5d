"""Short named tasks beside thousands of idle ones (a server's idle
connections), which space the looks at the tasks far apart: each short task
times its own running (tests/test_async.py). Written to the JSON file argv[1]."""
import asyncio
import json
import sys
import time

IDLE, SHORT, BURST = 3000, 20, 0.02
truth = {}


def burn(seconds):
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


async def idle(ev):
    await ev.wait()


async def short(name):
    a = time.perf_counter()
    burn(BURST)
    ran = time.perf_counter() - a
    await asyncio.sleep(0.01)
    a = time.perf_counter()
    burn(BURST)
    truth[name] = ran + time.perf_counter() - a


async def main():
    ev = asyncio.Event()
    idlers = [asyncio.create_task(idle(ev), name=f"idle-{i}") for i in range(IDLE)]
    await asyncio.sleep(0.1)
    for i in range(SHORT):
        await asyncio.create_task(short(f"short-{i}"), name=f"short-{i}")
    ev.set()
    await asyncio.gather(*idlers)


asyncio.run(main())
with open(sys.argv[1], "w") as f:
    json.dump(truth, f)
