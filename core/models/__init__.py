"""Models: the ``LLMAdapter`` seam and its adapters.

``base`` (the seam and its request/response types), ``openai`` (OpenAI-compatible
chat completions over httpx), ``scripted`` (a deterministic model for tests and
demos), ``replay`` (answers from recorded logs). May import the log and the
agents' tool types; never the runtime.
"""
