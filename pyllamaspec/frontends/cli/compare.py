"""--compare (on with --demo): is speculation faster than the same target decoding plainly?

A single plain run after a single speculative one measures the machine as much as the method:
the first run of a process pays for page faults of cold mappings and the first graphs, and a
busy machine slows whichever run it lands on (issue 27: a cold first demo printed 4.08x against a
plain run at 1.8 t/s). So both are warmed up before anything is timed, then timed alternately in
this process, and the medians are compared."""
from __future__ import annotations

import dataclasses
import statistics
import sys
from dataclasses import dataclass, field

from ...engine.model import Model
from ...engine.sampling import SamplingParams
from ...files.progress import Progress
from ...speculation.decoder import DraftParams, Stats
from ...generation.generate import iter_generate

WARM_UP_TOKENS = 16


@dataclass
class Comparison:
    """Tokens per second of each timed run, in the order they ran (alternating)."""
    plain: list[float] = field(default_factory=list)
    spec: list[float] = field(default_factory=list)
    tokens_per_round: list[float] = field(default_factory=list)
    drafted: list[int] = field(default_factory=list)      # tokens each speculative run drafted

    @property
    def ratio(self) -> float:
        p = statistics.median(self.plain) if self.plain else 0.0
        return statistics.median(self.spec) / p if p > 0 and self.spec else float("nan")


@dataclass
class Run:
    """What every run of the comparison shares."""
    prompt: str
    target: Model
    draft: object
    sampling: SamplingParams
    draft_params: DraftParams
    stop: list[str]
    parse_special: bool = True

    @property
    def _plain(self) -> DraftParams:
        """The same settings without a drafter (no --spec-type drafting without a draft either)."""
        return dataclasses.replace(self.draft_params, spec_type=())

    def __call__(self, drafted: bool, max_tokens: int, seed: int) -> Stats:
        result: dict = {}
        sampling = dataclasses.replace(self.sampling, seed=seed % 2**64)
        for _ in iter_generate(self.prompt, self.target, self.draft if drafted else None, sampling=sampling,
                               draft=self.draft_params if drafted else self._plain, max_tokens=max_tokens, stop=self.stop, result=result,
                               parse_special=self.parse_special):
            pass
        return result["stats"]


def warm_up(run: Run) -> None:
    """A short untimed generation each way: the models' pages are faulted in, their graphs built,
    and the cost model has made its first measurements (kept for the pair: pair_stats)."""
    for drafted in (False, True):
        run(drafted, WARM_UP_TOKENS, run.sampling.seed + 1000 + drafted)


def alternate(run: Run, shown: Stats, n_runs: int) -> Comparison:
    """shown (the speculative run the user watched, after the warm-up) counts as the first
    speculative run; then plain and speculative alternate until each has n_runs, every run
    generating up to as many tokens as the shown one."""
    c = Comparison(spec=[shown.generate_tps], tokens_per_round=[shown.mean_accepted], drafted=[shown.drafted])
    n = max(1, shown.n_generated)
    with Progress("timing plain and speculative runs alternately", 2 * n_runs - 1, unit="runs") as bar:
        for i in range(n_runs):
            c.plain.append(run(False, n, run.sampling.seed + i).generate_tps)
            bar.update(1)
            if len(c.spec) < n_runs:
                s = run(True, n, run.sampling.seed + i + 1)
                c.spec.append(s.generate_tps)
                c.tokens_per_round.append(s.mean_accepted)
                c.drafted.append(s.drafted)
                bar.update(1)
    return c


def report(c: Comparison, n_tokens: int, file=None) -> None:
    file = file or sys.stderr
    def row(name: str, xs: list[float]) -> str:
        return f"  {name:<12} t/s: " + " ".join(f"{x:6.1f}" for x in xs) + f"   median {statistics.median(xs):.1f}"
    print(f"\nsame target and prompt, plain and speculative decoding alternated after a warm-up "
          f"({len(c.spec)} runs each, up to {n_tokens} tokens):", file=file)
    print(row("plain", c.plain), file=file)
    print(row("speculative", c.spec) + f"   ({statistics.median(c.tokens_per_round):.2f} tokens per round)",
          file=file)
    if not any(c.drafted):
        # every "speculative" run decoded plainly: their ratio to the plain runs is noise, not a result
        print("the cost model drafted nothing in any run: speculation did not pay on this machine for this pair "
              "(both kinds decoded plainly; no speed-up to report)", file=file)
        return
    print(f"speculative / plain: {c.ratio:.2f}x (median / median)", file=file)


__all__ = ["Comparison", "Run", "warm_up", "alternate", "report", "WARM_UP_TOKENS"]
