"""Per-task tuning does not look more certain than it is: a task needs MIN_TASK_PROMPTS
prompts for an answer of its own, an interval never holds an impossible value (tokens per call
below 1), and a task whose answer is within the all-prompts answer's interval says it is not
distinguishable from it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cactus_core.app.frontier.tasks import answer_rows, tasks_caption
from cactus_core.experiments.sweeps.config import Setting
from cactus_core.experiments.sweeps.run import PromptRecord, SettingResult
from cactus_core.experiments.tuning import tasks as T


def record(i: int, tokens: int, calls: int) -> PromptRecord:
    return PromptRecord(i, "", tokens, calls, 4, 2, 0.1, 1.0, 0, 0.0, 0.0)


def test_an_interval_over_two_prompts_stays_at_one_token_per_call_or_more():
    res = SettingResult(Setting.of("cactus", delta=0.1), [])
    res.chunks = [SimpleNamespace(prompts=[record(0, 10, 10), record(1, 40, 10)], override=None)]
    e = res.estimate("tokens_per_call")
    assert e.mean == pytest.approx(2.5) and e.lo == 1.0 and e.hi > 4.0
    assert res.estimate("acceptance_rate").hi <= 1.0


def answer(task: str, prompts: int, value: float, low: float, high: float) -> T.BudgetAnswer:
    return T.BudgetAnswer(task, "cactus", "delta", 0.05, value, low, high, 2.0, prompts, True)


def test_tasks_need_enough_prompts_and_say_when_they_match_all_prompts(monkeypatch):
    made = {
        T.ALL_TASKS: answer(T.ALL_TASKS, 24, 0.05, 0.04, 0.06),
        "chat": answer("chat", 13, 0.055, 0.045, 0.07),
        "code": answer("code", 6, 0.2, 0.12, 0.3),
        "maths": answer("maths", 2, 0.12, 0.01, 3.0),
    }
    monkeypatch.setattr(T, "answer_budget", lambda result, rule, budget, task: made[task])
    result = SimpleNamespace(config=SimpleNamespace(task_names=["chat", "code", "maths"]))
    answers = T.answers_by_task(result, "cactus", 0.05)
    assert [(a.enough, a.versus_all) for a in answers] == [
        (True, ""),
        (True, "not distinguishable"),
        (True, "higher"),
        (False, ""),
    ]
    rows = answer_rows(answers)
    assert rows[3]["delta"] == "–" and "too few prompts" in rows[3]["against all prompts"]
    assert rows[1]["against all prompts"].startswith("not distinguishable")
    assert all(v is not None for r in rows for v in r.values())  # no raw "None" cells
    caption = tasks_caption(answers)
    assert "The 2 tasks' answers span" in caption  # maths, with 2 prompts, is left out
    assert "chat: not distinguishable from the all-prompts answer" in caption
