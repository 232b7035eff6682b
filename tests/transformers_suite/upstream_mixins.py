"""transformers' `ModelTesterMixin` / `ConfigTester` and their input helpers, from the fetched upstream files; files
missing or fetched for another transformers fail the suite (not skip it), naming the command that fixes it."""

from transformers import __version__ as transformers_version

from .fetch_upstream import FETCH_COMMAND, UPSTREAM_DIR, fetched_version

_fetched = fetched_version()
if _fetched != transformers_version:
    found = "are missing (or were edited)" if _fetched is None else f"come from transformers {_fetched}"
    raise RuntimeError(
        f"transformers' common tests in {UPSTREAM_DIR} {found}, but transformers {transformers_version} is "
        f"installed. Run `{FETCH_COMMAND}` from the repository root (it downloads the transformers sdist with pip)."
    )

from .upstream.generation.test_utils import GenerationTesterMixin  # noqa: E402, F401
from .upstream.test_configuration_common import ConfigTester  # noqa: E402, F401
from .upstream.test_modeling_common import ModelTesterMixin, floats_tensor, ids_tensor, random_attention_mask  # noqa: E402, F401
from .upstream.utils.test_configuration_utils import config_common_kwargs  # noqa: E402, F401
