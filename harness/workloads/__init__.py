"""What runs on an engine: speculative decoding, scoring, accuracy, golden outputs."""
