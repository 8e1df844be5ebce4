"""A small GPT-style training loop fed by sluice's training loader, in plain PyTorch (no Dagster running).

    .venv/bin/python examples/train.py --mix default --steps 20 --device cpu
    torchrun --nproc-per-node 8 examples/train.py --device cuda   # ranks come from torch.distributed
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn

from resources import TrainingLoaderResource


class TinyGPT(nn.Module):
    def __init__(self, vocab_size: int, width: int = 128, layers: int = 2, heads: int = 4, max_len: int = 4096) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.position = nn.Embedding(max_len, width)
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers)
        self.head = nn.Linear(width, vocab_size)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        length = input_ids.shape[1]
        positions = torch.arange(length, device=input_ids.device)
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=input_ids.device)
        hidden = self.embed(input_ids) + self.position(positions)
        return self.head(self.blocks(hidden, mask=mask, is_causal=True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=os.environ.get("SLUICE_CONFIG", "sluice.yaml"))
    parser.add_argument("--mix", default="default")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    if "RANK" in os.environ and not dist.is_initialized():
        dist.init_process_group("nccl" if args.device.startswith("cuda") else "gloo")
        if args.device == "cuda":
            args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"

    loader = TrainingLoaderResource.from_config_file(args.config, mix=args.mix, batch_size=args.batch_size, device=args.device)
    vocab_size = int(loader.dataset().manifest["vocab_size"])
    model = TinyGPT(vocab_size).to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    waited = 0.0
    started = time.perf_counter()
    step = 0
    mark = time.perf_counter()
    for batch in loader.batches():
        waited += time.perf_counter() - mark
        logits = model(batch["input_ids"])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        if step % 5 == 0 or step == args.steps:
            print(f"step {step}: loss {loss.item():.3f}")
        if step == args.steps:
            break
        mark = time.perf_counter()
    total = time.perf_counter() - started
    print(f"{step} steps in {total:.2f}s; waiting for data {waited:.3f}s ({100 * waited / total:.2f}% of the time)")


if __name__ == "__main__":
    main()
