"""pyprof's user-facing error: one clear line, never a traceback."""


class PyprofError(Exception):
    """A problem with pyprof's input or output (bad file, bad option...).

    The CLI prints ``pyprof: <message>`` on stderr and exits with status 2.
    """


class OptionError(PyprofError, ValueError):
    """A run option that is out of range or does not combine (options.py).
    A ValueError too, as the C core's checks of the same options were."""


REPLACED = ("the program replaced pyprof's signal handler or profiling timer while it was "
            "sampled: samples after that moment are missing")
