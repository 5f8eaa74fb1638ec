"""The job's stages, one entry each: what the runner makes of the prompts, what the job's server must
run with for it, whether a change of caps reaches the running runner, what it needs before it
starts and what its views show. A stage is one module of work (the runner's `Stage`, named in
`work`) and one entry here; everything else reads the entry, never the stage's name (standard
library only: the local side reads it too)."""

from __future__ import annotations

from dataclasses import dataclass

# what the job's server runs with for a stage (its own server.args may already say it)
PLAIN = "plain"  # hosts.yaml's server as written, no flags added
EXTRACT = "extract"  # vLLM's hidden-states extraction config
SPECULATE = "speculate"  # a --speculative-config naming the draft
NO_SERVER = "none"  # none: the job's server is stopped (the stage's own process holds the GPUs)

# what a stage's views show per dataset
ANSWERS = "answers"  # answers made: tokens, finish reasons
ROWS = "rows"  # rows of hidden states: tokens in rows, the disk they fill
MEASURE = "measure"  # held-out prompts asked: each dataset's acceptance length
TRAINING = "training"  # a trainer's epochs and steps: loss, accuracy per draft position


@dataclass(frozen=True)
class StageSpec:
    name: str
    work: str  # "module:class" under remote.job.loop: imported by the runner only
    doing: str  # what the job makes in it, for a sentence: "the answers"
    server: str = PLAIN
    shows: str = ANSWERS
    # the running runner takes a change of caps (what a new runner would read from caps.json)
    # without a restart; a stage that asks the prompts the caps pick starts again on new ones
    live_recap: bool = True
    needs_draft: bool = False  # hosts.yaml's server.draft must name one
    needs_vllm: bool = False  # the job's own vLLM server, started by deploytool
    followed_by: str | None = None  # the stage the watcher starts once this one ends, where asked

    @property
    def makes_answers(self) -> bool:
        """Its records are the answers, made with the job's sampling settings."""
        return self.shows == ANSWERS

    @property
    def asks_server(self) -> bool:
        """Its runner asks the job's server (else the server is stopped while it runs)."""
        return self.server != NO_SERVER

    @property
    def makes_rows(self) -> bool:
        """Its counts are rows of hidden states (tokens in rows, a disk they fill)."""
        return self.shows == ROWS

    @property
    def measures(self) -> bool:
        """It asks held-out prompts and says each dataset's acceptance."""
        return self.shows == MEASURE

    @property
    def trains(self) -> bool:
        """It runs a trainer, not requests: epochs and steps."""
        return self.shows == TRAINING

    @property
    def label(self) -> str:
        """The stage as a screen names it: nothing for the answers, the job's first stage."""
        return "" if self is FIRST else self.name


_TABLE = (
    StageSpec("generate", "generate:GenerateStage", "the answers"),
    StageSpec(
        "hidden-states",
        "hidden_stage:HiddenStage",
        "the target's hidden states of the answers",
        server=EXTRACT,
        shows=ROWS,
    ),
    StageSpec(
        "train",
        "train_stage:TrainStage",
        "a draft trained on the job's hidden states (job.train)",
        server=NO_SERVER,
        shows=TRAINING,
        live_recap=False,
        followed_by="draft",
    ),
    StageSpec(
        "draft",
        "draft_stage:DraftStage",
        "server.draft's acceptance measured on the held-out prompts after each cap",
        server=SPECULATE,
        shows=MEASURE,
        live_recap=False,
        needs_draft=True,
        needs_vllm=True,
        followed_by="baseline",
    ),
    StageSpec(
        "baseline",
        "draft_stage:DraftStage",  # the same prompts, the server without the draft
        "the same prompts without the draft, for its speedup",
        shows=MEASURE,
        live_recap=False,
        needs_vllm=True,
    ),
)
STAGES: dict[str, StageSpec] = {s.name: s for s in _TABLE}
FIRST = _TABLE[0]
GENERATE, HIDDEN_STATES, TRAIN, DRAFT, BASELINE = (
    STAGES  # the names, for their own modules and tests
)


def stage_of(name: str | None) -> StageSpec:
    """The entry of stage `name` (None or one this release does not know: the answers')."""
    return STAGES.get(name or "", FIRST)


def serving(server: str) -> str:
    """The stage a server started with `server`'s flags was started for (the first that asks)."""
    return next(s.name for s in _TABLE if s.server == server)
