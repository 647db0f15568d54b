"""What the scripted model answers to tasks with one right answer.

The stand-in has to get verify's exact tasks (verify/exact.py) and the
accuracy gate's arithmetic right the way the real model does: by reading the
prompt. So this module solves them from the prompt text (it never imports
verify's expected answers): copy the passage between <passage> tags,
evaluate an arithmetic expression, count log lines of a level, transform a
JSON array as instructed. Anything else: None (the canned answers apply).
"""

from __future__ import annotations

import ast
import json
import operator
import re
from fractions import Fraction

_OPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def _evaluate(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        return _OPS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError("not plain arithmetic")


def arithmetic(text: str) -> int | None:
    """The value of the first `Compute EXPR.` in text, if it is a whole number."""
    match = re.search(r"Compute ([\d\s()+\-*/]+?)\.(?:\s|$)", text)
    if not match:
        return None
    try:
        value = _evaluate(ast.parse(match.group(1).strip(), mode="eval"))
    except (SyntaxError, ValueError, ZeroDivisionError):
        return None
    return int(value) if value.denominator == 1 else None


def _copy(text: str) -> str | None:
    match = re.search(r"<passage>\n(.*?)\n</passage>", text, re.S)
    return match.group(1) if match and "Copy the passage" in text else None


def _count(text: str) -> int | None:
    match = re.search(r"have the level (\w+)", text)
    block = re.search(r"```\n(.*?)\n```", text, re.S)
    if not (match and block):
        return None
    return sum(
        len(line.split()) > 2 and line.split()[2] == match.group(1)
        for line in block.group(1).splitlines()
    )


def _transform(text: str) -> str | None:
    if not text.startswith("Transform the JSON array below"):
        return None
    records = json.loads(text[text.index("\n\n[") + 2 :])
    out = [
        {"id": r["id"], "name": f"{r['first']} {r['last']}", "city": r["city"].upper()}
        for r in records
        if r.get("active") is True
    ]
    return json.dumps(out)


def answer(user: str) -> str | None:
    """The right answer to a task with one, else None."""
    copied = _copy(user)
    if copied is not None:
        return copied
    transformed = _transform(user)
    if transformed is not None:
        return transformed
    if "ANSWER: <integer>" in user:
        value = _count(user)
        value = arithmetic(user) if value is None else value
        return None if value is None else f"ANSWER: {value}"
    if "#### <number>" in user:
        value = arithmetic(user)
        if value is None:
            return "I cannot work this one out from the information given.\n#### 0"
        return f"Working through it step by step, the result is {value}.\n#### {value}"
    return None
