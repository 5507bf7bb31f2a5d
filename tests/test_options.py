"""Run options (python/pyprof/options/): one RunOptions built from the
parser, checked once, handed to Profile, to children and to %%cprof; and
what each entry point imports at start-up."""
import os
import pstats
import subprocess
import sys
import textwrap

import pytest

import pyprof
from pyprof import _cprof, cli
from pyprof.integrations import magic
from pyprof.runtime.children import decode_config, encode_config
from pyprof.errors import OptionError, PyprofError
from pyprof.options import SORT_KEYS, RunOptions, parse_run_args, run_parser, split_argv

PROG = "prog.py"


def parsed(argv):
    opts, rest = parse_run_args([*argv, PROG, "arg"])
    assert rest == [PROG, "arg"], (argv, rest)
    return opts.check()


# One line per option of the parser: the command line that sets it, and what
# it must become in RunOptions / Profile's keywords (= a child's configuration).
# A new parser option fails test_the_table_covers_the_parser until it is here.
CASES = {
    "--outfile": (["-o", "OUT.cprof"], {"outfile": "OUT.cprof"}, {}),
    "--sort": (["-s", "tottime"], {"sort": "tottime"}, {}),
    "--mode": (["--mode", "lines"], {"chosen_mode": "lines", "lines": True}, {"lines": True}),
    "-m": (["-m"], {"module": True}, {}),
    "-c": (["-c"], {"code": True}, {}),
    "--sample": (["--sample"], {"sample": True}, {"mode": "sample"}),
    "--rate": (["--sample", "--rate", "100"], {}, {"mode": "sample", "rate": 100.0}),
    "--cpu": (["--sample", "--cpu"], {"cpu": True}, {"mode": "sample", "wall": False}),
    "--cpu-timer": (["--sample", "--cpu-timer", "itimer"], {"cpu_timer": "itimer"},
                    {"mode": "sample", "cpu_timer": "itimer"}),
    "--wall": (["--sample", "--wall"], {}, {"mode": "sample", "wall": True}),
    "--native": (["--sample", "--native"], {}, {"mode": "sample", "native": True}),
    "--async": (["--sample", "--async"], {"asyncio": True}, {"mode": "sample", "asyncio": True}),
    "--dump-every": (["--sample", "--dump-every", "2"], {"dump_every": 2.0}, {"mode": "sample"}),
    "--signal": (["--sample", "--signal", "USR2"], {"signal": "USR2"}, {"mode": "sample"}),
    "--memory": (["--memory"], {"memory": True}, {"mode": "memory"}),
    "--memory-sample": (["--memory-sample", "64k"], {"memory": True},
                        {"mode": "memory", "memory_sample": 65536}),
    "--memory-stacks": (["--memory-stacks"], {"memory": True},
                        {"mode": "memory", "memory_stacks": True}),
    "--native-allocs": (["--native-allocs"], {"memory": True},
                        {"mode": "memory", "native_allocs": True}),
    "--temporary": (["--temporary", "3"], {"memory": True}, {"mode": "memory", "temporary": 3}),
    "--gc": (["--gc"], {}, {"gc": True}),
    "--objects": (["--objects"], {"objects": True}, {}),
    "--functions": (["--memory", "--functions"], {"functions": True},
                    {"mode": "trace", "memory": True}),
    "--lines": (["-l"], {}, {"lines": True}),
    "--lines-of": (["--lines-of", "json"], {}, {"lines": True, "lines_of": ["json"]}),
    "--lines-all": (["--lines-all"], {}, {"lines": True, "lines_all": "/the/program"}),
    "--include": (["--include", "*.py"], {}, {"lines": True, "include": ["*.py"]}),
    "--exclude": (["--lines-all", "--exclude", "x*"], {}, {"exclude": ["x*"]}),
    "--unit": (["--unit", "ms"], {"unit": "ms"}, {}),
    "--no-call-rows": (["--no-call-rows"], {"no_call_rows": True}, {}),
    "--strict": (["--strict"], {"strict": True}, {}),
    "--timeline": (["--timeline"], {}, {"timeline": True}),
    "--min-duration": (["--timeline", "--min-duration", "1ms"], {},
                       {"timeline": True, "timeline_min_duration": 1_000_000}),
    "--timeline-max-events": (["--timeline", "--timeline-max-events", "7"], {},
                              {"timeline": True, "timeline_max_events": 7}),
    "--opcodes": (["--sample", "--opcodes"], {}, {"mode": "sample", "opcodes": True}),
    "--no-builtins": (["--no-builtins"], {}, {"builtins": False}),
    "--exact-builtins": (["--exact-builtins"], {}, {"exact_builtins": True}),
    "--flush-interval": (["--flush-interval", "3"], {"flush_interval": 3.0}, {}),
    "--children": (["--children"], {"children": True}, {}),
    "--listen": (["--listen"], {"listen": True}, {}),
    "--live": (["--live"], {"live": True}, {}),
    "--version": (["--version"], {"version": True}, {}),
}


def parser_options():
    """Each parser option by its longest spelling (-h aside)."""
    return {max(a.option_strings, key=len) for a in run_parser()._actions
            if a.option_strings and a.dest != "help"}


def test_the_table_covers_the_parser():
    assert parser_options() == set(CASES)


@pytest.mark.parametrize("option", sorted(CASES))
def test_every_option_reaches_profile_and_children(option, tmp_path):
    argv, fields, kwargs = CASES[option]
    if option == "--native" and "libunwind" not in _cprof.FEATURES:
        pytest.skip("this build has no libunwind")
    if option == "--outfile":
        argv = ["-o", str(tmp_path / "OUT.cprof")]
        fields = {"outfile": str(tmp_path / "OUT.cprof")}
    opts = parsed(argv)
    for name, value in fields.items():
        assert getattr(opts, name) == value, (option, name)
    kw = opts.profile_kwargs(program_dir="/the/program")
    for name, value in kwargs.items():
        assert kw[name] == value, (option, name, kw)
    # the flag changed something: the options differ from no options at all
    assert opts != parsed([]), option
    # Profile gets them (as the CLI gives them: already checked) ...
    if opts.lines_all is True:
        opts.lines_all = "/the/program"
    prof = pyprof.Profile(options=opts, _warn=False)
    assert prof.run_options is opts
    assert prof.sampling == (kw["mode"] == "sample")
    assert prof.memory == (kw["memory"] or kw["mode"] == "memory")
    assert prof.timeline == kw["timeline"]
    assert prof.exact_builtins == kw["exact_builtins"]
    assert (prof.line_targets is not None) == kw["lines"]
    # ... and a child gets the same: its configuration travels through the
    # environment (marshal) and becomes the child's Profile keywords
    config = decode_config(encode_config({"profile": prof.run_options.profile_kwargs()}))
    child = RunOptions.from_profile(**config["profile"]).check()
    assert child.profile_kwargs() == kw
    # and Profile's keywords map back to the same options
    again = pyprof.Profile(_warn=False, **config["profile"])
    assert again.run_options.profile_kwargs() == kw


def test_defaults_are_the_parser_defaults():
    """No option given on the command line = no keyword given to Profile."""
    opts = RunOptions.from_args(run_parser().parse_args([]))
    assert opts.profile_kwargs() == RunOptions.from_profile().check().profile_kwargs()
    assert opts.check().profile_kwargs() == pyprof.Profile().run_options.profile_kwargs()
    assert opts.memory_stacks is None and opts.lines_all is None     # Profile's defaults


def test_sort_keys_are_pstats():
    assert list(SORT_KEYS) == sorted(pstats.Stats.sort_arg_dict_default)


# ---------------------------------------------------------------- the rules
# (command line, its message; Profile keywords or None, the API's message)
RULES = [
    (["-s", "bogus"], "unknown sort key 'bogus'", None, None),
    (["-m", "-c"], "-m and -c cannot be used together", None, None),
    (["--flush-interval", "-1"], "--flush-interval must be >= 0", None, None),
    (["-o", "x.svg"], "x.svg: memory-svg shows memory: add --memory", None, None),
    (["--memory", "-o", "x.flame.html"], "memory profiling alone does not record", None, None),
    (["-o", "x.trace.json"], "a Chrome trace shows the timeline of calls", None, None),
    (["--memory-sample", "0"], "--memory-sample takes a positive number of bytes",
     dict(mode="memory", memory_sample="lots"),
     "memory_sample takes a positive number of bytes (like 4096, 512k or 4M), not 'lots'"),
    (["--memory-sample", "2048G"], "--memory-sample must be a number of bytes in (0, 2**40]",
     dict(mode="memory", memory_sample=-1), "memory_sample must be a number of bytes in "
                                            "(0, 2**40], not -1"),
    (["--functions"], "--functions goes with --memory", None, None),
    (["--memory", "--functions", "--sample"], "--functions combines --memory with function "
                                              "tracing", None, None),
    (["--min-duration", "1ms"], "--min-duration and --timeline-max-events go with --timeline",
     None, None),
    (["--timeline", "--sample"], "--timeline records function calls: it goes with function "
                                 "mode", dict(timeline=True, mode="sample"),
     "timeline=True records function calls: it goes with function mode"),
    (["--timeline", "-l"], "--timeline records function calls: it goes with function mode",
     dict(timeline=True, lines=True), "timeline=True records function calls"),
    (["--timeline", "--memory"], "--timeline records function calls: with --memory, add "
                                 "--functions", dict(timeline=True, mode="memory"),
     "timeline=True records function calls"),
    (["--timeline", "--min-duration", "fast"], "--min-duration takes a duration like 10us",
     dict(timeline=True, timeline_min_duration="fast"),
     "timeline_min_duration takes a duration like 10us"),
    (["--timeline", "--timeline-max-events", "-1"], "--timeline-max-events must be in "
                                                    "[0, 2**32), not -1",
     dict(timeline=True, timeline_max_events=2**32), "timeline_max_events must be in "
                                                     "[0, 2**32), not 4294967296"),
    (["--rate", "100"], "--rate, --cpu, --cpu-timer, --wall, --native, --signal and "
                        "--dump-every go with --sample", None, None),
    (["--cpu-timer", "itimer"], "--cpu-timer, --wall, --native, --signal and --dump-every go "
                                "with --sample", None, None),
    (["--sample", "--rate", "10001"], "--rate must be in [1, 10000] Hz, not 10001",
     dict(mode="sample", rate=0.5), "rate must be in [1, 10000] Hz, not 0.5"),
    (["--sample", "--wall", "--cpu-timer", "itimer"], "--cpu-timer is CPU mode's timer: wall "
                                                      "mode has per-thread wall-clock timers",
     dict(mode="sample", wall=True, cpu_timer="task-clock"),
     "cpu_timer is CPU mode's timer: wall mode has per-thread wall-clock timers"),
    (["--memory", "--native"], "--native also with --memory-stacks or --memory-sample",
     dict(mode="memory", native=True), "native=True with memory needs the allocation stacks"),
    (["--sample", "--rate", "0"], "--rate must be in [1, 10000] Hz, not 0",
     dict(mode="sample", rate=1e9), "rate must be in [1, 10000] Hz, not 1e+09"),
    (["--sample", "-l"], "--sample and line tracing (-l, --lines-of, --lines-all) do not "
                         "combine", None, None),
    (["--sample", "--signal", "KILL"], "--signal: 'KILL' is not a signal pyprof can use",
     None, None),
    (["--sample", "--dump-every", "-1"], "--dump-every must be >= 0", None, None),
    (["--opcodes"], "--opcodes needs a mode that sees instructions: --sample, or line "
                    "tracing (-l, --lines-of, --lines-all)",
     dict(mode="memory", opcodes=True), "opcodes needs a mode that sees instructions"),
    (None, None, dict(mode="memories"), "mode must be 'trace', 'sample' or 'memory', not "
                                        "memories"),
]


@pytest.mark.parametrize("argv, message, kwargs, api_message", RULES)
def test_each_rule_has_its_one_message(argv, message, kwargs, api_message, tmp_path,
                                       monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / PROG).write_text("open('ran', 'w').close()\n")
    if argv is not None:
        assert cli.main([*argv, PROG]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith("pyprof: error: "), err
        assert message in err, err
        assert not (tmp_path / "ran").exists()
    if kwargs is not None:
        with pytest.raises(PyprofError) as e:
            pyprof.Profile(**kwargs)
        assert api_message in str(e.value), str(e.value)
        assert "\n" not in str(e.value)
        if isinstance(e.value, OptionError):
            assert isinstance(e.value, ValueError)      # as the C core's checks were


def test_api_messages_are_the_cli_messages_spelled_as_keywords():
    for kwargs, flags in ((dict(mode="sample", rate=-5), ["--sample", "--rate", "-5"]),
                          (dict(timeline=True, timeline_max_events=-1),
                           ["--timeline", "--timeline-max-events", "-1"])):
        with pytest.raises(OptionError) as api:
            pyprof.Profile(**kwargs)
        with pytest.raises(OptionError) as cmd:
            parsed(flags)
        spelled = str(cmd.value).replace("--timeline-max-events", "timeline_max_events")
        assert str(api.value) == spelled.replace("--rate", "rate")


# ---------------------------------------------------------------- the split
@pytest.mark.parametrize("argv, mine", [
    (["--sample", "--rate", "100", "s.py", "-x"], ["--sample", "--rate", "100"]),
    (["--sample", "--rate=100", "s.py", "-x"], ["--sample", "--rate=100"]),
    (["--sample", "--rat", "100", "s.py"], ["--sample", "--rat", "100"]),    # a prefix
    (["-o", "script.py", "s.py", "-o", "y"], ["-o", "script.py"]),   # a value like a script
    (["-oout.cprof", "s.py"], ["-oout.cprof"]),
    (["-lo", "out.cprof", "s.py"], ["-lo", "out.cprof"]),                   # flags run together
    (["--memory-sample", "s.py"], ["--memory-sample"]),             # optional value: not this
    (["--memory-sample", "64k", "s.py"], ["--memory-sample", "64k"]),
    (["--memory-sample=64k", "s.py"], ["--memory-sample=64k"]),
    (["--timeline", "--min-duration", "1ms", "--timeline-max-events", "5", "s.py"],
     ["--timeline", "--min-duration", "1ms", "--timeline-max-events", "5"]),
    (["-s", "tottime", "--", "-weird.py"], ["-s", "tottime"]),
    (["--signal", "USR2", "--dump-every", "1", "s.py"], ["--signal", "USR2", "--dump-every",
                                                          "1"]),
])
def test_split_knows_every_value_option(argv, mine):
    got, rest = split_argv(run_parser(), argv)
    assert got == mine
    assert rest == argv[len(mine) + (argv[len(mine):][:1] == ["--"]):]


def test_the_plain_reader_reads_as_argparse():
    """A plain command line is read without argparse (start-up): the same
    values as argparse's, or None to let argparse read (and refuse) it."""
    from pyprof.options.argv import _read_plain
    lines = [argv for argv, _, _ in CASES.values()] + [
        ["--sample", "--rate=100", "--wall", "-o", "x.cprof"], ["--lines-of", "a", "--lines-of",
                                                                "b", "--exclude=c*"],
        ["--memory-sample"], ["--memory-sample", "1M", "--objects"], ["--unit", "ns"],
        ["-s", "tottime", "-s", "calls"], [], ["--timeline", "--min-duration=5us"]]
    for argv in lines:
        assert _read_plain(argv) == vars(run_parser().parse_args(argv)), argv
    for argv in (["--help"], ["--rat", "100"], ["--rate", "abc"], ["--unit", "h"],
                 ["--cpu", "--wall"], ["-lo", "x"], ["-ox.cprof"], ["--rate", "-5"],
                 ["--sample=1"], ["--nope"], ["-o"]):
        assert _read_plain(argv) is None, argv


def test_a_new_value_option_needs_no_hand_list():
    p = run_parser()
    p.add_argument("--brand-new", metavar="X")
    assert split_argv(p, ["--brand-new", "v.py", "s.py"]) == (["--brand-new", "v.py"],
                                                              ["s.py"])


def test_magic_knows_the_view_options_values():
    # %cprof [options] statement: --select takes a value (it was read as the statement)
    opts, code = magic.parse("--select calls,time --order-by calls sum(range(9))", None)
    assert code == "sum(range(9))"
    assert opts.select == ["calls,time"] and isinstance(opts.run, RunOptions)
    opts, code = magic.parse("--sample --rate 100 f(1)", None)
    assert code == "f(1)" and opts.run.profile_kwargs()["rate"] == 100.0


@pytest.mark.parametrize("rate", [["--rate", "100"], ["--rate=100"]])
def test_cli_rate_forms(tmp_path, rate):
    (tmp_path / "s.py").write_text("import sys\nprint(sys.argv[1:])\n")
    r = subprocess.run([sys.executable, "-m", "pyprof", "--sample", *rate, "-o", "x.cprof",
                        "s.py", "--rate", "7"], cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "['--rate', '7']"
    s = pyprof.Session.load(tmp_path / "x.cprof")
    assert s.info["sampling"]


# ---------------------------------------------------------------- start-up
HEAVY = ("dataclasses", "inspect", "typing", "re", "pstats", "argparse", "json", "tempfile")


def _loaded(code, *args, cwd=None):
    r = subprocess.run([sys.executable, *args], input=code, cwd=cwd, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


def test_import_pyprof_is_light():
    show = "import sys; print(' '.join(sys.modules))"
    before = _loaded(show, "-")
    after = _loaded("import pyprof\n" + show, "-")
    assert not (after - before) & set(HEAVY), sorted((after - before) & set(HEAVY))
    assert "pyprof.model.session" not in after and "pyprof.runtime.profiler" not in after
    # the names still resolve, on first use
    after = _loaded("import pyprof\npyprof.Profile, pyprof.Session, pyprof.load\n" + show, "-")
    assert "pyprof.model.session" in after and "pyprof.runtime.profiler" in after


@pytest.mark.parametrize("mode", [[], ["--sample"]])
def test_writing_a_capture_loads_no_data_model(tmp_path, mode):
    prog = tmp_path / "p.py"
    # the program's atexit runs after pyprof wrote the capture
    prog.write_text(textwrap.dedent("""
        import atexit, sys
        atexit.register(lambda: print(' '.join(sys.modules)))
    """))
    r = subprocess.run([sys.executable, "-m", "pyprof", *mode, "-o", "x.cprof", str(prog)],
                       cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    loaded = set(r.stdout.split())
    assert "pyprof.model.session" not in loaded and "pyprof.export.pstats" not in loaded
    assert not loaded & {"dataclasses", "inspect", "pstats", "json", "tempfile"}, loaded
    s = pyprof.Session.load(tmp_path / "x.cprof")
    assert s.meta["modes"] == (["sample"] if mode else ["function"])
    assert s.meta["pid"] and os.path.basename(s.meta["argv"][0]) == "p.py"


def test_the_c_core_holds_no_default():
    """module.c takes every argument (the defaults are Python's): a call
    without them is refused, and Profile passes each one, rate by the mode."""
    from pyprof import _cprof
    with pytest.raises(TypeError, match="missing required argument"):
        _cprof.Profiler()
    with pytest.raises(TypeError, match="missing required argument"):
        _cprof.Profiler(None, 0.0, True, True)
    for kw, rate in ((dict(mode="sample"), 250.0), (dict(mode="sample", wall=True), 100.0),
                     (dict(mode="sample", rate=77), 77.0), ({}, 250.0)):
        prof = pyprof.Profile(**kw)
        assert prof.core_arguments["rate"] == rate
        core = dict(prof.core_arguments)
        _cprof.Profiler(None, 0.0, True, **core)        # all of them, nothing else
        with pytest.raises(ValueError, match=r"rate must be in \[1, 10000\] Hz"):
            _cprof.Profiler(None, 0.0, True, **{**core, "rate": 0.0})
        with pytest.raises(ValueError, match=r"rate must be in \[1, 10000\] Hz"):
            _cprof.Profiler(None, 0.0, True, **{**core, "rate": 20000.0})
        with pytest.raises(ValueError, match="cpu_timer must be 'auto', 'task-clock' or"):
            _cprof.Profiler(None, 0.0, True, **{**core, "cpu_timer": "tsc"})


def test_every_option_of_the_table_reaches_each_place_with_its_default(monkeypatch):
    """options/table.py declares each option once; argparse, [tool.pyprof],
    the environment, Profile's keywords and the C call are built from it."""
    from pyprof.options import KEYWORDS, TABLE, config
    parser = run_parser()
    by_dest = {a.dest: a for a in parser._actions}
    defaults = vars(parser.parse_args([]))
    settings = {s.field: s for s in config.SETTINGS if s.section == ""}
    from_argv = RunOptions.from_args(defaults)
    def same(a, b):
        return (list(a) == list(b)) if isinstance(a, (list, tuple)) else a == b
    for o in TABLE:
        if o.cli:
            assert o.dest in by_dest, o.field
            assert any(f in by_dest[o.dest].option_strings for f in o.cli[1]), o.field
            assert same(getattr(from_argv, o.field), o.default), o.field  # argparse's default
        if o.setting:
            s = settings["mode" if o.field == "chosen_mode" else o.field]
            assert s.env == "PYPROF_" + s.key.upper()
            assert s.key == o.setting.get("key", o.field)
        if o.is_keyword:
            assert KEYWORDS[o.field] == o.keyword
    # Profile's keywords are the table's, with its defaults
    prof = pyprof.Profile()
    for name, default in KEYWORDS.items():
        if name in ("children", "flush_interval"):
            assert getattr(prof.run_options, name) == default, name
    with pytest.raises(TypeError, match="unexpected keyword argument 'rat'"):
        pyprof.Profile(rat=5)
    # the C call: one argument per option with a core, nothing else
    assert set(prof.core_arguments) == {o.field for o in TABLE if o.core}
    # every [tool.pyprof] key is read from the environment too
    for s in settings.values():
        if s.kind == "bool":
            cfg = config.Config(path="", environ={s.env: "1"})
            assert cfg.value("", s.key) is True, s.env


def test_profile_signature_lists_every_keyword():
    """help(pyprof.Profile) and editors show the keywords Profile takes, with
    their defaults, not **keywords; each is accepted, and the defaults are what
    a Profile made without them uses."""
    import inspect
    from pyprof.options import KEYWORDS
    sig = inspect.signature(pyprof.Profile)
    assert not any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())
    names = list(sig.parameters)
    assert names[:4] == ["timer", "timeunit", "subcalls", "builtins"]
    assert set(names) == {"timer", "timeunit", "subcalls", "flush_to", "options"} | set(KEYWORDS)
    defaults = {k: p.default for k, p in sig.parameters.items()}
    plain = pyprof.Profile().run_options
    explicit = pyprof.Profile(**{k: defaults[k] for k in KEYWORDS}).run_options
    assert explicit == plain
