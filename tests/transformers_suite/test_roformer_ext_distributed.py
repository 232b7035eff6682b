"""transformers' own distributed testers on roformer-ext: `TensorParallelTesterMixin` (tensor parallel forward,
backward, generation against one process) and `FSDPTesterMixin` (FSDP2 sharding structure, save / load, DCP, bf16
training, FSDP2 against DDP) from the installed release's sdist, each test on 2 spawned CPU processes (gloo).

The causal LM runs both testers; the masked LM (an encoder) runs the tensor-parallel forward and backward (it does
not generate; transformers' FSDP tester builds its models through AutoModelForCausalLM only: the encoder's FSDP2 run
is in tests/distributed). Skips left: the tests transformers' own models skip on this machine (HSDP needs 4 to 8
processes, expert parallel an MoE model), stated by the testers.
"""

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
    """What the testers call as `mp.spawn` where they start their ranks themselves (transformers 5.21; 5.24 calls
    distributed_testing_utils): the same ranks, forked from the stand-in's fork server instead of fresh interpreters
    (on 2 cores about 45 s per test with spawn, 3 to 8 s so)."""

    @staticmethod
    def spawn(fn, args: tuple = (), nprocs: int = 1, **_) -> None:
        _start_rank_processes(fn, args, nprocs)


for _tester in (test_fsdp_mixin, test_tensor_parallel_mixin):
    if hasattr(_tester, "mp"):
        _tester.mp = ForkServerRanks


class DistributedModelTester(RoFormerExtModelTester):
    """The common tests' tiny config (hidden 32, 4 heads, vocab 99) without dropout: the testers compare training
    losses and gradients of two runs, which dropout's random masks would make differ."""

    def __init__(self, parent: unittest.TestCase, lm_class: type, is_decoder: bool) -> None:
        super().__init__(parent, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        self.causal_lm_class = lm_class  # the class the testers load on every rank
        self.is_decoder = is_decoder

    def get_config(self) -> RoFormerExtConfig:
        return self.config_class(**{**self.config_kwargs(), "is_decoder": self.is_decoder})


class WholeSuiteOfOurModelType:
    """transformers runs its distributed testers on a short list of its own model types (their CI's cost); the list
    names no model of another library, so ours opts in here, as the testers' comment says to."""

    def _skip_if_tp_distributed_not_enabled(self) -> None:
        pass

    def _skip_if_fsdp_distributed_not_enabled(self) -> None:
        if not self._has_fsdp_plan():
            self.skipTest("Model does not have an FSDP plan (base_model_fsdp_plan)")

    def test_tp_unit_plan_forward_backward(self) -> None:
        # transformers 5.25's test sets `head_dim` (ours is hidden_size / heads, read-only), then skips every model
        # whose attention is not q_proj / k_proj / v_proj / o_proj under `self_attn` (ours: attention.query, ...)
        self.skipTest("unit sharding plans only q_proj/k_proj/v_proj/o_proj under self_attn; ours are query/key/value")


@pytest.mark.xdist_group("two_processes")  # never beside another two-process run: 2 cores
class RoFormerExtCausalLMDistributedTest(
    WholeSuiteOfOurModelType, TensorParallelTesterMixin, FSDPTesterMixin, unittest.TestCase
):
    all_model_classes = (RoFormerExtForCausalLM,)

    def setUp(self) -> None:
        self._model_tester = DistributedModelTester(self, RoFormerExtForCausalLM, is_decoder=True)

    @property
    def model_tester(self) -> DistributedModelTester:
        return self._model_tester


@pytest.mark.xdist_group("two_processes")
class RoFormerExtMaskedLMTensorParallelTest(WholeSuiteOfOurModelType, TensorParallelTesterMixin, unittest.TestCase):
    all_model_classes = (RoFormerExtForMaskedLM,)

    def setUp(self) -> None:
        self._model_tester = DistributedModelTester(self, RoFormerExtForMaskedLM, is_decoder=False)

    @property
    def model_tester(self) -> DistributedModelTester:
        return self._model_tester

    def test_tp_generation(self) -> None:
        self.skipTest("a masked LM (an encoder) does not generate; the causal LM's test_tp_generation runs")

    def test_tp_generation_quantized(self) -> None:
        self.skipTest("a masked LM (an encoder) does not generate; the causal LM's test runs")
