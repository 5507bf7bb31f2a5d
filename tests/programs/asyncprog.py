"""An asyncio program that measures itself (tests/test_async.py): each named
task times its own bursts of work with a clock (running) and its lifetime,
from its creation (spawn) to its end; awaiting is lifetime - running (and,
what function tracing sees, from its coroutine's first start). Written to the JSON file named by argv[1].
Exercises TaskGroup, gather, wait_for/timeout, a queue, a lock, to_thread,
cancellation and a second event loop in a thread (argv[2] == "uvloop": uvloop's)."""
import asyncio
import json
import sys
import threading
import time

truth = {}
BURST, PAUSE = 0.03, 0.04


def burn(seconds):
    t = time.perf_counter()
    while time.perf_counter() - t < seconds:
        pass


CREATED = {}


def spawn(coro, name):
    """create_task, noting when the task was made."""
    CREATED[name] = time.perf_counter()
    return asyncio.create_task(coro, name=name)


class Clock:
    """A task's own clock: its running time and its lifetime."""

    def __init__(self, name):
        self.name, self.t0, self.run, self.stolen = name, CREATED[name], 0.0, 0.0
        self.first = time.perf_counter()        # its coroutine's first start

    def burst(self, seconds):
        a, c = time.perf_counter(), time.thread_time()
        burn(seconds)
        self.run += time.perf_counter() - a
        # the burst's time off a CPU (a loaded machine's): a wall sampler charges
        # a wait that ends the burst to what the thread runs when it resumes
        self.stolen += max(0.0, time.perf_counter() - a - (time.thread_time() - c))

    def done(self):
        end = time.perf_counter()
        truth[self.name] = {"running": self.run, "awaiting": end - self.t0 - self.run,
                            "awaiting_since_start": end - self.first - self.run,
                            "stolen": self.stolen}


async def worker(name, n, burst=BURST, pause=PAUSE):
    c = Clock(name)
    for _ in range(n):
        c.burst(burst)
        await asyncio.sleep(pause)      # suspends once: the task runs n + 1 times
    c.done()
    truth[name]["steps"] = n + 1


def thread_work(seconds):
    """to_thread's work, timed by itself."""
    a = time.perf_counter()
    burn(seconds)
    WORK["to-thread"] = time.perf_counter() - a


WORK = {}


async def producer(q):
    c = Clock("producer")
    for i in range(4):
        c.burst(0.02)
        await q.put(i)
        await asyncio.sleep(0.03)
    await q.put(None)
    c.done()


async def consumer(q):
    c = Clock("consumer")
    while (item := await q.get()) is not None:
        c.burst(0.01)
    c.done()


async def locker(name, lock):
    c = Clock(name)
    async with lock:
        c.burst(0.04)
        await asyncio.sleep(0.15)       # the other waits for the lock that long
    c.done()


async def sleeper():
    await asyncio.sleep(10)


async def main():
    async with asyncio.TaskGroup() as tg:
        CREATED["tg-a"] = CREATED["tg-b"] = time.perf_counter()
        tg.create_task(worker("tg-a", 4), name="tg-a")
        tg.create_task(worker("tg-b", 3, burst=0.05), name="tg-b")
    t1 = spawn(worker("g-1", 3), "g-1")
    t2 = spawn(worker("g-2", 3, burst=0.02), "g-2")
    await asyncio.gather(t1, t2)
    q = asyncio.Queue()
    await asyncio.gather(spawn(producer(q), "producer"), spawn(consumer(q), "consumer"))
    lock = asyncio.Lock()
    await asyncio.gather(*(spawn(locker(f"lock-{i}", lock), f"lock-{i}") for i in range(2)))
    try:
        await asyncio.wait_for(asyncio.create_task(sleeper(), name="timed-out"), 0.25)
    except asyncio.TimeoutError:
        pass
    victim = asyncio.create_task(sleeper(), name="cancelled")
    await asyncio.sleep(0.5)        # seen by a look (a task shorter than one may not be;
                                    # a loaded machine spaces them up to 0.3 s)
    victim.cancel()
    try:
        await victim
    except asyncio.CancelledError:
        pass
    await asyncio.create_task(asyncio.to_thread(thread_work, 0.15), name="to-thread")


def in_thread(loop_factory):
    def run():
        async def inner():
            await spawn(worker("thread-w", 3), "thread-w")
        if loop_factory is None:
            asyncio.run(inner())
        else:
            loop = loop_factory()
            try:
                loop.run_until_complete(inner())
            finally:
                loop.close()
    th = threading.Thread(target=run, name="loop-thread")
    th.start()
    return th


if __name__ == "__main__":
    factory = None
    if len(sys.argv) > 2 and sys.argv[2] == "uvloop":
        import uvloop
        factory = uvloop.new_event_loop
        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    in_thread(factory).join()       # alone: two loops' bursts would share the GIL
    asyncio.run(main())
    with open(sys.argv[1], "w") as f:
        json.dump({**truth, "thread work": WORK}, f)
