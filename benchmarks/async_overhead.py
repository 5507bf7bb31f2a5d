"""What --async costs (docs/async.md): asyncio workloads timed bare, under
pyprof's sampler without and with --async (wall 1 kHz, and CPU at the default
rate), and under the peers' asyncio modes (pyinstrument's async_mode, yappi's
coroutine-aware wall clock) and pyprof's function tracing; each round runs
every configuration once, in a new order, in this one process; overhead =
the median over rounds of (time profiled / time bare of the same round).

Workloads: pyperformance's async_tree variants (none, io, memoization,
cpu_io_mixed; their eager and TaskGroup flavours where the Python has them),
async_generators and coroutines (loaded from the installed pyperformance's
benchmark files: `make bench` puts it in .bench/), and an HTTP-like
server/client on 127.0.0.1 (a bounded number of requests over keep-alive
connections, each connection a task, each request parsed and answered).

    python benchmarks/async_overhead.py [--rounds 5] [--only async_tree_none,http]

A configuration more than 8x slower than bare on a workload is timed once there
(marked * instead of x).
"""
import argparse
import asyncio
import importlib.util
import os
import statistics
import sys

import measure
import pyprof


def _pyperformance_module(name):
    import pyperformance
    path = os.path.join(os.path.dirname(pyperformance.__file__), "data-files", "benchmarks",
                        f"bm_{name}", "run_benchmark.py")
    spec = importlib.util.spec_from_file_location(f"bm_{name}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def async_tree(variant, flavour=""):
    mod = _pyperformance_module("async_tree")
    classes = {"none": ("NoneAsyncTree", "EagerAsyncTree"), "io": ("IOAsyncTree", "EagerIOAsyncTree"),
               "memoization": ("MemoizationAsyncTree", "EagerMemoizationAsyncTree"),
               "cpu_io_mixed": ("CpuIoMixedAsyncTree", "EagerCpuIoMixedAsyncTree")}
    cls = getattr(mod, classes[variant][flavour == "eager"])

    def run():
        tree = cls(use_task_groups=True) if flavour == "tg" else cls()
        asyncio.run(tree.run())
    return run


def async_generators():
    mod = _pyperformance_module("async_generators")
    return lambda: asyncio.run(mod.bench_async_generators())


def coroutines():
    mod = _pyperformance_module("coroutines")

    def run():
        for _ in range(3):
            coro = mod.fibonacci(25)
            try:
                while True:
                    coro.send(None)
            except StopIteration:
                pass
    return run


REQUESTS, CONNECTIONS = 10000, 50


async def _http():
    async def handle(reader, writer):
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            if not head:
                break
            path = head.split(b" ", 2)[1]
            body = b"hello " + path + b" " + str(sum(range(200))).encode()
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            await writer.drain()

    async def guarded(reader, writer):
        try:
            await handle(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(guarded, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def client(n):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        for i in range(n):
            writer.write(b"GET /item/%d HTTP/1.1\r\nHost: x\r\n\r\n" % i)
            head = await reader.readuntil(b"\r\n\r\n")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
        writer.close()
        await writer.wait_closed()

    await asyncio.gather(*(client(REQUESTS // CONNECTIONS) for _ in range(CONNECTIONS)))
    server.close()
    await server.wait_closed()


def http():
    return lambda: asyncio.run(_http())


def workloads():
    out = {f"async_tree_{v}": async_tree(v) for v in ("none", "io", "memoization",
                                                      "cpu_io_mixed")}
    if hasattr(asyncio, "eager_task_factory"):
        out["async_tree_eager"] = async_tree("none", "eager")
        out["async_tree_eager_io"] = async_tree("io", "eager")
    out["async_tree_tg"] = async_tree("none", "tg")
    out["async_generators"] = async_generators()
    out["coroutines"] = coroutines()
    out["http"] = http()
    return out


class _Pyinstrument:
    def __init__(self):
        from pyinstrument import Profiler
        self.p = Profiler(async_mode="enabled", interval=0.001)

    def enable(self):
        self.p.start()

    def disable(self):
        self.p.stop()


class _Yappi:
    def enable(self):
        import yappi
        yappi.clear_stats()
        yappi.set_clock_type("wall")
        yappi.start()

    def disable(self):
        import yappi
        yappi.stop()
        yappi.get_func_stats()              # its coroutine-aware wall times


def configs():
    out = {
        "bare": None,
        "wall 1kHz": lambda: pyprof.Profile(mode="sample", wall=True, rate=1000),
        "wall 1kHz --async": lambda: pyprof.Profile(mode="sample", wall=True, rate=1000,
                                                    asyncio=True),
        "cpu": lambda: pyprof.Profile(mode="sample"),
        "cpu --async": lambda: pyprof.Profile(mode="sample", asyncio=True),
        "pyprof tracing --async": lambda: pyprof.Profile(asyncio=True),
    }
    try:
        import pyinstrument  # noqa: F401
        out["pyinstrument async"] = _Pyinstrument
    except ImportError:
        pass
    try:
        import yappi  # noqa: F401
        out["yappi wall"] = _Yappi
    except ImportError:
        pass
    return out


SLOW = 8.0


def timed(run, make):
    return measure.timed(run, make() if make else None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--only", default="")
    ap.add_argument("--configs", default="", help="comma-separated (bare is always run)")
    args = ap.parse_args()
    loads = workloads()
    if args.only:
        loads = {k: v for k, v in loads.items() if k in args.only.split(",")}
    cfgs = configs()
    if args.configs:
        cfgs = {k: v for k, v in cfgs.items() if k == "bare" or k in args.configs.split(",")}
    print(f"Python {sys.version.split()[0]}, pyprof {pyprof.__version__}, {os.cpu_count()} CPUs, "
          f"{args.rounds} rounds, median of paired ratios (profiled / bare):")
    names = [c for c in cfgs if c != "bare"]
    print(f"{'workload':24s} {'bare s':>7s} " + " ".join(f"{n:>22s}" for n in names))
    table = {}
    for wname, run in loads.items():
        bare = timed(run, None)                 # warm up: imports, caches
        # a configuration slower than SLOW x bare is timed once (marked *): rounds of it
        # would take minutes (yappi on the sleeping async_tree variants)
        once = {}
        for c in names:
            r = timed(run, cfgs[c]) / bare
            if r > SLOW:
                once[c] = r
        times = measure.interleaved({c: (lambda c=c: timed(run, cfgs[c]))
                                     for c in cfgs if c not in once}, args.rounds)
        ratios = {c: measure.paired_ratio(times[c], times["bare"]) for c in names if c not in once}
        ratios.update(once)
        table[wname] = ratios
        print(f"{wname:24s} {statistics.median(times['bare']):7.3f} "
              + " ".join(f"{ratios[c]:21.3f}{'*' if c in once else 'x'}" for c in names),
              flush=True)
    extra = {n: [] for n in ("wall 1kHz --async", "cpu --async") if n in names}
    for r in table.values():
        for n in extra:
            extra[n].append(r[n] / r[n.replace(" --async", "")])
    for n, v in extra.items():
        print(f"--async over the same mode without it ({n}): median {statistics.median(v):.3f}x,"
              f" worst {max(v):.3f}x")


if __name__ == "__main__":
    main()
