"""Servers for tests/test_attach.py, started without pyprof.

    python attach_servers.py threaded|asyncio PORTFILE

A threaded HTTP server (http.server.ThreadingHTTPServer) or an asyncio one
(uvicorn, with a plain ASGI app). GET /work?n=N computes attach_work.handler_work(N)
and prints one line "served n=N sum=S"; GET /state answers what a detach must
leave as it found it, read from CPython's own APIs: the profile and trace
hooks, the sys.monitoring tools, the threads, the allocators (PyMem_GetAllocator
through ctypes). The port is written to PORTFILE once the server listens.
"""
import ctypes
import json
import os
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attach_work import handler_work  # noqa: E402


class _Allocator(ctypes.Structure):
    _fields_ = [("ctx", ctypes.c_void_p), ("malloc", ctypes.c_void_p),
                ("calloc", ctypes.c_void_p), ("realloc", ctypes.c_void_p),
                ("free", ctypes.c_void_p)]


def state():
    allocators = []
    for domain in range(3):                 # PYMEM_DOMAIN_RAW, MEM, OBJ
        a = _Allocator()
        ctypes.pythonapi.PyMem_GetAllocator(ctypes.c_int(domain), ctypes.byref(a))
        allocators.append([a.ctx, a.malloc, a.calloc, a.realloc, a.free])
    mon = getattr(sys, "monitoring", None)
    return {"profile": repr(sys.getprofile()), "trace": repr(sys.gettrace()),
            "threading_profile": repr(getattr(threading, "_profile_hook", None)),
            "threading_trace": repr(getattr(threading, "_trace_hook", None)),
            "tools": [mon.get_tool(i) for i in range(6)] if mon else None,
            # not the server's request threads: they come and go with the load
            "threads": sorted(t.name for t in threading.enumerate()
                              if "process_request" not in t.name),
            "allocators": allocators,
            "meta_path": [type(f).__name__ for f in sys.meta_path],
            "modules_main": sorted(k for k in vars(sys.modules["__main__"]) if not k.startswith("__"))}


def answer(path):
    """(status, body bytes) for a request path."""
    if path.startswith("/work?n="):
        n = int(path.split("=", 1)[1])
        s = handler_work(n)
        print(f"served n={n} sum={s}", flush=True)
        return 200, str(s).encode()
    if path == "/state":
        return 200, json.dumps(state()).encode()
    return 404, b"no"


def threaded(portfile):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            status, body = answer(self.path)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):       # the served lines are the output
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    with open(portfile + ".tmp", "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(portfile + ".tmp", portfile)
    server.serve_forever()


def asyncio_server(portfile):
    import socket
    import uvicorn

    async def app(scope, receive, send):
        if scope["type"] != "http":
            return
        path = scope["path"] + ("?" + scope["query_string"].decode() if scope["query_string"] else "")
        status, body = answer(path)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    with open(portfile + ".tmp", "w") as f:
        f.write(str(sock.getsockname()[1]))
    os.replace(portfile + ".tmp", portfile)
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    {"threaded": threaded, "asyncio": asyncio_server}[sys.argv[1]](sys.argv[2])
