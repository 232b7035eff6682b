"""The half pair layout's kept q/k rows (rope.PairAdjacentRows) are never made from a shard: a DTensor weight sends the
projection through its own forward, and reorder_rows refuses a DTensor or rows that are not whole heads. (Under
tensor parallel on 2 processes: test_distributed_runs.py::test_tensor_parallel_per_position_encoding.)"""

import pytest
import torch
import torch.distributed as dist
from torch import nn

from roformer_ext.rope import projects_pair_adjacent, reorder_rows


def test_rows_that_are_not_whole_heads_are_refused():
    with pytest.raises(ValueError, match="whole heads"):
        reorder_rows(torch.randn(30, 16), None, 8)  # 30 rows: 3.75 heads of 8, a shard's cut
    weight, _ = reorder_rows(torch.arange(16.0)[:, None], None, 8)
    assert weight.flatten().tolist() == [0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15]


@pytest.fixture
def one_process_group(tmp_path):
    if dist.is_initialized():
        pytest.skip("a process group is already set up in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_distributed_weight_is_never_reordered(one_process_group):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (1,))
    query, key = nn.Linear(16, 16), nn.Linear(16, 16)
    states = torch.randn(2, 20, 16)  # 40 rows > 16 outputs: a plain weight would take the kept-rows path
    assert projects_pair_adjacent(states, query, key)
    query.weight = nn.Parameter(distribute_tensor(query.weight.detach(), mesh, [Shard(0)]))
    assert not projects_pair_adjacent(states, query, key)
    with pytest.raises(ValueError, match="DTensor"):
        reorder_rows(query.weight, None, 8)
