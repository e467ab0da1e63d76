"""The answer in the stack's terms: the winning policy as the launch flags that realize it.

``run``'s winner is the rule ``recommend`` uses (``balanced``, docs/study.md) over the
run's stable policies; an unstable policy never wins. The flags come from
scenario/launch/emit.py (data in registry/launch_flags.py).
"""

from __future__ import annotations

from prefixbench.scenario.launch.emit import STACKS, Answer, policy_flags, serve_commands

from .recommend import rank


def run_ranking(rows: list[dict]) -> list[str]:
    """The run's stable policies, best first under the balanced rule."""
    stable = [r for r in rows if r.get("stable", True)]
    return rank(stable, "balanced") if stable else []


def run_winner(rows: list[dict]) -> str | None:
    """The run's best stable policy under the balanced rule, or None if none is stable."""
    ranked = run_ranking(rows)
    return ranked[0] if ranked else None


def best_with_flags(ranked: list[str], stack: str) -> str | None:
    """The best-ranked policy that ``stack`` can launch (the winner may have no flags)."""
    from prefixbench.registry.launch_flags import STACK_FLAGS

    return next((p for p in ranked if STACK_FLAGS[p].get(stack) is not None), None)


def run_answers(s, policy: str, kv_budget_gb: float | None, stacks=STACKS) -> list[Answer]:
    """Whole launch commands for the scenario under ``policy``, per stack, then Dynamo's
    setting where its conditional disaggregation applies."""
    answers = [serve_commands(s, policy, stack, kv_budget_gb) for stack in stacks]
    dynamo = policy_flags(policy, "dynamo")
    if dynamo.flags is not None and len(stacks) > 1:
        answers.append(dynamo)
    return answers


def policy_answers(policy: str, stacks=STACKS) -> list[Answer]:
    """The flags that realize ``policy`` (no scenario: the policy's own flags only)."""
    answers = [policy_flags(policy, stack) for stack in stacks]
    dynamo = policy_flags(policy, "dynamo")
    if dynamo.flags is not None and len(stacks) > 1:
        answers.append(dynamo)
    return answers
