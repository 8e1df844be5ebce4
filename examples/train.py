"""A small GPT-style training loop fed by sluice's training loader, in plain PyTorch (no Dagster running).

    .venv/bin/python examples/train.py --mix default --steps 20 --device cpu --checkpoint /tmp/ckpt.pt
    .venv/bin/python examples/train.py --mix default --steps 40 --device cpu --checkpoint /tmp/ckpt.pt  # resumes at step 20
    torchrun --nproc-per-node 8 examples/train.py --device cuda   # ranks come from torch.distributed

The loader's state (a few integers: seed, epoch, position) is saved with the model and optimizer; a restart
continues with exactly the batches the uninterrupted run would have seen, also on another number of GPUs.
Attention stays inside each document (the mask is built from `position_ids`, which restart at every
document; a flash-attention model would pass `cu_seqlens` / `max_seqlen` to its varlen kernel instead).
Every 5 steps rank 0 prints the loss averaged over all ranks and the trained tokens per second of all ranks
(label tokens, padding excluded); at the end, the share of wall time spent waiting for data (the loader's
stall metric).
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
        self.heads = heads
        self.embed = nn.Embedding(vocab_size, width)
        self.position = nn.Embedding(max_len, width)
        # No dropout: a resumed run then reproduces the uninterrupted one exactly (the RNG is not checkpointed).
        block = nn.TransformerEncoderLayer(width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = nn.Linear(width, vocab_size)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        length = input_ids.shape[1]
        # Causal attention within each document: segment k starts where position_ids is 0.
        segment = torch.cumsum((position_ids == 0).int(), dim=1)
        same_document = segment[:, :, None] == segment[:, None, :]
        causal = torch.ones(length, length, dtype=torch.bool, device=input_ids.device).tril()
        blocked = ~(same_document & causal)  # True = may not attend
        mask = blocked.repeat_interleave(self.heads, dim=0)
        hidden = self.embed(input_ids) + self.position(position_ids)
        return self.head(self.blocks(hidden, mask=mask))


def across_ranks(loss: torch.Tensor, tokens: int) -> tuple[float, int]:
    """(loss averaged over ranks, tokens summed over ranks); this rank's own values without torch.distributed."""
    if not dist.is_initialized():
        return float(loss), tokens
    values = torch.stack([loss.float().reshape(()), torch.tensor(float(tokens), device=loss.device)])
    dist.all_reduce(values, op=dist.ReduceOp.SUM)  # SUM then divide: gloo has no AVG
    return float(values[0]) / dist.get_world_size(), int(values[1])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", default=os.environ.get("SLUICE_CONFIG", "sluice.yaml"))
    parser.add_argument("--mix", default="default")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20, help="train until this global step")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--num-workers", type=int, default=0)
    parser.add_argument("--checkpoint", default=None, help="save here every --save-every steps; resume from it if it exists")
    parser.add_argument("--save-every", type=int, default=10)
    parser.add_argument("--seed", type=int, default=0, help="model initialization")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    if "RANK" in os.environ and not dist.is_initialized():
        dist.init_process_group("nccl" if args.device.startswith("cuda") else "gloo")
        if args.device == "cuda":
            args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    rank0 = not dist.is_initialized() or dist.get_rank() == 0

    resource = TrainingLoaderResource.from_config_file(
        args.config, mix=args.mix, batch_size=args.batch_size, device=args.device, num_workers=args.num_workers, mask_document_boundaries=True
    )
    loader = resource.loader()  # rank / world size from torch.distributed when initialized
    model = TinyGPT(int(loader.data.manifest["vocab_size"])).to(args.device)
    step = 0
    if args.checkpoint and os.path.exists(args.checkpoint):
        saved = torch.load(args.checkpoint, map_location=args.device)
        model.load_state_dict(saved["model"])
    core = model
    if dist.is_initialized():  # gradients averaged across ranks; each rank reads its own slice of every global batch
        model = nn.parallel.DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    if args.checkpoint and os.path.exists(args.checkpoint):
        optimizer.load_state_dict(saved["optimizer"])
        loader.load_state_dict(saved["loader"])  # same global order, whatever the world size now
        step = saved["step"]
        if rank0:
            print(f"resumed at step {step}, loader state {saved['loader']}")

    started = window_started = time.perf_counter()
    first_step = step
    window_tokens = 0  # trained (label) tokens of this rank since the last report
    for batch in loader:
        if step >= args.steps:
            break
        logits = model(batch["input_ids"], batch["position_ids"])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        step += 1
        window_tokens += int((batch["labels"] != -100).sum())
        if step % 5 == 0 or step == args.steps:  # every rank joins the reductions
            mean_loss, tokens = across_ranks(loss.detach(), window_tokens)
            now = time.perf_counter()
            if rank0:
                print(
                    f"step {step}: loss {mean_loss:.3f} (mean over ranks), {tokens / (now - window_started):,.0f} tokens/s "
                    f"(all ranks)  (epoch {loader.epoch}, samples {batch['sample_ids'][:3].tolist()}...)"
                )
            window_tokens, window_started = 0, now
        if args.checkpoint and rank0 and (step % args.save_every == 0 or step == args.steps):
            state = {"model": core.state_dict(), "optimizer": optimizer.state_dict(), "loader": loader.state_dict(), "step": step}
            torch.save(state, args.checkpoint + ".tmp")
            os.replace(args.checkpoint + ".tmp", args.checkpoint)  # a crash never leaves half a checkpoint
    total = time.perf_counter() - started
    if rank0:
        stats = loader.stats
        print(
            f"{step - first_step} steps in {total:.2f}s; waiting for data {stats.wait_seconds:.3f}s "
            f"({100 * stats.stall_share(total):.2f}% of the time, {1000 * stats.mean_wait_seconds:.2f} ms per step)"
        )


if __name__ == "__main__":
    main()
