"""The engine over HTTP: OpenAI-compatible routes, request limits, metrics and a graceful
shutdown; `serve(ServeOptions)` is the one entry `roofline serve` calls. The only part of the
engine that imports FastAPI or uvicorn."""
