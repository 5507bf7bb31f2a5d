"""The text export (`-o x.txt`): what the capture prints (render.printout)."""
from __future__ import annotations

from ..base.files import atomic_write
from ..render.printout import render


def write(session, path, **kw):
    atomic_write(path, render(session, **kw))
