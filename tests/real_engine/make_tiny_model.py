"""Build a tiny random-weight chat model that real vLLM serves on a CPU, with no download.

Qwen3 architecture, 2 layers, hidden 128, head_dim 64 (vLLM's CPU attention kernel refuses 16), a
word-level tokenizer made with `tokenizers`, and a chat template that opens a `<think>` block, so a
reasoning parser (`deepseek_r1`, `qwen3`) splits `reasoning` from `content`. The answers are noise;
what the tests need is the real server around them.

`--trainer` makes the variant the trainers' tier reads (tests/real_engine/test_real_trainers.py):
a template that keeps each reply's thinking, and greedy replies that close their thinking and end.
`--long`: greedy replies of 82 tokens that close their thinking half way (the continuation tier).
`--shift N`: each word's successor is the word N ahead on the cycle, not the next: a draft for the
tiny model (the same tokenizer) that predicts other words than it writes (the draft tier).
`--miss-every P`: the successor is the next word but for every P-th word of the cycle (the word after
next there): a draft that agrees with the tiny model on a known share of words, (P-1)/P.

Run with the Python of the vLLM environment (torch, transformers, tokenizers):
    python tests/real_engine/make_tiny_model.py OUT_DIR [--trainer] [--long] [--shift N]
                                                              [--miss-every P]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SPECIAL = ["<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
WORDS = (
    "the a of to and in is it that for on with as was at by be this from or an are not but which "
    "have has one two three four five six seven eight nine ten question answer step first then "
    "model data train draft token think reason result because so we can will user assistant system "
    "count from separated by commas B1 B2 B3 B4 B5 B6 B7 B8 , . : ; ? ! ( ) - 0 1 2 3 4 5 6 7 8 9"
).split()
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)
# the trainer variant (--trainer): Qwen3's shape, but every reply keeps its thinking (vLLM hands a
# reply's `reasoning` to templates as `reasoning_content`, as SpecForge's ThinkingParser does), so a
# reply renders to exactly the tokens the model made after its generation prompt
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['role'] == 'assistant' %}"
    "<think>\n{{ m.get('reasoning_content') or '' }}\n</think>\n\n{% endif %}"
    "{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n<think>\n{% endif %}"
)


def build(
    out: Path, trainer: bool = False, long: bool = False, shift: int = 1, miss_every: int = 0
) -> Path:
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import Qwen3Config, Qwen3ForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    names = list(dict.fromkeys(SPECIAL + WORDS))  # ids 0..n-1, each word once
    vocab = {w: i for i, w in enumerate(names)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.add_special_tokens(SPECIAL)
    tok.save(str(out / "tokenizer.json"))
    eos = vocab["<|im_end|>"]
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "chat_template": THINKING_TEMPLATE if trainer else TEMPLATE,
                "eos_token": "<|im_end|>",
                "pad_token": "<|endoftext|>",
                "unk_token": "<unk>",
                "bos_token": None,
                "model_max_length": 4096,
                "clean_up_tokenization_spaces": False,
            },
            indent=1,
        )
    )
    config = Qwen3Config(
        vocab_size=len(vocab),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=4096,
        rope_theta=10000.0,
        tie_word_embeddings=False,
        eos_token_id=eos,
        pad_token_id=vocab["<|endoftext|>"],
        bos_token_id=None,
    )
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(config)
    # Random weights decoded greedily repeat one token, which the smoke test rightly calls
    # degenerate. So the weights carry a plan:
    # the residual stream is dominated by the current token's embedding, and the output head maps
    # each word to the next word of one long cycle. Greedy walks the cycle (varied words); sampling
    # (temperature 1) leaves it often, ending the thinking or the answer now and then.
    words = [vocab[w] for w in vocab if w not in SPECIAL]
    nxt = {w: words[(i + shift) % len(words)] for i, w in enumerate(words)}
    if miss_every:  # words P-1, 2P-1, …: the word after next
        for i in range(miss_every - 1, len(words), miss_every):
            nxt[words[i]] = words[(i + 2) % len(words)]
    for t in SPECIAL:
        nxt[vocab[t]] = words[0]
    if trainer:  # greedy: 8 words of thinking, </think>, 12 words of answer, the end of the turn
        nxt[words[7]], nxt[vocab["</think>"]] = vocab["</think>"], words[8]
        nxt[words[19]] = eos
    if long:  # greedy: 50 words of thinking, </think>, 30 words of answer, the end of the turn
        nxt[words[49]], nxt[vocab["</think>"]] = vocab["</think>"], words[50]
        nxt[words[79]] = eos
    with torch.no_grad():
        emb = torch.randn(len(vocab), config.hidden_size)
        model.model.embed_tokens.weight.copy_(emb)
        head = torch.zeros_like(emb)
        for cur, follow in nxt.items():
            head[follow] += emb[cur]
        model.lm_head.weight.copy_(head * (4.0 / config.hidden_size))
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": eos, "pad_token_id": vocab["<|endoftext|>"]})
    )
    return out


if __name__ == "__main__":
    flags = sys.argv[2:]
    shift = int(flags[flags.index("--shift") + 1]) if "--shift" in flags else 1
    miss = int(flags[flags.index("--miss-every") + 1]) if "--miss-every" in flags else 0
    print(build(Path(sys.argv[1]), "--trainer" in flags, "--long" in flags, shift, miss))
