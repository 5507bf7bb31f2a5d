"""Web middleware (docs/web.md): profile the requests a rule chooses, write
each one's capture (and HTML report) to a directory, optionally serve an
index of them.

    app.wsgi_app = WSGIProfiler(app.wsgi_app, directory="prof", param="pyprof")  # Flask
    app.add_middleware(ASGIProfiler, directory="prof", slower_than="200ms")     # Starlette
    MIDDLEWARE = ["pyprof.middleware.DjangoProfiler", ...]; PYPROF = {...}       # Django

Nothing is profiled and nothing is served unless configured: a directory and
at least one rule (a query parameter, a header, one request in N, slower than
a duration), from the keywords, else the PYPROF_WEB_* variables, else
[tool.pyprof.web] of the nearest pyproject.toml (config.py). A configuration
that cannot work (a directory that cannot be written, a bad value) is one
error line on the "pyprof" logger at start-up; requests are still served.

One request is profiled at a time (a profiler is process-wide): a request
chosen while another is profiled runs unprofiled. A WSGI or Django capture
keeps the request's thread; an ASGI one has every coroutine the event loop ran
meanwhile (they share its thread), with asyncio's tasks (docs/async.md) so that
the time a request awaits is under its task and where it waited. Worker
processes share the directory: a capture's name has its pid, and it is
published whole under a name no file has yet.
"""
from __future__ import annotations

import html
import itertools
import logging
import os
import re
import threading
import time

log = logging.getLogger("pyprof")

_KEYS = ("directory", "mode", "param", "header", "every", "slower_than", "index", "html")
# DATE-TIME-PID-SEQ-METHOD-PATH-DURms: the pid keeps worker processes apart (names
# without it are older pyprof's)
_NAME = re.compile(r"^(?P<when>\d{8}-\d{6})-(?:(?P<pid>\d+)-)?(?P<seq>\d{5})-(?P<method>[A-Z]+)-"
                   r"(?P<slug>[A-Za-z0-9_.\-]*)-(?P<ms>\d+)ms\.(?P<ext>cprof|html)$")
REQUEST_RATE = 1000.0           # Hz: wall-clock samples per request (sample mode)
WRITER = "pyprof-writer"        # the ASGI writer thread's name prefix


class Recorder:
    """What the three middlewares share: the rules, the profiler, the files."""

    def __init__(self, directory=None, mode=None, param=None, header=None, every=None,
                 slower_than=None, index=None, html=None, **unknown):
        self.enabled = False
        self.directory = None
        self.index = None
        self.lock = threading.Lock()
        self.seen = itertools.count(1)
        self.seq = itertools.count(1)
        self.requests = {}              # capture name -> its META's request
        self.writer = None              # (pid, executor): executor()'s
        self.lock_writer = threading.Lock()
        self.busy = 0                   # chosen requests left unprofiled: one at a time
        try:
            if unknown:
                raise ValueError(f"unknown keyword {next(iter(unknown))!r} (known: "
                                 f"{', '.join(_KEYS)})")
            self._configure(directory=directory, mode=mode, param=param, header=header,
                            every=every, slower_than=slower_than, index=index, html=html)
        except Exception as e:          # a middleware never stops the application
            log.error("pyprof: request profiling is off: %s", e)
            self.enabled = False
            self.index = None

    def _configure(self, **given):
        from ..options import config
        cfg = config.load()
        if given.get("slower_than") is not None and not isinstance(given["slower_than"], str):
            given["slower_than"] = float(given["slower_than"])
        raw = dict(given)
        raw["dir"] = raw.pop("directory")
        for key in ("mode", "every", "slower_than"):
            if raw.get(key) is not None:
                setting = next(s for s in config.SETTINGS if (s.section, s.key) == ("web", key))
                try:
                    raw[key] = config.convert(setting, raw[key], False)
                except Exception as e:
                    raise config.ConfigError(f"{key}={given[key]!r}: {e}") from None
        values = {k: v for k, (v, _) in config.section("web", raw, cfg).items()}
        self.mode = values["mode"]
        self.param, self.header = values["param"], values["header"]
        self.every, self.slower_than = values["every"] or 0, values["slower_than"]
        self.html = values["html"]
        index = values["index"]
        directory = values["dir"]
        if directory is None:
            if index or self.param or self.header or self.every or self.slower_than:
                log.error("pyprof: request profiling is off: no directory given "
                          "(directory=, PYPROF_WEB_DIR or [tool.pyprof.web] dir)")
            return
        if not (self.param or self.header or self.every or self.slower_than):
            log.error("pyprof: request profiling is off: no rule chooses requests (param=, "
                      "header=, every= or slower_than=)")
            return
        directory = os.path.abspath(directory)
        from ..errors import PyprofError
        from ..options import check_writable
        try:
            os.makedirs(directory, exist_ok=True)
            check_writable(os.path.join(directory, "pyprof-probe.cprof"))
        except (OSError, PyprofError) as e:
            log.error("pyprof: request profiling is off: cannot write %s: %s", directory,
                      getattr(e, "strerror", None) or e)
            return
        self.options = config.run_options(
            None if self.mode == "memory" else self.mode, cfg, memory=self.mode == "memory",
            line_dir=os.getcwd(), rate=REQUEST_RATE, wall=True)
        self.directory = directory
        self.index = "/" + index.strip("/") if index else None
        self.enabled = True
        rules = [f"query parameter {self.param!r}" if self.param else "",
                 f"header {self.header!r}" if self.header else "",
                 f"1 request in {self.every}" if self.every else "",
                 f"slower than {self.slower_than * 1e3:g} ms" if self.slower_than else ""]
        log.info("pyprof: profiling requests (%s mode; %s) into %s%s", self.mode,
                 ", ".join(r for r in rules if r), directory,
                 f"; index at {self.index}/" if self.index else "")

    # ---------------------------------------------------------- choosing
    def choose(self, query: str, header_value) -> tuple:
        """(profile it, keep it whatever its duration) for one request."""
        if not self.enabled:
            return False, False
        asked = False
        if self.param and query:
            from urllib.parse import parse_qs
            values = parse_qs(query, keep_blank_values=True).get(self.param)
            asked = bool(values) and values[-1].lower() not in ("0", "false", "no", "off")
        if self.header and header_value is not None:
            asked = asked or header_value.strip().lower() not in ("0", "false", "no", "off")
        counted = bool(self.every) and next(self.seen) % self.every == 0
        keep = asked or counted
        return keep or bool(self.slower_than), keep

    def start(self):
        """A started Profile, or None when another request holds the profiler."""
        if not self.lock.acquire(blocking=False):
            self.busy += 1
            return None
        try:
            from ..runtime.profiler import Profile
            prof = Profile(options=self.options, _warn=False)
            prof.enable()
        except Exception as e:          # another tool holds the hooks
            self.lock.release()
            log.warning("pyprof: cannot profile a request: %s", e)
            return None
        return prof

    def stop(self, prof):
        try:
            prof.disable()
        finally:
            self.lock.release()

    def write(self, prof, seconds, keep, method, path, thread=None, task=None):
        """Write the capture (and report) of a request kept by the rules."""
        if not keep and not (self.slower_than and seconds > self.slower_than):
            return None
        slug = re.sub(r"[^A-Za-z0-9_.\-]+", "_", path.strip("/"))[:60] or "root"
        method = re.sub(r"[^A-Z]", "", method.upper())[:10] or "X"
        try:
            session = prof.session()
            if thread is not None:      # the request's thread only
                others = [i for i, t in session.threads.items() if t.ident != thread]
                if len(others) < len(session.threads):
                    session.drop_threads(others)
            else:
                session.drop_threads([i for i, t in session.threads.items()
                                      if t.name.startswith(WRITER + "_")])
            session.meta["request"] = {"method": method, "path": path,
                                       "seconds": seconds}
            if task is not None:
                session.meta["request"]["task"] = task
            base = self._publish(session, lambda: (
                f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-"
                f"{next(self.seq) % 100000:05d}-{method}-{slug}-{round(seconds * 1e3)}ms"))
            if self.html:
                from ..export import export
                export(session, "html", base + ".html")
        except Exception as e:
            log.error("pyprof: cannot write the capture of %s %s: %s", method, path, e)
            return None
        return base + ".cprof"

    def _publish(self, session, name):
        """Save `session` under a fresh DIR/name() + ".cprof", never over another
        capture (workers share the directory): written whole under a private
        name, then hard-linked to a name no file has yet. Returns the base."""
        tmp = os.path.join(self.directory,
                           f".pyprof-{os.getpid()}-{threading.get_ident()}.cprof.part")
        session.save(tmp)
        try:
            for _ in range(100):
                base = os.path.join(self.directory, name())
                try:
                    os.link(tmp, base + ".cprof")
                    return base
                except FileExistsError:
                    continue
                except OSError:         # no hard links here: the pid keeps names apart
                    if os.path.lexists(base + ".cprof"):
                        continue
                    os.rename(tmp, base + ".cprof")
                    return base
            raise OSError(f"no free capture name in {self.directory}")
        finally:
            if os.path.lexists(tmp):
                os.unlink(tmp)

    def executor(self):
        """This process's writer thread (ASGI: the files are written off the
        event loop); its work is left out of the captures taken meanwhile."""
        with self.lock_writer:
            if self.writer is None or self.writer[0] != os.getpid():   # forked
                from concurrent.futures import ThreadPoolExecutor
                self.writer = (os.getpid(), ThreadPoolExecutor(1, WRITER))
            return self.writer[1]

    # ---------------------------------------------------------- the index
    def serves(self, path) -> bool:
        return self.index is not None and (path == self.index or
                                           path.startswith(self.index + "/"))

    def index_response(self, path):
        """(status, content type, body bytes) for a path under the index."""
        rest = path[len(self.index):].strip("/")
        if not rest:
            return "200 OK", "text/html; charset=utf-8", self._index_page()
        if "/" in rest or not _NAME.match(rest):
            return "404 Not Found", "text/plain; charset=utf-8", b"not found\n"
        try:
            with open(os.path.join(self.directory, rest), "rb") as f:
                body = f.read()
        except OSError:
            return "404 Not Found", "text/plain; charset=utf-8", b"not found\n"
        kind = ("text/html; charset=utf-8" if rest.endswith(".html")
                else "application/octet-stream")
        return "200 OK", kind, body

    def _request(self, name) -> dict:
        """The request a capture was made of (its META), cached: a capture
        never changes once it has its name."""
        got = self.requests.get(name)
        if got is None:
            from ..errors import PyprofError
            from ..model.codec import read_meta
            try:
                got = read_meta(os.path.join(self.directory, name)).get("request")
            except PyprofError:
                got = None
            got = got if isinstance(got, dict) else {}
            if len(self.requests) >= 10000:
                self.requests.clear()
            self.requests[name] = got
        return got

    def _index_page(self) -> bytes:
        try:
            names = set(n for n in os.listdir(self.directory) if _NAME.match(n))
        except OSError:
            names = set()
        rows = []
        # newest first: the names' time, then their order within that second
        for n in sorted((n for n in names if n.endswith(".cprof")),
                        key=lambda n: (_NAME.match(n)["when"], self._mtime(n)), reverse=True):
            m = _NAME.match(n)
            req = self._request(n)
            path = req.get("path")
            path = path if isinstance(path, str) else "/" + m["slug"]
            stem = n[:-len(".cprof")]
            report = (f'<a href="{self.index}/{stem}.html">report</a> '
                      if stem + ".html" in names else "")
            rows.append(f"<tr><td>{m['when']}</td><td>{m['pid'] or ''}</td>"
                        f"<td>{m['method']}</td><td>{html.escape(path)}</td>"
                        f"<td>{m['ms']} ms</td>"
                        f'<td>{report}<a href="{self.index}/{n}">capture</a></td></tr>')
        body = ("<!doctype html><meta charset=utf-8><title>pyprof: profiled requests</title>"
                "<h1>Profiled requests</h1><table><tr><th>when</th><th>pid</th><th>method</th>"
                "<th>path</th><th>duration</th><th></th></tr>" + "".join(rows) +
                "</table>")
        return body.encode()

    def _mtime(self, name) -> int:
        try:
            return os.stat(os.path.join(self.directory, name)).st_mtime_ns
        except OSError:
            return 0


class _Body:
    """A WSGI response body whose end ends the request's profile: its last
    chunk read, or its close (servers call it; test clients may not)."""

    def __init__(self, body, finish):
        self.body, self.finish = body, finish

    def __iter__(self):
        try:
            yield from self.body
        finally:
            self.finish()

    def close(self):
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.finish()


class WSGIProfiler:
    """WSGI middleware: ``WSGIProfiler(app, directory=..., param=..., ...)``
    (the keywords of the module's doc; docs/web.md)."""

    def __init__(self, app, **options):
        self.app = app
        self.recorder = Recorder(**options)

    def __call__(self, environ, start_response):
        rec = self.recorder
        path = environ.get("PATH_INFO", "") or "/"
        if rec.serves(path):
            status, kind, body = rec.index_response(path)
            start_response(status, [("Content-Type", kind),
                                     ("Content-Length", str(len(body)))])
            return [body]
        header = (environ.get("HTTP_" + rec.header.upper().replace("-", "_"))
                  if rec.header else None)
        profile, keep = rec.choose(environ.get("QUERY_STRING", ""), header)
        prof = rec.start() if profile else None
        if prof is None:
            return self.app(environ, start_response)
        t0 = time.perf_counter()
        thread = threading.get_ident()
        done = []

        def finish():
            if done:
                return
            done.append(True)
            seconds = time.perf_counter() - t0
            rec.stop(prof)
            rec.write(prof, seconds, keep, environ.get("REQUEST_METHOD", "GET"), path, thread)

        try:
            body = self.app(environ, start_response)
        except BaseException:
            finish()
            raise
        if isinstance(body, (list, tuple)):     # nothing runs while it is sent
            finish()
            return body
        return _Body(body, finish)


class ASGIProfiler:
    """ASGI middleware (Starlette, FastAPI): ``app.add_middleware(ASGIProfiler,
    directory=..., ...)`` or ``ASGIProfiler(app, ...)``."""

    def __init__(self, app, **options):
        self.app = app
        self.recorder = Recorder(**options)
        rec = self.recorder
        # a request's time is mostly awaited: --async puts it under the request's
        # task (wall sampling: its awaiting stacks; tracing: coroutines' awaiting)
        if rec.enabled and rec.mode in ("sample", "function"):
            rec.options.asyncio = True

    async def __call__(self, scope, receive, send):
        rec = self.recorder
        if scope.get("type") != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "") or "/"
        if rec.serves(path):
            status, kind, body = rec.index_response(path)
            await send({"type": "http.response.start", "status": int(status.split()[0]),
                        "headers": [(b"content-type", kind.encode()),
                                    (b"content-length", str(len(body)).encode())]})
            await send({"type": "http.response.body", "body": body})
            return
        header = None
        if rec.header:
            want = rec.header.lower().encode()
            for k, v in scope.get("headers", ()):
                if k.lower() == want:
                    header = v.decode("latin-1")
        query = scope.get("query_string", b"").decode("latin-1")
        profile, keep = rec.choose(query, header)
        prof = rec.start() if profile else None
        if prof is None:
            return await self.app(scope, receive, send)
        import asyncio
        try:
            task = asyncio.current_task()
            task = task.get_name() if task is not None else None
        except RuntimeError:            # not asyncio's loop (trio)
            task = None
        t0 = time.perf_counter()
        try:
            await self.app(scope, receive, send)
        finally:
            seconds = time.perf_counter() - t0
            rec.stop(prof)
            # awaited: a server's graceful shutdown waits for the request's task
            await asyncio.get_running_loop().run_in_executor(
                rec.executor(), rec.write, prof, seconds, keep, scope.get("method", "GET"),
                path, None, task)


class DjangoProfiler:
    """Django middleware: add ``"pyprof.middleware.DjangoProfiler"`` to
    MIDDLEWARE and its keywords as ``PYPROF = {"directory": ..., ...}`` to the
    settings (synchronous views)."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response):
        from django.conf import settings
        self.get_response = get_response
        self.recorder = Recorder(**dict(getattr(settings, "PYPROF", {})))

    def __call__(self, request):
        rec = self.recorder
        path = request.path_info or "/"
        if rec.serves(path):
            from django.http import HttpResponse
            status, kind, body = rec.index_response(path)
            return HttpResponse(body, status=int(status.split()[0]), content_type=kind)
        header = request.headers.get(rec.header) if rec.header else None
        profile, keep = rec.choose(request.META.get("QUERY_STRING", ""), header)
        prof = rec.start() if profile else None
        if prof is None:
            return self.get_response(request)
        t0 = time.perf_counter()
        try:
            return self.get_response(request)
        finally:
            seconds = time.perf_counter() - t0
            rec.stop(prof)
            rec.write(prof, seconds, keep, request.method, path, threading.get_ident())
