"""A model's layers on other machines through ggml's RPC backend. The client side (the worker
process a Model drives, probing, endpoints) is pyllamaspec.engine.remote; this package holds the
processes: worker.py (the worker) and serve.py (``python -m pyllamaspec.rpc_server``)."""
from ..engine.remote import CONN_CAPS, HELLO, RemoteContext, available, endpoints, probe, protocol_version, split_values

__all__ = ["available", "protocol_version", "endpoints", "split_values", "probe", "RemoteContext", "HELLO",
           "CONN_CAPS"]
