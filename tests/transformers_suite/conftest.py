"""The fetched upstream files are libraries (not collected, though named `test_*`); the marks `ModelTesterMixin` puts
on tests are registered by transformers' own conftest.py, which we do not fetch, so here."""

import pytest

collect_ignore = ["upstream"]

UPSTREAM_MARKS = {
    "accelerate_tests": "needs accelerate (transformers' mark)",
    "flash_attn_test": "flash attention 2 (transformers' mark; skipped without a GPU)",
    "flash_attn_3_test": "flash attention 3 (transformers' mark; skipped without a GPU)",
    "flash_attn_4_test": "flash attention 4 (transformers' mark; skipped without a GPU)",
    "torch_compile_test": "torch.compile (transformers' mark)",
    "slow": "transformers' @slow tests (skipped unless RUN_SLOW=1)",
    "is_tensor_parallel_test": "transformers' tensor parallel tester (skipped when RUN_TENSOR_PARALLEL_TESTS=0)",
    "is_fsdp_test": "transformers' FSDP tester (skipped when RUN_FSDP_TESTS=0)",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, description in UPSTREAM_MARKS.items():
        config.addinivalue_line("markers", f"{name}: {description}")
