"""Coverage-guided fuzzing of the state and statefile decoders (see README.md here)."""
