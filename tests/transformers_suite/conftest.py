"""The fetched upstream files are libraries (not collected, though named `test_*`); the marks `ModelTesterMixin` puts
on tests are registered by transformers' own conftest.py, which we do not fetch, so here."""

import pytest

collect_ignore = ["upstream"]

#: transformers' own marks (their skip conditions are transformers': flash attention without a GPU, slow unless RUN_SLOW=1,
#: tensor parallel / FSDP when RUN_TENSOR_PARALLEL_TESTS / RUN_FSDP_TESTS=0)
UPSTREAM_MARKS = ("accelerate_tests", "flash_attn_test", "flash_attn_3_test", "flash_attn_4_test", "torch_compile_test",
                  "slow", "is_tensor_parallel_test", "is_fsdp_test")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    for name in UPSTREAM_MARKS:
        config.addinivalue_line("markers", f"{name}: transformers' mark (ModelTesterMixin and its testers)")
