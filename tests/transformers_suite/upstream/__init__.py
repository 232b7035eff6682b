"""transformers' tests/test_modeling_common.py, tests/test_configuration_common.py and the distributed testers
tests/test_tensor_parallel_mixin.py and tests/test_fsdp_mixin.py, fetched into this folder by
`python tests/transformers_suite/fetch_upstream.py` (gitignored), with small stand-ins of our own for the four
modules they import that the sdist lacks: generation/test_utils.py, exporters/test_export.py,
utils/test_configuration_utils.py and distributed_testing_utils.py. The folder layout mirrors transformers' tests/ so their relative imports resolve
here. Nothing in it is collected by pytest (see ../conftest.py).

test_configuration_common.py executes this file once more as `transformers` (`direct_transformers_import`): keep it
free of code.
"""
