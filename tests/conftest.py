import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def run_python(args, timeout=120, **kw):
    """Run this interpreter in a subprocess with the current environment."""
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout, **kw)


@pytest.fixture
def python_run():
    return run_python


monitoring_only = pytest.mark.skipif(
    sys.version_info < (3, 12), reason="sys.monitoring exists on 3.12+ only")
