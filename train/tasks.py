"""tasks.py — the quality axis's task families: problems generated from a seed, and an exact
checker for each. Standard library only, so the trainer (train/train.py) and the quality bench
(bench/quality.py) share one copy.

A problem is a prompt and its one correct answer, both plain text over the alphabet below. The
model sees the prompt and must write the answer and then end its sequence; the checker compares
the answer it wrote with the correct one, exactly (after trimming surrounding spaces).

Training and held-out problems never overlap: the held-out set of a task is drawn from its own
seed first, and the training stream skips every prompt that is in it (`TrainStream`).
"""

import random

# Every character a prompt or an answer may hold. The tokenizer (train/tokenizer.py) has one
# token for each, plus <unk>, <s> and </s>.
ALPHABET = " 0123456789+-*=()%;?abcdefghijklmnopqrstuvwxyz"

HELDOUT_SEED = 1_000_003  # the held-out sets are drawn from this seed (per task, below)
HELDOUT_MAX = 1000  # held-out problems per task: the training stream skips all of them


def gen_add(rng):
    """Multi-digit addition: two numbers of 1 to 3 digits."""
    a = rng.randrange(10 ** rng.randint(1, 3))
    b = rng.randrange(10 ** rng.randint(1, 3))
    return f"add {a}+{b}=", str(a + b)


def gen_sort(rng):
    """Sorting: 4 to 7 single digits, ascending, separated by spaces."""
    xs = [rng.randrange(10) for _ in range(rng.randint(4, 7))]
    return "sort " + " ".join(map(str, xs)) + "=", " ".join(map(str, sorted(xs)))


def gen_expr(rng):
    """A small arithmetic expression over single digits with + - * and one pair of brackets,
    evaluated with the usual precedence."""
    d = [str(rng.randrange(10)) for _ in range(3)]
    o = [rng.choice("+-*") for _ in range(2)]
    shape = rng.randrange(3)
    if shape == 0:
        text = f"{d[0]}{o[0]}{d[1]}{o[1]}{d[2]}"
    elif shape == 1:
        text = f"({d[0]}{o[0]}{d[1]}){o[1]}{d[2]}"
    else:
        text = f"{d[0]}{o[0]}({d[1]}{o[1]}{d[2]})"
    return f"expr {text}=", str(eval_expr(text))


def gen_prog(rng):
    """A multi-step task: a three-line program over variables a, b, c (each line sets one from
    a digit or a variable already set, plus or minus a digit or a variable), and the value of
    one variable at the end. The answer needs every step traced in order."""
    env = {}
    lines = []
    for _ in range(3):
        target = rng.choice("abc")
        lhs = rng.choice(sorted(env)) if env and rng.random() < 0.7 else str(rng.randrange(10))
        rhs = rng.choice(sorted(env)) if env and rng.random() < 0.4 else str(rng.randrange(10))
        op = rng.choice("+-")
        value = eval_term(lhs, env) + (1 if op == "+" else -1) * eval_term(rhs, env)
        lines.append(f"{target}={lhs}{op}{rhs}")
        env[target] = value
    ask = rng.choice(sorted(env))
    return "prog " + ";".join(lines) + f";{ask}?", str(env[ask])


def eval_term(t, env):
    return env[t] if t in env else int(t)


def eval_expr(text):
    """Evaluates a digits-and-+-*-and-brackets expression without eval(): a tiny precedence
    parser, so the checker's notion of the answer is written down here."""
    pos = 0

    def atom():
        nonlocal pos
        if text[pos] == "(":
            pos += 1
            v = additive()
            pos += 1  # ")"
            return v
        v = int(text[pos])
        pos += 1
        return v

    def term():
        nonlocal pos
        v = atom()
        while pos < len(text) and text[pos] == "*":
            pos += 1
            v *= atom()
        return v

    def additive():
        nonlocal pos
        v = term()
        while pos < len(text) and text[pos] in "+-":
            op = text[pos]
            pos += 1
            v = v + term() if op == "+" else v - term()
        return v

    return additive()


TASKS = {"add": gen_add, "sort": gen_sort, "expr": gen_expr, "prog": gen_prog}
TASK_NAMES = list(TASKS)


def check(task, prompt, answer):
    """True when `answer` (a model's output) is the correct answer to `prompt` of `task`."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}")
    return answer.strip() == solve(task, prompt)


def solve(task, prompt):
    """The correct answer, computed from the prompt text alone (not remembered from the
    generator), so a checker can be trusted on a prompt it did not make."""
    body = prompt[len(task) + 1:]
    if task == "add":
        a, b = body.rstrip("=").split("+")
        return str(int(a) + int(b))
    if task == "sort":
        return " ".join(sorted(body.rstrip("=").split(), key=int))
    if task == "expr":
        return str(eval_expr(body.rstrip("=")))
    if task == "prog":
        *lines, ask = body.split(";")
        env = {}
        for line in lines:
            target, rest = line.split("=")
            i = max(rest.rfind("+"), rest.rfind("-"))
            lhs, op, rhs = rest[:i], rest[i], rest[i + 1:]
            env[target] = eval_term(lhs, env) + (1 if op == "+" else -1) * eval_term(rhs, env)
        return str(env[ask.rstrip("?")])
    raise ValueError(f"unknown task {task!r}")


def heldout(task, count, seed=HELDOUT_SEED):
    """The first `count` distinct held-out problems of `task`: the same for any caller. More
    than HELDOUT_MAX would reach problems the training stream may have used."""
    if not 0 <= count <= HELDOUT_MAX:
        raise ValueError(f"held-out count {count} is outside 0..{HELDOUT_MAX}")
    rng = random.Random(f"{seed}/{task}")
    seen, out = set(), []
    while len(out) < count:
        prompt, answer = TASKS[task](rng)
        if prompt not in seen:
            seen.add(prompt)
            out.append((prompt, answer))
    return out


class TrainStream:
    """An endless stream of training problems over the task mix (uniform over tasks), from
    `seed`, never yielding a prompt of the held-out sets (the first `heldout_count` of each)."""

    def __init__(self, seed, heldout_count, tasks=TASK_NAMES):
        self.rng = random.Random(f"train/{seed}")
        self.tasks = list(tasks)
        self.excluded = {p for t in self.tasks for p, _ in heldout(t, heldout_count)}
        self.skipped = 0

    def next(self):
        while True:
            task = self.rng.choice(self.tasks)
            prompt, answer = TASKS[task](self.rng)
            if prompt in self.excluded:
                self.skipped += 1
                continue
            return task, prompt, answer
