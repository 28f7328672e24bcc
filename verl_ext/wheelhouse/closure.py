"""`check`: is every dependency of every carried file satisfied on the target?

Reads `Requires-Dist` of each downloaded wheel/sdist (markers evaluated for the target interpreter, extras
followed when a requirement asks for them, e.g. `fastapi[standard]`) and classifies each requirement as
satisfied by a carried file, satisfied by the image ([present]), deliberately skipped ([skip]), an accepted
version mismatch ([accept]), a version CONFLICT, or MISSING. Runs on the connected machine only: it parses
requirements with the `packaging` copy that pip vendors (or `packaging` itself).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl_ext.wheelhouse import WheelhouseError
from verl_ext.wheelhouse.files import normalize, parse_filename, read_metadata
from verl_ext.wheelhouse.targets import Target


def _packaging() -> Any:
    try:
        from pip._vendor.packaging import requirements, specifiers, version  # type: ignore[import-not-found]
    except ImportError:  # pragma: no cover - pip always vendors it; fall back to a real install
        try:
            from packaging import requirements, specifiers, version  # type: ignore[import-not-found,no-redef]
        except ImportError as exc:
            raise WheelhouseError("check needs pip (or `packaging`) importable to parse requirements") from exc
    return requirements, specifiers, version


@dataclass(frozen=True)
class Finding:
    """One requirement of one carried distribution, classified."""

    status: str  # carried | present | skipped | accepted | CONFLICT | MISSING
    dep: str  # normalized name of the required project
    requirer: str  # normalized name[extra] of the carried distribution
    requirement: str
    detail: str = ""


PROBLEMS = ("CONFLICT", "MISSING")


def check(target: Target, files: list[Path]) -> list[Finding]:
    """Classify every (marker-applicable) requirement of every carried file against carried + present + skip."""
    requirements, _, version_mod = _packaging()
    carried: dict[str, str] = {}
    metadata: dict[str, Any] = {}
    for path in files:
        dist = parse_filename(path.name)
        carried[dist.name] = dist.version
        metadata[dist.name] = read_metadata(path)
    env = target.marker_env()
    findings: list[Finding] = []
    seen: set[tuple[str, str]] = set()
    queue: list[tuple[str, str]] = [(name, "") for name in sorted(carried)]  # (distribution, extra)
    while queue:
        name, extra = queue.pop(0)
        if (name, extra) in seen:
            continue
        seen.add((name, extra))
        requirer = f"{name}[{extra}]" if extra else name
        for line in metadata[name].get_all("Requires-Dist") or []:
            try:
                req = requirements.Requirement(line)
            except requirements.InvalidRequirement as exc:
                raise WheelhouseError(f"{name}: unparsable Requires-Dist {line!r} ({exc})") from exc
            if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
                continue
            if req.marker is None and extra:
                continue  # unconditional requirements were handled with the base distribution
            dep = normalize(req.name)
            findings.append(_classify(target, carried, dep, req, requirer, version_mod))
            if dep in carried:
                queue += [(dep, normalize(e)) for e in sorted(req.extras)]
    return findings


def _classify(target: Target, carried: dict[str, str], dep: str, req: Any, requirer: str, version_mod: Any) -> Finding:
    spec = str(req)
    have, where = (carried[dep], "carried") if dep in carried else (target.present.get(dep), "present")
    if have is None:
        if dep in target.skip:
            return Finding("skipped", dep, requirer, spec, target.skip[dep].why)
        return Finding("MISSING", dep, requirer, spec, "neither carried, on the image, nor in [skip]")
    try:
        ok = req.specifier.contains(version_mod.Version(have), prereleases=True)
    except version_mod.InvalidVersion:
        ok = False
    if ok:
        return Finding(where, dep, requirer, spec, f"{have}")
    if dep in target.accept:
        return Finding("accepted", dep, requirer, spec, f"{where} {have}: {target.accept[dep]}")
    return Finding("CONFLICT", dep, requirer, spec, f"{where} version is {have}")


def report(findings: list[Finding], target: Target, verbose: bool = False) -> list[str]:
    """Human-readable lines: problems always, skips/accepts once per name, everything when verbose."""
    lines: list[str] = []
    for f in sorted(findings, key=lambda f: (f.status not in PROBLEMS, f.status, f.requirement.lower())):
        if verbose or f.status in PROBLEMS or f.status in ("skipped", "accepted"):
            lines.append(f"{f.status:<9} {f.requirer} requires {f.requirement}" + (f" ({f.detail})" if f.detail else ""))
    counts: dict[str, int] = {}
    for f in findings:
        counts[f.status] = counts.get(f.status, 0) + 1
    for name in sorted(set(target.skip) - {f.dep for f in findings}):
        lines.append(f"unused    [skip].{name}: no carried file requires it")
    lines.append("summary: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    return lines
