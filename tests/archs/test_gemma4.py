"""Gemma 4 (issue 24): what only it has. Its logits against llama.cpp and the oracle, broken
conventions, batching, rollback and speculation: test_arch_checks.py's gemma4 entry. Here:
malformed files are refused with a message."""
from __future__ import annotations

import numpy as np
import pytest

import pyllamaspec
from models_gemma4 import write_gemma4_gguf
from pyllamaspec import Model


@pytest.mark.parametrize("kw,match", [
    (dict(extra_kv={"gemma4.attention.sliding_window_pattern": [True, False]}), "one entry per layer"),
    (dict(shared_kv_layers=5), "shared_kv_layers"),
    (dict(shared_kv_layers=1, swa_pattern=(True, True, False, True, False)), "shares the cache"),
    (dict(extra_kv={"gemma4.attention.head_count_kv": [2, 1, 2]}), "one per layer"),
    (dict(drop_tensors=("rope_freqs.weight",)), "rope_freqs"),
])
def test_malformed_files_are_refused(tmp_path, kw, match):
    p = tmp_path / "bad.gguf"
    write_gemma4_gguf(p, **kw)
    with pytest.raises(pyllamaspec.ModelFormatError, match=match):
        Model(p)


def test_unread_scale_tensor_is_refused(tmp_path):
    """llama.cpp multiplies a weight by its ".scale" tensor (NVFP4 exports): one we would not
    read is refused rather than ignored."""
    p = tmp_path / "scaled.gguf"
    write_gemma4_gguf(p, extra_tensors=(("blk.0.attn_q.scale", np.array([2.0]), "F32"),))
    with pytest.raises(pyllamaspec.UnsupportedModelError, match="attn_q.scale"):
        Model(p)
