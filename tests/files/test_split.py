"""Split GGUF models (llama.cpp's gguf-split, issue 13): the first shard loads the whole set, with
logits bit-identical to the unsplit file's; a broken set is our error naming the shard."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import models
import pyllamaspec
from pyllamaspec import Model, Tokenizer, errors, generate

TOKENS = [1, 5, 9, 17, 33, 2, 40, 11]


def _logits(path, tokens=TOKENS, **kw) -> np.ndarray:
    with Model(path, n_ctx=64, **kw) as m:
        return m.eval(tokens).copy()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = tmp_path_factory.mktemp("split") / "tiny.gguf"
    models.write_llama_gguf(p, n_layer=3, seed=3)
    return p


@pytest.fixture(scope="module")
def smol_split(smollm2_path, tmp_path_factory):
    """SmolLM2 in 2 and in 3 shards: n -> first shard."""
    d = tmp_path_factory.mktemp("smol-split")
    return {n: models.split_gguf(smollm2_path, d / f"s{n}" / "smol", n_shards=n)[0] for n in (2, 3)}


# ---- loads and matches ---------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("kw", [{"use_mmap": True}, {"use_mmap": False}, {"use_repack": False}],
                         ids=["mmap", "read", "norepack"])
def test_tiny_split_logits_are_identical(tiny, tmp_path, n, kw):
    parts = models.split_gguf(tiny, tmp_path / "t", n_shards=n)
    assert len(parts) == n and all(p.name.endswith(f"-of-{n:05d}.gguf") for p in parts)
    ref = _logits(tiny, **kw)
    got = _logits(parts[0], **kw)
    assert np.array_equal(got, ref)
    with Model(parts[0]) as a, Model(tiny) as b:
        assert a.info == b.info
        assert a.metadata["split.count"] == n and a.metadata["split.no"] == 0
        assert a.metadata["general.name"] == b.metadata["general.name"]


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "gemma3"])
def test_other_architectures_split(tmp_path, arch):
    src = tmp_path / f"{arch}.gguf"
    models.write_gguf(src, arch=arch, n_layer=2, head_dim=16 if arch != "qwen2" else None)
    first = models.split_gguf(src, tmp_path / arch, n_shards=3)[0]
    assert np.array_equal(_logits(first), _logits(src))


def test_metadata_only_first_shard_and_one_tensor_shards(tiny, tmp_path):
    """llama-gguf-split --no-tensor-first-split (the first shard has metadata only), and one
    tensor per shard (every tensor in its own mapping)."""
    import gguf
    names = [t.name for t in gguf.GGUFReader(str(tiny)).tensors]
    first = models.split_gguf(tiny, tmp_path / "a" / "t", groups=[[], names[:5], names[5:]])[0]
    assert np.array_equal(_logits(first), _logits(tiny))
    parts = models.split_gguf(tiny, tmp_path / "b" / "t", max_tensors=1)
    assert len(parts) == len(names)
    assert np.array_equal(_logits(parts[0]), _logits(tiny))


def test_one_part_set_is_a_whole_model(tiny, tmp_path):
    first = models.split_gguf(tiny, tmp_path / "t", n_shards=1)[0]
    assert first.name.endswith("-00001-of-00001.gguf")
    assert np.array_equal(_logits(first), _logits(tiny))


@pytest.mark.slow
@pytest.mark.parametrize("n", [2, 3])
def test_smollm2_split_logits_are_identical(smollm2_path, smol_split, n):
    with Tokenizer(smollm2_path) as tok:
        prompt = tok.tokenize("The quick brown fox jumps over the lazy dog. " * 4)
    assert np.array_equal(_logits(smol_split[n], prompt), _logits(smollm2_path, prompt))


def test_restricted_head_from_another_shard(smollm2_path, smol_split):
    """set_output_ids copies head rows from the shard that holds the head (SmolLM2's tied
    embeddings are in the first shard, so split it so they are not)."""
    import gguf
    names = [t.name for t in gguf.GGUFReader(str(smollm2_path)).tensors]
    assert names[0] == "token_embd.weight"
    ids = np.arange(0, 49152, 7, dtype=np.int32)
    res = []
    for path in (smollm2_path, smol_split[2]):
        with Model(path, n_ctx=64) as m:
            m.set_output_ids(ids)
            res.append(m.eval(TOKENS).copy())
    assert np.array_equal(res[0], res[1]) and np.isfinite(res[0][:, ids]).all()


def test_tokenizer_of_a_split_model(smollm2_path, smol_split):
    text = "Hello, split world!"
    with Tokenizer(smol_split[3]) as a, Tokenizer(smollm2_path) as b:
        assert a.tokenize(text) == b.tokenize(text)


def test_speculative_generation_with_a_split_target(smollm2_path, smol_split):
    from pyllamaspec.files.convert import ensure_variant
    draft = ensure_variant(smollm2_path, "q4_0")
    kw = dict(max_tokens=24, temperature=0, n_draft=4, p_min=0.0, adaptive=False, n_ctx=512)
    plain = generate("Write a haiku about rivers.", smollm2_path, max_tokens=24, temperature=0, n_ctx=512)
    spec = generate("Write a haiku about rivers.", smol_split[3], draft, **kw)
    assert spec.tokens == plain.tokens and spec.stats.drafted > 0


@pytest.mark.slow
def test_cli_takes_first_shards(smollm2_path, smol_split, tmp_path):
    """-m and -md given first shards, as llama.cpp's CLI takes them."""
    from pyllamaspec.files.convert import ensure_variant
    draft = models.split_gguf(ensure_variant(smollm2_path, "q4_0"), tmp_path / "d", n_shards=2)[0]
    proc = subprocess.run([sys.executable, "-m", "pyllamaspec.cli", "-m", str(smol_split[3]), "-md", str(draft),
                           "-no-cnv", "-p", "The capital of France is", "-n", "12", "--temp", "0", "-t", "2"],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("The capital of France is") and "Paris" in proc.stdout
    assert "n_drafted" in proc.stderr


def test_matches_llama_gguf_split(smollm2_path, tmp_path):
    """Our writer (the test tooling) makes llama.cpp's shards byte for byte, and they load."""
    tool = os.environ.get("PYLLAMASPEC_GGUF_SPLIT") or shutil.which("llama-gguf-split")
    if not tool:
        pytest.skip("llama-gguf-split not found (set PYLLAMASPEC_GGUF_SPLIT)")
    (tmp_path / "ll").mkdir()
    subprocess.run([tool, "--split", "--split-max-tensors", "100", str(smollm2_path), str(tmp_path / "ll" / "s")],
                   check=True, capture_output=True, cwd=tmp_path)
    ours = models.split_gguf(smollm2_path, tmp_path / "ours" / "s", max_tensors=100)
    for p in ours:
        assert (tmp_path / "ll" / p.name).read_bytes() == p.read_bytes(), p.name
    assert np.array_equal(_logits(tmp_path / "ll" / ours[0].name), _logits(smollm2_path))


# ---- broken sets ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bad_sets(tiny, tmp_path_factory):
    d = tmp_path_factory.mktemp("bad-splits")
    other = d / "other.gguf"
    models.write_llama_gguf(other, n_layer=2, seed=4)
    return models.bad_split_sets(tiny, other, d)


@pytest.mark.parametrize("kind", sorted(models.BAD_SPLITS))
@pytest.mark.parametrize("use_mmap", [True, False], ids=["mmap", "read"])
def test_broken_sets_are_our_errors_naming_the_shard(bad_sets, kind, use_mmap):
    cls_name, _, pattern = models.BAD_SPLITS[kind]
    path, shard = bad_sets[kind]
    with pytest.raises(getattr(errors, cls_name), match=pattern) as ei:
        Model(path, use_mmap=use_mmap)
    assert str(shard) in str(ei.value), str(ei.value)


def test_non_first_shard_names_the_first(bad_sets):
    path, first = bad_sets["non_first"]
    with pytest.raises(pyllamaspec.InvalidArgumentError, match="shard 2 of 3") as ei:
        Tokenizer(path)
    assert str(first) in str(ei.value)


def test_broken_set_then_repaired(tiny, tmp_path):
    """A failed load keeps nothing open that stops the fixed set from loading."""
    parts = models.split_gguf(tiny, tmp_path / "t", n_shards=3)
    saved = parts[2].read_bytes()
    parts[2].unlink()
    with pytest.raises(pyllamaspec.ModelNotFoundError, match=str(parts[2])):
        Model(parts[0])
    parts[2].write_bytes(saved)
    assert np.array_equal(_logits(parts[0]), _logits(tiny))
