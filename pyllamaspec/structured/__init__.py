"""Structured output: JSON schemas as llama.cpp's GBNF (json_schema.py, schema_model.py,
gbnf_text.py), a request's grammar / json_schema / response_format / tools (formats.py), reading
an answer and its stream deltas (output.py), and the tool-call families (tools/)."""
