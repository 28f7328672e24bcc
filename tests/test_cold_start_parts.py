"""bench/device/cold_start_parts.sh: a cold-start model as checksummed parts that fit the device tool's transfers
(back: 8 files of <= 16 MiB, 64 MiB a call; in: 64 MiB a call with the working tree), and back again unchanged."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "device" / "cold_start_parts.sh"
MIB = 1024 * 1024


def parts(*args: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *map(str, args)], capture_output=True, text=True, check=False)


def _model(tmp_path: Path) -> Path:
    model = tmp_path / "base" / "sft_hf"
    model.mkdir(parents=True)
    (model / "config.json").write_text('{"model_type": "llama"}')
    (model / "model.safetensors").write_bytes(os.urandom(40 * MIB))
    (tmp_path / "base" / "sft.done").write_text("572 s\n")
    return model


def test_parts_fit_both_directions_and_join_to_the_same_model(tmp_path):
    model = _model(tmp_path)
    packed = parts("pack", model, tmp_path / "parts", "bench/learning/runs/smollm2-boardgames-base.env")
    assert packed.returncode == 0, packed.stderr
    files = sorted((tmp_path / "parts").glob("coldstart.tar.*"))
    assert len(files) == 3 and all(f.stat().st_size <= 15 * MIB for f in files)
    provenance = (tmp_path / "parts" / "PROVENANCE").read_text()
    assert "base_env=smollm2-boardgames-base.env" in provenance and "sft_stage=572 s" in provenance

    # back from the lent machine: one group per call, within 8 files and 64 MiB
    sent = parts("out", tmp_path / "parts", tmp_path / "out", 0)
    assert sent.returncode == 0 and "group 0 of 1" in sent.stdout
    returned = list((tmp_path / "out" / "coldstart").iterdir())
    assert len(returned) <= 8 and sum(f.stat().st_size for f in returned) <= 64 * MIB
    assert parts("out", tmp_path / "parts", tmp_path / "out", 1).returncode == 2  # no such group

    # into the next one: one folder per carry call, joined again on arrival
    carried = parts("carry", tmp_path / "parts", tmp_path / "carry")
    assert carried.returncode == 0 and "1 folders" in carried.stdout
    arrived = tmp_path / "arrived"
    arrived.mkdir()
    for folder in sorted((tmp_path / "carry").iterdir()):
        assert sum(f.stat().st_size for f in folder.iterdir()) <= 46 * MIB  # beside a ~3 MiB working tree
        for file in folder.iterdir():
            (arrived / file.name).write_bytes(file.read_bytes())
    joined = parts("assemble", arrived, tmp_path / "cold")
    assert joined.returncode == 0, joined.stderr
    assert (tmp_path / "cold" / "sft_hf" / "model.safetensors").read_bytes() == \
        (model / "model.safetensors").read_bytes()
    assert (tmp_path / "cold" / "PROVENANCE").read_text() == provenance


def test_a_missing_or_damaged_part_is_refused(tmp_path):
    model = _model(tmp_path)
    assert parts("pack", model, tmp_path / "parts", "base.env").returncode == 0
    last = sorted((tmp_path / "parts").glob("coldstart.tar.*"))[-1]
    data = bytearray(last.read_bytes())
    data[100] ^= 0xFF
    last.write_bytes(bytes(data))
    damaged = parts("assemble", tmp_path / "parts", tmp_path / "cold")
    assert damaged.returncode == 1 and "does not match SHA256SUMS" in damaged.stderr
    last.unlink()
    missing = parts("assemble", tmp_path / "parts", tmp_path / "cold")
    assert missing.returncode == 1 and "holds 2 of the 3 parts" in missing.stderr
    assert not (tmp_path / "cold" / "sft_hf").exists()


def test_a_folder_that_is_not_a_model_is_refused(tmp_path):
    (tmp_path / "empty").mkdir()
    refused = parts("pack", tmp_path / "empty", tmp_path / "parts", "base.env")
    assert refused.returncode == 2 and "no config.json" in refused.stderr
