"""Training on the responses of conversations: a chat template whose assistant replies are marked for TRL's
`assistant_only_loss` with `{% generation %}` ... `{% endgeneration %}`.

A template that has the markers is used as it is. A ChatML template that writes each message in one of the forms in
CHATML_TURNS (the embedded SmolLM2's, Qwen-style minimal ones) gets them around the assistant's reply and its
`<|im_end|>`, checked to render the same text; any other template goes to TRL's own patched templates
(trl.chat_template_utils.get_training_chat_template: Qwen, Llama 3, Gemma, Phi-3, ...). A template none of these
can mark is one line naming the markers, with --train-on-prompt as the way to train on whole conversations.
"""

from __future__ import annotations

from wemask_cli.runtime.errors import WeMaskError

MARKERS = "{% generation %} ... {% endgeneration %}"
CHATML_TURNS = (  # (how a template writes one message, the same with the assistant's reply marked)
    (
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}",
        "{% if message['role'] == 'assistant' %}{{'<|im_start|>assistant\n'}}{% generation %}"
        "{{message['content'] + '<|im_end|>' + '\n'}}{% endgeneration %}{% else %}"
        "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endif %}",
    ),
    (
        "<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n",
        "{% if message['role'] == 'assistant' %}<|im_start|>assistant\n{% generation %}{{ message['content'] }}"
        "<|im_end|>\n{% endgeneration %}{% else %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
        "<|im_end|>\n{% endif %}",
    ),
)
PROBE = [
    {"role": "system", "content": "S"}, {"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"},
    {"role": "user", "content": "Q2"}, {"role": "assistant", "content": "A2"},
]  # fmt: skip


def training_chat_template(tokenizer, source: str) -> str | None:
    """The template to train on responses with: None when the tokenizer's own has the markers, else a marked one
    that renders the same text; a WeMaskError naming the missing markers when no marked form is known."""
    from trl.chat_template_utils import get_training_chat_template, has_generation_markers

    template = tokenizer.chat_template
    if isinstance(template, dict):
        template = template.get("default")
    if not isinstance(template, str) or not template:
        raise WeMaskError(
            f"training on the responses of conversations needs a chat template, and {source}'s tokenizer has none: "
            "pass --train-on-prompt to train on the whole text, or give a model with a chat template"
        )
    if has_generation_markers(template):
        return None
    for plain, marked in CHATML_TURNS:
        if plain in template:
            patched = template.replace(plain, marked)
            if renders_same(tokenizer, template, patched):
                return patched
    try:
        return get_training_chat_template(tokenizer)
    except (ValueError, TypeError):
        raise WeMaskError(
            f"training on responses (TRL's assistant_only_loss, the default for conversations) needs the chat template "
            f"of {source} to mark each assistant reply with {MARKERS}, and it has no such markers: add them around the "
            "assistant's content and end-of-turn token in its chat_template.jinja, or pass --train-on-prompt to train "
            "on whole conversations"
        ) from None


def renders_same(tokenizer, template: str, patched: str) -> bool:
    """Whether the marked template writes exactly what the original writes, and marks a non-empty reply."""
    try:
        text = tokenizer.apply_chat_template(PROBE, tokenize=False, chat_template=template)
        again = tokenizer.apply_chat_template(PROBE, tokenize=False, chat_template=patched)
        marked = tokenizer.apply_chat_template(PROBE, chat_template=patched, return_dict=True, return_assistant_tokens_mask=True)
    except Exception:  # a template that fails on the probe is not one we can vouch for
        return False
    return text == again and any(marked["assistant_masks"])


def configure_response_loss(ctx) -> str:
    """Train on responses (TRL's assistant_only_loss for conversations, completion_only_loss for prompt/completion,
    as LLaMA-Factory does), or on everything with --train-on-prompt; returns what the loss covers, said in one line."""
    args, columns = ctx.args, ctx.data_format.columns
    if ctx.options.get("train_on_prompt"):
        args.assistant_only_loss, args.completion_only_loss = False, False
        return "the whole text (--train-on-prompt)"
    if "messages" not in columns and args.assistant_only_loss:
        raise WeMaskError(
            f"--assistant_only_loss true needs conversations (a messages column), and this data is {ctx.data_format.name}: "
            "drop the flag (its completions are what is trained on already)"
        )
    if "messages" in columns:
        args.assistant_only_loss = True
        patched = training_chat_template(ctx.tokenizer, ctx.loaded.source)
        if patched is not None:
            ctx.tokenizer.chat_template = patched  # renders the same text; saved with the run, markers included
        return "the assistant replies (--train-on-prompt trains on whole conversations)"
    if "completion" in columns:
        return "the completions (--train-on-prompt trains on the prompts too)"
    return "the whole text"
