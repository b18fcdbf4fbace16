"""choice: each option scored by the sum of its token log-probabilities given the question (lm-eval's
multiple_choice): `accuracy` picks the best sum (lm-eval's acc), `accuracy_norm` the best sum per character of the
option's own text, without the delimiter (lm-eval's acc_norm). Deterministic.

Prompt: `--prompt-template` (default 'Question: {question}\\nAnswer:'), each option after a space (the target
delimiter); with --num-fewshot k, k other solved examples first, separated by blank lines. With the chat template
the question is a user message (few-shot examples as earlier turns) and the option the assistant's reply.
"""

from __future__ import annotations

from wemask_cli.data import column_value
from wemask_cli.eval.data import TRUNCATED_NOTE, EvalData, parse_answer_index, parse_choices, pick_field, require_text
from wemask_cli.eval.stats import proportion
from wemask_cli.eval.tasks.base import CALIBRATION, Prepared, Scored, Task, check_fewshot, fewshot_draws
from wemask_cli.eval.tasks.registry import register
from wemask_cli.prompts.rendering import left_truncate, render_prompt, warn_truncated
from wemask_cli.runtime.errors import WeMaskError

DELIMITER = " "  # lm-eval's target_delimiter
FEWSHOT_SEPARATOR = "\n\n"  # lm-eval's fewshot_delimiter


@register
class ChoiceTask(Task):
    name = "choice"
    primary = "accuracy"
    bundled = "choice.jsonl"
    template = "Question: {question}\nAnswer:"
    fewshot = True
    summary = "log-likelihood of each option"
    description = "log-likelihood of each option: accuracy, and accuracy_norm per character of the option, lm-eval's acc/acc_norm"
    flags = frozenset({"question_field", "choices_field", "answer_field"})
    columns = {"question": ("question", "problem", "goal", "ctx", "query", "prompt", "instruction"),
               "choices": ("choices", "options", "endings", "sol1,sol2"),
               "answer": ("answer", "answerKey", "label", "gold")}

    def load(self) -> EvalData:
        s = self.settings
        source, rows, labels = self.open_rows()
        question = pick_field(rows, s.question_field, self.columns["question"], "--question-field", source.where)
        choices_name = pick_field(rows, s.choices_field, self.columns["choices"], "--choices-field", source.where)
        answer = pick_field(rows, s.answer_field, self.columns["answer"], "--answer-field", source.where)
        out = []
        for row, label in zip(rows, labels):
            choices, option_labels = parse_choices(row, choices_name, label, source.where)
            out.append({
                "question": require_text(column_value(row, question), question, label, source.where),
                "choices": choices,
                "answer": parse_answer_index(column_value(row, answer), choices, option_labels, label, source.where, answer),
            })
        check_fewshot(s.num_fewshot, len(out))
        return source.data(self.name, rows=out, fields={"question": question, "choices": choices_name, "answer": answer})

    def contexts(self, tokenizer, rows: list[dict]) -> tuple[list[str], list[list[int]], str, bool]:
        """(context text per question, few-shot indices per question, option delimiter, add special tokens)."""
        s = self.settings
        draws = fewshot_draws(len(rows), s.num_fewshot, s.fewshot_seed)
        ask = lambda row: s.prompt_template.replace("{question}", row["question"])
        answer = lambda row: row["choices"][row["answer"]]
        if s.chat_template and getattr(tokenizer, "chat_template", None):
            texts = []
            for row, shots in zip(rows, draws):
                messages = [m for i in shots for m in ({"role": "user", "content": ask(rows[i])},
                                                        {"role": "assistant", "content": answer(rows[i])})]
                texts.append(render_prompt(tokenizer, messages + [{"role": "user", "content": ask(row)}], True)[0])
            return texts, draws, "", False
        texts = [
            "".join(ask(rows[i]) + DELIMITER + answer(rows[i]) + FEWSHOT_SEPARATOR for i in shots) + ask(row)
            for row, shots in zip(rows, draws)
        ]
        return texts, draws, DELIMITER, True

    def prepare(self, tokenizer, data: EvalData, max_positions: int | None) -> Prepared:
        from wemask_cli.eval.scoring import encode_pair, prefix_token_id

        texts, draws, delimiter, special = self.contexts(tokenizer, data.rows)
        groups, cuts = [], []
        for row, text in zip(data.rows, texts):
            pairs = [encode_pair(tokenizer, text, delimiter + choice, special) for choice in row["choices"]]
            context = pairs[0][0] or [prefix_token_id(tokenizer)]
            options = [option for _, option in pairs]
            if any(not option for option in options):
                raise WeMaskError(f"an option of question {row['question'][:60]!r} tokenizes to nothing")
            room = (max_positions or 10**9) - max(len(o) for o in options)
            context, cut = left_truncate(context, room, tokenizer.bos_token_id)
            groups.append((context, options))
            cuts.append(cut)
        warn_truncated(cuts, max_positions or 0, "the model's context, with the longest option", what="choice prompts",
                       note=TRUNCATED_NOTE)
        longest = max(len(c) + max(len(o) for o in opts) for c, opts in groups)
        units = sum(len(opts) for _, opts in groups)
        samples = [context + options[row['answer']] for row, (context, options) in zip(data.rows, groups)][:CALIBRATION]
        return Prepared(units, longest, (data.rows, groups, texts, draws, delimiter, cuts), samples)

    def evaluate(self, model, tokenizer, prepared, seed, batch_size, advance) -> Scored:
        from wemask_cli.eval.scoring import require_finite_scores

        rows, groups, texts, draws, delimiter, cuts = prepared.payload
        scores = model.score_options(groups, batch_size, advance)
        records = []
        for number, (row, sums, text, shots, cut) in enumerate(zip(rows, scores, texts, draws, cuts), 1):
            require_finite_scores(sums, f"question {number} ({row['question'][:60]!r})")
            n = len(row["choices"])
            normed = [total / max(1, len(choice)) for total, choice in zip(sums, row["choices"])]
            pred = max(range(n), key=lambda i: sums[i])
            pred_norm = max(range(n), key=lambda i: normed[i])
            records.append({
                "question": row["question"], "prompt": text, "continuations": [delimiter + c for c in row["choices"]],
                "answer": row["answer"], "loglik": sums, "pred": pred, "pred_norm": pred_norm,
                "correct": pred == row["answer"], "correct_norm": pred_norm == row["answer"],
                **({"fewshot": shots} if shots else {}), **({"truncated": True} if cut else {}),
            })
        metrics = {"accuracy": proportion([r["correct"] for r in records]),
                   "accuracy_norm": proportion([r["correct_norm"] for r in records])}
        return Scored(metrics, len(rows), records)
