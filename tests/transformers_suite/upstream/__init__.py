"""transformers' common and distributed testers, fetched here by ../fetch_upstream.py (gitignored), beside our
stand-ins for the modules they import that the sdist lacks; the layout mirrors transformers' tests/. Not collected.

test_configuration_common.py executes this file as `transformers` (`direct_transformers_import`): keep it code-free.
"""
