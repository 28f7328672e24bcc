"""Target files (`targets/*.toml`): what the air-gapped machine already has and the exact pins to bring.

A target file has these tables (every unknown key is an error naming it):
  format = 1
  [target]   name, description, python_version ("3.12"), python_full_version, implementation ("cp"), abi ("cp312"),
             glibc ("2.39"), arch ("x86_64"), measured (where the facts come from)
  [env]      variables to export when running from the install dir; "{site}" is replaced by that dir
  [present]  project = "version" for every package already installed on the target (its `pip list`)
  [[bundle]] name, why, requires = ["project==version", ...]   (exact pins only), optional = true|false (default
             false: an optional bundle is brought only when asked for, `download --with NAME`)
  [sdist]    project = "why": pins that have no usable wheel; downloaded as sdists, built with --no-build-isolation
  [skip]     project = { why = "...", imports = ["module", ...] }: dependencies deliberately not brought
  [accept]   project = "why": version mismatches between a carried package's metadata and what the target has
  [smoke]    imports = ["module", ...]: what `smoke` imports after installing (the GRPO path's key modules)
  [scan]     roots = ["module", ...]: the GRPO path's root modules for `scan-imports` (optional; default: the
             vLLM path's roots in imports.DEFAULT_ROOTS)
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from verl_ext.wheelhouse import WheelhouseError
from verl_ext.wheelhouse.files import normalize

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: pip vendors tomli (the same parser)
    from pip._vendor import tomli as tomllib

TARGETS_DIR = Path(__file__).parent / "targets"
DEFAULT_TARGET = "h100-py312-cu130"

_PIN = re.compile(r"^([A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)==([A-Za-z0-9.+!_-]+)$")
_TOP_KEYS = {"format", "target", "env", "present", "bundle", "sdist", "skip", "accept", "smoke", "scan"}
_TARGET_KEYS = {
    "name": str, "description": str, "python_version": str, "python_full_version": str,
    "implementation": str, "abi": str, "glibc": str, "arch": str, "measured": str,
}  # fmt: skip
_BUNDLE_KEYS = {"name", "why", "requires", "optional"}
_SKIP_KEYS = {"why", "imports"}


@dataclass(frozen=True)
class Pin:
    """One `project==version` line of a bundle."""

    line: str
    name: str  # normalized
    version: str
    bundle: str
    sdist: bool = False


@dataclass(frozen=True)
class Skip:
    """A dependency deliberately left out, with the import names it would provide."""

    why: str
    imports: tuple[str, ...] = ()


@dataclass
class Target:
    """A parsed and validated target file."""

    path: Path
    name: str
    description: str
    python_version: str
    python_full_version: str
    implementation: str
    abi: str
    glibc: str
    arch: str
    measured: str
    env: dict[str, str] = field(default_factory=dict)
    present: dict[str, str] = field(default_factory=dict)  # normalized name -> version
    bundles: dict[str, str] = field(default_factory=dict)  # bundle name -> why
    optional: set[str] = field(default_factory=set)  # names of the bundles brought only when asked for
    pins: list[Pin] = field(default_factory=list)
    sdist: dict[str, str] = field(default_factory=dict)
    skip: dict[str, Skip] = field(default_factory=dict)
    accept: dict[str, str] = field(default_factory=dict)
    smoke_imports: list[str] = field(default_factory=list)
    scan_roots: list[str] = field(default_factory=list)

    def to_bring(self, with_bundles: tuple[str, ...] | list[str] = ()) -> list[Pin]:
        """Pins the target lacks (a pin equal to the present version is left out), of the non-optional bundles and
        of the optional ones named in `with_bundles`."""
        for name in with_bundles:
            if name not in self.optional:
                known = ", ".join(sorted(self.optional)) or "none"
                raise WheelhouseError(f"{self.path.name}: --with {name!r} is not an optional bundle "
                                      f"(optional: {known})")
        return [p for p in self.pins if self.present.get(p.name) != p.version
                and (p.bundle not in self.optional or p.bundle in with_bundles)]

    def platforms(self) -> list[str]:
        """pip `--platform` tags the target accepts: manylinux_2_<glibc>..manylinux_2_5 plus the legacy aliases."""
        major, minor = (int(x) for x in self.glibc.split("."))
        tags = [f"manylinux_{major}_{m}_{self.arch}" for m in range(minor, 4, -1)]
        legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
        tags += [f"{alias}_{self.arch}" for m, alias in legacy.items() if m <= minor]
        return tags + [f"linux_{self.arch}"]

    def marker_env(self) -> dict[str, str]:
        """PEP 508 marker environment of the target interpreter."""
        impl = {"cp": ("cpython", "CPython")}.get(self.implementation, (self.implementation, self.implementation))
        return {
            "python_version": self.python_version,
            "python_full_version": self.python_full_version,
            "implementation_name": impl[0],
            "implementation_version": self.python_full_version,
            "platform_python_implementation": impl[1],
            "platform_machine": self.arch,
            "platform_system": "Linux",
            "sys_platform": "linux",
            "os_name": "posix",
            "platform_release": "",
            "platform_version": "",
        }

    def summary(self) -> dict[str, Any]:
        """What the lock file and the chunk manifest record about the target."""
        return {
            "name": self.name,
            "python_version": self.python_full_version,
            "abi": self.abi,
            "platform": self.platforms()[0],
            "env": dict(self.env),
            "smoke_imports": list(self.smoke_imports),
            "skipped_imports": sorted({m for skip in self.skip.values() for m in skip.imports}),
        }


def resolve_target_path(name_or_path: str) -> Path:
    """A bundled target name (`h100-py312-cu130`) or a path to a .toml file."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.exists():
        if not path.is_file():
            raise WheelhouseError(f"target file {path} does not exist")
        return path
    bundled = TARGETS_DIR / f"{name_or_path}.toml"
    if not bundled.is_file():
        known = ", ".join(sorted(p.stem for p in TARGETS_DIR.glob("*.toml")))
        raise WheelhouseError(f"unknown target {name_or_path!r} (bundled targets: {known}; or give a .toml path)")
    return bundled


def load_target(name_or_path: str | Path = DEFAULT_TARGET) -> Target:
    """Read and validate a target file; errors name the file and the offending key."""
    path = resolve_target_path(str(name_or_path))
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise WheelhouseError(f"{path.name}: invalid TOML: {exc}") from exc
    return parse_target(data, path)


def parse_target(data: dict[str, Any], path: Path) -> Target:
    """Validate the decoded TOML of a target file."""
    where = path.name
    _check_keys(data, _TOP_KEYS, where, "")
    if data.get("format") != 1:
        raise WheelhouseError(f"{where}: format: expected 1, got {data.get('format')!r}")
    info = _table(data, "target", where)
    _check_keys(info, set(_TARGET_KEYS), where, "[target].")
    values: dict[str, str] = {}
    for key, typ in _TARGET_KEYS.items():
        if key not in info:
            raise WheelhouseError(f"{where}: [target].{key} is missing")
        if not isinstance(info[key], typ) or not info[key]:
            raise WheelhouseError(f"{where}: [target].{key}: expected a non-empty string, got {info[key]!r}")
        values[key] = info[key]
    if not re.fullmatch(r"3\.\d+", values["python_version"]):
        raise WheelhouseError(f"{where}: [target].python_version: expected 'X.Y', got {values['python_version']!r}")
    if not values["python_full_version"].startswith(values["python_version"] + "."):
        raise WheelhouseError(f"{where}: [target].python_full_version does not match python_version")
    if not re.fullmatch(r"\d+\.\d+", values["glibc"]):
        raise WheelhouseError(f"{where}: [target].glibc: expected 'X.Y', got {values['glibc']!r}")
    target = Target(path=path, **values)

    target.env = _string_table(data, "env", where)
    target.present = {normalize(k): v for k, v in _string_table(data, "present", where).items()}
    target.sdist = {normalize(k): v for k, v in _string_table(data, "sdist", where).items()}
    target.accept = {normalize(k): v for k, v in _string_table(data, "accept", where).items()}
    target.smoke_imports = _module_list(data, "smoke", "imports", where)
    target.scan_roots = _module_list(data, "scan", "roots", where)
    for key, value in _table(data, "skip", where).items():
        target.skip[normalize(key)] = _parse_skip(value, where, f"[skip].{key}")

    bundles = data.get("bundle")
    if not isinstance(bundles, list) or not bundles:
        raise WheelhouseError(f"{where}: [[bundle]]: expected at least one bundle table")
    seen: dict[str, Pin] = {}
    for i, bundle in enumerate(bundles):
        label = f"[[bundle]] #{i + 1}"
        if not isinstance(bundle, dict):
            raise WheelhouseError(f"{where}: {label}: expected a table")
        _check_keys(bundle, _BUNDLE_KEYS, where, f"{label}.")
        name, why, requires = bundle.get("name"), bundle.get("why"), bundle.get("requires")
        if not isinstance(name, str) or not name:
            raise WheelhouseError(f"{where}: {label}.name: expected a non-empty string")
        label = f"[[bundle]] {name!r}"
        if name in target.bundles:
            raise WheelhouseError(f"{where}: {label}: bundle name used twice")
        if not isinstance(why, str) or not why:
            raise WheelhouseError(f"{where}: {label}.why: expected a non-empty string")
        if not isinstance(requires, list) or not requires:
            raise WheelhouseError(f"{where}: {label}.requires: expected a non-empty list of 'project==version'")
        optional = bundle.get("optional", False)
        if not isinstance(optional, bool):
            raise WheelhouseError(f"{where}: {label}.optional: expected true or false, got {optional!r}")
        target.bundles[name] = why
        if optional:
            target.optional.add(name)
        for j, line in enumerate(requires):
            pin = _parse_pin(line, name, f"{where}: {label}.requires[{j}]")
            if pin.name in seen:
                raise WheelhouseError(
                    f"{where}: {label}.requires[{j}]: {pin.name} is already pinned in bundle {seen[pin.name].bundle!r}"
                )
            pin = Pin(pin.line, pin.name, pin.version, name, sdist=pin.name in target.sdist)
            seen[pin.name] = pin
            target.pins.append(pin)

    for key in target.sdist:
        if key not in seen:
            raise WheelhouseError(f"{where}: [sdist].{key}: not pinned in any bundle")
    for key in target.skip:
        if key in seen:
            raise WheelhouseError(f"{where}: [skip].{key}: also pinned in bundle {seen[key].bundle!r}")
    for key in target.accept:
        if key in target.skip:
            raise WheelhouseError(f"{where}: [accept].{key}: also listed in [skip]")
    return target


def _parse_pin(line: Any, bundle: str, where: str) -> Pin:
    if not isinstance(line, str):
        raise WheelhouseError(f"{where}: expected a string 'project==version', got {line!r}")
    match = _PIN.match(line.strip())
    if not match:
        raise WheelhouseError(f"{where}: {line!r} is not an exact pin 'project==version' (no ranges, extras, markers)")
    return Pin(line.strip(), normalize(match.group(1)), match.group(2), bundle)


def _parse_skip(value: Any, where: str, label: str) -> Skip:
    if not isinstance(value, dict):
        raise WheelhouseError(f"{where}: {label}: expected a table {{ why = '...', imports = [...] }}")
    _check_keys(value, _SKIP_KEYS, where, f"{label}.")
    why, imports = value.get("why"), value.get("imports", [])
    if not isinstance(why, str) or not why:
        raise WheelhouseError(f"{where}: {label}.why: expected a non-empty string")
    if not isinstance(imports, list) or not all(isinstance(m, str) and m for m in imports):
        raise WheelhouseError(f"{where}: {label}.imports: expected a list of module names")
    return Skip(why, tuple(imports))


def _module_list(data: dict[str, Any], table: str, key: str, where: str) -> list[str]:
    """`[table] key = ["module", ...]` (an absent table or key is an empty list)."""
    values = _table(data, table, where)
    _check_keys(values, {key}, where, f"[{table}].")
    modules = values.get(key, [])
    if not isinstance(modules, list) or not all(isinstance(m, str) and m for m in modules):
        raise WheelhouseError(f"{where}: [{table}].{key}: expected a list of module names")
    return list(modules)


def _table(data: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise WheelhouseError(f"{where}: [{key}]: expected a table")
    return value


def _string_table(data: dict[str, Any], key: str, where: str) -> dict[str, str]:
    table = _table(data, key, where)
    for k, v in table.items():
        if not isinstance(v, str) or not v:
            raise WheelhouseError(f"{where}: [{key}].{k}: expected a non-empty string, got {v!r}")
    return dict(table)


def _check_keys(table: dict[str, Any], known: set[str], where: str, prefix: str) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise WheelhouseError(f"{where}: unknown key {prefix}{unknown[0]} (known: {', '.join(sorted(known))})")
