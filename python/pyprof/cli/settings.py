"""`pyprof config`: the effective settings and where each came from (config.py)."""
from __future__ import annotations

from ..errors import PyprofError
from ..options import given_fields, parse_run_args


def cmd_config(argv) -> int:
    """The effective settings and where each came from (config.py)."""
    fmt = "table"
    argv = list(argv)
    if "--format" in argv:
        i = argv.index("--format")
        if i + 1 >= len(argv) or argv[i + 1] not in ("table", "json"):
            raise PyprofError("--format takes table or json (see 'pyprof config --help')")
        fmt = argv[i + 1]
        del argv[i:i + 2]
    if argv in (["-h"], ["--help"]):
        print("usage: pyprof config [RUN OPTIONS] [--format table|json]\n\n"
              "The settings a run would use (run options given here, then PYPROF_* "
              "variables, then [tool.pyprof] of the nearest pyproject.toml, then the "
              "defaults) and where each came from; also the pytest plugin's and the web "
              "middleware's (docs/cli.md, 'Configuration').")
        return 0
    from ..options import config
    opts, rest = parse_run_args(argv)
    if rest:
        raise PyprofError(f"pyprof config takes run options only, not {rest[0]!r}")
    cfg = config.load()
    origins = config.apply(opts, given_fields(argv), cfg)
    opts.check()
    desc = config.describe(origins, cfg)
    if fmt == "json":
        import json
        print(json.dumps(desc, indent=1, default=str))
        return 0
    print(f"pyproject.toml: {desc['pyproject'] or '(none found)'}")
    print("precedence: command line > environment (PYPROF_*) > pyproject.toml > default")
    for name, title in (("run", "[tool.pyprof]"), ("pytest", "[tool.pyprof.pytest]"),
                        ("web", "[tool.pyprof.web]")):
        print(f"\n{title}")
        width = max(len(r["key"]) for r in desc[name])
        for r in desc[name]:
            value = r["value"]
            shown = "-" if value is None or value == () or value == [] else (
                ",".join(value) if isinstance(value, (list, tuple)) else value)
            print(f"  {r['key']:<{width}}  {str(shown):<24} {r['from']}")
    return 0
