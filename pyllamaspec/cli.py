"""Entry point: ``python -m pyllamaspec.cli`` and the ``pyllamaspec`` command (llama-cli's flags).
The command line lives in pyllamaspec.frontends.cli."""
from .frontends.cli.main import main

if __name__ == "__main__":
    raise SystemExit(main())
