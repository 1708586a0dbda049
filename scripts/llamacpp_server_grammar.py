#!/usr/bin/env python3
"""llama-server b11434's greedy answers under GBNF grammars and JSON schemas on the two real
models, for tests/data/reference/grammar_server_llamacpp.json (tests/structured/test_grammar_server.py).
Not part of CI.

For each model it starts llama-server (`--verbose`, so that each answer carries the grammar the
server sampled with in __verbose.generation_settings.grammar), then asks with temperature 0:
/v1/chat/completions with response_format json_schema / json_object and with a GBNF grammar,
and /v1/completions with json_schema and grammar. The fixture keeps each request, the content
(the chat's parsed content, and the raw text the model wrote), the finish reason, and the
grammar.

  python scripts/llamacpp_server_grammar.py /work/llamacpp/build-native/bin/llama-server
"""
from __future__ import annotations

import json
import pathlib
import socket
import subprocess
import sys
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
OUT = REPO / "tests" / "data" / "reference" / "grammar_server_llamacpp.json"
MAX_TOKENS = 96

PERSON = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"]}
WEATHER = {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"enum": ["celsius", "fahrenheit"]},
                                            "days": {"type": "integer", "minimum": 1, "maximum": 7}},
           "required": ["city", "unit", "days"], "additionalProperties": False}
RECIPE = {"type": "object", "properties": {
    "title": {"type": "string", "maxLength": 40},
    "ingredients": {"type": "array", "items": {"type": "string"}, "minItems": 2, "maxItems": 4},
    "vegetarian": {"type": "boolean"}}, "required": ["title", "ingredients", "vegetarian"]}
EVENT = {"type": "object", "properties": {"name": {"type": "string"}, "date": {"type": "string", "format": "date"},
                                          "tags": {"type": "array", "items": {"enum": ["work", "fun", "family"]}}},
         "required": ["name", "date"]}

YES_NO = 'root ::= ("yes" | "no") "." '
LIST = 'root ::= item{3}\nitem ::= "- " [A-Za-z ]{1,30} "\\n"'
ARITH = 'root ::= expr "=" [0-9]+\nexpr ::= term (("+" | "-" | "*") term)*\nterm ::= [0-9]+'
CSV = 'root ::= row row\nrow ::= field ("," field)* "\\n"\nfield ::= [a-z0-9]+'


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def json_schema(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "answer", "schema": schema}}


REQUESTS = [
    ("chat", {"messages": user("Give me a person as JSON."), "response_format": json_schema(PERSON)}),
    ("chat", {"messages": user("What is the weather forecast request for Paris this week?"),
              "response_format": json_schema(WEATHER)}),
    ("chat", {"messages": user("Write a short recipe."), "response_format": json_schema(RECIPE)}),
    ("chat", {"messages": user("Plan an event for next month."), "response_format": json_schema(EVENT)}),
    ("chat", {"messages": user("Describe a cat in JSON."), "response_format": {"type": "json_object"}}),
    ("chat", {"messages": [{"role": "system", "content": "Answer in JSON."}, *user("List two colors.")],
              "json_schema": {"type": "object", "properties": {"colors": {"type": "array", "items": {"type": "string"}}},
                              "required": ["colors"]}}),
    ("chat", {"messages": user("Is the sky blue?"), "grammar": YES_NO}),
    ("chat", {"messages": user("Name three animals."), "grammar": LIST}),
    ("completion", {"prompt": "A person, as JSON:", "json_schema": PERSON}),
    ("completion", {"prompt": "The weather request:", "json_schema": WEATHER}),
    ("completion", {"prompt": "Three animals:\n", "grammar": LIST}),
    ("completion", {"prompt": "Some arithmetic: ", "grammar": ARITH}),
    ("completion", {"prompt": "A table:\n", "grammar": CSV}),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port: int, route: str, body: dict) -> dict:
    req = urllib.request.Request(f"http://127.0.0.1:{port}{route}", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def wait_ready(port: int, proc: subprocess.Popen) -> None:
    for _ in range(600):
        if proc.poll() is not None:
            raise RuntimeError("llama-server exited")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("llama-server did not start")


def run_model(server: str, name: str, path: pathlib.Path) -> list[dict]:
    port = free_port()
    proc = subprocess.Popen([server, "-m", str(path), "-c", "2048", "-t", "2", "-np", "1", "--port", str(port),
                             "--verbose"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out = []
    try:
        wait_ready(port, proc)
        for kind, body in REQUESTS:
            body = dict(body, temperature=0, max_tokens=MAX_TOKENS)
            route = "/v1/chat/completions" if kind == "chat" else "/v1/completions"
            r = post(port, route, body)
            choice = r["choices"][0]
            verbose = r["__verbose"]
            out.append({"kind": kind, "request": body,
                        "content": choice["message"]["content"] if kind == "chat" else choice["text"],
                        "raw": verbose["content"], "finish_reason": choice["finish_reason"],
                        "grammar": verbose["generation_settings"]["grammar"],
                        "n_predicted": verbose["tokens_predicted"]})
            print(f"{name} {kind}: {out[-1]['raw']!r}", file=sys.stderr)
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return out


def main(server: str) -> None:
    from pyllamaspec.files.offline import real_model_path
    fixture = {"server": "llama-server b11434 (--verbose, -c 2048, -np 1, temperature 0)", "max_tokens": MAX_TOKENS,
               "models": {}}
    for name in ("smollm2", "gemma3"):
        path = real_model_path(name)
        fixture["models"][name] = {"file": path.name, "cases": run_model(server, name, path)}
    OUT.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
