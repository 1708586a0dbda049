"""llama-server's slot files (--slot-save-path, POST /slots/{id}?action=save|restore|erase; issue 43):
save a slot, restart the server, restore it: the same request evaluates only its last tokens and
answers the same; a traversal filename, a truncated file, a file of another model or cache type,
a missing one: each a 4xx, and the server serves on."""
from __future__ import annotations

import pytest

from pyllamaspec.files.offline import real_model_path
from test_server import Server

SYSTEM = "You are a meticulous assistant for a logistics company. " * 30
A = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Summarize your role."}]


def _server(path, *flags, model="smollm2") -> Server:
    return Server(["-m", str(real_model_path(model)), "-c", "2048", "-np", "1", "-t", "1", "--temp", "0",
                   "--cache-ram", "0", "--slot-save-path", str(path), *flags])


def _ask(s: Server) -> dict:
    code, r = s.post("/v1/chat/completions", {"messages": A, "max_tokens": 8})
    assert code == 200, r
    return r


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    d = tmp_path_factory.mktemp("slots")
    s = _server(d)
    try:
        first = _ask(s)
        code, out = s.post("/slots/0?action=save", {"filename": "a.bin"})
        assert code == 200, out
    finally:
        s.stop()
    return d, first, out


def test_save_restart_restore_resumes(saved):
    d, first, out = saved
    assert out["id_slot"] == 0 and out["n_saved"] > 300 and out["n_written"] == (d / "a.bin").stat().st_size
    s = _server(d)
    try:
        code, r = s.post("/slots/0?action=restore", {"filename": "a.bin"})
        assert code == 200 and r["n_restored"] == out["n_saved"], r
        again = _ask(s)
        assert again["timings"]["prompt_n"] <= 2, again["timings"]
        assert again["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
        code, r = s.post("/slots/0?action=erase", {})
        assert code == 200 and r["n_erased"] > 300
        assert _ask(s)["timings"]["prompt_n"] > 300             # erased: evaluated again
    finally:
        s.stop()


def test_bad_files_and_names_are_4xx_and_the_server_serves_on(saved):
    d, first, _ = saved
    blob = (d / "a.bin").read_bytes()
    (d / "cut.bin").write_bytes(blob[:len(blob) // 2])
    (d / "junk.bin").write_bytes(b"not a state file at all")
    s = _server(d)
    try:
        for name, status in (("../a.bin", 400), ("/etc/passwd", 400), (".hidden", 400), ("", 400),
                             ("missing.bin", 404), ("cut.bin", 400), ("junk.bin", 400)):
            code, r = s.post("/slots/0?action=restore", {"filename": name})
            assert code == status, (name, r)
        code, r = s.post("/slots/0?action=save", {"filename": "../escape.bin"})
        assert code == 400 and not (d.parent / "escape.bin").exists()
        code, r = s.post("/slots/0?action=nope", {})
        assert code == 400
        code, r = s.post("/slots/9?action=erase", {})
        assert code == 400
        assert _ask(s)["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    finally:
        s.stop()
    s = _server(d, "-ctk", "f32", "-ctv", "f32")                 # another cache type
    try:
        code, r = s.post("/slots/0?action=restore", {"filename": "a.bin"})
        assert code == 400 and "cache type" in r["error"]["message"], r
    finally:
        s.stop()
    s = _server(d, model="gemma3")                                # another model
    try:
        code, r = s.post("/slots/0?action=restore", {"filename": "a.bin"})
        assert code == 400 and "another model" in r["error"]["message"], r
        assert s.health()["status"] == "ok"
    finally:
        s.stop()


def test_a_sequence_belongs_to_one_slot():
    """The pool may give a sequence one slot left to another slot: from then on only the second
    saves it (a save of the first must not write the second's conversation)."""
    from types import SimpleNamespace
    from pyllamaspec.frontends.server.worker import Worker
    w, s1, s2 = SimpleNamespace(slot_seq={}), object(), object()
    Worker.hold(w, 0, s1)
    Worker.hold(w, 1, s2)
    Worker.hold(w, 1, s1)
    assert w.slot_seq == {1: s1}


def test_a_hybrids_slot_survives_a_restart(tmp_path):
    """qwen35 (hybrid, tiny): its slot file holds its recurrent states too, so after a restart
    and a restore the same chat evaluates its last token only and answers the same."""
    from models_qwen35 import write_qwen35_gguf
    path = tmp_path / "qwen35.gguf"
    write_qwen35_gguf(path)
    msgs = [{"role": "system", "content": "abcdefgh ijkl mnop " * 10}, {"role": "user", "content": "hi there"}]

    def server() -> Server:
        return Server(["-m", str(path), "-c", "1024", "-np", "1", "-t", "1", "--temp", "0", "--cache-ram", "0",
                       "--slot-save-path", str(tmp_path)])

    def ask(s: Server) -> dict:
        code, r = s.post("/v1/chat/completions", {"messages": msgs, "max_tokens": 6})
        assert code == 200, r
        return r
    s = server()
    try:
        first = ask(s)
        code, out = s.post("/slots/0?action=save", {"filename": "h.bin"})
        assert code == 200 and out["n_saved"] > 150, out
    finally:
        s.stop()
    s = server()
    try:
        code, r = s.post("/slots/0?action=restore", {"filename": "h.bin"})
        assert code == 200 and r["n_restored"] == out["n_saved"], r
        again = ask(s)
        assert again["timings"]["prompt_n"] <= 2, again["timings"]
        assert again["choices"][0]["message"] == first["choices"][0]["message"]
    finally:
        s.stop()
