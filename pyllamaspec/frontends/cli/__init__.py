"""The command line (llama-cli's flags): args.py parses and checks them, launch.py turns them into
loaded models (the server's too), main.py runs a prompt or the demo, conversation.py a
conversation. Every path ends in the generation lifecycle (generation/). The entry point is
pyllamaspec.cli (python -m pyllamaspec.cli, the `pyllamaspec` command)."""
