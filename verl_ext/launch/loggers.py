"""Can ``$PYTHON`` import every logger that ``LOGGERS`` (verl's ``trainer.logger``) names?

verl 0.9.1's ``Tracking`` (verl/utils/tracking.py) imports a logger's package only when the trainer starts, minutes
after launch, so a missing ``wandb`` used to stop a run after Ray, the workers and vLLM had started. The train
scripts run this file by path before composing their command (standard library only, like ``interpreter.py``):

    "$PYTHON" verl_ext/launch/loggers.py --mode fallback --import "[console,file,wandb]"

It prints the loggers to use on stdout, in the same ``[a,b]`` form, and one line per dropped logger on stderr.
``--mode fallback`` (the default) drops loggers that do not import and keeps the rest (``console`` and ``file``
need nothing; nothing left: ``[console,file]``); ``strict`` exits 2 naming ``LOGGERS`` and the missing module;
``off`` checks nothing. A name verl does not know exits 2 in every mode but ``off`` (verl would assert on it).
Without ``--import`` modules are only looked up (``find_spec``: nothing is imported, as in a dry run); with it they
are imported, which also catches an installed package that fails to import (e.g. a protobuf clash).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys

EXIT_PROBLEM = 2
MODES = ("fallback", "strict", "off")
FALLBACK = ["console", "file"]
# verl 0.9.1 Tracking.supported_backend (+ the deprecated "tracking" alias of wandb) -> the module its backend imports
LOGGER_MODULES: dict[str, str | None] = {
    "console": None,
    "file": None,
    "wandb": "wandb",
    "tracking": "wandb",
    "vemlp_wandb": "volcengine_ml_platform",
    "mlflow": "mlflow",
    "swanlab": "swanlab",
    "tensorboard": "tensorboard",  # torch.utils.tensorboard.SummaryWriter needs the tensorboard package
    "clearml": "clearml",
    "trackio": "trackio",
    "rl_insight": "rl_insight",
}
INSTALL = {"vemlp_wandb": "volcengine-ml-platform", "rl_insight": "rl-insight"}


class LoggerError(ValueError):
    """LOGGERS names a logger verl does not know, or (strict mode) one that does not import."""


def parse_loggers(text: str) -> list[str]:
    """``[console,file,wandb]``, ``['console', "wandb"]`` or ``console`` -> the names, in order."""
    body = text.strip()
    if body.startswith("[") and body.endswith("]"):
        body = body[1:-1]
    names = [part.strip().strip("'\"").strip() for part in body.split(",")]
    return [name for name in names if name]


def format_loggers(names: list[str]) -> str:
    """The Hydra list form the scripts pass as ``trainer.logger``."""
    return "[" + ",".join(names) + "]"


def import_problem(module: str, do_import: bool) -> str | None:
    """Why ``module`` cannot be used (None: it can). Looked up only, or imported when ``do_import``."""
    try:
        if not do_import:
            return None if importlib.util.find_spec(module) is not None else f"No module named {module!r}"
        importlib.import_module(module)
    except Exception as err:  # ImportError, or anything the package raises while importing
        return f"{type(err).__name__}: {err}"
    return None


def resolve(names: list[str], mode: str, do_import: bool, variable: str = "LOGGERS") -> tuple[list[str], list[str]]:
    """The loggers to use and one message per dropped logger. Raises :class:`LoggerError` for an unknown name
    (any mode but ``off``) and, in ``strict`` mode, for a logger that does not import."""
    if mode not in MODES:
        raise LoggerError(f"LOGGER_CHECK must be one of {', '.join(MODES)}; got {mode!r}")
    if mode == "off":
        return list(names), []
    unknown = [name for name in names if name not in LOGGER_MODULES]
    if unknown:
        raise LoggerError(f"{variable}={format_loggers(names)}: verl 0.9.1 knows no logger "
                          f"{', '.join(map(repr, unknown))}; choose from {', '.join(LOGGER_MODULES)}")
    kept: list[str] = []
    dropped: list[tuple[str, str, str]] = []  # (logger, module, why)
    for name in names:
        module = LOGGER_MODULES[name]
        problem = import_problem(module, do_import) if module else None
        if problem is None:
            kept.append(name)
        else:
            dropped.append((name, str(module), problem))
    kept = kept or list(FALLBACK)
    setting = variable.split(" ")[0]  # "LOGGERS (trainer.logger)" -> LOGGERS
    for name, module, problem in dropped:
        package = INSTALL.get(name, module)
        if mode == "strict":
            raise LoggerError(
                f"{variable}={format_loggers(names)} names the {name!r} logger, but {sys.executable} cannot import "
                f"{module!r} ({problem}); pip install {package}, or drop it: {setting}={format_loggers(kept)}")
    notes = [f"{variable}: dropped the {name!r} logger, logging to {format_loggers(kept)}: {sys.executable} cannot "
             f"import {module!r} ({problem}); pip install {INSTALL.get(name, module)} to keep it, or set "
             f"{setting}={format_loggers(kept)} (LOGGER_CHECK=strict stops instead)"
             for name, module, problem in dropped]
    return kept, notes


def config_problems(value: object, mode: str = "strict") -> list[str]:
    """For the pre-flight of a composed config: problems with its ``trainer.logger`` (a list or one name), which
    may come from a Hydra override the scripts' ``LOGGERS`` check never saw. Nothing is imported, and nothing is
    dropped here: a logger that is not found is a problem unless ``mode`` (``LOGGER_CHECK``) is ``off``."""
    if mode == "off":
        return []
    names = parse_loggers(value) if isinstance(value, str) else [str(name) for name in (value or [])]
    try:
        resolve(names, "strict", do_import=False, variable="LOGGERS (trainer.logger)")
    except LoggerError as err:
        return [str(err)]
    return []


def main(argv: list[str] | None = None) -> int:
    """Print the loggers to use (stdout) and what was dropped (stderr); exit 2 on a problem."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("loggers", help="the LOGGERS value, e.g. [console,file,wandb]")
    parser.add_argument("--mode", default="fallback", help="/".join(MODES) + " (LOGGER_CHECK)")
    parser.add_argument("--import", dest="do_import", action="store_true",
                        help="import each logger's module (default: only look it up)")
    parser.add_argument("--variable", default="LOGGERS", help="the variable named in messages")
    args = parser.parse_args(argv)
    try:
        kept, notes = resolve(parse_loggers(args.loggers), args.mode, args.do_import, args.variable)
    except LoggerError as err:
        print(f"pre-flight: {err}", file=sys.stderr)
        return EXIT_PROBLEM
    for note in notes:
        print(f"pre-flight: {note}", file=sys.stderr)
    print(format_loggers(kept))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
