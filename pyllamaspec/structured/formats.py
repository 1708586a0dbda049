"""What constrains a generation, from a request's fields as llama-server reads them: `grammar`
(GBNF), `json_schema`, OpenAI's `response_format` (json_object, json_schema). A completion
gets the schema's grammar itself (llama.cpp's json_schema_to_grammar); a chat gets the grammar
llama-server b11434 builds for a response format around the template's generation prompt (the
JSON may come bare or in a ```json fence, whitespace around it; the grammar first takes the
generation prompt, as llama.cpp's sampler is prefilled with it), and the answer's content is the
JSON alone."""
from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from ..engine.grammar import Grammar, check_grammar
from ..errors import GrammarError, InvalidArgumentError
from .gbnf_text import format_literal
from .json_schema import SchemaConverter, json_schema_to_grammar
from .output import ChatOutput, JsonOutput, PlainOutput, json_content
from .reasoning import Reasoning, ThinkSyntax, reasoning_output, think_syntax
from .tools.request import ToolRequest
from .schema_model import read_schema


@dataclass(frozen=True)
class GrammarSpec:
    """What constrains a generation: GBNF text (empty: nothing, a chat's tools may still be read),
    its start rule, the text the grammar takes before the first generated token (llama.cpp
    prefills a chat's generation prompt into output-format grammars), and for a chat the JSON
    schema or the tools it came from, with what the template says of them (for_chat)."""
    text: str
    root: str = "root"
    prefill: str = ""
    kind: str = "grammar"                 # "grammar", "json_schema", "response_format", "tools" or "text"
    schema: Any = None                    # the JSON schema it came from, if any
    tools: ToolRequest | None = None
    source: str = ""                      # the chat template (tools: its family's syntax)
    generation_prompt: str = ""
    parallel: bool = False                # the template shows several calls in one message
    reasoning: Reasoning = Reasoning()    # a chat's: how its thinking is read and bounded
    think: ThinkSyntax | None = None      # the template's reasoning block (for_chat)

    @property
    def generic_tools(self) -> bool:
        """Whether a chat's tool calls take the generic JSON format (its template has no tool syntax)."""
        return self.kind == "tools" and bool(self.source) and self.tools.generic(self.source)

    def bind(self, prompt, model) -> "tuple[Any, GrammarSpec]":
        """A chat's prompt and grammar once the model's template is known: the generic tool
        format's system message where the template has no tool syntax (structured/tools/generic.py),
        then for_chat."""
        if self.kind == "tools":
            source = prompt.template(model).source
            if self.tools.generic(source):
                kwargs = tuple((k, v) for k, v in prompt.kwargs if k != "tools")
                prompt = replace(prompt, messages=tuple(self.tools.messages(list(prompt.messages))), kwargs=kwargs)
        return prompt, self.for_chat(prompt, model)

    def for_chat(self, prompt, model) -> "GrammarSpec":
        """The grammar of a chat (a ChatPrompt for `model`): a schema's becomes llama-server's
        response-format grammar around the template's generation prompt; tools get the grammar
        their tool_choice enforces (none for "auto"); GBNF stays as it is (not prefilled)."""
        tmpl = prompt.template(model)
        think = think_syntax(tmpl.source)
        if self.kind in ("text", "grammar") and think is None:
            return replace(self, source=tmpl.source, think=None)   # read as text: no generation prompt needed
        gen = prompt.generation_prompt(model)
        bound = dict(source=tmpl.source, generation_prompt=gen, think=think)
        if self.kind == "json_schema":
            return replace(chat_response_grammar(self.schema, gen), reasoning=self.reasoning, **bound)
        if self.kind != "tools":
            return replace(self, **bound)
        par = tmpl.parallel_tool_calls
        return replace(self, text=self.tools.grammar(tmpl.source, gen, par) or "", parallel=par, **bound)

    def make(self, model) -> Grammar | None:
        """The grammar on model's vocabulary, having taken the prefill text (llama.cpp's rule:
        the text tokenized with special tokens, less a first token that starts with a space
        the text does not start with); None where there is no grammar."""
        if not self.text:
            return None
        g = Grammar(self.text, model, self.root)
        if self.prefill:
            ids = model.tokenize(self.prefill, add_special=False, parse_special=True)
            if ids and model.token_to_piece(ids[0], render_special=True)[:1].isspace() and not self.prefill[:1].isspace():
                ids = ids[1:]
            if g.accept(ids) != len(ids):
                raise GrammarError(f"the grammar refuses the generation prompt {self.prefill!r}")
        if g.dead_end:       # later dead ends end the generation (finish "stop"); this one is the request's
            raise GrammarError(g.failure or "the grammar allows no token of this model's vocabulary at the start "
                                            "of the answer")
        return g

    def reader(self) -> ChatOutput:
        """How the chat's answer is read: tool calls, the JSON of a response format, or text."""
        if self.kind == "tools":
            return self.tools.output(self.source, self.generation_prompt, self.parallel)
        if self.kind == "response_format":
            return JsonOutput()
        if self.kind == "text":
            return reasoning_output(self.source, self.generation_prompt, self.reasoning.format)
        return PlainOutput()


def tools_spec(tools: Any, tool_choice: Any = None, parallel_tool_calls: Any = None) -> GrammarSpec:
    """A chat's tools, to be bound to the template (for_chat)."""
    return GrammarSpec("", kind="tools", tools=ToolRequest.make(tools, tool_choice, parallel_tool_calls))


def chat_spec(constraint: GrammarSpec | None, reasoning: Reasoning | None = None) -> GrammarSpec:
    """What constrains and reads a chat: its constraint (tools, a response format, GBNF) or
    plain text, with how its thinking is read and bounded."""
    spec = constraint if constraint is not None else GrammarSpec("", kind="text")
    return replace(spec, reasoning=reasoning) if reasoning is not None else spec


def response_format_schema(response_format: Any, json_schema: Any = None) -> Any:
    """The schema a response_format asks for (None for text), as llama-server reads it."""
    if response_format is None:
        return json_schema
    if not isinstance(response_format, dict):
        raise InvalidArgumentError(f"response_format must be an object, got {type(response_format).__name__}")
    kind = response_format.get("type", "")
    if kind == "json_object":
        if "schema" in response_format or not json_schema:
            return response_format.get("schema", {})
        return json_schema
    if kind == "json_schema":
        wrapper = response_format.get("json_schema", {})
        if not isinstance(wrapper, dict):
            raise InvalidArgumentError("response_format.json_schema must be an object with a 'schema'")
        return wrapper.get("schema", {})
    if kind not in ("", "text"):
        raise InvalidArgumentError(f'response_format type must be one of "text", "json_object" or "json_schema", '
                                   f"got {kind!r}")
    return json_schema


def _schema(value: Any) -> Any:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise GrammarError(f"json_schema is not valid JSON: {e}") from None
    if isinstance(value, dict) and not value:
        return {"type": "object"}           # an empty schema means any object (llama-server)
    return value


def constraint_spec(grammar: str | None = None, json_schema: Any = None,
                    response_format: Any = None, check: bool = True) -> GrammarSpec | None:
    """The grammar of a completion: GBNF text, or the schema's grammar. check: parse GBNF text
    now, before any model loads (False: its one parse is on the model's vocabulary, later)."""
    if grammar is not None and not isinstance(grammar, str):
        raise InvalidArgumentError(f"grammar must be GBNF text, got {type(grammar).__name__}")
    schema = response_format_schema(response_format, json_schema)
    if grammar and schema is not None:
        raise InvalidArgumentError("Cannot use both json_schema (or response_format) and grammar")
    if grammar:
        if check:
            check_grammar(grammar)            # its syntax now, before any model loads
        return GrammarSpec(grammar)
    if schema is None:
        return None
    schema = _schema(schema)
    return GrammarSpec(json_schema_to_grammar(schema), kind="json_schema", schema=schema)


# The rules llama.cpp's PEG builder writes for its generic JSON parser; a response format's
# grammar carries them (unreachable from root: the schema's own rules constrain the value).
PEG_JSON_RULES = {
    "json-array": '"[" space ("]" | json-value (space "," space json-value)* space "]")',
    "json-bool": '"true" | "false"',
    "json-null": '"null"',
    "json-number": '"-"? ("0" | [1-9] [0-9]*) ("." [0-9]+)? (("e" | "E") [+-]? [0-9]+)?',
    "json-object": '"{" space ("}" | json-string space ":" space json-value (space "," space json-string space ":" '
                   'space json-value)* space "}")',
    "json-string": '"\\"" ( [^"\\\\] | "\\\\" ( ["\\\\/ bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\\""',
    "json-value": "json-object | json-array | json-string | json-number | json-bool | json-null",
}


def chat_response_grammar(schema: Any, generation_prompt: str) -> GrammarSpec:
    """llama-server's grammar for a chat's response format (templates without a reasoning
    block): the generation prompt, then the JSON bare or in a ```json fence."""
    conv = SchemaConverter()
    for name, rule in PEG_JSON_RULES.items():
        conv.add_rule(name, rule)
    body = conv.visit(read_schema(_schema(schema)), "response-format-schema")
    conv.add_rule("response-format", body)
    choice = '("```json" space response-format space "```" | space response-format space)'
    conv.add_rule("root", format_literal(generation_prompt) + " space space " + choice)
    return GrammarSpec(conv.grammar(), prefill=generation_prompt, kind="response_format")


def response_content(text: str) -> str:
    """The answer's content under a response format: the JSON without the fence and the
    whitespace the grammar allows around it (what llama-server's parser returns)."""
    return json_content(text, True)


__all__ = ["GrammarSpec", "tools_spec", "chat_spec", "constraint_spec", "chat_response_grammar", "response_format_schema", "response_content"]
