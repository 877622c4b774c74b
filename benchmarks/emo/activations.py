"""The EMO benchmark model's activations per GPU: the tensors autograd saves for backward
in TorchRec's TestSparseNN dense arch and over arch (prefetch_emo.yml's shapes), counted
on CPU with `torch.autograd.graph.saved_tensors_hooks` at a small batch and scaled to the
benchmark's local batch of 32,768 (every saved tensor has the batch as its first dim).
Parameters and the pooled embeddings (the all-to-all's buffer, counted apart) are left
out. Needs torch and torchrec; prints the figure benchmarks/emo/*.toml give as
`compute.activations_bytes`.

    python benchmarks/emo/activations.py
"""

from __future__ import annotations

import torch
from torchrec.distributed.test_utils.test_model import TestDenseArch, TestOverArchLarge
from torchrec.modules.embedding_configs import EmbeddingBagConfig
from torchrec.sparse.jagged_tensor import KeyedTensor

LOCAL_BATCH = 32768  # RunOptions.batch_size
BATCH = 512  # counted at this batch, scaled


def bag(name: str, dim: int) -> EmbeddingBagConfig:
    return EmbeddingBagConfig(name=name, embedding_dim=dim, num_embeddings=10, feature_names=[name])


def main() -> None:
    torch.manual_seed(0)
    unweighted = [bag(f"table_{i}", 256) for i in range(30)]
    unweighted += [bag("FP16_table", 512), bag("large_table", 512)]
    weighted = [bag(f"weighted_table_{i}", 256) for i in range(40)]
    dense = TestDenseArch(
        num_float_features=100, dense_arch_out_size=128, dense_arch_hidden_sizes=[128] * 3
    )
    over = TestOverArchLarge(
        unweighted, weighted, dense_arch_out_size=128, over_arch_out_size=1024,
        over_arch_hidden_layers=5, skip_regroup=True,
    )  # fmt: skip
    params = {p.untyped_storage().data_ptr() for m in (dense, over) for p in m.parameters()}
    keys = [t.name for t in unweighted + weighted]
    dims = [t.embedding_dim for t in unweighted + weighted]
    pooled = torch.rand(BATCH, sum(dims), requires_grad=True)
    floats = torch.rand(BATCH, 100)
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in params and storage.data_ptr() != pooled.data_ptr():
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        kt = KeyedTensor(keys=keys, length_per_key=dims, values=pooled)
        over(dense(floats), kt).mean()
    per_sample = sum(saved.values()) / BATCH
    print(f"{len(saved)} saved tensors, {per_sample:,.0f} bytes per sample")
    print(f"activations_bytes = {round(per_sample * LOCAL_BATCH)}")


if __name__ == "__main__":
    main()
