"""Short named tasks beside thousands of idle ones (a server's idle
connections), which space the looks at the tasks far apart: each short task
times its own running and its time off a CPU (tests/test_async.py). Written to the JSON file argv[1]."""
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


def timed_burn(clock):
    """A burst, added to the task's running time; and its time off a CPU (a
    loaded machine's), which a wall sampler may charge on either side of it."""
    a, c = time.perf_counter(), time.thread_time()
    burn(BURST)
    wall = time.perf_counter() - a
    clock["running"] += wall
    clock["stolen"] += max(0.0, wall - (time.thread_time() - c))


async def short(name):
    clock = truth[name] = {"running": 0.0, "stolen": 0.0}
    timed_burn(clock)
    await asyncio.sleep(0.01)
    timed_burn(clock)


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
