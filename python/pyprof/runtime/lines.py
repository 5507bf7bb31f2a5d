"""Line targets: what line mode traces (the ``@profile`` decorator is decorator.py).

A line target is a code object whose lines are timed. Targets come from:

- ``@pyprof.profile`` (decorator.py; or ``Profile.add_function``): the decorated function's code,
  with the generator expressions, comprehensions and lambdas written inside it;
- patterns (``--lines-of``): ``module``, ``module:function``, ``module:Class.method``,
  or a file glob;
- whole-program mode (``--lines-all``): every code object of the files under a
  directory (the script's), minus site-packages and the standard library, with
  ``--include``/``--exclude`` globs on top.

The C core asks :class:`Targets` once per new code object it meets (``filter``);
decorated code is also pushed to running line profilers directly.
"""
import os
import sys
import types


# Code objects nested in a function whose lines are the function's own text.
_ANONYMOUS = ("<genexpr>", "<listcomp>", "<setcomp>", "<dictcomp>", "<lambda>")

DECORATED: set = set()                     # code objects, for the process


def code_objects(obj) -> list:
    """The code objects ``@profile`` traces for `obj`, or [] if it is no function."""
    seen, out, todo = set(), [], [obj]
    # no partial object without functools (not imported for it: ~4 ms at start-up)
    partial = getattr(sys.modules.get("functools"), "partial", None)
    while todo:
        o = todo.pop()
        if id(o) in seen:
            continue
        seen.add(id(o))
        if isinstance(o, (classmethod, staticmethod)):
            todo.append(o.__func__)
        elif isinstance(o, property):
            todo.extend(f for f in (o.fget, o.fset, o.fdel) if f is not None)
        elif isinstance(o, types.MethodType):
            todo.append(o.__func__)
        elif partial is not None and isinstance(o, partial):
            todo.append(o.func)
        elif isinstance(o, types.FunctionType):
            out.extend(_with_nested(o.__code__))
            if hasattr(o, "__wrapped__"):           # functools.wraps: the wrapped one too
                todo.append(o.__wrapped__)
        elif not isinstance(o, type) and hasattr(o, "__wrapped__"):
            todo.append(o.__wrapped__)              # lru_cache and other C wrappers
    return out


def _with_nested(code) -> list:
    out = [code]
    for const in code.co_consts:
        if isinstance(const, types.CodeType) and const.co_name in _ANONYMOUS:
            out.extend(_with_nested(const))
    return out


_fnmatch = None


def _load_fnmatch():
    """fnmatch imports re (~7 ms): loaded only when there are globs to match."""
    global _fnmatch
    if _fnmatch is None:
        from fnmatch import fnmatch
        _fnmatch = fnmatch


class Targets:
    """The line-target predicate of one profiler (called with a code object)."""

    def __init__(self, patterns=(), all_dir=None, include=(), exclude=(), decorated=True):
        self.decorated = decorated
        self.patterns = [_Pattern(p) for p in patterns]
        self.all_dir = os.path.abspath(all_dir) if all_dir else None
        self.include = list(include)
        self.exclude = list(exclude)
        self._skip = _library_dirs()
        if self.patterns or self.include or self.exclude:
            _load_fnmatch()             # now, not in the filter while the program runs

    def __call__(self, code) -> bool:
        if self.decorated and code in DECORATED:
            return True
        file = code.co_filename
        hit = False
        for p in self.patterns:
            if p.matches(code):
                p.matched = True
                hit = True
        if hit:
            return True
        if self.all_dir is None and not self.include:
            return False
        if any(_fnmatch(file, g) for g in self.exclude):
            return False
        if any(_fnmatch(file, g) for g in self.include):
            return True
        if self.all_dir is None or not file.startswith(self.all_dir + os.sep):
            return False
        return not any(file.startswith(d) for d in self._skip)

    def unmatched(self) -> list:
        """Patterns that matched no code object run so far."""
        return [p.text for p in self.patterns if not p.matched]


class _Pattern:
    """``module``, ``module:qualname`` or a file glob (has a ``/``, ``*`` or ``.py``).

    Module names are resolved on first use (the program's sys.path is in place by
    then) by looking for the file on sys.path: nothing is imported early."""

    def __init__(self, text):
        self.text = text
        self.matched = False
        self.glob = self.module = self.qualname = None
        self._file = False                      # not resolved yet
        if ":" in text and not os.path.exists(text):
            self.module, self.qualname = text.split(":", 1)
        elif any(c in text for c in "/*?[") or text.endswith(".py"):
            self.glob = os.path.abspath(text) if not text.startswith("*") else text
        else:
            self.module = text

    @property
    def file(self):
        if self._file is False:
            self._file = _module_file(self.module)
        return self._file

    def matches(self, code) -> bool:
        if self.glob is not None:
            return _fnmatch(code.co_filename, self.glob)
        if code.co_filename != self.file:
            return False
        if self.qualname is None:
            return True
        q = code.co_qualname
        # The function itself, and the anonymous code written inside it.
        return q == self.qualname or (q.startswith(self.qualname + ".<locals>.<")
                                      and code.co_name in _ANONYMOUS)


def _module_file(name):
    """The source file of a module on sys.path (a .py file or a package's
    __init__.py), found without importing anything; None if there is none."""
    parts = name.split(".")
    for entry in sys.path:
        base = os.path.join(os.path.abspath(entry or os.curdir), *parts)
        for candidate in (base + ".py", os.path.join(base, "__init__.py")):
            if os.path.isfile(candidate):
                return candidate
    return None


def _library_dirs():
    """The standard library and site-packages directories. site's list, not
    sysconfig's: sysconfig imports threading (~5 ms of start-up)."""
    site = sys.modules.get("site")
    stdlib = getattr(os, "__file__", None)
    if site is None or stdlib is None or not hasattr(site, "getsitepackages"):
        import sysconfig                # python -S: no site
        paths = sysconfig.get_paths()
        dirs = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    else:
        dirs = {os.path.dirname(stdlib), *site.getsitepackages()}
    return tuple(os.path.abspath(d) + os.sep for d in dirs if d)
