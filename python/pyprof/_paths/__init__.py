"""The clusters' public paths, `pyprof.dask`, `pyprof.ray` and `pyprof.spark`
(docs/clusters.md): modules that pyprof's __init__ puts on the package's
__path__, each replacing itself with the integrations module of its name. They
live here, not in the package root, which holds at most 14 modules; nothing
global changes (a meta-path finder would add to every program's sys.meta_path,
a program pyprof attaches to included)."""
