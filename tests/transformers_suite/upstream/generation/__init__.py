"""Stand-in for transformers' tests/generation package (repository only, not in the sdist)."""
