"""transformers' `TensorParallelTesterMixin` (causal and masked LM) and `FSDPTesterMixin` (causal LM only: it builds
through AutoModelForCausalLM; the encoder's FSDP2 run is in tests/distributed), on 2 CPU processes (gloo)."""

import unittest

import pytest

from roformer_ext import RoFormerExtConfig, RoFormerExtForCausalLM, RoFormerExtForMaskedLM

from .test_roformer_ext_common import RoFormerExtModelTester
from .upstream import test_fsdp_mixin, test_tensor_parallel_mixin
from .upstream.distributed_testing_utils import _start_rank_processes
from .upstream.test_fsdp_mixin import FSDPTesterMixin
from .upstream.test_tensor_parallel_mixin import TensorParallelTesterMixin
from .upstream_mixins import ModelTesterMixin  # noqa: F401  (refuses upstream files of another release)


class ForkServerRanks:
    """`mp.spawn` for 5.21's testers: ranks forked from the stand-in's fork server (3-8 s a test, not 45 s)."""

    @staticmethod
    def spawn(fn, args: tuple = (), nprocs: int = 1, **_) -> None:
        _start_rank_processes(fn, args, nprocs)


for _tester in (test_fsdp_mixin, test_tensor_parallel_mixin):
    if hasattr(_tester, "mp"):
        _tester.mp = ForkServerRanks


class DistributedModelTester(RoFormerExtModelTester):
    """The common tests' tiny config without dropout (the testers compare losses and gradients of two runs)."""

    def __init__(self, parent: unittest.TestCase, lm_class: type) -> None:
        super().__init__(parent, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        self.causal_lm_class = lm_class  # the class the testers load on every rank
        self.is_decoder = lm_class is RoFormerExtForCausalLM

    def get_config(self) -> RoFormerExtConfig:
        return self.config_class(**{**self.config_kwargs(), "is_decoder": self.is_decoder})


class WholeSuiteOfOurModelType:
    """transformers runs its distributed testers on a list of its model types; ours opts in, as the testers say to."""

    lm_class = RoFormerExtForCausalLM

    def setUp(self) -> None:
        self._model_tester = DistributedModelTester(self, self.lm_class)

    @property
    def model_tester(self) -> DistributedModelTester:
        return self._model_tester

    def _skip_if_tp_distributed_not_enabled(self) -> None:
        pass

    def _skip_if_fsdp_distributed_not_enabled(self) -> None:
        if not self._has_fsdp_plan():
            self.skipTest("Model does not have an FSDP plan (base_model_fsdp_plan)")

    def test_tp_unit_plan_forward_backward(self) -> None:
        # transformers 5.25's test sets `head_dim` (ours is derived), then plans only q_proj/.../o_proj under self_attn
        self.skipTest("unit sharding plans only q_proj/k_proj/v_proj/o_proj under self_attn; ours are query/key/value")


@pytest.mark.xdist_group("two_processes")  # never beside another two-process run: 2 cores
class RoFormerExtCausalLMDistributedTest(
    WholeSuiteOfOurModelType, TensorParallelTesterMixin, FSDPTesterMixin, unittest.TestCase
):
    all_model_classes = (RoFormerExtForCausalLM,)


@pytest.mark.xdist_group("two_processes")
class RoFormerExtMaskedLMTensorParallelTest(WholeSuiteOfOurModelType, TensorParallelTesterMixin, unittest.TestCase):
    all_model_classes, lm_class = (RoFormerExtForMaskedLM,), RoFormerExtForMaskedLM

    _encoder = unittest.skip(reason="a masked LM (an encoder) does not generate; the causal LM's tests run")
    test_tp_generation = test_tp_generation_quantized = _encoder(lambda self: None)
