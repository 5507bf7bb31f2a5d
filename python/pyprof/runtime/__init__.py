"""What runs inside the profiled process: Profile (profiler.py) and what it
drives (line targets, steps, native frames, object summaries, numpy hooks,
child processes, MPI ranks). Never the live channel, the command line or the
integrations. Empty on purpose: a child process loads this package without
pyprof's (_boot/sitecustomize.py)."""
