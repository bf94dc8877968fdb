"""NxD Inference backend for Trainium2 (NxDI 0.9, Neuron SDK 2.29).

Everything that decides something is a pure function and is tested on any machine: ``config``
(what the reference runs compile, and each compile variant), ``artifacts`` (the content-addressed
key, whether a cached artifact is complete, NxDI's GQA override against ``harness.core.plan``),
``host`` (what this host can run, the NeuronCores of each xdist worker).

``engine.NeuronEngine`` runs NxDI's real model code in two modes: on a Trainium2 host (compile into
the content-addressed cache, load) and in NxDI's own CPU mode (``on_cpu=True``, ``to_cpu()``, tp 1,
``max_context_length == seq_len``), where only the Neuron-only binary packages are stubbed
(``stubs``). NxDI is imported lazily, so every module here imports on a machine without it.
"""
