"""The generation lifecycle: one prompt or many, from the prompt's ids to the text and the
result (lifecycle.py: Generation, Scheduler, run_alone; text.py: the text as tokens arrive;
generate.py: generate() and stream_generate(); together.py: generate([...]))."""
