"""zl_mpl.py — matplotlib for the figure scripts (plots.py, plot_gpt.py), found once.

    from zl_mpl import find_matplotlib
    find_matplotlib()   # before `import matplotlib`
"""
import os
import subprocess
import sys


def find_matplotlib():
    """Return if this python has matplotlib; else re-run the script under one that has it.

    PATH's python3 is often a pyenv or venv python without matplotlib while Debian's
    python3-matplotlib lives under /usr/bin/python3 (make deps installs it there). ZL_PYTHON
    names another; ZL_PLOTS_REEXEC stops a second re-run. None found: one error line, exit 2."""
    import importlib.util
    if importlib.util.find_spec("matplotlib") is not None:
        return
    here = os.path.realpath(sys.executable)
    for cand in [os.environ.get("ZL_PYTHON", ""), "/usr/bin/python3", "/usr/local/bin/python3"]:
        if cand and os.path.exists(cand) and os.path.realpath(cand) != here and not os.environ.get("ZL_PLOTS_REEXEC"):
            if subprocess.call([cand, "-c", "import matplotlib"], stderr=subprocess.DEVNULL) == 0:
                os.environ["ZL_PLOTS_REEXEC"] = "1"
                os.execv(cand, [cand] + sys.argv)
    sys.stderr.write("error: matplotlib not found for %s: run 'make deps' "
                     "(Debian: apt-get install python3-matplotlib), or set ZL_PYTHON\n" % sys.executable)
    sys.exit(2)
