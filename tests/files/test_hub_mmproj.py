"""-hf's vision projector (hub.select_mmproj, hub.resolve_with_mmproj): llama.cpp b11434's sibling
rule (common/download.cpp, find_best_sibling with "mmproj": the model's folder or one above it,
the deepest first, then the quant closest in bits, then the first in path order), resolved from a
local Hugging Face cache made offline as test_hub.py makes it (no socket may open), and "online"
with test_hub's fakes of HfApi and hf_hub_download."""
from __future__ import annotations

import logging
import random

import pytest

pytest.importorskip("huggingface_hub")

from pyllamaspec.files import hub  # noqa: E402
from test_hub import COMMIT, FakeHub, cache, check, make_cached_repo, no_network  # noqa: E402,F401 - fixtures

# ---- select_mmproj: the rule on a listing -------------------------------------------------------


@pytest.mark.parametrize("name,bits", [
    ("m-Q4_K_M.gguf", 4), ("m.Q8_0.gguf", 8), ("m-IQ4_XS.gguf", 4), ("m-UD-Q4_K_XL.gguf", 4),
    ("mmproj-model-f16.gguf", 16), ("mmproj-BF16.gguf", 16), ("mmproj-F32.gguf", 32), ("m-TQ1_0.gguf", 1),
    ("m-MXFP4_MOE.gguf", 4), ("dir/m-Q6_K-00001-of-00002.gguf", 6),
    ("mmproj.gguf", 0), ("mmproj-model.gguf", 0), ("Q8_0/model.gguf", 0),   # no tag at the end of the name
])
def test_quant_bits(name, bits):
    assert hub._quant_bits(name) == bits


def test_the_models_folder_then_the_folders_above():
    files = ["mmproj-F16.gguf", "Q8_0/mmproj-F16.gguf", "Q8_0/m-Q8_0.gguf", "Q4_K_M/m-Q4_K_M.gguf",
             "F16/mmproj-F16.gguf", "Q4_K_M/sub/mmproj-F16.gguf", "a/b/m-Q4_K_M.gguf", "a/mmproj-F16.gguf"]
    # its own folder before the root
    assert hub.select_mmproj(files, "Q8_0/m-Q8_0.gguf") == "Q8_0/mmproj-F16.gguf"
    # none in its folder: the root's; never another branch (F16/) nor a subfolder (Q4_K_M/sub/)
    assert hub.select_mmproj(files, "Q4_K_M/m-Q4_K_M.gguf") == "mmproj-F16.gguf"
    # two folders down: the nearest folder above that has one
    assert hub.select_mmproj(files, "a/b/m-Q4_K_M.gguf") == "a/mmproj-F16.gguf"
    # a model at the root sees only the root's
    assert hub.select_mmproj(["m-Q8_0.gguf", "Q8_0/mmproj-Q8_0.gguf"], "m-Q8_0.gguf") is None
    # a nearer folder wins even with a farther quant
    assert hub.select_mmproj(["mmproj-Q8_0.gguf", "Q8_0/mmproj-F32.gguf"], "Q8_0/m-Q8_0.gguf") == \
        "Q8_0/mmproj-F32.gguf"


def test_the_quant_closest_in_bits():
    unsloth = ["mmproj-F32.gguf", "mmproj-F16.gguf", "mmproj-BF16.gguf", "mmproj-Q8_0.gguf"]
    assert hub.select_mmproj(unsloth, "m-Q8_0.gguf") == "mmproj-Q8_0.gguf"
    assert hub.select_mmproj(unsloth, "m-Q4_K_M.gguf") == "mmproj-Q8_0.gguf"         # 4 bits apart, not 12
    assert hub.select_mmproj(unsloth, "m-F32.gguf") == "mmproj-F32.gguf"
    three = ["mmproj-F32.gguf", "mmproj-F16.gguf", "mmproj-BF16.gguf"]
    # a tie (BF16 and F16 are both 16 bits): the first in path order
    assert hub.select_mmproj(three, "m-Q4_K_M.gguf") == "mmproj-BF16.gguf"
    assert hub.select_mmproj(three, "m-F16.gguf") == "mmproj-BF16.gguf"
    # a model name without a tag counts 0 bits: the fewest bits win
    assert hub.select_mmproj(unsloth, "model.gguf") == "mmproj-Q8_0.gguf"
    # a split model's bits come from its name less the split suffix
    assert hub.select_mmproj(unsloth, "m-F32-00001-of-00002.gguf") == "mmproj-F32.gguf"


def test_listing_order_does_not_matter():
    files = ["mmproj-F32.gguf", "mmproj-F16.gguf", "mmproj-BF16.gguf", "x/mmproj-Q8_0.gguf", "m-Q4_K_M.gguf"]
    rng = random.Random(0)
    for _ in range(20):
        rng.shuffle(files)
        assert hub.select_mmproj(files, "m-Q4_K_M.gguf") == "mmproj-BF16.gguf"


def test_no_projector():
    assert hub.select_mmproj(["m-Q4_K_M.gguf", "README.md", "imatrix.dat"], "m-Q4_K_M.gguf") is None
    assert hub.select_mmproj(["m-Q4_K_M.gguf", "mmproj-F16.bin", "mmproj/README.md"], "m-Q4_K_M.gguf") is None
    assert hub.select_mmproj([], "m-Q4_K_M.gguf") is None
    # the model file itself is never its own projector, whatever its name
    assert hub.select_mmproj(["mmproj-F16.gguf"], "mmproj-F16.gguf") is None
    # the name is what counts (any case, as the model's selection leaves such files out)
    assert hub.select_mmproj(["MMPROJ-F16.gguf", "m-Q4_K_M.gguf"], "m-Q4_K_M.gguf") == "MMPROJ-F16.gguf"


# ---- resolve_with_mmproj: from the cache, offline ---------------------------------------------

VISION_REPO = "someone/Vision-3b-it-GGUF"
VISION_FILES = ["README.md", "vision-3b-it-Q4_K_M.gguf", "vision-3b-it-Q8_0.gguf", "vision-3b-it-F16.gguf",
                "mmproj-vision-3b-it-Q8_0.gguf", "mmproj-vision-3b-it-F16.gguf"]


def test_resolves_the_model_and_its_projector(cache):
    make_cached_repo(cache, VISION_REPO, VISION_FILES)
    for spec, model, mmproj in [
            (VISION_REPO, "vision-3b-it-Q4_K_M.gguf", "mmproj-vision-3b-it-Q8_0.gguf"),
            (VISION_REPO + ":q8_0", "vision-3b-it-Q8_0.gguf", "mmproj-vision-3b-it-Q8_0.gguf"),
            (VISION_REPO + ":F16", "vision-3b-it-F16.gguf", "mmproj-vision-3b-it-F16.gguf")]:
        got = hub.resolve_with_mmproj(spec, cache_dir=cache, offline=True)
        check(got.model, cache, VISION_REPO, model)
        check(got.mmproj, cache, VISION_REPO, mmproj)
        model_path, mmproj_path = got                                   # a tuple too
        assert model_path == hub.resolve(spec, cache_dir=cache, offline=True)   # the model as resolve finds it
    got = hub.resolve_with_mmproj(VISION_REPO, "vision-3b-it-F16.gguf", cache_dir=cache, offline=True)
    check(got.model, cache, VISION_REPO, "vision-3b-it-F16.gguf")           # --hf-file: its sibling
    check(got.mmproj, cache, VISION_REPO, "mmproj-vision-3b-it-F16.gguf")


def test_folders_in_the_cache(cache):
    repo = "someone/Folders-GGUF"
    make_cached_repo(cache, repo, ["Q4_K_M/v-Q4_K_M.gguf", "Q8_0/v-Q8_0.gguf", "Q8_0/mmproj-v-Q8_0.gguf",
                                   "mmproj-v-F16.gguf", "F16/mmproj-v-F16.gguf"])
    got = hub.resolve_with_mmproj(repo + ":Q8_0", cache_dir=cache, offline=True)
    check(got.mmproj, cache, repo, "Q8_0/mmproj-v-Q8_0.gguf")
    got = hub.resolve_with_mmproj(repo, cache_dir=cache, offline=True)     # Q4_K_M/ has none: the root's
    check(got.model, cache, repo, "Q4_K_M/v-Q4_K_M.gguf")
    check(got.mmproj, cache, repo, "mmproj-v-F16.gguf")


def test_a_repository_without_projector_is_text_only(cache, caplog):
    repo = "someone/Text-GGUF"
    make_cached_repo(cache, repo, ["t-Q4_K_M.gguf", "t-Q8_0.gguf"])
    with caplog.at_level(logging.WARNING):
        got = hub.resolve_with_mmproj(repo, cache_dir=cache, offline=True)
    check(got.model, cache, repo, "t-Q4_K_M.gguf")
    assert got.mmproj is None and caplog.text == ""


def test_a_projector_whose_blob_is_missing_is_not_there(cache):
    snap = make_cached_repo(cache, VISION_REPO, VISION_FILES)
    (snap / "mmproj-vision-3b-it-Q8_0.gguf").resolve().unlink()     # an interrupted download
    got = hub.resolve_with_mmproj(VISION_REPO, cache_dir=cache, offline=True)
    check(got.mmproj, cache, VISION_REPO, "mmproj-vision-3b-it-F16.gguf")


def test_a_split_model_and_its_projector(cache):
    repo = "someone/BigVision-GGUF"
    parts = [f"Q8_0/bv-Q8_0-0000{k}-of-00002.gguf" for k in (1, 2)]
    make_cached_repo(cache, repo, parts + ["mmproj-bv-F16.gguf", "mmproj-bv-Q8_0.gguf"])
    got = hub.resolve_with_mmproj(repo + ":Q8_0", cache_dir=cache, offline=True)
    check(got.model, cache, repo, parts[0])
    assert (got.model.parent / "bv-Q8_0-00002-of-00002.gguf").is_file()
    check(got.mmproj, cache, repo, "mmproj-bv-Q8_0.gguf")


def test_the_errors_are_resolves(cache):
    make_cached_repo(cache, VISION_REPO, VISION_FILES)
    with pytest.raises(hub.QuantNotFoundError):
        hub.resolve_with_mmproj(VISION_REPO + ":Q2_K", cache_dir=cache, offline=True)
    for args in (("nobody/Missing-GGUF",), ("nobody/Missing-GGUF", "m-Q4_K_M.gguf")):
        with pytest.raises(hub.HubModelNotFoundError, match="offline") as ei:
            hub.resolve_with_mmproj(*args, cache_dir=cache, offline=True)
        assert "hf download" in str(ei.value)
    with pytest.raises(hub.HubModelNotFoundError, match="not in the Hugging Face cache"):
        hub.resolve_with_mmproj(VISION_REPO, "vision-3b-it-Q2_K.gguf", cache_dir=cache, offline=True)


# ---- "online", with fakes ---------------------------------------------------------------------

def test_online_the_projector_is_downloaded_after_the_model(cache, monkeypatch):
    fake = FakeHub(monkeypatch, files=VISION_FILES)
    got = hub.resolve_with_mmproj(VISION_REPO + ":Q8_0", cache_dir=cache, offline=False)
    assert [d["filename"] for d in fake.downloads] == ["vision-3b-it-Q8_0.gguf", "mmproj-vision-3b-it-Q8_0.gguf"]
    assert all(d["local_files_only"] is False for d in fake.downloads)
    check(got.mmproj, cache, VISION_REPO, "mmproj-vision-3b-it-Q8_0.gguf")
    # resolve alone fetches no projector (llama.cpp's -hf for the programs without images)
    fake.downloads.clear()
    hub.resolve(VISION_REPO + ":F16", cache_dir=cache, offline=False)
    assert [d["filename"] for d in fake.downloads] == ["vision-3b-it-F16.gguf"]


def test_online_hf_file_lists_the_repository(cache, monkeypatch):
    fake = FakeHub(monkeypatch, files=VISION_FILES)
    got = hub.resolve_with_mmproj(VISION_REPO, "vision-3b-it-F16.gguf", cache_dir=cache, offline=False)
    assert fake.listings == 1
    assert [d["filename"] for d in fake.downloads] == ["vision-3b-it-F16.gguf", "mmproj-vision-3b-it-F16.gguf"]
    check(got.mmproj, cache, VISION_REPO, "mmproj-vision-3b-it-F16.gguf")
    fake.listings = 0
    hub.resolve(VISION_REPO, "vision-3b-it-Q8_0.gguf", cache_dir=cache, offline=False)
    assert fake.listings == 0                                       # resolve needs no listing for a named file


def test_online_unreachable_takes_the_cached_projector(cache, monkeypatch, caplog):
    make_cached_repo(cache, VISION_REPO, VISION_FILES)
    fake = FakeHub(monkeypatch, list_error=OSError("connection refused"))
    with caplog.at_level(logging.WARNING):
        got = hub.resolve_with_mmproj(VISION_REPO, "vision-3b-it-F16.gguf", cache_dir=cache,
                                      offline=False)
    check(got.model, cache, VISION_REPO, "vision-3b-it-F16.gguf")
    check(got.mmproj, cache, VISION_REPO, "mmproj-vision-3b-it-F16.gguf")
    assert all(d["local_files_only"] is True for d in fake.downloads)
    assert "could not be reached" in caplog.text


def test_commit_of_the_cached_projector(cache):
    """The projector comes from the snapshot that holds it, like the model (no ref, no network)."""
    old = "fedcba9876543210fedcba9876543210fedcba98"
    make_cached_repo(cache, VISION_REPO, ["mmproj-vision-3b-it-F16.gguf"], commit=old, ref=None)
    make_cached_repo(cache, VISION_REPO, ["vision-3b-it-F16.gguf"])
    got = hub.resolve_with_mmproj(VISION_REPO + ":F16", cache_dir=cache, offline=True)
    assert got.mmproj.resolve().parent.name == "blobs"
    assert f"snapshots/{old}/" in got.mmproj.as_posix() and f"snapshots/{COMMIT}/" in got.model.as_posix()
