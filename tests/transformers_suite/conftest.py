"""The fetched upstream files are libraries (not collected); transformers' marks, registered by its conftest.py."""

import pytest

collect_ignore = ["upstream"]

UPSTREAM_MARKS = (
    "accelerate_tests",
    "flash_attn_test",
    "flash_attn_3_test",
    "flash_attn_4_test",
    "torch_compile_test",
    "slow",
    "is_tensor_parallel_test",
    "is_fsdp_test",
)


def pytest_configure(config: pytest.Config) -> None:
    for name in UPSTREAM_MARKS:
        config.addinivalue_line("markers", f"{name}: transformers' mark (ModelTesterMixin and its testers)")
