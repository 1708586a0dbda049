"""The CLI's conversation mode (-cnv) driven through stdin, and llama.cpp's flag names parsed
as llama.cpp parses them (-fa is not -f a, -cnv is not -c nv)."""
from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from pyllamaspec.frontends.flags import args as cli_args
from pyllamaspec.errors import PyllamaspecError

cli = importlib.import_module("pyllamaspec.frontends.cli.main")    # the package exports main() as `main`


def parse(*argv: str) -> argparse.Namespace:
    return cli_args.parse_args(cli_args.build_parser(), list(argv))


def test_multi_letter_flags():
    a = parse("-m", "t.gguf", "-fa", "on", "-cnv", "-ctk", "q8_0", "-ctv", "q4_0", "-td", "1", "-sys", "S",
              "-ngl", "all", "-ngld", "3", "-hfd", "u/r", "-ctkd", "f32")
    assert a.flash_attn == "on" and a.conversation is True and a.file is None and a.ctx_size == 4096
    assert (a.cache_type_k, a.cache_type_v, a.cache_type_k_draft) == ("q8_0", "q4_0", "f32")
    assert a.threads_draft == 1 and a.system_prompt == "S" and a.n_gpu_layers == -1 and a.n_gpu_layers_draft == 3
    assert a.hf_repo_draft == "u/r"
    assert parse("-no-cnv").conversation is False and parse().conversation is None
    assert parse("-fa", "-m", "x").flash_attn == "on"


def test_llamacpp_spec_names():
    a = parse("--spec-draft-model", "d.gguf", "--spec-draft-n-max", "8", "--spec-draft-n-min", "2",
              "--spec-draft-p-min", "0.5", "--temperature", "0.3", "--spec-draft-threads", "2")
    assert (a.model_draft, a.draft_max, a.draft_min, a.draft_p_min, a.temp, a.threads_draft) == \
        ("d.gguf", 8, 2, 0.5, 0.3, 2)
    a = parse("-m", "t", "--spec-type", "ngram-simple")          # a name does what it names in llama.cpp
    cli_args.resolve_spec_type(a)
    assert a.spec_types == ("ngram-simple",) and not a.lookup
    a = parse("-m", "t", "--spec-type", "ngram-mod,ngram-simple", "--spec-type", "ngram-cache", "--lookup")
    cli_args.resolve_spec_type(a)
    assert a.spec_types == ("ngram-simple", "ngram-mod", "ngram-cache", "ngram-lookup")   # llama.cpp's order
    a = parse("-m", "t", "-md", "h.gguf", "--spec-type", "ngram-mod,draft-eagle3")
    cli_args.resolve_spec_type(a)
    assert a.spec_types == ("ngram-mod", "draft-eagle3") and a.model_draft == "h.gguf"
    a = parse("-m", "t", "-md", "d", "--spec-type", "none")
    cli_args.resolve_spec_type(a)
    assert a.model_draft is None and not a.lookup and a.spec_types == ()
    a = parse("-m", "t", "-md", "d")
    cli_args.resolve_spec_type(a)
    assert a.spec_types is None                                    # the draft's file decides
    a = parse("--spec-ngram-mod-n-match", "8", "--spec-ngram-map-k4v-min-hits", "3", "-lcs", "s.bin")
    p = cli_args.ngram_params(a)
    assert (p.mod.n_match, p.mod.n_max, p.map_k4v.min_hits, p.simple.size_n, p.cache_static) == (8, 64, 3, 12, "s.bin")
    for bad, msg in (("draft-dspark", "not supported"), ("bogus", "unknown"), ("draft-simple", "needs a draft"),
                     ("draft-eagle3", "needs a draft"), ("draft-dflash,draft-simple", "one draft")):
        a = parse("-m", "t", "--spec-type", bad)
        with pytest.raises(PyllamaspecError, match=msg):
            cli_args.resolve_spec_type(a)


@pytest.mark.parametrize("argv", [["-fitt", "1"], ["-cnvx"], ["-ng", "1"], ["--draft-ma", "3"]])
def test_unknown_flags_refused_by_name(argv, capsys):
    with pytest.raises(SystemExit) as e:
        parse(*argv)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert argv[0] in err


def test_negative_values_still_parse():
    a = parse("-n", "-1", "-s", "-1", "-p", "-hello")
    assert a.n_predict == -1 and a.seed == -1 and a.prompt == "-hello"


def test_penalties_parsed_and_passed():
    a = parse("--repeat-penalty", "1.1", "--presence-penalty", "0.5", "--frequency-penalty", "0.2",
              "--repeat-last-n", "32")
    assert (a.repeat_penalty, a.presence_penalty, a.frequency_penalty) == (1.1, 0.5, 0.2)
    assert cli_args.penalty_kwargs(a) == {"repeat_penalty": 1.1, "presence_penalty": 0.5,
                                          "frequency_penalty": 0.2, "penalty_last_n": 32}
    assert cli_args.penalty_kwargs(parse()) == {}


def test_gpu_layers_warning_without_gpu(capsys, monkeypatch):
    monkeypatch.setattr(cli_args, "gpu_available", lambda: False)
    a = parse("-ngl", "99")
    cli_args.warn_gpu_layers(a)
    assert "no usable GPU found, --gpu-layers option will be ignored" in capsys.readouterr().err
    assert a.n_gpu_layers == 0


def test_bad_template_name_fails_before_loading(tmp_path):
    assert cli.main(["-m", str(tmp_path / "none.gguf"), "--chat-template", "nope", "-cnv"]) == 1


def _run(args, stdin: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyllamaspec.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)


def test_conversation_two_turns(smollm2_path):
    """Two turns and /exit through stdin: the answers stream after '> ', the second turn reuses
    the first's cache (--turn-stats), and the session ends cleanly."""
    p = _run(["-m", str(smollm2_path), "-cnv", "-sys", "Answer in one short sentence.", "--temp", "0",
              "-n", "16", "-t", "1", "-c", "512", "--turn-stats"],
             "What is the capital of France?\nAnd of Italy?\n/exit\nnever read\n")
    assert p.returncode == 0, p.stderr
    assert "Paris" in p.stdout and "Rome" in p.stdout
    assert p.stdout.count("> ") == 3 and "never read" not in p.stdout
    assert "> What is the capital of France?\n" in p.stdout      # piped input is echoed, as a terminal would
    stats = [line for line in p.stderr.splitlines() if line.startswith("[prompt")]
    assert len(stats) == 2 and " 0 reused" in stats[0] and " 0 reused" not in stats[1]


def test_conversation_is_default_with_template_and_ends_at_eof(smollm2_path):
    p = _run(["-m", str(smollm2_path), "--temp", "0", "-n", "8", "-t", "1", "-c", "256"], "Hi\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("\n> ") and p.stdout.count("> ") == 2


def test_ctrl_c_stops_the_answer_not_the_program(smollm2_path):
    """SIGINT while an answer streams: the answer stops, the program reads the next line."""
    import os
    import signal
    import time
    proc = subprocess.Popen([sys.executable, "-m", "pyllamaspec.cli", "-m", str(smollm2_path), "-cnv", "--temp", "0",
                             "-n", "400", "-t", "1", "-c", "1024"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=0)
    try:
        proc.stdin.write("Write a very long story about a dragon.\n")
        proc.stdin.flush()
        seen = ""
        while "dragon.\n" not in seen or len(seen.split("dragon.\n", 1)[1]) < 20:   # the answer has started
            ch = proc.stdout.read(1)
            assert ch, proc.stderr.read()
            seen += ch
        os.kill(proc.pid, signal.SIGINT)
        time.sleep(0.5)
        proc.stdin.write("/exit\n")
        proc.stdin.flush()
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "[interrupted]" in err and "Traceback" not in err
    assert (seen + out).count("> ") == 2                 # it asked for the next message
