"""Stand-in for transformers' tests/utils package (repository only, not in the sdist)."""
