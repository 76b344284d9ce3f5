"""Model → bytes and FLOPs: parse a config.json into a ModelSpec and count what one decoded token
reads."""
