"""Front ends: what users call. generate()/chat() (the generation loop over a Decoder), the CLI
and the OpenAI-compatible server, thin layers over that same loop."""
