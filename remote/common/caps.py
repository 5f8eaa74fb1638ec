"""The job's caps (run/caps.json): what it runs, kept across restarts."""

from __future__ import annotations

from dataclasses import dataclass, field

from .codec import Record

CLEAR = "all"  # a cap flag's value that clears it: --max-samples all, --cap B3=all, --datasets all


@dataclass
class Caps(Record):
    """What the job runs: each dataset's target is its first N prompts (None: all of them), a
    response-token budget per dataset (None: none), the datasets selected (None: every one).
    Kept on the host (run/caps.json): a restart without cap flags, typed on any machine or made by
    the watcher, runs the same caps; a flag changes only what it names."""

    KEEP_NONE = True  # status.json and control.json readers look its keys up

    max_samples: int | None = None
    caps: dict[str, int] = field(default_factory=dict)
    max_tokens: int | None = None
    datasets: list[str] | None = None

    def target(self, name: str) -> int | None:
        return self.caps.get(name, self.max_samples)

    def selected(self, name: str) -> bool:
        return self.datasets is None or name in self.datasets

    def line(self) -> str:
        """One line for a log: `max-samples 20, B3=5, max-tokens 10000, datasets B1,B3`."""
        parts = [f"max-samples {'all' if self.max_samples is None else self.max_samples}"]
        parts += [f"{n}={c}" for n, c in self.caps.items()]
        if self.max_tokens is not None:
            parts.append(f"max-tokens {self.max_tokens}")
        if self.datasets is not None:
            parts.append("datasets " + ",".join(self.datasets))
        return ", ".join(parts)
