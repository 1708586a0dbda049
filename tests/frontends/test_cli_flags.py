"""llama-cli's habits (issue 27): conversation by default with a chat template, the flags it has
(-r, --jinja, --verbose-prompt, --ignore-eos, -e, --mlock, --no-mmap, --log-disable), a one-line
error with a close match for an unknown flag, and a warning for each flag that does nothing."""
from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from pyllamaspec.frontends.flags import args as cli_args
from pyllamaspec.frontends.flags.checks import Setup, check_drafters, ineffective_flags
from pyllamaspec.errors import PyllamaspecError

cli = importlib.import_module("pyllamaspec.frontends.cli.main")    # the package exports main() as `main`


def parse(*argv: str) -> argparse.Namespace:
    return cli_args.parse_args(cli_args.build_parser(), list(argv))


def _run(*args: str, stdin: str = "", timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pyllamaspec.cli", *args], input=stdin, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("flag, meant", [("--draft-ma", "--draft-max"), ("--reverse", "--reverse-prompt"),
                                         ("--ignore_eos", "--ignore-eos"), ("--temprature", "--temperature"),
                                         ("--n-gpu-layer", "--n-gpu-layers"), ("--bogus", None), ("-x", None)])
def test_unknown_flag_is_one_line_with_a_close_match(flag, meant, capsys):
    with pytest.raises(SystemExit) as e:
        parse(flag, "1")
    assert e.value.code == 2
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith(f"error: unknown argument: {flag}") and len(err) == 2 and "usage" not in err[0]
    assert (f"(did you mean {meant}?)" in err[0]) if meant else "did you mean" not in err[0]


def test_llama_cli_flags_parse():
    a = parse("-r", "User:", "-r", "\\n\\n", "--jinja", "--verbose-prompt", "--ignore-eos", "-e", "--mlock",
              "--no-mmap", "--log-disable", "-lm", "mmap+mlock")
    assert a.reverse_prompt == ["User:", "\\n\\n"] and a.jinja and a.verbose_prompt and a.ignore_eos
    assert a.escape and a.mlock and a.mmap is False and a.log_disable and a.load_mode == "mmap+mlock"
    assert parse("--no-escape").escape is False and parse().escape is True
    assert parse("-r", "x").given == {"reverse_prompt": "-r"}
    assert parse().repack is True and parse("-nr").repack is False and parse("--no-repack").repack is False


def test_escapes_as_llama_cpp():
    assert cli.process_escapes(r"a\nb\tc\\d\'e\"f\x41\q") == "a\nb\tc\\d'e\"fA\\q"
    assert cli.process_escapes("trailing\\") == "trailing\\"
    a = parse("-p", r"one\ntwo", "-r", r"\n\n", "--stop", "END")
    cli.settings_from_args(a)
    assert a.prompt == "one\ntwo" and a.stop == ["END", "\n\n"]
    a = parse("-p", r"one\ntwo", "--no-escape")
    cli.settings_from_args(a)
    assert a.prompt == r"one\ntwo"


def test_two_drafters_are_refused():
    with pytest.raises(PyllamaspecError, match="both name a drafter"):
        check_drafters(parse("-m", "t", "--lookup", "-md", "d"))
    check_drafters(parse("-m", "t", "--lookup"))


def _setup(**kw) -> Setup:
    return Setup(**{"drafter": None, "conversing": False, "has_template": True, "n_ctx_train": 8192,
                    "n_ctx": 4096, **kw})


def test_a_warning_for_each_flag_without_effect():
    a = parse("-sys", "S", "--draft-max", "8", "--draft-p-min", "0.5", "-td", "1", "-no-cnv", "-s", "3",
              "--temp", "0")
    msgs = ineffective_flags(a, _setup(n_ctx=100000))
    text = "\n".join(msgs)
    for flag in ("-sys", "--draft-max", "--draft-p-min", "-td", "-c 100000", "-s has no effect with --temp 0"):
        assert flag in text, text
    assert len(msgs) == 6 and "-no-cnv" in text and "n_ctx_train = 8192" in text
    # the same flags where each does something: no warning
    a = parse("-sys", "S", "--draft-max", "8", "--draft-p-min", "0.5", "-td", "1", "-s", "3", "-md", "d")
    assert ineffective_flags(a, _setup(drafter=object(), conversing=True)) == []
    # a drafter without a model: the draft model's flags do nothing
    msgs = ineffective_flags(parse("--lookup", "-td", "2", "-ngld", "3"), _setup(drafter="ngram"))
    assert len(msgs) == 2 and all("without a draft model" in m for m in msgs)
    # without a template the reason says so
    [m] = ineffective_flags(parse("-sys", "S"), _setup(has_template=False))
    assert "no chat template" in m


def test_a_question_converses_by_default(smollm2_path):
    """Issue 27, 2: `-p "What is the capital of France?"` on an instruct model printed 0 tokens
    (a raw completion that ended at once). With a chat template -p is the first user turn, as in
    llama-cli; -no-cnv completes the text as given."""
    p = _run("-m", str(smollm2_path), "-p", "What is the capital of France?", "-n", "16", "--temp", "0",
             "-t", "1", "-c", "512", "-sys", "Answer in one short sentence.")
    assert p.returncode == 0, p.stderr
    assert "> What is the capital of France?" in p.stdout and "Paris" in p.stdout
    assert "warning" not in p.stderr                       # -sys does something here
    p = _run("-m", str(smollm2_path), "-p", "What is the capital of France?", "-n", "8", "--temp", "0",
             "-t", "1", "-c", "512", "-no-cnv", "-sys", "S", "--draft-max", "4")
    assert p.returncode == 0 and p.stdout.startswith("What is the capital of France?")
    warnings = [line for line in p.stderr.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2 and "-sys" in warnings[0] + warnings[1] and "--draft-max" in p.stderr


def test_no_template_converses_with_a_one_line_warning(gemma3_path):
    """Issue 27, 6: -cnv on a model without a template printed a raw UserWarning with a file and
    line; without -p it completed a ChatML-wrapped story and printed <|im_end|>."""
    p = _run("-m", str(gemma3_path), "-cnv", "-n", "4", "--temp", "0", "-t", "1", "-c", "256", stdin="Hi\n")
    assert p.returncode == 0, p.stderr
    assert "warning: gemma-3-270m-q4_k_m.gguf has no chat template; using ChatML" in p.stderr
    assert "UserWarning" not in p.stderr and ".py:" not in p.stderr
    p = _run("-m", str(gemma3_path), "-n", "8", "--temp", "0", "-t", "1", "-c", "256")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(cli.DEFAULT_PROMPT) and "<|im" not in p.stdout


def test_ignore_eos_verbose_prompt_reverse_prompt(smollm2_path):
    chat = "<|im_start|>user\nSay hi.<|im_end|>\n<|im_start|>assistant\n"
    base = ["-m", str(smollm2_path), "-no-cnv", "-p", chat, "-n", "64", "--temp", "0", "-t", "1", "-c", "512"]
    short = _run(*base)
    assert short.returncode == 0 and "decoded" in short.stderr
    n_short = int(short.stderr.split("decoded")[1].split()[0])
    assert n_short < 64                                     # the answer ends (an end-of-generation token)
    long = _run(*base, "--ignore-eos", "--verbose-prompt")
    assert long.returncode == 0, long.stderr
    assert "decoded   64 tokens" in long.stderr
    assert "number of tokens in prompt = " in long.stderr and "-> '<|im_start|>'" in long.stderr
    first_word = short.stdout[len(chat):].split()[0]
    cut = _run(*base, "-r", first_word)                     # -r: a stop string
    assert cut.returncode == 0 and cut.stdout == chat + short.stdout[len(chat):].split(first_word)[0] + "\n"


def test_log_disable_mmap_mlock(smollm2_path):
    p = _run("-m", str(smollm2_path), "-no-cnv", "-p", "The capital of France is", "-n", "6", "--temp", "0",
             "-t", "1", "-c", "256", "--log-disable", "--no-mmap", "--mlock")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("The capital of France is") and len(p.stdout) > len("The capital of France is")
    assert "decoded" not in p.stderr and "encoded" not in p.stderr


def test_error_is_not_glued_to_the_echoed_prompt(smollm2_path, tmp_path):
    """Issue 27, 8: `hierror: vocabularies differ...`: the draft is checked before any output. A
    draft of another vocabulary drafts by text now (issue 45); one without a tokenizer cannot."""
    from models import write_gguf
    write_gguf(tmp_path / "d.gguf", n_vocab=64, drop_keys=("tokenizer.ggml.model",))
    p = _run("-m", str(smollm2_path), "-md", str(tmp_path / "d.gguf"), "-no-cnv", "-p", "hi", "-n", "4", "-t", "1",
             "-c", "256")
    assert p.returncode == 1 and p.stdout == "" and p.stderr.startswith("error: the vocabularies differ"), p.stderr


def test_one_token_prompt_has_no_made_up_rate(smollm2_path):
    """Issue 27, 8: a 1-token prompt was 'encoded in 0.000 s, 21021 t/s': nothing is evaluated
    before the first round, so no rate is printed."""
    p = _run("-m", str(smollm2_path), "-no-cnv", "-p", "Hi", "-n", "4", "--temp", "0", "-t", "1", "-c", "256")
    assert p.returncode == 0, p.stderr
    line = next(x for x in p.stderr.splitlines() if x.startswith("encoded"))
    assert "t/s" not in line and "encoded    0 tokens (prompt: 1 tokens" in line


# issue 46, item 5: the llama-cli flags its users type every day, each accepted (never an error)
EVERYDAY = [("-ub", "512"), ("-tb", "4"), ("-dev", "CUDA0"), ("--mirostat", "2"), ("--mirostat-lr", "0.1"),
            ("--mirostat-ent", "5"), ("--typical", "0.9"), ("--lora", "a.gguf"), ("--keep", "32"), ("--simple-io",)]


@pytest.mark.parametrize("argv", EVERYDAY, ids=lambda x: x[0])
def test_everyday_llama_cli_flags_accepted_with_a_warning(argv):
    a = parse(*argv)
    [m] = ineffective_flags(a, _setup())
    assert m.startswith(f"{argv[0]} has no effect: "), m


def test_everyday_flags_that_ask_for_nothing_warn_nothing():
    a = parse("--mirostat", "0", "--typical", "1.0", "--reasoning-format", "none", "--reasoning-budget", "-1",
              "--no-warmup", "--perf", "--no-display-prompt")
    assert ineffective_flags(a, _setup()) == []


def test_reasoning_flags_take_effect():
    """--reasoning-format, --reasoning-budget, -rea and --chat-template-kwargs are implemented (no
    warning): they become the chat's Reasoning and the template's variables."""
    from pyllamaspec.frontends.flags.launch import reasoning_from_args
    a = parse("--reasoning-format", "deepseek", "--reasoning-budget", "0", "-rea", "off",
              "--chat-template-kwargs", '{"reasoning_effort": "low"}')
    assert ineffective_flags(a, _setup()) == []
    r, kw = reasoning_from_args(a)
    assert (r.format, r.budget) == ("deepseek", 0) and kw == {"reasoning_effort": "low", "enable_thinking": False}
    for bad in (["--chat-template-kwargs", "{nope"], ["--chat-template-kwargs", "[1]"], ["--reasoning-budget", "-2"],
                ["--chat-template-kwargs", '{"enable_thinking": "no"}']):
        with pytest.raises(PyllamaspecError):
            reasoning_from_args(parse(*bad))


def test_log_verbosity_as_llama_cpp(capsys):
    """Issue 46, item 7: -lv N / --verbosity / --log-verbosity, llama.cpp's threshold (0 output,
    1 error, 2 warning, 3 info, 4 debug): 4 and above as -v; the server's line per request is
    info; the CLI below 2 prints what --log-disable prints."""
    from pyllamaspec.frontends.server.main import build_parser as server_parser
    for flag in ("-lv", "--verbosity", "--log-verbosity"):
        assert parse(flag, "4").verbose is True
    assert parse().verbosity is None and not parse("-lv", "3").verbose and not parse("-lv", "3").log_disable
    assert parse("-lv", "1").log_disable is True and parse("-lv", "2").log_disable is False
    server = lambda *argv: cli_args.parse_args(server_parser(), list(argv))
    assert [cli_args.request_lines(server(*argv)) for argv in ([], ["-lv", "3"], ["-lv", "4"], ["-lv", "2"],
            ["-lv", "0"], ["--log-disable"], ["--log-disable", "-lv", "4"])] == [True, True, True, False, False,
                                                                                 False, False]
    assert server("--log-verbosity", "5").verbose is True
    with pytest.raises(SystemExit):
        parse("-lv", "-1")
    assert "-lv/--verbosity must be 0 or more" in capsys.readouterr().err


def test_interactive_flags_read_as_a_conversation():
    a = parse("-i")
    cli._interactive(a)
    assert a.conversation is True
    a = parse("--interactive-first", "-p", "You answer in French.")
    cli._interactive(a)
    assert a.conversation is True and a.prompt is None and a.system_prompt == "You answer in French."
    a = parse("-p", "hi")
    cli._interactive(a)
    assert a.conversation is None and a.prompt == "hi"


def test_no_display_prompt_and_perf(smollm2_path):
    r = _run("-m", str(smollm2_path), "-no-cnv", "-p", "The capital of France is", "-n", "4", "--temp", "0",
             "-c", "128", "--no-display-prompt", "--log-disable", "--perf")
    assert r.returncode == 0, r.stderr
    assert not r.stdout.startswith("The capital") and r.stdout.strip()
    assert "decoded" in r.stderr                  # --perf: the timings even with --log-disable
    r = _run("-m", str(smollm2_path), "-no-cnv", "-p", "The capital of France is", "-n", "4", "--temp", "0",
             "-c", "128", "--log-disable")
    assert r.stdout.startswith("The capital of France is") and "decoded" not in r.stderr


def test_model_by_its_offline_name(smollm2_path):
    """Issue 46, item 7: -m smollm2 is the project's offline SmolLM2 (it was "file not found")."""
    r = _run("-m", "smollm2", "-no-cnv", "-p", "The capital of France is", "-n", "2", "--temp", "0", "-c", "128")
    assert r.returncode == 0, r.stderr
    assert f"smollm2 is {smollm2_path.name}" in r.stderr and r.stdout.startswith("The capital of France is")
    r = _run("-m", "smollm3", "-no-cnv", "-p", "x", "-n", "1")
    assert r.returncode == 1 and "smollm3" in r.stderr


def test_prompt_cache_file(smollm2_path, gemma3_path, tmp_path):
    """--prompt-cache FILE (issue 43, item 4): the second run of a prompt evaluates none of what the
    first saved, and prints the same text; --prompt-cache-ro reads but never writes; another
    model's file is an error (exit 1) and stays as it was."""
    path = tmp_path / "pc.bin"
    prompt = "You are a meticulous assistant for a logistics company. " * 20 + "Question: what is 2+2? Answer:"
    args = ["-m", str(smollm2_path), "-no-cnv", "-p", prompt, "-n", "6", "--temp", "0", "-t", "1", "-c", "1024",
            "--no-display-prompt", "--prompt-cache", str(path)]
    first = _run(*args)
    assert first.returncode == 0, first.stderr
    assert "0 from the cache" in first.stderr and path.stat().st_size > 0
    mtime = path.stat().st_mtime_ns
    second = _run(*args, "--prompt-cache-ro")
    assert second.returncode == 0, second.stderr
    assert "prompt cache:" in second.stderr and "encoded    0 tokens" in second.stderr, second.stderr
    assert second.stdout == first.stdout and path.stat().st_mtime_ns == mtime
    blob = path.read_bytes()
    other = _run("-m", str(gemma3_path), "-no-cnv", "-p", "Hi", "-n", "2", "-t", "1", "-c", "256",
                 "--prompt-cache", str(path))
    assert other.returncode == 1 and "another model" in other.stderr, other.stderr
    assert path.read_bytes() == blob
