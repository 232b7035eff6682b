"""transformers' tests/test_modeling_common.py and tests/test_configuration_common.py, fetched into this folder by
`python tests/transformers_suite/fetch_upstream.py` (gitignored), with small stand-ins of our own for the three
modules they import that the sdist lacks: generation/test_utils.py, exporters/test_export.py and
utils/test_configuration_utils.py. The folder layout mirrors transformers' tests/ so their relative imports resolve
here. Nothing in it is collected by pytest (see ../conftest.py).

test_configuration_common.py executes this file once more as `transformers` (`direct_transformers_import`): keep it
free of code.
"""
