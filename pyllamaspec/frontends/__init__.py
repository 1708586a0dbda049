"""Front ends: what users call. chat() and the structured answers of a chat, the CLI, the
OpenAI-compatible server, llama-cpp-python's and mlx-lm's APIs: thin layers over the one
generation lifecycle (pyllamaspec.generation)."""
