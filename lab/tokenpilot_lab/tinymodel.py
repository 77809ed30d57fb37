"""A tiny random Llama model that real vLLM (CPU build) can load with no hub access.

It runs inside the engine virtualenv (.venv-engine), which has torch, transformers and tokenizers
but not TokenPilot, so it imports nothing from `tokenpilot`; run it by path:

    .venv-engine/bin/python lab/tokenpilot_lab/tinymodel.py OUT_DIR

The result is a normal Hugging Face model directory: a Llama config, random weights as
safetensors, and a byte-level BPE tokenizer trained here on a small built-in text, with a chat
template so /v1/chat/completions works too. The same seed gives the same weights and tokenizer.
Its answers are noise; it exists so tests face vLLM's real server, scheduler and metrics.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# vLLM's CPU attention backend rejects small head sizes (16 fails); 64 is accepted.
HEAD_DIM = 64
NUM_ATTENTION_HEADS = 4
NUM_KV_HEADS = 2
NUM_LAYERS = 2
INTERMEDIATE_SIZE = 512
# Long enough for a decode stream to outlive the interference probe on a busy machine.
MAX_POSITION_EMBEDDINGS = 16384
# The tokenizer learns at most this many tokens; the model's vocabulary is what it learned.
MAX_VOCAB_SIZE = 1024
BOS_TOKEN = "<s>"
EOS_TOKEN = "</s>"

# A role-tagged template: enough for vLLM to render chat requests into a prompt.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ message['role'] }}: {{ message['content'] }}\n"
    "{% endfor %}{% if add_generation_prompt %}assistant: {% endif %}"
)

# Training text for the tokenizer: varied enough to learn a few hundred merges.
_CORPUS_WORDS = """
    the a an of to in is it that for on with as by at from this be are was were token tokens
    batch budget prefill decode request requests latency throughput queue model models server
    engine schedule scheduler kernel memory cache block blocks kubernetes operator replica
    replicas scale service pod node gpu cpu time first inter second seconds hello world
    question answer please write short story about llama vllm chunked continuous iteration
    step running waiting finished stream
""".split()  # noqa: SIM905 - a word list reads better as text


def _corpus(num_lines: int = 2000) -> list[str]:
    # Deterministic pseudo-random sentences; no `random` state shared with the caller.
    lines = []
    state = 12345
    for _ in range(num_lines):
        words = []
        for _ in range(12):
            state = (state * 1103515245 + 12345) % (2**31)
            words.append(_CORPUS_WORDS[state % len(_CORPUS_WORDS)])
        lines.append(" ".join(words).capitalize() + ". 0123456789 " + ",;:!?-'\"()")
    return lines


def _train_tokenizer(vocab_size: int):  # type: ignore[no-untyped-def]
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[BOS_TOKEN, EOS_TOKEN],
        # Every byte is in the vocabulary, so any text (and any id) round-trips.
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer=trainer)
    return tokenizer


def write_tiny_model(out_dir: Path, seed: int = 0) -> Path:
    """Write the model directory to `out_dir` (created if missing) and return it."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out_dir.mkdir(parents=True, exist_ok=True)
    raw_tokenizer = _train_tokenizer(MAX_VOCAB_SIZE)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=raw_tokenizer,
        bos_token=BOS_TOKEN,
        eos_token=EOS_TOKEN,
        model_max_length=MAX_POSITION_EMBEDDINGS,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out_dir)

    config = LlamaConfig(
        vocab_size=raw_tokenizer.get_vocab_size(),
        hidden_size=HEAD_DIM * NUM_ATTENTION_HEADS,
        intermediate_size=INTERMEDIATE_SIZE,
        num_hidden_layers=NUM_LAYERS,
        num_attention_heads=NUM_ATTENTION_HEADS,
        num_key_value_heads=NUM_KV_HEADS,
        head_dim=HEAD_DIM,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        bos_token_id=raw_tokenizer.token_to_id(BOS_TOKEN),
        eos_token_id=raw_tokenizer.token_to_id(EOS_TOKEN),
        tie_word_embeddings=False,
        dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out_dir, safe_serialization=True)
    return out_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out_dir", type=Path, help="directory to write the model into")
    parser.add_argument("--seed", type=int, default=0, help="seed for the random weights")
    args = parser.parse_args(argv)
    print(write_tiny_model(args.out_dir, seed=args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
