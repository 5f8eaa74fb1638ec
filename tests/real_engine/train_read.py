"""Run in the vLLM environment with the released trainers on PYTHONPATH, by
tests/real_engine/test_real_train_data.py: speculators 0.9.0 reads the train stage's data folder,
and its own sampler counts an epoch's steps as remote/job/train/epoch_steps does.

    python train_read.py DATA_FOLDER REPO

Prints one JSON line: what the trainer's ArrowDataset read, and the step counts both ways."""

from __future__ import annotations

import json
import random
import sys
import warnings


def main(data: str, repo: str) -> None:
    sys.path.insert(0, repo)
    import torch
    from speculators.train.data import ArrowDataset
    from speculators.train.distributed_batch_sampler import MultipackDistributedBatchSamplerV2

    from remote.job.train import epoch_steps

    warnings.simplefilter("ignore")
    read = []
    ratio = json.loads(open(f"{data}/manifest.json").read())[
        "train_ratio"
    ]  # as the stage passes it
    for split in ("train", "val"):
        ds = ArrowDataset(
            max_len=64, datapath=data, on_missing="raise", train_ratio=ratio, split=split
        )
        for i in range(len(ds)):
            item = ds[i]
            read.append([split, item["input_ids"].tolist(), list(item["hidden_states"].shape)])

    def sampler(lengths, max_len, seed, epoch):
        s = MultipackDistributedBatchSamplerV2(
            batch_max_length=max_len, lengths=lengths, num_replicas=1, rank=0, seed=seed
        )
        s.set_epoch(epoch)
        return len(s)

    rnd, pairs = random.Random(3), []
    for _ in range(40):
        n, max_len = rnd.randint(1, 300), rnd.choice([32, 128, 4096])
        lengths = [rnd.randint(1, 2 * max_len) for _ in range(n)]
        seed, epoch = rnd.randint(0, 2**33), rnd.randint(0, 5)
        ours = epoch_steps.steps_per_epoch(lengths, max_len, 0.9, seed, epoch)
        pairs.append([ours, sampler(lengths[: int(n * 0.9)], max_len, seed, epoch)])
    freq = torch.load(f"{data}/token_freq.pt", weights_only=True)
    print(
        json.dumps(
            {"read": read, "steps": pairs, "token_freq": {str(k): v for k, v in freq.items()}}
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
