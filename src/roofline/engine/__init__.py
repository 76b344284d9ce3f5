"""The embedded engine: a compact decoder for the Llama family, its scheduler and its OpenAI-compatible server."""
