"""The Carbon model family's own formats: tokenizer, checkpoints, DNA suites, FNS, variant files."""
