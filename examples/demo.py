"""A small, self-contained workload to try a profiler on.

It does the kind of things real programs spend their time on:

* generates a web-server access log, then parses it with ``re`` and ``str``
  methods through a generator pipeline;
* aggregates it into dicts of metric objects (a small class hierarchy);
* sorts endpoints with a key function;
* tokenizes, parses (recursive descent) and evaluates nested arithmetic
  expressions, split across a pool of two threads;
* round-trips the report through ``json`` and checksums / compresses the log
  with ``hashlib`` and ``zlib`` (time spent in C).

Everything is seeded: the output is the same on every run.

    python -m pyprof -s cumulative examples/demo.py
"""
import hashlib
import json
import queue
import random
import re
import threading
import zlib
from collections import defaultdict

SEED = 20240601
N_LOG_LINES = 12_000
N_EXPRESSIONS = 1_500
N_WORKERS = 2

# --------------------------------------------------------------------------
# 1. a synthetic access log


ENDPOINTS = [
    "/", "/login", "/logout", "/search", "/static/app.js", "/static/app.css",
    "/api/users/{id}", "/api/users/{id}/orders", "/api/orders/{id}",
    "/api/products", "/api/products/{id}", "/api/cart", "/api/checkout",
]
METHODS = ["GET"] * 8 + ["POST"] * 2 + ["PUT", "DELETE"]
AGENTS = ["Mozilla/5.0 (X11; Linux x86_64)", "curl/8.5.0", "python-requests/2.31",
          "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_2)", "Googlebot/2.1"]


def generate_log(rng, n):
    """Yield n access-log lines, e.g.
    2024-06-01T08:00:03.120Z 10.0.3.7 GET /api/users/42 200 512 13.4ms "curl/8.5.0"
    """
    t = 8 * 3600.0
    for _ in range(n):
        t += rng.expovariate(4.0)
        endpoint = rng.choice(ENDPOINTS).replace("{id}", str(rng.randint(1, 5000)))
        method = rng.choice(METHODS)
        status = rng.choices([200, 201, 204, 301, 404, 500], [80, 5, 3, 3, 7, 2])[0]
        size = 0 if status == 204 else int(rng.lognormvariate(7, 1.2))
        latency = rng.lognormvariate(2.5, 0.8) * (6 if "checkout" in endpoint else 1)
        h, rem = divmod(t, 3600)
        m, s = divmod(rem, 60)
        ip = f"10.0.{rng.randint(0, 15)}.{rng.randint(1, 254)}"
        yield (f"2024-06-01T{int(h):02d}:{int(m):02d}:{s:06.3f}Z {ip} {method} {endpoint} "
               f"{status} {size} {latency:.1f}ms \"{rng.choice(AGENTS)}\"")


# --------------------------------------------------------------------------
# 2. parsing: a generator pipeline

LINE_RE = re.compile(
    r'(?P<ts>\S+) (?P<ip>[\d.]+) (?P<method>[A-Z]+) (?P<path>\S+) '
    r'(?P<status>\d{3}) (?P<size>\d+) (?P<ms>[\d.]+)ms "(?P<agent>[^"]*)"')
ID_RE = re.compile(r"/\d+(?=/|$)")


class Request:
    __slots__ = ("minute", "ip", "method", "route", "status", "size", "ms", "bot")

    def __init__(self, minute, ip, method, route, status, size, ms, bot):
        self.minute, self.ip, self.method, self.route = minute, ip, method, route
        self.status, self.size, self.ms, self.bot = status, size, ms, bot


def parse_lines(lines):
    for line in lines:
        m = LINE_RE.match(line)
        if m is None:
            continue
        d = m.groupdict()
        route = ID_RE.sub("/{id}", d["path"])
        yield Request(minute=d["ts"][11:16], ip=d["ip"], method=d["method"], route=route,
                      status=int(d["status"]), size=int(d["size"]), ms=float(d["ms"]),
                      bot="bot" in d["agent"].lower())


def drop_bots(requests):
    return (r for r in requests if not r.bot)


def drop_static(requests):
    for r in requests:
        if not r.route.startswith("/static/"):
            yield r


# --------------------------------------------------------------------------
# 3. aggregation: a small class hierarchy of metrics


class Metric:
    kind = "metric"

    def __init__(self, name):
        self.name = name

    def observe(self, value):
        raise NotImplementedError

    def summary(self):
        return {"kind": self.kind, "name": self.name}


class Counter(Metric):
    kind = "counter"

    def __init__(self, name):
        super().__init__(name)
        self.count = 0

    def observe(self, value=1):
        self.count += value

    def summary(self):
        return {**super().summary(), "count": self.count}


class Histogram(Metric):
    kind = "histogram"

    def __init__(self, name):
        super().__init__(name)
        self.values = []

    def observe(self, value):
        self.values.append(value)

    def quantile(self, q):
        ordered = sorted(self.values)
        if not ordered:
            return 0.0
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def summary(self):
        return {**super().summary(), "n": len(self.values),
                "p50": self.quantile(0.50), "p95": self.quantile(0.95),
                "max": max(self.values, default=0.0)}


class ErrorRate(Counter):
    kind = "error_rate"

    def __init__(self, name):
        super().__init__(name)
        self.errors = 0

    def observe(self, value=1, failed=False):
        super().observe(value)
        self.errors += failed

    def summary(self):
        rate = self.errors / self.count if self.count else 0.0
        return {**super().summary(), "errors": self.errors, "rate": round(rate, 4)}


def aggregate(requests):
    latency = defaultdict(lambda: None)
    errors = {}
    bytes_by_status = defaultdict(int)
    per_minute = Counter("requests")
    busiest = defaultdict(int)
    for r in requests:
        key = f"{r.method} {r.route}"
        if latency[key] is None:
            latency[key] = Histogram(key)
            errors[key] = ErrorRate(key)
        latency[key].observe(r.ms)
        errors[key].observe(failed=r.status >= 500)
        bytes_by_status[r.status] += r.size
        per_minute.observe()
        busiest[r.minute] += 1
    return latency, errors, bytes_by_status, per_minute, busiest


# --------------------------------------------------------------------------
# 4. expressions: tokenizer + recursive-descent parser + evaluator

TOKEN_RE = re.compile(r"\s*(?:(\d+\.\d*|\d+)|(.))")


def random_expression(rng, depth=0):
    if depth > 4 or rng.random() < 0.25:
        return str(rng.randint(1, 99))
    op = rng.choice("+-*/")
    left, right = random_expression(rng, depth + 1), random_expression(rng, depth + 1)
    return f"({left} {op} {right})" if rng.random() < 0.7 else f"{left} {op} {right}"


def tokenize(text):
    tokens = []
    for number, op in TOKEN_RE.findall(text):
        if number:
            tokens.append(("num", float(number)))
        elif op.strip():
            tokens.append(("op", op))
    tokens.append(("end", None))
    return tokens


class Parser:
    """expr := term (('+'|'-') term)* ; term := factor (('*'|'/') factor)* ;
    factor := number | '-' factor | '(' expr ')'"""

    def __init__(self, tokens):
        self.tokens = tokens
        self.pos = 0

    def peek(self):
        return self.tokens[self.pos]

    def take(self):
        tok = self.tokens[self.pos]
        self.pos += 1
        return tok

    def expr(self):
        node = self.term()
        while self.peek() in (("op", "+"), ("op", "-")):
            node = (self.take()[1], node, self.term())
        return node

    def term(self):
        node = self.factor()
        while self.peek() in (("op", "*"), ("op", "/")):
            node = (self.take()[1], node, self.factor())
        return node

    def factor(self):
        kind, value = self.take()
        if kind == "num":
            return value
        if value == "-":
            return ("neg", self.factor())
        if value == "(":
            node = self.expr()
            if self.take() != ("op", ")"):
                raise SyntaxError("expected ')'")
            return node
        raise SyntaxError(f"unexpected {value!r}")


def evaluate(node):
    if isinstance(node, float):
        return node
    if node[0] == "neg":
        return -evaluate(node[1])
    op, a, b = node[0], evaluate(node[1]), evaluate(node[2])
    if op == "+":
        return a + b
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    return a / b if b else float("inf")


def depth(node):
    if isinstance(node, float):
        return 0
    return 1 + max(depth(child) for child in node[1:])


def calculate(text):
    tree = Parser(tokenize(text)).expr()
    return evaluate(tree), depth(tree)


def evaluate_in_threads(expressions, n_workers):
    """Evaluate expressions on a pool of n_workers threads; results in input order."""
    jobs = queue.Queue()
    results = [None] * len(expressions)
    done_by = [0] * n_workers

    def worker(index):
        while True:
            item = jobs.get()
            if item is None:
                return
            i, text = item
            results[i] = calculate(text)
            done_by[index] += 1

    threads = [threading.Thread(target=worker, args=(k,), name=f"calc-{k}")
               for k in range(n_workers)]
    for t in threads:
        t.start()
    for item in enumerate(expressions):
        jobs.put(item)
    for _ in threads:
        jobs.put(None)
    for t in threads:
        t.join()
    return results, done_by


# --------------------------------------------------------------------------
# 5. checksums, compression, JSON


def fingerprint(lines, chunk=1000):
    digest = hashlib.sha256()
    compressed = 0
    raw = 0
    for start in range(0, len(lines), chunk):
        blob = "\n".join(lines[start:start + chunk]).encode()
        digest.update(hashlib.blake2b(blob, digest_size=16).digest())
        packed = zlib.compress(blob, 6)
        assert zlib.decompress(packed) == blob
        raw += len(blob)
        compressed += len(packed)
    return digest.hexdigest(), raw, compressed


def build_report(latency, errors, bytes_by_status, per_minute, busiest):
    slowest = sorted(latency.values(), key=lambda h: h.quantile(0.95), reverse=True)
    flaky = sorted(errors.values(), key=lambda e: (-e.summary()["rate"], e.name))
    return {
        "requests": per_minute.summary(),
        "slowest": [h.summary() for h in slowest[:5]],
        "flaky": [e.summary() for e in flaky[:5]],
        "bytes_by_status": {str(k): v for k, v in sorted(bytes_by_status.items())},
        "busiest_minute": max(sorted(busiest.items()), key=lambda kv: kv[1]),
    }


def main():
    rng = random.Random(SEED)
    lines = list(generate_log(rng, N_LOG_LINES))

    pipeline = drop_static(drop_bots(parse_lines(lines)))
    report = build_report(*aggregate(pipeline))

    text = json.dumps(report, indent=2, sort_keys=True)
    assert json.loads(text) == json.loads(json.dumps(json.loads(text)))

    expressions = [random_expression(rng) for _ in range(N_EXPRESSIONS)]
    results, done_by = evaluate_in_threads(expressions, N_WORKERS)
    finite = [v for v, _ in results if v == v and abs(v) != float("inf")]

    sha, raw, packed = fingerprint(lines)

    top = report["slowest"][0]
    minute, count = report["busiest_minute"]
    print(f"log: {len(lines)} lines, {report['requests']['count']} requests kept "
          f"(bots and static files dropped), busiest minute {minute} with {count}")
    print(f"slowest endpoint: {top['name']} p95={top['p95']:.1f}ms over {top['n']} requests")
    print(f"expressions: {len(results)} evaluated on {N_WORKERS} threads, "
          f"max depth {max(d for _, d in results)}, sum of finite values {sum(finite):.6g}")
    print(f"log: {raw} bytes, zlib {packed} bytes ({packed / raw:.1%}), sha256 {sha[:16]}")
    print(f"report: {len(text)} bytes of JSON")


if __name__ == "__main__":
    main()
