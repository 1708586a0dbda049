"""llama.cpp's flags, shared by the command line and the server: args.py (the parsers: models,
resources, sampling) + spec_args.py (the speculation flags), checks.py (flags without effect in
the combination given), launch.py (flags to loaded models and settings)."""
