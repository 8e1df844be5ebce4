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

When a batch goes bad (docs/guides/when-a-batch-goes-bad.md): every batch carries its provenance (`--provenance`,
on by default: per packed segment the mix record, shard, document and token span). A loss-spike hook (loss
above `--spike-factor` x the running mean, or `--spike-at-step` to try it) saves that batch's provenance as
JSON under `--spike-dir` and prints the `sluice trace` command that explains it; `--stop-on-spike` ends the
run there. Resume from the last checkpoint with the skip list:

    .venv/bin/python examples/train.py --steps 30 --checkpoint /tmp/ckpt.pt --spike-at-step 24 --stop-on-spike
    .venv/bin/python -m data_assets.cli trace --mix default --provenance '/tmp/ckpt.pt.spikes/step-00000024-rank*.json'
    .venv/bin/python examples/train.py --steps 30 --checkpoint /tmp/ckpt.pt --skip-steps 24   # or --skip-doc-id / --skip-domain / --skip-url

The skip list goes into the loader's state (`load_state_dict(state, skip=...)`) and so into every later
checkpoint; every sample not skipped keeps its place in the global order.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import torch
import torch.distributed as dist
from torch import nn

from resources import TrainingLoaderResource
from sluice.trace.batch import batch_provenance


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
    parser.add_argument("--no-provenance", dest="provenance", action="store_false", help="batches without their provenance")
    parser.add_argument("--spike-factor", type=float, default=3.0, help="a loss above this x the running mean is a spike")
    parser.add_argument("--spike-at-step", type=int, action="append", default=[], help="treat this step as a spike (to try the hook)")
    parser.add_argument("--spike-dir", default=None, help="where spikes' batch provenance goes (default: <checkpoint>.spikes or ./spikes)")
    parser.add_argument("--stop-on-spike", action="store_true", help="end the run at the first spike (then trace it, resume with a skip list)")
    parser.add_argument("--skip-steps", type=int, nargs="*", default=[], help="at resume: leave out the samples of these steps of the saved run")
    parser.add_argument("--skip-doc-id", action="append", default=[], help="at resume: leave out every sample holding this document")
    parser.add_argument("--skip-domain", action="append", default=[], help="at resume: leave out documents of this domain (and subdomains)")
    parser.add_argument("--skip-url", action="append", default=[], help="at resume: leave out documents whose URL matches this wildcard")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    if "RANK" in os.environ and not dist.is_initialized():
        dist.init_process_group("nccl" if args.device.startswith("cuda") else "gloo")
        if args.device == "cuda":
            args.device = f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}"
    rank0 = not dist.is_initialized() or dist.get_rank() == 0

    resource = TrainingLoaderResource.from_config_file(
        args.config, mix=args.mix, batch_size=args.batch_size, device=args.device, num_workers=args.num_workers, mask_document_boundaries=True,
        provenance=args.provenance,
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
        skip = {"steps": args.skip_steps, "doc_ids": args.skip_doc_id, "domains": args.skip_domain, "urls": args.skip_url}
        # Same global order, whatever the world size now, minus what the skip list names (steps are the saved run's).
        loader.load_state_dict(saved["loader"], skip=skip if any(skip.values()) else None)
        step = saved["step"]
        if rank0:
            print(f"resumed at step {step}, loader position {saved['loader']['position']}, skip list {loader.state_dict()['skip']}")
            if loader.skip_unresolved:
                print(f"  not in this mix (nothing to skip): {loader.skip_unresolved}")
    spike_dir = args.spike_dir or (args.checkpoint + ".spikes" if args.checkpoint else "spikes")
    running_loss = None

    started = window_started = time.perf_counter()
    first_step = step
    window_tokens = 0  # trained (label) tokens of this rank since the last report
    for batch in loader:
        if step >= args.steps:
            break
        logits = model(batch["input_ids"], batch["position_ids"])
        loss = nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), ignore_index=-100)
        value = mean_over_ranks(loss)  # every rank takes the same spike decision
        if (running_loss is not None and value > args.spike_factor * running_loss) or step in args.spike_at_step:
            saved_spike = save_spike(batch, loader, step, value, spike_dir, args.mix)
            if saved_spike and args.stop_on_spike:
                break  # before the update: the last checkpoint never saw this batch
        running_loss = value if running_loss is None else 0.9 * running_loss + 0.1 * value
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


def mean_over_ranks(loss: torch.Tensor) -> float:
    value = loss.detach().clone()
    if dist.is_initialized():
        dist.all_reduce(value)
        value /= dist.get_world_size()
    return float(value.item())


def save_spike(batch: dict, loader, step: int, loss: float, folder: str, mix: str) -> bool:
    """The loss-spike hook: save this rank's batch provenance (what `sluice trace --provenance` reads)."""
    if "provenance" not in batch:
        print(f"step {step}: loss {loss:.3f} looks like a spike, but the loader runs without provenance")
        return False
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"step-{step:08d}-rank{loader.rank}.json")
    with open(path + ".tmp", "w") as handle:
        json.dump({**batch_provenance(batch, loader, step), "loss": loss}, handle)
    os.replace(path + ".tmp", path)
    if loader.rank == 0:
        pattern = os.path.join(folder, f"step-{step:08d}-rank*.json")
        print(f"step {step}: loss spike ({loss:.3f}); batch provenance in {pattern}\n"
              f"  explain it:  sluice trace --mix {mix} --provenance '{pattern}'\n"
              f"  resume without it:  examples/train.py ... --skip-steps {step}")
    return True


if __name__ == "__main__":
    main()
