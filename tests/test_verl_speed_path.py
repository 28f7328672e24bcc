"""The update path our speed defaults select in verl 0.9.1 (USE_FUSED_KERNELS=1, padded rows under SDPA) gives the
same token log-probs and LoRA gradients as the plain path, on CPU with a tiny random Qwen2 and verl's own code."""

from __future__ import annotations

import pytest
import torch
from peft import LoraConfig, TaskType, get_peft_model
from transformers import Qwen2Config, Qwen2ForCausalLM
from verl.models.transformers.monkey_patch import apply_monkey_patch


def tiny_lora_model() -> torch.nn.Module:
    torch.manual_seed(0)
    config = Qwen2Config(vocab_size=97, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                         attn_implementation="sdpa", use_cache=False)
    model = Qwen2ForCausalLM(config)
    return model


def lora(model: torch.nn.Module) -> torch.nn.Module:
    wrapped = get_peft_model(model, LoraConfig(task_type=TaskType.CAUSAL_LM, r=4, lora_alpha=4,
                                               target_modules="all-linear", bias="none"))
    torch.manual_seed(1)
    for name, param in wrapped.named_parameters():  # non-zero B so the adapter changes the output
        if "lora_B" in name:
            param.data.normal_(0, 0.1)
    return wrapped


@pytest.fixture
def restore_qwen2_forward():
    """verl's patch replaces Qwen2ForCausalLM.forward on the class; put it back for the other tests."""
    original = Qwen2ForCausalLM.forward
    yield
    Qwen2ForCausalLM.forward = original


def plain_log_probs(model, input_ids, attention_mask, temperature):
    logits = model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits / temperature
    labels = torch.roll(input_ids, shifts=-1, dims=-1)
    return torch.log_softmax(logits.float(), -1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)


def test_fused_log_probs_match_plain_path_with_lora(restore_qwen2_forward):
    input_ids = torch.randint(0, 97, (3, 11))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 7:] = 0  # a padded row, as with USE_REMOVE_PADDING=0
    temperature = 0.7

    reference = lora(tiny_lora_model())
    expected = plain_log_probs(reference, input_ids, attention_mask, temperature)
    expected.masked_fill(attention_mask == 0, 0).sum().backward()
    expected_grads = {n: p.grad.clone() for n, p in reference.named_parameters() if p.requires_grad}

    base = tiny_lora_model()
    apply_monkey_patch(model=base, use_remove_padding=False, use_fused_kernels=True, fused_kernels_backend="torch")
    fused = lora(base)
    output = fused(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=True,
                   temperature=temperature)
    mask = attention_mask.bool()
    assert torch.allclose(output.log_probs[mask], expected[mask], atol=1e-5)
    output.log_probs.masked_fill(attention_mask == 0, 0).sum().backward()
    grads = {n: p.grad for n, p in fused.named_parameters() if p.requires_grad}
    assert grads.keys() == expected_grads.keys() and len(grads) > 0
    for name, grad in grads.items():
        assert torch.allclose(grad, expected_grads[name], atol=1e-5), name
