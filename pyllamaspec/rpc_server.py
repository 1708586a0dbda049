"""Entry point: ``python -m pyllamaspec.rpc_server`` (a ggml RPC server, as llama.cpp's
rpc-server). It lives in pyllamaspec.rpc.serve."""
from .rpc.serve import main

if __name__ == "__main__":
    raise SystemExit(main())
