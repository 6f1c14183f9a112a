"""`probe engine`: per-phase timing inside a user's own engine through an injected hook."""
