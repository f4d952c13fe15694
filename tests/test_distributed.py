"""hrm.distributed's agreement on a stage's outcome: the merged message every rank raises, and its type.
(Two real gloo ranks refusing a start-up: tests/test_train.py.)"""
from __future__ import annotations

import pytest
import torch

from hrm.distributed import (AgreedOnEveryRank, DistInfo, MissingOnEveryRank, RefusedOnEveryRank, agree_on_outcome,
                             merge_rank_messages, rank_span)

CPU = DistInfo(0, 1, 0, torch.device("cpu"))


def test_rank_span_names_runs_of_ranks_as_ranges():
    assert rank_span([3]) == "rank 3"
    assert rank_span([0, 1]) == "ranks 0-1"
    assert rank_span([0, 1, 2, 3, 6, 8, 9]) == "ranks 0-3, 6, 8-9"


def test_one_message_every_rank_shares_is_told_as_it_is():
    assert merge_rank_messages({0: "no checkpoint", 1: "no checkpoint"}, world_size=2) == "no checkpoint"


def test_differing_messages_are_told_once_each_after_their_ranks():
    messages = {5: "file B missing", 0: "file A missing", 1: "file A missing", 2: "file A missing",
                3: "file A missing", 7: "file B missing"}
    assert merge_rank_messages(messages, world_size=8) == ("ranks 0-3: file A missing\n"
                                                           "ranks 5, 7: file B missing")


def test_a_message_from_some_ranks_only_names_them():
    """The ranks that passed say nothing, so the message must say where it failed."""
    assert merge_rank_messages({3: "no such folder"}, world_size=4) == "rank 3: no such folder"
    assert merge_rank_messages({2: "x", 3: "x"}, world_size=4) == "ranks 2-3: x"


def test_agree_on_outcome_returns_the_result_or_raises_an_agreed_error_of_the_kind():
    assert agree_on_outcome(lambda: 7, CPU) == 7

    def missing():
        raise FileNotFoundError("resume=latest: no checkpoint under run")
    with pytest.raises(MissingOnEveryRank, match="^resume=latest: no checkpoint under run$") as raised:
        agree_on_outcome(missing, CPU)
    assert isinstance(raised.value, AgreedOnEveryRank) and isinstance(raised.value.__cause__, FileNotFoundError)

    def refused():
        raise ValueError("another build")
    with pytest.raises(RefusedOnEveryRank, match="^another build$"):
        agree_on_outcome(refused, CPU)


def test_a_rank_that_passed_raises_what_the_others_refused(monkeypatch):
    """Rank 0 of 4 passed its stage; ranks 1-2 lack a file, rank 3 refuses a build (as gathered):
    rank 0 raises too, naming each rank's reason; a ValueError, since not every failure was a
    missing file."""
    import hrm.distributed
    gathered = []

    def four_ranks(outcome, info):
        gathered.append(outcome)
        return [outcome, (True, "step_2/rank_1.pt missing"), (True, "step_2/rank_1.pt missing"), (False, "other build")]
    monkeypatch.setattr(hrm.distributed, "gather_objects", four_ranks)
    with pytest.raises(RefusedOnEveryRank) as raised:
        agree_on_outcome(lambda: "ready", DistInfo(0, 4, 0, torch.device("cpu")))
    assert gathered == [None] and raised.value.__cause__ is None
    assert str(raised.value) == "ranks 1-2: step_2/rank_1.pt missing\nrank 3: other build"


def test_other_exceptions_pass_through_unchanged():
    def broken():
        raise KeyError("a bug")
    with pytest.raises(KeyError):
        agree_on_outcome(broken, CPU)
