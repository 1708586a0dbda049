"""The engine: the core library bound with cffi (_native), Model and the context it drives
(in-process, or in an RPC worker: remote.py), sampling and verification in the core, the
tokenizer, chat templates, cancellation. Nothing here knows about speculation."""
