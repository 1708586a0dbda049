"""Entry point: ``python -m pyllamaspec.server`` (an OpenAI-compatible server with llama-server's
flags). The server lives in pyllamaspec.frontends.server."""
from .frontends.server import EXTRA_HINT, ServerDependencyError, check_dependencies, create_app

__all__ = ["create_app", "check_dependencies", "ServerDependencyError", "EXTRA_HINT", "main"]


def main(argv: list[str] | None = None) -> int:
    from .frontends.server.main import main as run
    return run(argv)


if __name__ == "__main__":
    from .frontends.server.main import run
    raise SystemExit(run())
