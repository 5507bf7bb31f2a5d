# pyprof developer entry points (GNU make).
#
#   make demo     set up what the demo needs, profile examples/demo.py, show the results
#   make test     set up what the tests need, build (-Werror) and run tests/ on every
#                 CPython 3.11-3.13 found
#   make asan     the test suite against an ASan+UBSan build (3.11 and the newest)
#   make fuzz     differential tests and corrupt captures, longer (SEED= N= CAPTURES=)
#   make bench    overhead vs peers on every CPython found -> benchmarks/RESULTS.md
#   make accuracy the sampler's accuracy against known time splits -> benchmarks/RESULTS.md
#   make bench-threads  wall sampling beside 1-1000 idle threads, against py-spy and pyinstrument
#   make deps     the tests' system packages (apt-get when root)
#   make venv     create/update .venv/3.X (with the test extra) for every version found
#   make pythons  list the interpreters that would be used
#   make clean    remove build/, *.egg-info, .venv, .bench
#
# Knobs (make VAR=value):
#   PY_VERSIONS   minor versions to look for           (default: 3.11 3.12 3.13)
#   PYTHONS       explicit interpreter paths, skipping discovery
#   PYTEST_ARGS   arguments for pytest                 (default: -q)
#   TESTS         test files or folders to run         (default: tests)
#   TEST_TIMEOUT  seconds allowed for one pytest run   (default: 1500)
#   BENCH_ARGS    arguments for benchmarks/run.py or accuracy.py (e.g. --rounds 3 --only richards)
#
# Each venv gets its own *built* copy of pyprof (never an editable install), so
# the tests import exactly what a user would get. Every build recompiles the C
# extension, in build/setuptools/<flavor>/, so a change of flags (-Werror,
# sanitizers) or of setup.py can never leave a stale .so behind.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.ONESHELL:
.DEFAULT_GOAL := help
MAKEFLAGS += --no-print-directory

PY_VERSIONS  ?= 3.11 3.12 3.13
PYTHONS      ?=
VENV_DIR     ?= .venv
PYTEST_ARGS  ?= -q
TESTS        ?= tests
TEST_TIMEOUT ?= 1500
BENCH_ARGS   ?=
DEMO_LINES   ?= 45
SPEEDSCOPE_VERSION ?= 1.25.0

# apt packages: build-essential ones (the build fails without them) and the rest
# (libunwind-dev: optional native stacks; libdw-dev: their file, line and inlined frames;
# graphviz/valgrind/golang-go: `dot`,
# `callgrind_annotate` and `go tool pprof`, used by tests that validate exported files;
# openmpi-bin/libopenmpi-dev: `mpirun` for tests/test_mpi.py, and mpicc should pip
# have to build mpi4py from source where it has no wheel (ensure_mpi4py);
# tmux: the live view's tests in a real terminal (tests/test_attach.py).
# The demo needs the required ones and a C compiler only.
APT_REQUIRED := zlib1g-dev
APT_OPTIONAL := libunwind-dev libdw-dev graphviz valgrind golang-go chromium openmpi-bin \
                libopenmpi-dev tmux openjdk-17-jre-headless

.PHONY: help deps pythons venv test demo asan bench accuracy bench-threads clean

# Shell helpers prepended to the recipes that need them (one shell per recipe).
define SH_LIB
export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1
msg()  { printf '==> %s\n' "$$*"; }
die()  { printf 'error: %s\n' "$$*" >&2; exit 1; }

# "3.X" if $$1 runs and is CPython 3.X, else nothing.
py_minor() {
  [ -x "$$1" ] || command -v "$$1" >/dev/null 2>&1 || return 0
  "$$1" -c 'import sys; assert sys.implementation.name == "cpython"; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true
}

# Supported interpreters, one "3.X /path/to/python3.X" line per minor version:
# pyenv's newest patch release of each minor first, else python3.X on PATH.
find_pythons() {
  local minor exe found root="" v
  if [ -n "$(strip $(PYTHONS))" ]; then
    for exe in $(PYTHONS); do
      minor=$$(py_minor "$$exe")
      [ -n "$$minor" ] || die "PYTHONS: $$exe is not a working CPython"
      printf '%s %s\n' "$$minor" "$$exe"
    done
    return 0
  fi
  if command -v pyenv >/dev/null 2>&1; then root=$$(pyenv root 2>/dev/null || true); fi
  [ -n "$$root" ] || root=$${PYENV_ROOT:-$$HOME/.pyenv}
  for minor in $(PY_VERSIONS); do
    found=""
    if [ -d "$$root/versions" ]; then
      for v in $$(ls -1 "$$root/versions" | grep -E "^$${minor//./\\.}\.[0-9]+$$" | sort -t. -k3,3nr); do
        exe="$$root/versions/$$v/bin/python$$minor"
        if [ "$$(py_minor "$$exe")" = "$$minor" ]; then found=$$exe; break; fi
      done
    fi
    if [ -z "$$found" ] && exe=$$(command -v "python$$minor" 2>/dev/null); then
      # resolve shims (pyenv, asdf) to the real binary
      if [ "$$(py_minor "$$exe")" = "$$minor" ]; then
        found=$$("$$exe" -c 'import sys; print(sys.executable)')
      fi
    fi
    if [ -n "$$found" ]; then printf '%s %s\n' "$$minor" "$$found"; fi
  done
}

pythons_or_die() {
  PYS=$$(find_pythons)
  [ -n "$$PYS" ] || die "no supported CPython found (looked for CPython $(PY_VERSIONS) in pyenv and as python3.X on PATH); install one, e.g. 'pyenv install 3.12', or pass PYTHONS=/path/to/python3.12"
}

# ensure_venv MINOR PYTHON DIR EXTRAS...: DIR is a working venv of PYTHON with
# pip/setuptools/wheel upgraded and the dependencies of the given extras
# installed. Idempotent; dependencies are only reinstalled when they change.
ensure_venv() {
  local minor=$$1 py=$$2 dir=$$3; shift 3
  if [ "$$(py_minor "$$dir/bin/python")" != "$$minor" ]; then
    if [ -e "$$dir" ]; then msg "$$dir is not a working Python $$minor venv: recreating it"; fi
    msg "creating $$dir with $$py"
    "$$py" -m venv --clear "$$dir" \
      || die "could not create $$dir (a distribution's python needs its venv package: apt-get install python$$minor-venv python$$minor-dev)"
  fi
  local reqs stamp="$$dir/.pyprof-deps" want
  reqs=$$("$$dir/bin/python" -c 'import sys, tomllib; p = tomllib.load(open("pyproject.toml", "rb"))["project"]; print("\n".join(p.get("dependencies", []) + [r for e in sys.argv[1:] for r in p["optional-dependencies"][e]]))' "$$@") \
    || die "cannot read the requirements of [$$*] from pyproject.toml"
  want=$$(printf '%s\n' "$$("$$dir/bin/python" -VV)" "extras: $$*" "$$reqs")
  if [ -f "$$stamp" ] && [ "$$(cat "$$stamp")" = "$$want" ]; then return 0; fi
  msg "$$dir: installing pip, setuptools, wheel and the dependencies of [$$*]"
  "$$dir/bin/python" -m pip install -q --upgrade pip setuptools wheel
  if [ -n "$$reqs" ]; then
    local -a list; mapfile -t list <<< "$$reqs"
    "$$dir/bin/python" -m pip install -q "$${list[@]}"
  fi
  printf '%s\n' "$$want" > "$$stamp"
}

# ensure_mpi4py DIR: mpi4py for tests/test_mpi.py, apart from the test extra: on
# a machine where pip has no wheel for it and no MPI compiler is there to build
# it, only the mpirun tests skip (saying so), not the whole test run.
ensure_mpi4py() {
  local dir=$$1
  "$$dir/bin/python" -c 'import mpi4py' 2>/dev/null && return 0
  "$$dir/bin/python" -m pip install -q "mpi4py>=4" >/dev/null 2>&1 \
    || msg "$$dir: mpi4py could not be installed (no wheel, no MPI to build it): the mpirun tests will skip"
}

# install_pkg DIR FLAVOR: build pyprof from this tree and (re)install it into
# venv DIR, compiling from scratch in build/setuptools/FLAVOR. The caller sets
# PYPROF_WERROR / PYPROF_SANITIZE / PYPROF_NO_LIBUNWIND in the environment.
install_pkg() {
  local dir=$$1 base="$$PWD/build/setuptools/$$2"
  mkdir -p "$$base"
  rm -rf "$$base"/lib.*             # a module moved or deleted must not stay in the wheel
  printf '[build]\nbuild_base = %s\n[build_ext]\nforce = 1\n[egg_info]\negg_base = %s\n' \
    "$$base" "$$base" > "$$base/setup.cfg"
  msg "$$dir: building and installing pyprof ($$2)"
  DIST_EXTRA_CONFIG="$$base/setup.cfg" \
    "$$dir/bin/python" -m pip install -q --no-build-isolation --force-reinstall --no-deps .
}

# speedscope's built web app (npm package) in build/speedscope, for the test that
# loads a Chrome trace in it (headless Chromium). Optional: without npm or the
# network that test skips, saying so.
fetch_speedscope() {
  local dir="$$PWD/build/speedscope"
  [ -f "$$dir/package/dist/release/index.html" ] && return 0
  command -v npm >/dev/null 2>&1 || { msg "no npm: speedscope not fetched (its test will skip)"; return 0; }
  mkdir -p "$$dir"
  if ( cd "$$dir" && timeout 120 npm pack --silent "speedscope@$(SPEEDSCOPE_VERSION)" >/dev/null 2>&1 \
       && tar xzf "speedscope-$(SPEEDSCOPE_VERSION).tgz" ); then
    msg "speedscope $(SPEEDSCOPE_VERSION) in $$dir/package"
  else
    msg "npm pack speedscope failed (offline?): its test will skip"
  fi
}

# ensure_apt WHO "REQUIRED" "OPTIONAL": the Debian packages (and a C compiler)
# installed with apt-get when root; otherwise named, and a missing required one stops.
ensure_apt() {
  local who=$$1 p req="" opt="" missing log
  if ! command -v dpkg >/dev/null 2>&1; then
    echo "$$who: no dpkg here; make sure these (Debian names) are installed: $$2 $$3 and a C compiler"
    return 0
  fi
  installed() { [[ $$(dpkg -s "$$1" 2>/dev/null) == *"Status: install ok installed"* ]]; }
  for p in $$2; do installed "$$p" || req="$$req $$p"; done
  for p in $$3; do installed "$$p" || opt="$$opt $$p"; done
  command -v cc >/dev/null 2>&1 || command -v gcc >/dev/null 2>&1 || req="$$req build-essential"
  missing="$${req# }$$opt"; missing=$${missing# }
  [ -n "$$missing" ] || return 0
  if [ "$$(id -u)" = 0 ]; then
    msg "$$who: installing $$missing"
    export DEBIAN_FRONTEND=noninteractive
    log=$$(mktemp)
    if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing; } > "$$log" 2>&1; then
      cat "$$log" >&2; rm -f "$$log"; die "apt-get failed (above)"
    fi
    rm -f "$$log"
  elif [ -n "$$req" ]; then
    die "missing packages:$$req (required)$${opt:+,$$opt (optional)}; run: sudo apt-get install -y --no-install-recommends $$missing"
  else
    echo "warning: missing optional packages:$$opt (libunwind-dev: no native stacks; graphviz/valgrind/openmpi-bin/openjdk: some tests skip); run: sudo apt-get install -y --no-install-recommends $$missing" >&2
  fi
}

# Where the newest found interpreter's venv is: sets NEW_MINOR NEW_PY NEW_VENV.
newest() {
  pythons_or_die
  read -r NEW_MINOR NEW_PY <<< "$$(tail -n 1 <<< "$$PYS")"
  NEW_VENV="$(VENV_DIR)/$$NEW_MINOR"
}
endef

help:
	@awk 'NR > 1 && /^# Each venv/ { exit } NR > 1 { sub(/^# ?/, ""); print }' $(firstword $(MAKEFILE_LIST))

deps:
	@$(SH_LIB)
	ensure_apt deps "$(APT_REQUIRED)" "$(APT_OPTIONAL)"

pythons:
	@$(SH_LIB)
	pythons_or_die
	while read -r minor exe; do
	  printf '%-5s %s (%s)\n' "$$minor" "$$exe" "$$("$$exe" -c 'import platform; print(platform.python_version())')"
	done <<< "$$PYS"

venv:
	@$(SH_LIB)
	pythons_or_die
	fetch_speedscope
	while read -r minor exe; do
	  ensure_venv "$$minor" "$$exe" "$(VENV_DIR)/$$minor" test
	  ensure_mpi4py "$(VENV_DIR)/$$minor"
	  install_pkg "$(VENV_DIR)/$$minor" "cp$${minor/./}"
	done <<< "$$PYS"

test: deps
	@$(SH_LIB)
	pythons_or_die
	fetch_speedscope
	mkdir -p build/test-logs
	declare -a summary=()
	failed=0 tp=0 tf=0 ts=0
	while read -r minor exe; do
	  dir="$(VENV_DIR)/$$minor" log="build/test-logs/$$minor.log"
	  msg "Python $$minor: $$exe"
	  set +e
	  ( set -e; ensure_venv "$$minor" "$$exe" "$$dir" test
	    ensure_mpi4py "$$dir"
	    PYPROF_WERROR=1 install_pkg "$$dir" "cp$${minor/./}-werror" ) < /dev/null
	  rc=$$?
	  set -e
	  if [ $$rc != 0 ]; then
	    summary+=("$$minor: FAILED  (venv/build/install, see the errors above)"); failed=1; continue
	  fi
	  msg "Python $$minor: python -m pytest $(PYTEST_ARGS) $(TESTS)"
	  set +e
	  timeout --kill-after=30 $(TEST_TIMEOUT) "$$dir/bin/python" -m pytest $(PYTEST_ARGS) $(TESTS) < /dev/null 2>&1 | tee "$$log"
	  rc=$${PIPESTATUS[0]}
	  set -e
	  last=$$(grep -E '[0-9]+ (passed|failed|errors?|skipped|deselected|xfailed|xpassed)|no tests ran' "$$log" | tail -n 1 | sed -E 's/^=+ //; s/ =+$$//' || true)
	  n() { grep -oE "[0-9]+ $$1" <<< "$$last" | grep -oE '^[0-9]+' || echo 0; }
	  tp=$$((tp + $$(n passed))); tf=$$((tf + $$(n failed) + $$(n 'errors?'))); ts=$$((ts + $$(n skipped)))
	  case $$rc in
	    0) summary+=("$$minor: ok      ($$last)") ;;
	    5) summary+=("$$minor: NO TESTS collected (pytest exit 5; not counted as a failure)") ;;
	    124|137) summary+=("$$minor: FAILED  (timed out after $(TEST_TIMEOUT)s; log: $$log)"); failed=1 ;;
	    *) summary+=("$$minor: FAILED  (pytest exit $$rc: $$last; log: $$log)"); failed=1 ;;
	  esac
	done <<< "$$PYS"
	echo
	echo "==> summary"
	printf '  %s\n' "$${summary[@]}"
	echo "total: $$tp passed, $$tf failed, $$ts skipped"
	exit $$failed

# The demo: the build's packages only, and a venv of its own (.venv/demo-3.X) with
# pyprof and its run-time dependencies, none of the test extra.
demo:
	@$(SH_LIB)
	ensure_apt demo "$(APT_REQUIRED)" ""
	newest
	NEW_VENV="$(VENV_DIR)/demo-$$NEW_MINOR"
	ensure_venv "$$NEW_MINOR" "$$NEW_PY" "$$NEW_VENV"
	install_pkg "$$NEW_VENV" "cp$${NEW_MINOR/./}"
	py="$$NEW_VENV/bin/python" out=build/demo
	mkdir -p "$$out"
	msg "python -m pyprof -s cumulative examples/demo.py   (Python $$NEW_MINOR)"
	"$$py" -m pyprof -s cumulative examples/demo.py > "$$out/table.txt"
	total=$$(wc -l < "$$out/table.txt")
	sed -n '1,$(DEMO_LINES)p' "$$out/table.txt"
	if [ "$$total" -gt $(DEMO_LINES) ]; then echo "    ... $$((total - $(DEMO_LINES))) more lines in $$out/table.txt"; fi
	echo
	msg "python -m pyprof -o $$out/demo.cprof examples/demo.py"
	"$$py" -m pyprof -o "$$out/demo.cprof" examples/demo.py > /dev/null
	msg "pyprof convert $$out/demo.cprof -o $$out/demo.prof"
	"$$NEW_VENV/bin/pyprof" convert "$$out/demo.cprof" -o "$$out/demo.prof"
	msg "pstats: top 15 by tottime, read from $$out/demo.prof"
	"$$py" -c 'import pstats, sys; pstats.Stats(sys.argv[1]).sort_stats("tottime").print_stats(15)' "$$out/demo.prof"
	msg "pyprof view $$out/demo.cprof --view code --max-depth 4 --min-time 10ms   (the call tree by path)"
	"$$NEW_VENV/bin/pyprof" view "$$out/demo.cprof" --view code --max-depth 4 --min-time 10ms
	msg "pyprof convert $$out/demo.cprof -o $$out/report.html"
	"$$NEW_VENV/bin/pyprof" convert "$$out/demo.cprof" -o "$$out/report.html"
	echo "the HTML report (summary, functions, code heatmap, flame graph): open $$out/report.html"
	msg "python -m pyprof --sample --wall --rate 2000 -o $$out/sampled.flame.html examples/demo.py"
	"$$py" -m pyprof --sample --wall --rate 2000 -o "$$out/sampled.flame.html" examples/demo.py > /dev/null
	echo "an interactive flame graph of the sampled stacks: open $$out/sampled.flame.html in a browser"
	msg "python -m pyprof --memory --functions -o $$out/memory.cprof examples/demo.py; pyprof view"
	"$$py" -m pyprof --memory --functions -o "$$out/memory.cprof" examples/demo.py > /dev/null
	"$$NEW_VENV/bin/pyprof" view "$$out/memory.cprof" --memory > "$$out/memory.txt"
	sed -n '/^Traced memory/,/^Memory unit/p' "$$out/memory.txt" | sed '$$d' | head -n 16
	echo "    ... the line tables are in $$out/memory.txt"
	"$$NEW_VENV/bin/pyprof" convert "$$out/memory.cprof" -o "$$out/memory.svg"
	echo "the memory curve: open $$out/memory.svg"
	msg "files: $$(ls "$$out" | tr '\n' ' ')(in $$out/)"

# make fuzz [SEED=0] [N=200] [SECONDS=0]: the differential tests (tests/programs/difftest.py) on
# programs SEED..SEED+N-1 of tests/programs/progen.py (or for SECONDS), with the newest Python;
# each failing program is shrunk and written to tests/difftest_cases/. Then CAPTURES
# (default 3000) structurally corrupt captures through every reader
# (tests/programs/fuzz_captures.py); failing files are copied to tests/corrupt_cases/new/.
.PHONY: fuzz
fuzz: deps
	@$(SH_LIB)
	newest
	ensure_venv "$$NEW_MINOR" "$$NEW_PY" "$$NEW_VENV" test
	install_pkg "$$NEW_VENV" "cp$${NEW_MINOR/./}"
	msg "differential tests, Python $$NEW_MINOR: seeds $(or $(SEED),0).. ($(or $(N),200) programs)"
	( cd tests/programs && "../../$$NEW_VENV/bin/python" difftest.py fuzz --seed $(or $(SEED),0) --n $(or $(N),200) --seconds $(or $(SECONDS),0) )
	msg "corrupt captures, Python $$NEW_MINOR: seed $(or $(SEED),0), $(or $(CAPTURES),3000) mutated files"
	"$$NEW_VENV/bin/python" tests/programs/fuzz_captures.py --seed $(or $(SEED),0) --n $(or $(CAPTURES),3000)

asan: deps
	@$(SH_LIB)
	pythons_or_die
	libasan=$$(gcc -print-file-name=libasan.so) libubsan=$$(gcc -print-file-name=libubsan.so)
	[[ $$libasan == /* && -e $$libasan && $$libubsan == /* && -e $$libubsan ]] \
	  || die "gcc's libasan.so/libubsan.so not found (apt-get install gcc, or the libasanN/libubsanN packages)"
	# Both hook paths: 3.11's legacy profile hook and the newest's sys.monitoring.
	sel=$$( (grep '^3\.11 ' <<< "$$PYS" || true; tail -n 1 <<< "$$PYS") | sort -u)
	# Only the test processes get the sanitizer runtimes (never pip or the compiler);
	# a refused allocation returns NULL, as with libc (the program gets MemoryError).
	run() {
	  LD_PRELOAD="$$libasan $$libubsan" \
	  ASAN_OPTIONS=detect_leaks=0:abort_on_error=1:allocator_may_return_null=1 \
	  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  "$$@"
	}
	failed=0
	while read -r minor exe; do
	  dir="$(VENV_DIR)/asan-$$minor"
	  ( set -e; ensure_venv "$$minor" "$$exe" "$$dir" test
	    ensure_mpi4py "$$dir"
	    PYPROF_SANITIZE=1 install_pkg "$$dir" "cp$${minor/./}-asan" ) < /dev/null
	  msg "Python $$minor, ASan+UBSan: import check"
	  run "$$dir/bin/python" -c 'import pyprof._cprof as m; print("pyprof._cprof loaded from", m.__file__)'
	  msg "Python $$minor, ASan+UBSan: python -m pytest $(PYTEST_ARGS) $(TESTS)"
	  set +e
	  run timeout --kill-after=30 $$(( $(TEST_TIMEOUT) * 3 )) "$$dir/bin/python" -m pytest $(PYTEST_ARGS) $(TESTS) < /dev/null
	  rc=$$?
	  set -e
	  case $$rc in 0|5) ;; *) echo "asan: Python $$minor FAILED (pytest exit $$rc)"; failed=1 ;; esac
	done <<< "$$sel"
	exit $$failed

bench accuracy bench-threads: deps
	@$(SH_LIB)
	pythons_or_die
	declare -a args=()
	while read -r minor exe; do
	  dir=".bench/$$minor"
	  ensure_venv "$$minor" "$$exe" "$$dir" bench
	  install_pkg "$$dir" "cp$${minor/./}"
	  args+=(--python "$$dir/bin/python")
	done <<< "$$PYS"
	script=benchmarks/$(if $(filter accuracy,$@),accuracy,$(if $(filter bench-threads,$@),idle_threads,run)).py
	msg "$$script $${args[*]} $(BENCH_ARGS)"
	"$$dir/bin/python" "$$script" "$${args[@]}" $(BENCH_ARGS)

clean:
	rm -rf build .venv .bench
	find . -path ./.git -prune -o -name '*.egg-info' -type d -prune -exec rm -rf {} +
