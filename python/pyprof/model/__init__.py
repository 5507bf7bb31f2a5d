"""The data model (the bottom layer, docs/architecture.md): the Session and its
rows and tables (session, tables), the .cprof codec (codec), function names
(names) and source files (sources). Imports only the base modules (errors,
files, _cprof), never a layer above."""
