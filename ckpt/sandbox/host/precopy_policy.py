"""The pre-copy engine: rounds until P.Haul's rule says stop, in one place for
``checkpoint --pre-copy`` (rounds into image directories) and ``ckpt migrate`` (rounds
streamed to the destination); ``sandbox`` may not import ``migration``, so it lives here.
What a round does, and where its pages go (a page sink, ``images.pagexfer``), is the
caller's: the engine only runs rounds and decides when to stop.

After each round the caller asks ``StopRule.after`` with the pages each round wrote
and the pages dirty now.  Pre-copy stops when so few pages are dirty that the frozen
image will be small anyway, when a round wrote over 10% more than the one before (the
sandbox dirties memory faster than it is copied: more rounds only repeat the work), or
after ``max_rounds`` rounds.  Otherwise another round runs: the dirty set is still
large but shrinking, so one more round takes pages off the frozen step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

MAX_ROUNDS = 8
FEW_DIRTY = 64  # pages: stop pre-copying once so few are dirty
GROWTH = 1.10  # stop once a round writes over 10% more pages than the one before


@dataclass(frozen=True)
class StopRule:
    """P.Haul's stopping rule with its three limits."""

    max_rounds: int = MAX_ROUNDS
    few_dirty: int = FEW_DIRTY
    growth: float = GROWTH

    def converged(self, written: Sequence[int], dirty: int | None = None) -> bool:
        """Whether the rounds left so few pages dirty that a frozen image of them is
        small: what ``--auto`` asks before it chooses post-copy instead."""
        if not written:
            return False
        return (written[-1] if dirty is None else dirty) <= self.few_dirty

    def after(self, written: Sequence[int], dirty: int | None = None) -> str | None:
        """Why pre-copy stops after the rounds that wrote ``written`` pages each (the
        last is the round just done), ``dirty`` pages being dirty now (None: unknown,
        the last round's count stands in); None: run another round."""
        if not written:
            raise ValueError("StopRule.after is asked after a round, not before the first")
        left = written[-1] if dirty is None else dirty
        if left <= self.few_dirty:
            return f"{left} pages dirty (<= {self.few_dirty})"
        if len(written) > 1 and written[-1] > self.growth * written[-2]:
            over = round((self.growth - 1) * 100)
            return (
                f"round {len(written) - 1} wrote {written[-1]} pages, over {over}% more "
                f"than the {written[-2]} before"
            )
        if len(written) >= self.max_rounds:
            return f"{self.max_rounds} rounds"
        return None


def run_rounds(
    rule: StopRule, one_round: Callable[[int], tuple[dict[str, Any], int | None]]
) -> list[dict[str, Any]]:
    """Run ``one_round(r)`` for ``r = 0, 1, ...`` until ``rule`` says stop (at most
    ``rule.max_rounds``).  Each returns its record, which holds ``pages_written``,
    and the pages dirty after it (None: unknown); the last record gets ``stop``, the
    reason.  Returns the records, oldest first."""
    records: list[dict[str, Any]] = []
    for r in range(rule.max_rounds):
        record, dirty = one_round(r)
        records.append(record)
        stop = rule.after([x["pages_written"] for x in records], dirty)
        if stop is not None:
            record["stop"] = stop
            break
    return records
