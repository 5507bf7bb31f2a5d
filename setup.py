"""Build of the C core, pyprof._cprof (metadata lives in pyproject.toml).

zlib is required. libunwind and elfutils' libdw are linked when their headers
are found (PYPROF_NO_LIBUNWIND=1 / PYPROF_NO_LIBDW=1 leave them out), and the
feature list (`pyprof --version`) says so. PYPROF_SANITIZE=1 builds with
AddressSanitizer + UBSan (used by `make asan`).
"""
import os
import sys
from setuptools import Extension, setup


def header_exists(name):
    dirs = ["/usr/include", "/usr/local/include"]
    dirs += [os.path.join("/usr/include", d) for d in os.listdir("/usr/include")
             if d.endswith("-linux-gnu")] if os.path.isdir("/usr/include") else []
    return any(os.path.exists(os.path.join(d, name)) for d in dirs)


# The engines live in folders (tracer/, sampler/, memory/, capture/); the
# shared lower parts stay at the top. Headers are included from src/_cprof.
sources = [os.path.join("src", "_cprof", f) for f in (
    "clock.c", "table.c", "stack.c", "frames.c", "unwind.c", "symbols.c", "termguard.c",
    "asyncio_task.c",
    "threads.c", "registry.c",
    "tracer/tracer.c", "tracer/tracer_events.c", "tracer/tracer_monitoring.c", "tracer/tracer_legacy.c",
    "tracer/tracer_coro.c",
    "sampler/sampler.c", "sampler/sampler_drain.c", "sampler/sampler_samples.c", "sampler/sampler_wall.c", "sampler/sampler_signals.c",
    "sampler/sampler_async.c", "sampler/sampler_cpuclock.c",
    "memory/memory.c", "memory/memory_control.c", "memory/memory_blocks.c", "memory/memory_numpy.c",
    "memory/memory_curve.c", "memory/memory_native.c", "memory/memory_runs.c",
    "capture/capture.c", "capture/capture_async.c",
    "gcwatch.c", "profiler.c", "remote.c", "remote_read.c", "remote_py.c",
    "module.c")]

define_macros = []
libraries = ["z", "m"]
if header_exists("libunwind.h") and os.environ.get("PYPROF_NO_LIBUNWIND") != "1":
    define_macros.append(("PP_HAVE_LIBUNWIND", "1"))
    libraries.append("unwind")
# libunwind-ptrace: native stacks of another process, read from outside (dump --native)
if header_exists("libunwind-ptrace.h") and os.environ.get("PYPROF_NO_LIBUNWIND") != "1":
    define_macros.append(("PP_HAVE_LIBUNWIND_PTRACE", "1"))     # opened at first use
    if "dl" not in libraries:
        libraries.append("dl")
# elfutils' libdw names native frames with file, line and inlined functions;
# opened at first use (symbols.c), not linked: it would cost every start ~1 ms
if header_exists("elfutils/libdwfl.h") and os.environ.get("PYPROF_NO_LIBDW") != "1":
    define_macros.append(("PP_HAVE_LIBDW", "1"))
    if "dl" not in libraries:
        libraries.append("dl")

# hidden: calls between the core's files are direct (no PLT) and inlinable, as
# they were when one file held them; only PyInit__cprof is exported.
extra_compile_args = ["-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers",
                      "-Wno-cast-function-type", "-O2", "-fno-strict-aliasing",
                      "-fvisibility=hidden"]
extra_link_args = []
if os.environ.get("PYPROF_SANITIZE") == "1":
    flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
             "-fno-omit-frame-pointer", "-g", "-O1"]
    extra_compile_args += flags
    extra_link_args += flags
if os.environ.get("PYPROF_WERROR") == "1":
    extra_compile_args.append("-Werror")


if not os.path.exists(os.path.join("src", "_cprof", "module.c")):
    sys.exit("pyprof: run setup.py from the repository root")

setup(
    ext_modules=[Extension(
        "pyprof._cprof",
        sources=sources,
        depends=[os.path.join(d, f) for d, _, files in os.walk(os.path.join("src", "_cprof"))
                 for f in files if f.endswith(".h")],
        include_dirs=[os.path.join("src", "_cprof")],
        define_macros=define_macros,
        libraries=libraries,
        extra_compile_args=extra_compile_args,
        extra_link_args=extra_link_args,
    )],
)
