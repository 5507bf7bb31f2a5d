"""python -m pyprof: see pyprof.cli."""
import sys

from pyprof.cli import main

if __name__ == "__main__":
    sys.exit(main())
