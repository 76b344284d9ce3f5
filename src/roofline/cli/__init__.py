"""Thin typer commands: parse arguments, call one package, print the result."""
