"""The bottom layer beside errors.py and _version.py: what every layer may use
(files.py: writing an output whole, pyprof's own frames)."""
