"""Names, numbers and local files: no torch, transformers, pytest or network."""
