"""Random-init Qwen2 models and a tokenizer trained in-process: for tests and GPU smoke runs offline.

``python -m verl_ext.tiny_model --out DIR --shape qwen2.5-0.5b`` writes a Hugging Face model folder
(config, safetensors, tokenizer with a Qwen-style chat template) with no hub access. The weights are
random. Shapes (parameter counts with the default 4096-token vocabulary, embeddings tied):

- ``tiny`` (0.4M): unit tests and CPU runs of the whole pipeline.
- ``small`` (14.6M; 13.2M with the ~1,000-token vocabulary a tic_tac_toe + connect_four corpus gives): the smallest shape that learns the games; the from-scratch recipe
  (``train/recipes/from-scratch.sh``) trains it by SFT, then GRPO, on one GPU in minutes.
- ``qwen2.5-0.5b`` (0.36B with this vocabulary): Qwen2.5-0.5B's layers, for speed and memory runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

QWEN_STYLE_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
SHAPES = {
    "tiny": dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2),
    # 6 layers x hidden 384 (head dim 64, grouped-query attention 6:2): 14.6M parameters with a 4096 vocabulary.
    "small": dict(hidden_size=384, intermediate_size=1536, num_hidden_layers=6, num_attention_heads=6,
                  num_key_value_heads=2),
    # Qwen2.5-0.5B's shape (its vocabulary is replaced by the tokenizer trained here).
    "qwen2.5-0.5b": dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                         num_key_value_heads=2),
}


def build_tokenizer(out_dir: Path, texts: list[str], vocab_size: int = 1024) -> Path:
    """Train a byte-level BPE with Qwen-style special tokens and chat template; save it HF-style."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    fast.chat_template = QWEN_STYLE_TEMPLATE
    fast.save_pretrained(out_dir)
    return Path(out_dir)


def build_qwen2(out_dir: Path, shape: str, tokenizer_dir: Path, seed: int = 0, dtype: str = "bfloat16") -> Path:
    """A random-init ``Qwen2ForCausalLM`` of ``shape`` whose vocabulary matches the tokenizer in ``tokenizer_dir``."""
    import torch
    from transformers import AutoTokenizer, GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    if shape not in SHAPES:
        raise ValueError(f"shape: unknown {shape!r} (choose from {', '.join(SHAPES)})")
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    config = Qwen2Config(vocab_size=len(tokenizer), max_position_embeddings=4096, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         torch_dtype=dtype, **SHAPES[shape])
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config).to(getattr(torch, dtype))
    model.generation_config = GenerationConfig(eos_token_id=tokenizer.eos_token_id,
                                               pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return Path(out_dir)


def parameter_count(model_dir: Path) -> int:
    """Number of parameters of the model saved in ``model_dir`` (tied embeddings counted once)."""
    from safetensors import safe_open

    total = 0
    for path in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as handle:
            for key in handle.keys():
                shape = handle.get_slice(key).get_shape()
                count = 1
                for dim in shape:
                    count *= int(dim)
                total += count
    return total


def env_corpus(env_section: dict, limit: int = 2000) -> list[str]:
    """Prompts of the configured envs (and answer snippets): text to train the tokenizer on."""
    from .mixture import EnvMixture

    mixture = EnvMixture(env_section)
    refs = (mixture.plan("train") + mixture.plan("val"))[:limit]
    texts = [mixture.build(ref).messages[0]["content"] for ref in refs]
    return texts + ["<answer>MOVE</answer> I think the best move is", "Let me think step by step."]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m verl_ext.tiny_model", description=__doc__)
    parser.add_argument("--out", required=True)
    parser.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--game-types", default="tic_tac_toe,connect_four,hex,breakthrough,othello")
    parser.add_argument("--logic-cases", default="", help="reasoning-gym datasets whose prompts the tokenizer sees")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = Path(args.out)
    section: dict = {"openspiel": {"game_types": args.game_types.split(","), "num_tasks_per_case": 64}}
    if args.logic_cases:
        section["logic"] = {"cases": args.logic_cases.split(","), "num_tasks_per_case": 16}
    build_tokenizer(out, env_corpus(section), args.vocab_size)
    build_qwen2(out, args.shape, out, seed=args.seed)
    print(f"wrote a random-init {args.shape} Qwen2 model ({parameter_count(out) / 1e6:.1f}M parameters) "
          f"and tokenizer to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
