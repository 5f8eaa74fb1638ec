"""Run speculators 0.9.0's offline trainer on a machine with no GPU: the test rig's CPU launcher.

    python cpu_train_launch.py -m speculators.train ARGS...

The released trainer assumes an accelerator in a few places, so on a CPU-only torch it fails before
its first step. This launcher patches those places at runtime, in this process only (the installed
package is never edited), then runs the module by runpy exactly as `python -m` would, with the same
arguments, so the command line is the one a GPU host runs:

- `Trainer` moves the model and every batch with `.to(get_local_rank())`, i.e. `.to(0)`, which is
  cuda:0 (torch: "Cannot access accelerator device when none is available"): the trainer module's
  `get_local_rank` answers the CPU device instead;
- `Trainer.device_type` falls back to "cuda" for `torch.autocast`: set to "cpu" (bfloat16 autocast
  on the CPU, as the GPU run autocasts);
- its step timer calls `torch.accelerator.synchronize()`, which raises with no accelerator: a no-op
  (there is nothing to wait for on the CPU);
- `SingleGPUCheckpointer` loads a checkpoint it resumes from onto `get_current_device()`, "cuda:0"
  when there is no accelerator: the checkpointer module's copy answers "cpu";
- the default draft attention (`simple_flex_attention`) has no backward pass on the CPU, and the
  default `fused` loss is a Triton GPU kernel: a run that left them at their defaults gets `sdpa`
  and `eager` (said on stderr), recorded as if typed: the run.yaml the trainer saves beside its
  checkpoints names them, so `--config run.yaml` reruns what ran.

Where torch does see an accelerator, nothing is patched. DataLoader workers (`--num-workers N`,
spawned processes) only read files and need none of it; on a small CPU pass `--num-workers 0`.
"""

from __future__ import annotations

import runpy
import sys

USAGE = "usage: python cpu_train_launch.py -m MODULE [ARGS...]"
# (config group, field, what the CPU runs instead of the field's default, why)
GPU_ONLY_DEFAULTS = (
    ("draft", "draft_attn_impl", "sdpa", "flex attention has no backward pass on the CPU"),
    ("loss", "loss_implementation", "eager", "the fused loss is a Triton GPU kernel"),
)


def patch_for_cpu() -> bool:
    """Patch the trainer for a CPU-only torch; False (nothing done) where an accelerator exists."""
    import torch

    if torch.accelerator.is_available():
        return False
    cpu = torch.device("cpu")

    def synchronize(device=None) -> None:  # nothing runs asynchronously on the CPU
        return None

    torch.accelerator.synchronize = synchronize

    import speculators.train.checkpointer as checkpointer
    import speculators.train.cli as cli
    import speculators.train.trainer as trainer

    trainer.get_local_rank = lambda: cpu
    checkpointer.get_current_device = lambda: "cpu"

    init = trainer.Trainer.__init__

    def trainer_init(self, *args, **kwargs) -> None:
        init(self, *args, **kwargs)
        self.device_type = "cpu"  # torch.autocast's device (its own fallback is "cuda")

    trainer.Trainer.__init__ = trainer_init

    main = cli.main

    def cpu_main(cfg):
        for group, field, instead, why in GPU_ONLY_DEFAULTS:
            section = getattr(cfg, group)
            if getattr(section, field) == type(section).model_fields[field].default:
                setattr(section, field, instead)
                cfg._provenance[field] = "flag"  # run.yaml writes the fields a flag set
                flag = "--" + field.replace("_", "-")
                print(f"cpu_train_launch: {flag} {instead} ({why})", file=sys.stderr, flush=True)
        return main(cfg)

    cli.main = cpu_main  # speculators/train/__main__.py imports it from here when runpy runs it
    return True


def launch(argv: list[str]) -> None:
    if len(argv) < 2 or argv[0] != "-m":
        sys.exit(USAGE)
    module, args = argv[1], argv[2:]
    patch_for_cpu()
    sys.argv = [module, *args]  # runpy sets argv[0] to the module's file, as `python -m` does
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    launch(sys.argv[1:])
