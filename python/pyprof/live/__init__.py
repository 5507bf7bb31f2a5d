"""A running program seen from outside or switched on while it runs: the
control channel (channel.py), attach and its bootstrap, top, dump read from
another process, sampling toggled by a signal (control.py)."""
