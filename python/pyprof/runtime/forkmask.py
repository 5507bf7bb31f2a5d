"""SIGTERM held across fork() (docs/children.md): for a process whose SIGTERM
handler is Python code, the forking thread blocks SIGTERM until the child has
set its own disposition. The runner uses it on every run; children.py's fork
hook too. Built-in modules only (loaded in a lean child, and at start-up)."""
import _signal as signal
import _thread
import os

# SIGTERM is blocked in the forking thread across fork(): a SIGTERM sent to a
# new child (a pool terminated right after it started a worker) before CPython
# re-initialises its signal state in the child would be dropped there, and
# the worker, whose handler is Python code, would never end. Blocked, it stays
# pending until the child has installed its handler. Several threads may fork
# at once (a pool's handler thread and the program's): one mask per thread.
_masks = {}


def block_sigterm():
    if _thread.get_ident() in _masks:
        return                          # the runner's hook and ours: the first saves
    try:
        _masks[_thread.get_ident()] = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    except (OSError, ValueError):
        pass


def restore_mask():
    mask = _masks.pop(_thread.get_ident(), None)
    if mask is not None:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def guard_sigterm_across_fork(after_in_child):
    """For a process whose SIGTERM handler is Python code (python -m pyprof's
    runner): SIGTERM stays blocked in the forking thread until the child has
    run `after_in_child` (which sets the child's disposition)."""
    def child():
        try:
            after_in_child()
        finally:
            restore_mask()
    os.register_at_fork(before=block_sigterm, after_in_parent=restore_mask,
                        after_in_child=child)
