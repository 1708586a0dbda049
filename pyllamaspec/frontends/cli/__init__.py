"""The command line (llama-cli's flags): args.py parses and checks them, main.py runs a prompt
or the demo, chat.py a conversation. Every path ends in frontends.generate's loop. The entry
point is pyllamaspec.cli (python -m pyllamaspec.cli, the `pyllamaspec` command)."""
