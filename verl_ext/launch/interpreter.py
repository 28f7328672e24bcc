"""Does the interpreter the train scripts launch (``$PYTHON``) have what the command needs?

Run by file path, before anything of verl-ext can be imported (that is the point):

    "$PYTHON" verl_ext/launch/interpreter.py --python-var "$PYTHON" --command "bash train/scripts/openspiel-ppo.sh" \
        --extra vllm verl verl_ext vllm=ROLLOUT_BACKEND=vllm

Standard library only, and it imports nothing it checks: ``importlib.util.find_spec`` looks each module up on the
path that ``$PYTHON -m <module>`` would use (the current directory first). Exit 0 when everything is found, else
exit 2 with one message naming the interpreter (path and version), what is missing, and how to point the scripts
at the right environment. ``preflight.py`` reuses :func:`advice` when verl is found but fails to import.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys

EXIT_MISSING = 2
SUPPORTED = ((3, 10), (3, 12))  # pyproject.toml: requires-python = ">=3.10,<3.13"
INSTALL = {
    "vllm": 'pip install uv && uv pip install --extra-index-url https://download.pytorch.org/whl/cu130 '
            '--index-strategy unsafe-best-match -e ".[vllm]"',
    "sglang": 'pip install uv && uv pip install --extra-index-url https://download.pytorch.org/whl/cu130 '
              '--index-strategy unsafe-best-match -e ".[sglang]"   (uv: the sglang extra needs the '
              "[tool.uv] override in pyproject.toml)",
    "": 'pip install -e .',
}


def missing_modules(modules: list[str]) -> list[str]:
    """The modules of ``modules`` that this interpreter cannot find (``find_spec``; nothing is imported)."""
    missing = []
    for module in modules:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that is missing or broken
            found = False
        if not found:
            missing.append(module)
    return missing


def describe_interpreter(python_var: str) -> str:
    """`/usr/bin/python3 (Python 3.11.2; PYTHON=python3 resolved on PATH)`: what ran, and how it was chosen."""
    version = ".".join(str(part) for part in sys.version_info[:3])
    how = f"PYTHON={python_var}" + ("" if os.sep in python_var else " resolved on PATH")
    if python_var == "python3":
        how += ", the scripts' default"
    return f"{sys.executable} (Python {version}; {how})"


def advice(python_var: str, command: str, extra: str, repo_root: str) -> list[str]:
    """How to point the scripts at the environment where verl-ext is installed, or install it into this one."""
    lines = ["Point the scripts at the environment where verl-ext is installed, one of:",
             f"  PYTHON=/path/to/venv/bin/python {command}",
             "  source /path/to/venv/bin/activate   (then python3 is the venv's; check with: command -v python3)"]
    venv_python = os.path.join(repo_root, ".venv", "bin", "python")
    if repo_root and os.path.isfile(venv_python) and os.path.realpath(venv_python) != os.path.realpath(sys.executable):
        lines.append(f"  PYTHON={venv_python} {command}   (a venv in this checkout)")
    lines.append('or install into this interpreter (README "GPU node quick start"):')
    lines.append(f"  {INSTALL.get(extra, INSTALL[''])}")
    if not SUPPORTED[0] <= sys.version_info[:2] <= SUPPORTED[1]:
        lines.append(f"Note: verl-ext supports Python 3.10-3.12; this is {sys.version_info[0]}.{sys.version_info[1]}.")
    return lines


def check(needs: list[str], python_var: str, command: str, extra: str, repo_root: str) -> list[str]:
    """The message lines for what is missing (empty: all found). ``needs`` items are ``module`` or
    ``module=SETTING`` (the script setting that asked for it, e.g. ``sglang=ROLLOUT_BACKEND=sglang``)."""
    wanted = dict(item.split("=", 1) if "=" in item else (item, "") for item in needs)
    missing = missing_modules(list(wanted))
    if not missing:
        return []
    named = ", ".join(f"{m} (for {wanted[m]})" if wanted[m] else m for m in missing)
    lines = [f"pre-flight: the scripts' Python interpreter cannot import {named}.",
             f"  interpreter: {describe_interpreter(python_var)}"]
    return lines + ["  " + line for line in advice(python_var, command, extra, repo_root)]


def local_checkout_note(repo_root: str) -> str:
    """A note when verl_ext resolves to another copy than this checkout (stale install or other clone)."""
    try:
        spec = importlib.util.find_spec("verl_ext")
    except (ImportError, ValueError):
        return ""
    if spec is None or not spec.origin or not repo_root:
        return ""
    found = os.path.dirname(os.path.dirname(os.path.realpath(spec.origin)))
    if found != os.path.realpath(repo_root):
        return (f"pre-flight: note: verl_ext is imported from {found}, not from this checkout ({repo_root}); "
                "the scripts run that copy's code.")
    return ""


def main(argv: list[str] | None = None) -> int:
    """Entry point: print the message and return 2 when something is missing, else 0."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python-var", default="python3", help="the value of $PYTHON the script used")
    parser.add_argument("--command", default="bash train/scripts/openspiel-ppo.sh", help="the command to repeat")
    parser.add_argument("--extra", default="", choices=sorted(INSTALL), help="the pyproject extra the command needs")
    parser.add_argument("--repo-root", default="", help="the checkout the scripts belong to")
    parser.add_argument("needs", nargs="+", help="module, or module=SETTING (e.g. vllm=ROLLOUT_BACKEND=vllm)")
    args = parser.parse_args(argv)
    sys.path[0] = os.getcwd()  # as `$PYTHON -m module` sees it (run by path, sys.path[0] is this file's folder)
    lines = check(args.needs, args.python_var, args.command, args.extra, args.repo_root)
    for line in lines:
        print(line, file=sys.stderr)
    if lines:
        return EXIT_MISSING
    note = local_checkout_note(args.repo_root)
    if note:
        print(note, file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
