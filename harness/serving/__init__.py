"""OpenAI-compatible serving: the torch-free client, vLLM-named metrics, load, the vLLM server process."""
