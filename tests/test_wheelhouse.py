"""Offline wheelhouse: target files, download idempotence, dependency check, pack/verify/install, import scan.

Everything runs offline on tiny wheels and sdists built here; pip runs only against local files (--no-index).
"""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import random
import subprocess
import sys
import tarfile
import textwrap
import zipfile
from pathlib import Path

import pytest

from verl_ext.wheelhouse import WheelhouseError
from verl_ext.wheelhouse import chunks as chunks_mod
from verl_ext.wheelhouse import download as download_mod
from verl_ext.wheelhouse.carry import MIB, auto_chunk_mib, carried_bytes, working_tree_bytes
from verl_ext.wheelhouse.chunks import MANIFEST, ChunkWriter, chunk_name, extract, load_manifest, pack, verify
from verl_ext.wheelhouse.cli import main as cli_main
from verl_ext.wheelhouse.closure import check
from verl_ext.wheelhouse.files import normalize, parse_filename
from verl_ext.wheelhouse.imports import chain, scan
from verl_ext.wheelhouse.install import MARKER, compile_bytecode, install
from verl_ext.wheelhouse.smoke import smoke
from verl_ext.wheelhouse.targets import load_target, parse_target

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    from pip._vendor import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
KIB = 1024


# ---------------------------------------------------------------------------------------------------------------
# tiny distributions
# ---------------------------------------------------------------------------------------------------------------
def _record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(dest: Path, name: str, version: str, payload: bytes = b"", requires: tuple[str, ...] = ()) -> Path:
    """A valid pure-Python wheel with module `name` (VERSION constant) and an optional binary payload."""
    dist = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    extras = sorted({r.split("extra ==")[1].strip(" '\"") for r in requires if "extra ==" in r})
    metadata += "".join(f"Provides-Extra: {e}\n" for e in extras)
    files = {
        f"{name}/__init__.py": f"VERSION = {version!r}\n".encode(),
        f"{name}/blob.bin": payload,
        f"{dist}/METADATA": metadata.encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{path},{_record_hash(data)},{len(data)}\n" for path, data in files.items())
    record += f"{dist}/RECORD,,\n"
    path = dest / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as zf:
        for arcname, data in files.items():
            zf.writestr(arcname, data)
        zf.writestr(f"{dist}/RECORD", record)
    return path


def make_sdist(dest: Path, name: str, version: str) -> Path:
    """A setuptools sdist (setup.py only, like the old pure-Python sdists the target file carries)."""
    root = f"{name}-{version}"
    members = {
        f"{root}/PKG-INFO": f"Metadata-Version: 1.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{root}/setup.py": f"from setuptools import setup\nsetup(name={name!r}, version={version!r}, "
        f"py_modules=[{name!r}])\n".encode(),
        f"{root}/{name}.py": f"VERSION = {version!r}\n".encode(),
    }
    path = dest / f"{root}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for arcname, data in members.items():
            info = tarfile.TarInfo(arcname)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    return path


@pytest.fixture()
def wheel_dir(tmp_path: Path) -> Path:
    """Two wheels (one 50 KiB of random bytes: larger than a 20 KiB chunk) and one sdist."""
    src = tmp_path / "wheels"
    src.mkdir()
    make_wheel(src, "tinya", "1.0")
    make_wheel(src, "tinyb", "2.0", payload=random.Random(0).randbytes(50 * KIB))
    make_sdist(src, "tinyc", "3.0")
    return src


CHUNK_MIB = 20 / 1024  # 20 KiB chunks


# ---------------------------------------------------------------------------------------------------------------
# pack / verify / install
# ---------------------------------------------------------------------------------------------------------------
def test_pack_verify_install_round_trip(wheel_dir: Path, tmp_path: Path) -> None:
    out, site = tmp_path / "chunks", tmp_path / "site"
    manifest = pack(wheel_dir, out, chunk_mib=CHUNK_MIB, log=lambda _: None)
    assert len(manifest["chunks"]) >= 3
    assert sorted(f["name"] for f in manifest["files"]) == sorted(p.name for p in wheel_dir.iterdir())
    assert {f["kind"] for f in manifest["files"]} == {"wheel", "sdist"}
    assert verify(out, log=lambda _: None).ok
    sums = (out / "SHA256SUMS").read_text().splitlines()
    assert [line.split()[1] for line in sums] == [c["name"] for c in manifest["chunks"]]

    lines: list[str] = []
    install(out, site, log=lines.append)
    code = "import tinya, tinyb, tinyc; print(tinya.VERSION, tinyb.VERSION, tinyc.VERSION)"
    env = {**os.environ, "PYTHONPATH": str(site)}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert proc.stdout.split() == ["1.0", "2.0", "3.0"]
    assert (site / "tinyb" / "blob.bin").read_bytes() == random.Random(0).randbytes(50 * KIB)
    assert json.loads((site / MARKER).read_text())["tar_sha256"] == manifest["tar"]["sha256"]
    assert any(line.startswith("run with:  export PYTHONPATH=" + str(site)) for line in lines)
    assert not list(tmp_path.glob(".wheelhouse-files-*")), "the extracted files are cleaned up"
    tag = sys.implementation.cache_tag
    assert list((site / "tinya").rglob(f"__pycache__/*.{tag}.pyc")), "install writes the bytecode"
    assert any(line.startswith("bytecode written in ") for line in lines)

    again: list[str] = []
    install(out, site, log=again.append)  # same tar: nothing to do
    assert again and again[0].startswith("already installed")

    smoked: list[str] = []
    assert smoke(site, modules=["tinya", "tinyc", "tiny_nowhere"], log=smoked.append) == 1
    assert smoked[0].startswith("ok   tinya") and smoked[1].startswith("ok   tinyc")
    assert any(line.startswith("FAIL tiny_nowhere") and "ModuleNotFoundError" in line for line in smoked)


def test_bytecode_is_optional_and_bad_files_do_not_fail_it(wheel_dir: Path, tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    out, site = tmp_path / "chunks", tmp_path / "site"
    pack(wheel_dir, out, chunk_mib=CHUNK_MIB, log=lambda _: None)
    install(out, site, bytecode=False, log=lambda _: None)
    assert not list(site.rglob("*.pyc")), "--no-bytecode leaves the sources alone"

    (site / "tinya" / "template.py").write_text("def broken(:\n")  # e.g. a code template a wheel ships
    lines: list[str] = []
    seconds = compile_bytecode(sys.executable, site, log=lines.append)
    assert seconds >= 0 and lines[-1].startswith("bytecode written in ")
    assert any("template.py" in line for line in lines), lines  # named, not raised
    tag = sys.implementation.cache_tag
    assert (site / "tinya" / "__pycache__" / f"__init__.{tag}.pyc").is_file()

    assert cli_main(["compile", "--target-dir", str(tmp_path / "nowhere")]) == 2
    assert "nowhere is not a directory" in capsys.readouterr().err
    assert cli_main(["compile", "--target-dir", str(site)]) == 0


def test_smoke_reports_attempted_imports_of_skipped_packages(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "probe.py").write_text("try:\n    import heavyskip.kernels\nexcept ImportError:\n    pass\n")
    target = {"env": {"PYTHONPATH": "{site}", "PROBE_FLAG": "{site}/x"}, "smoke_imports": ["probe"],
              "skipped_imports": ["heavyskip"]}  # fmt: skip
    (site / MARKER).write_text(json.dumps({"tar_sha256": "0", "target": target}))
    lines: list[str] = []
    assert smoke(site, log=lines.append) == 0
    assert lines[0].startswith("ok   probe")
    assert any(line.startswith("attempted import of skipped heavyskip: ") and "probe.py:2" in line for line in lines)
    assert lines[-1] == "skipped packages loaded: none"
    with pytest.raises(WheelhouseError, match="run `install"):
        smoke(tmp_path / "elsewhere", log=lines.append)


def test_chunks_are_exact_cuts_of_the_tar(wheel_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "chunks"
    manifest = pack(wheel_dir, out, chunk_mib=CHUNK_MIB, log=lambda _: None)
    sizes = [(out / c["name"]).stat().st_size for c in manifest["chunks"]]
    assert all(size == manifest["chunk_bytes"] for size in sizes[:-1])
    assert 0 < sizes[-1] <= manifest["chunk_bytes"]
    whole = b"".join((out / c["name"]).read_bytes() for c in manifest["chunks"])
    assert len(whole) == manifest["tar"]["size"] == sum(sizes)
    assert hashlib.sha256(whole).hexdigest() == manifest["tar"]["sha256"]
    big = next(f for f in manifest["files"] if f["name"].startswith("tinyb"))
    assert big["size"] > 2 * manifest["chunk_bytes"], "the big wheel spans at least three chunks"
    files = extract(out, tmp_path / "x", manifest, log=lambda _: None)
    for path in files:
        assert path.read_bytes() == (wheel_dir / path.name).read_bytes()


def test_chunk_writer_exact_multiple_makes_no_empty_chunk(tmp_path: Path) -> None:
    writer = ChunkWriter(tmp_path, 10240, log=lambda _: None)
    writer.write(b"a" * 10240)
    writer.write(b"b" * 10240)
    writer.close()
    assert [c["size"] for c in writer.chunks] == [10240, 10240]
    assert sorted(p.name for p in tmp_path.iterdir()) == [chunk_name(0), chunk_name(1)]
    with pytest.raises(WheelhouseError, match="too small"):
        ChunkWriter(tmp_path, 100)


def test_pack_is_deterministic_and_replaces_old_chunks(wheel_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "chunks"
    first = pack(wheel_dir, out, chunk_mib=CHUNK_MIB / 2, log=lambda _: None)  # more, smaller chunks
    second = pack(wheel_dir, out, chunk_mib=CHUNK_MIB, log=lambda _: None)
    assert first["tar"]["sha256"] == second["tar"]["sha256"]
    assert len(list(out.glob("wheels.tar.*"))) == len(second["chunks"]) < len(first["chunks"])


@pytest.fixture()
def packed(wheel_dir: Path, tmp_path: Path) -> Path:
    out = tmp_path / "chunks"
    pack(wheel_dir, out, chunk_mib=CHUNK_MIB, log=lambda _: None)
    return out


def test_corrupt_chunk_is_named(packed: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    victim = packed / chunk_name(1)
    data = bytearray(victim.read_bytes())
    data[100] ^= 0xFF
    victim.write_bytes(bytes(data))
    result = verify(packed, log=lambda _: None)
    assert len(result.problems) == 1 and result.problems[0].startswith(f"corrupt chunk {chunk_name(1)}: sha256")
    with pytest.raises(WheelhouseError, match=f"corrupt chunk {chunk_name(1)}"):
        install(packed, tmp_path / "site", log=lambda _: None)
    assert not (tmp_path / "site" / "tinya").exists()
    assert cli_main(["verify", "--chunks", str(packed)]) == 1
    assert f"corrupt chunk {chunk_name(1)}" in capsys.readouterr().err


def test_truncated_and_missing_chunks_are_named(packed: Path, tmp_path: Path) -> None:
    (packed / chunk_name(0)).write_bytes((packed / chunk_name(0)).read_bytes()[:-1])
    (packed / chunk_name(2)).unlink()
    problems = verify(packed, log=lambda _: None).problems
    assert any(p.startswith(f"corrupt chunk {chunk_name(0)}: ") and "expected" in p for p in problems)
    assert any(p.startswith(f"missing chunk {chunk_name(2)} ") for p in problems)
    with pytest.raises(WheelhouseError, match=f"missing chunk {chunk_name(2)}"):
        install(packed, tmp_path / "site", log=lambda _: None)


def test_missing_manifest_and_stray_chunk(packed: Path) -> None:
    (packed / chunk_name(99)).write_bytes(b"x")
    assert any(f"unexpected chunk {chunk_name(99)}" in p for p in verify(packed, log=lambda _: None).problems)
    (packed / MANIFEST).unlink()
    with pytest.raises(WheelhouseError, match="MANIFEST.json is missing"):
        load_manifest(packed)


def test_extract_refuses_paths_outside_the_dir(tmp_path: Path) -> None:
    chunk_dir = tmp_path / "chunks"
    chunk_dir.mkdir()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("../evil.whl")
        info.size = 1
        tf.addfile(info, io.BytesIO(b"x"))
    (chunk_dir / chunk_name(0)).write_bytes(buf.getvalue())
    manifest = {"files": [{"name": "../evil.whl", "size": 1, "sha256": ""}], "chunks": [{"name": chunk_name(0)}]}
    with pytest.raises(WheelhouseError, match="refusing member '../evil.whl'"):
        extract(chunk_dir, tmp_path / "x", manifest, log=lambda _: None)
    assert not (tmp_path / "evil.whl").exists()


# ---------------------------------------------------------------------------------------------------------------
# target files
# ---------------------------------------------------------------------------------------------------------------
MINIMAL = textwrap.dedent(
    """
    format = 1
    [target]
    name = "t"
    description = "test"
    python_version = "3.12"
    python_full_version = "3.12.3"
    implementation = "cp"
    abi = "cp312"
    glibc = "2.28"
    arch = "x86_64"
    measured = "by hand"
    [env]
    PYTHONPATH = "{site}"
    [present]
    numpy = "2.5.2"
    [[bundle]]
    name = "one"
    why = "test"
    requires = ["tinya==1.0", "tinyc==3.0", "numpy==2.5.2"]
    [sdist]
    tinyc = "no wheel"
    [skip]
    heavy = { why = "too big", imports = ["heavy"] }
    [accept]
    """
)


def _parse(text: str):  # noqa: ANN202
    return parse_target(tomllib.loads(text), Path("t.toml"))


def test_minimal_target_parses() -> None:
    target = _parse(MINIMAL)
    assert [p.line for p in target.to_bring()] == ["tinya==1.0", "tinyc==3.0"]  # numpy is on the target
    assert [p.sdist for p in target.pins] == [False, True, False]
    assert target.platforms()[0] == "manylinux_2_28_x86_64"
    assert {"manylinux2014_x86_64", "manylinux_2_17_x86_64", "manylinux1_x86_64"} <= set(target.platforms())
    assert target.skip["heavy"].imports == ("heavy",)


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("format = 1", "format = 2", "format: expected 1"),
        ('arch = "x86_64"', 'arch = "x86_64"\nosname = "linux"', "unknown key [target].osname"),
        ('python_version = "3.12"\n', "", "[target].python_version is missing"),
        ('python_version = "3.12"', 'python_version = "3"', "[target].python_version: expected 'X.Y'"),
        ('glibc = "2.28"', "glibc = 2.28", "[target].glibc: expected a non-empty string"),
        ('"tinya==1.0"', '"tinya>=1.0"', "[[bundle]] 'one'.requires[0]: 'tinya>=1.0' is not an exact pin"),
        ('"tinya==1.0"', '"tinya==1.0", "Tinya==2.0"', "requires[1]: tinya is already pinned in bundle 'one'"),
        ('tinyc = "no wheel"', 'tinyd = "no wheel"', "[sdist].tinyd: not pinned in any bundle"),
        ("heavy = {", "tinya = {", "[skip].tinya: also pinned in bundle 'one'"),
        ('why = "too big"', 'why = "too big", size = 3', "unknown key [skip].heavy.size"),
        ('numpy = "2.5.2"', "numpy = 2", "[present].numpy: expected a non-empty string"),
        ("[accept]", "[accept]\nheavy = 'x'", "[accept].heavy: also listed in [skip]"),
        ("[accept]", "[extras]", "unknown key extras"),
        ('name = "one"', "name = 1", "[[bundle]] #1.name: expected a non-empty string"),
        ("[accept]", "[scan]\nroots = 'verl'\n[accept]", "[scan].roots: expected a list of module names"),
        ("[accept]", "[scan]\nroot = ['verl']\n[accept]", "unknown key [scan].root"),
    ],
)
def test_target_errors_name_the_key(old: str, new: str, message: str) -> None:
    assert old in MINIMAL
    with pytest.raises(WheelhouseError) as exc:
        _parse(MINIMAL.replace(old, new, 1))
    assert message in str(exc.value) and str(exc.value).startswith("t.toml: ")


def test_unknown_target_name_lists_the_bundled_ones() -> None:
    with pytest.raises(WheelhouseError, match="bundled targets: h100-py312-cu130"):
        load_target("h200-nope")


@pytest.mark.parametrize(("target_name", "extra"),
                         [("h100-py312-cu130", "vllm"), ("h100-py312-cu130-sglang", "sglang")])
def test_bundled_target_pins_agree_with_pyproject(target_name: str, extra: str) -> None:
    """A target brings exactly the versions pyproject.toml pins (its rollout extra included) and satisfies every
    runtime dependency; pyproject's [tool.uv] overrides win over a dependency's own pin, as an [accept]ed mismatch."""
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.version import Version

    target = load_target(target_name)
    pyproject = tomllib.loads((REPO / "pyproject.toml").read_text())
    project = pyproject["project"]
    pinned = {p.name: p.version for p in target.pins}
    for line in project["dependencies"] + project["optional-dependencies"][extra]:
        req = Requirement(line)
        name = normalize(req.name)
        exact = [s.version for s in req.specifier if s.operator == "=="]
        if name in target.skip:
            continue  # e.g. wandb: deliberately not brought, with a reason
        have = pinned.get(name) or target.present.get(name)
        assert have is not None, f"pyproject dependency {line!r} is neither pinned nor present in {target_name}"
        if name in pinned and exact:
            assert pinned[name] == exact[0], f"{target_name} pins {name}=={pinned[name]}, pyproject says {line!r}"
        assert req.specifier.contains(Version(have), prereleases=True), f"{name} {have} does not satisfy {line!r}"
    for line in pyproject["tool"]["uv"]["override-dependencies"]:
        req = Requirement(line)
        assert pinned[normalize(req.name)] == next(iter(req.specifier)).version, f"{target_name} ignores {line!r}"
    for name, version in [("verl", "0.9.1"), (extra, {"vllm": "0.24.0", "sglang": "0.5.12"}[extra]),
                          ("transformers", "5.9.0"), ("open-spiel", "2.0.2"), ("reasoning-gym", "0.1.25"),
                          ("hydra-core", "1.3.8")]:  # fmt: skip
        assert pinned[name] == version
    assert target.present["torch"] == "2.11.0"
    assert normalize("wandb") in target.skip


def test_sglang_target_carries_what_its_server_imports_at_start_up() -> None:
    """The SGLang target skips heavy kernels but must carry every package the SGLang server path imports at module
    level (scan-imports: CERTAIN sites), and must run it without FlashInfer kernels (none are carried)."""
    target = load_target("h100-py312-cu130-sglang")
    vllm = load_target("h100-py312-cu130")
    pinned = {p.name: p.version for p in target.pins}
    for name in ["sglang-kernel", "torch-memory-saver", "flashinfer-python", "ipython", "soundfile", "openai",
                 "partial-json-parser", "compressed-tensors", "gguf", "transferqueue", "ray"]:  # fmt: skip
        assert name in pinned, f"{name} is imported at start-up by the SGLang path; it must be carried"
    assert "vllm" not in pinned and "xgrammar" not in pinned  # vLLM's stack stays in the other target
    for name in ["flashinfer-cubin", "nvidia-cutlass-dsl", "xgrammar", "tilelang", "sgl-deep-gemm", "torchao"]:
        assert target.skip[name].why and name not in pinned, name
    assert target.env["SGLANG_IS_FLASHINFER_AVAILABLE"] == "false"
    assert {"sglang.srt.managers.scheduler", "verl.workers.rollout.sglang_rollout.async_sglang_server"} <= set(
        target.scan_roots
    )
    assert "transformers" in target.accept and "[tool.uv]" in target.accept["transformers"]
    assert target.present == vllm.present, "same machine, same image: the [present] tables must agree"


def test_bundled_target_keeps_the_proven_pitfall_pins() -> None:
    target = load_target()
    pinned = {p.name: p.version for p in target.pins}
    assert pinned["xgrammar"] == "0.2.3" and pinned["apache-tvm-ffi"] == "0.1.9"
    assert pinned["tokenizers"] == "0.22.2" and pinned["omegaconf"] == "2.3.0"
    assert {p.name for p in target.pins if p.sdist} == {"antlr4-python3-runtime", "cellpylib", "pycosat", "zss"}
    for name in ["flashinfer-python", "tilelang", "quack-kernels", "humming-kernels", "tokenspeed-mla",
                 "nvidia-cutlass-dsl", "fastsafetensors", "opentelemetry-sdk", "anthropic", "mcp"]:  # fmt: skip
        assert target.skip[name].why and target.skip[name].imports, name
    assert target.env["VLLM_USE_FLASHINFER_SAMPLER"] == "0" and target.env["PYTHONPATH"] == "{site}"


# ---------------------------------------------------------------------------------------------------------------
# download (pip against a local find-links dir) and the dependency check
# ---------------------------------------------------------------------------------------------------------------
def _write_target(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "t.toml"
    path.write_text(text)
    return path


def test_download_is_idempotent_and_refetches_a_changed_file(
    wheel_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = load_target(_write_target(tmp_path, MINIMAL))
    dest = tmp_path / "dl"
    offline = ["--no-index", f"--find-links={wheel_dir}"]
    got = download_mod.download(target, dest, jobs=2, extra_args=offline, log=lambda _: None)
    assert {f.file for f in got.values()} == {"tinya-1.0-py3-none-any.whl", "tinyc-3.0.tar.gz"}
    lock = json.loads((dest / download_mod.LOCK_NAME).read_text())
    assert lock["target"]["name"] == "t" and set(lock["files"]) == {"tinya==1.0", "tinyc==3.0"}

    def no_pip(*args: object, **kwargs: object) -> None:
        raise AssertionError("pip must not run when every file is present with its recorded sha256")

    monkeypatch.setattr(download_mod.subprocess, "run", no_pip)
    again = download_mod.download(target, dest, extra_args=offline, log=lambda _: None)
    assert all(f.cached for f in again.values())
    monkeypatch.undo()

    (dest / "tinya-1.0-py3-none-any.whl").write_bytes(b"damaged")
    lines: list[str] = []
    third = download_mod.download(target, dest, extra_args=offline, log=lines.append)
    assert not third["tinya==1.0"].cached and third["tinyc==3.0"].cached
    assert lines[0] == "skip numpy==2.5.2: the target already has it"
    assert "2 pins for t: 1 already here (sha256 checked), 1 to fetch" in lines[1]


def test_an_optional_bundle_is_brought_only_when_asked_for(wheel_dir: Path, tmp_path: Path) -> None:
    text = MINIMAL.replace("[sdist]", '[[bundle]]\nname = "model"\nwhy = "a model wheel"\noptional = true\n'
                                      'requires = ["tinyb==2.0"]\n[sdist]')
    target = load_target(_write_target(tmp_path, text))
    assert target.optional == {"model"} and [p.bundle for p in target.pins][-1] == "model"
    assert [p.line for p in target.to_bring()] == ["tinya==1.0", "tinyc==3.0"]
    assert [p.line for p in target.to_bring(["model"])] == ["tinya==1.0", "tinyc==3.0", "tinyb==2.0"]
    with pytest.raises(WheelhouseError, match=r"t.toml: --with 'one' is not an optional bundle \(optional: model\)"):
        target.to_bring(["one"])
    offline = ["--no-index", f"--find-links={wheel_dir}"]
    lines: list[str] = []
    got = download_mod.download(target, tmp_path / "dl", extra_args=offline, log=lines.append)
    assert "tinyb==2.0" not in got and "optional bundle 'model' not brought (--with model brings it)" in lines
    got = download_mod.download(target, tmp_path / "dl", extra_args=offline, log=lambda _: None,
                                with_bundles=["model"])
    assert got["tinyb==2.0"].file == "tinyb-2.0-py3-none-any.whl" and got["tinya==1.0"].cached
    with pytest.raises(WheelhouseError, match=r"\[\[bundle\]\] 'model'.optional: expected true or false, got 'yes'"):
        _parse(text.replace("optional = true", 'optional = "yes"'))


def test_download_names_the_failing_pin(tmp_path: Path, wheel_dir: Path) -> None:
    target = load_target(_write_target(tmp_path, MINIMAL.replace('"tinya==1.0"', '"tinya==9.9"')))
    with pytest.raises(WheelhouseError, match=r"tinya==9.9 \(bundle one\): pip download failed"):
        download_mod.download(target, tmp_path / "dl", extra_args=["--no-index", f"--find-links={wheel_dir}"],
                              log=lambda _: None)  # fmt: skip


def test_pip_command_for_wheels_and_sdists() -> None:
    target = _parse(MINIMAL)
    wheel_pin, sdist_pin = target.pins[0], target.pins[1]
    cmd = download_mod.pip_command(target, wheel_pin, Path("/d"), "py", [])
    assert cmd[:4] == ["py", "-m", "pip", "download"] and cmd[-1] == "tinya==1.0"
    assert "--only-binary=:all:" in cmd and "--no-deps" in cmd
    assert cmd[cmd.index("--python-version") + 1] == "3.12" and cmd[cmd.index("--abi") + 1] == "cp312"
    sdist = download_mod.pip_command(target, sdist_pin, Path("/d"), "py", [])
    assert "--no-binary=:all:" in sdist and "--platform" not in sdist


def test_check_classifies_requirements(tmp_path: Path) -> None:
    text = MINIMAL.replace('numpy = "2.5.2"', 'numpy = "2.5.2"\nscipy = "1.18.1"\nsix = "1.0"\nzlibx = "1.0"')
    text = text.replace("[accept]", "[accept]\nzlibx = 'known mismatch'")
    target = _parse(text)
    files = [
        make_wheel(tmp_path, "tinya", "1.0", requires=(
            "tinyb>=2", "numpy>=2", "six>=1.16", "zlibx>=2", "heavy", "nothere", "oldonly; python_version < '3.11'",
            "tinyb[fast]; extra == 'all'",
        )),
        make_wheel(tmp_path, "tinyb", "2.0", requires=("scipy; extra == 'fast'", "gone; extra == 'fast'")),
    ]  # fmt: skip
    findings = {(f.requirer, f.dep): f.status for f in check(target, files)}
    assert findings[("tinya", "tinyb")] == "carried"
    assert findings[("tinya", "numpy")] == "present"
    assert findings[("tinya", "six")] == "CONFLICT"
    assert findings[("tinya", "zlibx")] == "accepted"
    assert findings[("tinya", "heavy")] == "skipped"
    assert findings[("tinya", "nothere")] == "MISSING"
    assert ("tinya", "oldonly") not in findings, "markers are evaluated for Python 3.12"
    assert ("tinyb[fast]", "scipy") not in findings, "extra 'all' of tinya is not requested by anyone"
    requested = make_wheel(tmp_path, "tinyc", "1.0", requires=("tinyb[fast]",))
    findings2 = {(f.requirer, f.dep): f.status for f in check(target, [*files, requested])}
    assert findings2[("tinyb[fast]", "scipy")] == "present" and findings2[("tinyb[fast]", "gone")] == "MISSING"


def test_parse_filename() -> None:
    d = parse_filename("vllm-0.24.0-cp38-abi3-manylinux_2_28_x86_64.whl")
    assert (d.name, d.version, d.kind) == ("vllm", "0.24.0", "wheel")
    d = parse_filename("antlr4-python3-runtime-4.9.3.tar.gz")
    assert (d.name, d.version, d.kind) == ("antlr4-python3-runtime", "4.9.3", "sdist")
    with pytest.raises(WheelhouseError, match="notes.txt: neither a wheel"):
        parse_filename("notes.txt")


# ---------------------------------------------------------------------------------------------------------------
# import scan
# ---------------------------------------------------------------------------------------------------------------
def test_scan_classifies_import_sites(tmp_path: Path) -> None:
    pkg = tmp_path / "src" / "app"
    pkg.mkdir(parents=True)
    guarded = "try:\n    from . import optional\nexcept ImportError:\n    pass\n"
    (pkg / "__init__.py").write_text("from . import engine\n" + guarded)
    (pkg / "optional.py").write_text("import heavy.opt\n")
    (pkg / "engine.py").write_text(textwrap.dedent("""
        import os
        from typing import TYPE_CHECKING
        import heavy.core
        try:
            import heavy.extra
        except ImportError:
            pass
        if os.environ.get("USE_HEAVY") == "1":
            from heavy import sampler
        if TYPE_CHECKING:
            import heavy.types
        def run():
            import heavy.kernels
            import importlib
            importlib.import_module("heavy.dyn")
        from app import unused_here
        """))
    (pkg / "unused_here.py").write_text("")
    (pkg / "cold.py").write_text("import heavy\n")
    result = scan([tmp_path / "src"], {"heavy"})
    kinds = {(s.imported, s.kind) for s in result.sites if s.module == "app.engine"}
    assert kinds == {
        ("heavy.core", "unguarded"), ("heavy.extra", "guarded"), ("heavy", "conditional"),
        ("heavy.types", "type-only"), ("heavy.kernels", "lazy"), ("heavy.dyn", "dynamic"),
    }  # fmt: skip
    eager = result.reachable(["app"], include_lazy=False)
    assert "app.engine" in eager and "app.unused_here" in eager and "app.cold" not in eager
    assert chain(eager, "app.engine") == ["app", "app.engine"]
    certain = result.reachable(["app"], include_lazy=False, certain_only=True)
    assert {"app", "app.engine", "app.unused_here"} <= set(certain)
    assert "app.optional" in eager and "app.optional" not in certain, "imported only inside try/except ImportError"


def test_scan_imports_cli_labels_certain_and_guarded_paths(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkg = tmp_path / "src" / "app"
    pkg.mkdir(parents=True)
    guarded = "try:\n    from . import extra\nexcept ImportError:\n    pass\n"
    (pkg / "__init__.py").write_text("from . import core\n" + guarded)
    (pkg / "core.py").write_text("import heavy\n")
    (pkg / "extra.py").write_text("import heavy.extra\n")
    target = _write_target(tmp_path, MINIMAL)
    assert cli_main(["scan-imports", "--target", str(target), "--wheel", str(tmp_path / "src"), "--root", "app"]) == 0
    out = capsys.readouterr().out
    assert "unguarded   CERTAIN   app.core:1 import heavy [module level]" in out
    assert "unguarded   EAGER     app.extra:1 import heavy.extra [module level]" in out
    assert "1 unparsable" not in out and "2 modules always at import time" in out


# ---------------------------------------------------------------------------------------------------------------
# standard library only, runnable as `python3 -m verl_ext.wheelhouse` from a plain checkout
# ---------------------------------------------------------------------------------------------------------------
def test_target_side_runs_on_the_standard_library_alone() -> None:
    code = textwrap.dedent("""
        import sys
        import verl_ext.wheelhouse.cli, verl_ext.wheelhouse.install, verl_ext.wheelhouse.chunks
        import verl_ext.wheelhouse.targets, verl_ext.wheelhouse.download
        verl_ext.wheelhouse.targets.load_target()
        tops = {name.split(".")[0] for name in sys.modules}
        print(sorted(t for t in tops if t not in sys.stdlib_module_names and t not in ("verl_ext", "__main__")))
        """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.run(
        [sys.executable, "-S", "-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); exec({code!r})"],
        capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    assert proc.stdout.strip() == "[]", proc.stdout + proc.stderr
    help_ = subprocess.run([sys.executable, "-m", "verl_ext.wheelhouse", "--help"], capture_output=True, text=True,
                           env={**env, "PYTHONPATH": str(REPO)}, cwd="/", check=True)  # fmt: skip
    for command in ["download", "check", "pack", "verify", "install", "scan-imports"]:
        assert command in help_.stdout


def _git_checkout(root: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A checkout with a tracked file (100 B), an untracked one (50 B), an ignored one and a deleted tracked one."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(root.parent))  # never the repository around tmp
    root.mkdir()
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    (root / ".gitignore").write_text("ignored.bin\n")  # 12 B
    (root / "sub").mkdir()
    (root / "sub" / "tracked.txt").write_bytes(b"t" * 100)
    (root / "gone.txt").write_bytes(b"g" * 70)
    subprocess.run(["git", "-C", str(root), "add", "."], check=True)
    (root / "gone.txt").unlink()
    (root / "untracked.txt").write_bytes(b"u" * 50)
    (root / "ignored.bin").write_bytes(b"i" * 5000)
    return root


def test_working_tree_bytes_counts_what_a_carry_call_sends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = _git_checkout(tmp_path / "repo", monkeypatch)
    # each file as in a tar archive: a 512-byte header and its content padded to 512 bytes
    assert working_tree_bytes(root) == (root, 3 * (512 + 512))
    assert working_tree_bytes(root / "sub") == (root, 3 * (512 + 512))  # the whole checkout, from any folder in it
    outside = tmp_path / "plain"
    outside.mkdir()
    with pytest.raises(WheelhouseError, match="not in a git checkout"):
        working_tree_bytes(outside)


def test_carried_bytes_count_the_tar_overhead_of_many_small_files() -> None:
    assert [carried_bytes(n) for n in (0, 1, 512, 513)] == [512, 1024, 1024, 1536]
    # the refused call of 2026-11-27: ~2,084 files of 37.4 MiB and one chunk of 26 MiB are over the limit
    tree = sum(carried_bytes(int(37.4 * MIB / 2084)) for _ in range(2084))
    assert tree / MIB + 26 > 64 and auto_chunk_mib(tree) < 26


def test_auto_chunk_mib_leaves_the_tree_and_headroom_under_the_carry_limit() -> None:
    assert auto_chunk_mib(0) == 60.0
    assert auto_chunk_mib(int(11.6 * MIB)) == 48.0  # the tree of 2026-11-25: 64 - 11.6 - 4, rounded down
    assert auto_chunk_mib(int(11.6 * MIB)) + 11.6 + 4 <= 64
    with pytest.raises(WheelhouseError, match=r"the working tree is 53\.0 MiB, which leaves 7 MiB per chunk"):
        auto_chunk_mib(53 * MIB)


def test_cli_pack_chunk_mib_auto(wheel_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    root = _git_checkout(tmp_path / "repo", monkeypatch)
    out = tmp_path / "chunks"
    args = ["pack", "--src", str(wheel_dir), "--out", str(out), "--chunk-mib", "auto", "--repo", str(root)]
    assert cli_main(args) == 0
    printed = capsys.readouterr().out
    # 162 bytes of tree: 64 - 4 - 0.00015 MiB, rounded down to whole MiB
    assert f"chunk size 59 MiB = 64 MiB carry limit - 0.0 MiB working tree of {root} - 4 MiB headroom" in printed
    assert load_manifest(out)["chunk_bytes"] == 59 * MIB
    assert cli_main(["pack", "--src", str(wheel_dir), "--out", str(out), "--chunk-mib", "big"]) == 1
    assert "--chunk-mib 'big': expected a size in MiB or 'auto'" in capsys.readouterr().err


def test_cli_pack_and_install_commands(wheel_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "chunks"
    assert cli_main(["pack", "--src", str(wheel_dir), "--out", str(out), "--chunk-mib", str(CHUNK_MIB)]) == 0
    assert "packed 3 files" in capsys.readouterr().out
    assert cli_main(["pack", "--src", str(wheel_dir), "--out", str(out), "--chunk-mib", "0"]) == 1
    assert "--chunk-mib 0.0" in capsys.readouterr().err
    assert cli_main(["install", "--chunks", str(tmp_path / "nowhere"), "--target-dir", str(tmp_path / "s")]) == 1
    assert "nowhere/MANIFEST.json is missing" in capsys.readouterr().err
    assert chunks_mod.TAR_NAME == "wheels.tar"
