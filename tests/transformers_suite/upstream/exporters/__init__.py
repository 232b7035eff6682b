"""Stand-in for transformers' tests/exporters package (repository only, not in the sdist)."""
