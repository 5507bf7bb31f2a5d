"""pyprof's user-facing error: one clear line, never a traceback."""


class PyprofError(Exception):
    """A problem with pyprof's input or output (bad file, bad option...).

    The CLI prints ``pyprof: <message>`` on stderr and exits with status 2.
    """


REPLACED = ("the program replaced pyprof's SIGPROF handler or profiling timer while it was "
            "sampled: samples after that moment are missing")
