"""The command line (llama-cli's flags, parsed and turned into models by frontends/flags/):
main.py runs a prompt or the demo, conversation.py a conversation. Every path ends in the
generation lifecycle (generation/). The entry point is pyllamaspec.cli (python -m
pyllamaspec.cli, the `pyllamaspec` command)."""
