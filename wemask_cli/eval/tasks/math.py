"""math: generate (greedy unless --seeds), extract the final answer with `rewards.extract_answer` and grade it with
`rewards.grade_answer` (the GRPO `math` reward's own code): `accuracy`, and `unparseable`, the number of completions
with no final answer or one the grader could not read (each such record says `"unparseable": true`).

Layouts: GSM8K/MATH-style question + answer columns (the question goes through --prompt-template), and verl's RL
layout, recognised without flags: the `prompt` chat messages are used as they are (no template around them) and
the answer is `reward_model.ground_truth`. With --num-fewshot k, k other solved examples come first (as earlier
chat turns with the chat template, else as text separated by blank lines).
"""

from __future__ import annotations

from wemask_cli.data import VERL_ANSWER, column_value, is_verl
from wemask_cli.eval.data import EvalData, pick_field, require_text
from wemask_cli.eval.stats import Metric, proportion
from wemask_cli.eval.tasks.base import CALIBRATION, Prepared, Scored, Task, check_fewshot, fewshot_draws
from wemask_cli.eval.tasks.registry import register

FEWSHOT_SEPARATOR = "\n\n"


def grade_math(completion: str, reference: str) -> tuple[str | None, bool, bool]:
    """(extracted answer, correct?, parsed?) with the GRPO math reward's own extractor and grader."""
    from wemask_cli.rewards import extract_answer, grade_answer

    extracted = extract_answer(completion)
    grade = grade_answer(extracted, reference)
    return extracted, grade.correct, grade.parsed


@register
class MathTask(Task):
    name = "math"
    primary = "accuracy"
    bundled = "math.jsonl"
    generates = True
    template = "{question}\nSolve it step by step, then write the final answer on the last line as '#### <answer>'."
    chat_default = True
    fewshot = True
    summary = "generate, then grade the final answer"
    description = "generate, then the GRPO math reward's grader: accuracy, and how many answers were unparseable"
    flags = frozenset({"question_field", "answer_field"})
    columns = {"question": ("question", "problem", "goal", "ctx", "query", "prompt", "instruction"),
               "answer": ("answer", "final_answer", "solution")}
    max_new_tokens = 256

    def load(self) -> EvalData:
        s = self.settings
        source, rows, labels = self.open_rows()
        verl = s.question_field is None and s.answer_field is None and is_verl(rows[:5])
        question = "prompt" if verl else pick_field(rows, s.question_field, self.columns["question"], "--question-field", source.where)
        answer = VERL_ANSWER if verl else pick_field(rows, s.answer_field, self.columns["answer"], "--answer-field", source.where)
        out = [
            {"question": require_text(column_value(row, question), question, label, source.where, messages=True),
             "answer": require_text(column_value(row, answer), answer, label, source.where)}
            for row, label in zip(rows, labels)
        ]
        check_fewshot(s.num_fewshot, len(out))
        fields = {"question": question, "answer": answer, **({"layout": "verl"} if verl else {})}
        return source.data(self.name, rows=out, fields=fields)

    def prompt(self, rows: list[dict], index: int, shots: list[int], chat: bool):
        """The prompt of example `index`: chat messages (chat template) or text, with its few-shot examples first."""
        ask = lambda q: q if isinstance(q, list) else self.settings.prompt_template.replace("{question}", q)
        as_text = lambda q: q[-1]["content"] if isinstance(q, list) else ask(q)
        question = rows[index]["question"]
        if chat:
            turns = [m for i in shots for m in ({"role": "user", "content": as_text(rows[i]["question"])},
                                                 {"role": "assistant", "content": rows[i]["answer"]})]
            return turns + (question if isinstance(question, list) else [{"role": "user", "content": ask(question)}])
        head = "".join(as_text(rows[i]["question"]) + "\n" + rows[i]["answer"] + FEWSHOT_SEPARATOR for i in shots)
        body = "\n".join(m["content"] for m in question) if isinstance(question, list) else ask(question)
        return head + body

    def prepare(self, tokenizer, data: EvalData, max_positions: int | None) -> Prepared:
        from wemask_cli.eval.task_prompts import encode_prompts

        s = self.settings
        chat = bool(s.chat_template and getattr(tokenizer, "chat_template", None))
        draws = fewshot_draws(len(data.rows), s.num_fewshot, s.fewshot_seed)
        prompts = [self.prompt(data.rows, i, shots, chat) for i, shots in enumerate(draws)]
        encoded, texts, cuts = encode_prompts(tokenizer, prompts, chat, max_positions, s.max_new_tokens)
        longest = max(map(len, encoded)) + s.max_new_tokens
        return Prepared(len(encoded), longest, (data.rows, encoded, texts, cuts, draws), encoded[:CALIBRATION])

    def evaluate(self, model, tokenizer, prepared, seed, batch_size, advance) -> Scored:
        from wemask_cli.engines.generation import generate

        s = self.settings
        rows, encoded, texts, cuts, draws = prepared.payload
        completions = generate(model, tokenizer, encoded, max_new_tokens=s.max_new_tokens, temperature=s.temperature,
                               top_p=s.top_p, seed=seed, batch_size=batch_size, advance=advance)
        records = []
        for row, text, completion, cut, shots in zip(rows, texts, completions, cuts, draws):
            extracted, correct, parsed = grade_math(completion, row["answer"])
            records.append({"question": row["question"], "prompt": text, "reference": row["answer"], "completion": completion,
                            "extracted": extracted, "correct": correct, **({"fewshot": shots} if shots else {}),
                            **({"truncated": True} if cut else {}), **({} if parsed else {"unparseable": True})})
        unparseable = [float("unparseable" in r) for r in records]
        metrics = {"accuracy": proportion([r["correct"] for r in records]),
                   "unparseable": Metric(sum(unparseable), None, unparseable, pairable=False)}
        return Scored(metrics, len(rows), records)
