"""GLM-4.5 / 4.6 / 4.7 (``glm4moe``, issue 24): what only it has. Its logits and MTP drafts
against llama.cpp and the oracle, broken conventions, batching, rollback and speculation:
test_arch_checks.py's glm4moe entry. Here: a file without the routing's selection bias is
refused."""
from __future__ import annotations

import pytest

import pyllamaspec
from models_glm4moe import write_glm4moe_gguf
from pyllamaspec import Model


def test_missing_selection_bias_is_refused(tmp_path):
    p = tmp_path / "bad.gguf"
    write_glm4moe_gguf(p, drop_tensors=("blk.1.exp_probs_b.bias",))
    with pytest.raises(pyllamaspec.ModelFormatError, match="exp_probs_b"):
        Model(p)
