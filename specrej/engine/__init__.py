"""The torch engine's parts: loading a model the real way (``models``), the prompt's cache stored once
(``shared_prefix``), growing KV buffers (``kvcache``), prepacked fp32 linears (``packed``), the compiled
decoding step (``compiled``), and the dtype probe (``precision``).
The transformers backend (``backends.hf``) drives them; nothing here decides who lives."""
