"""Build a tiny random-weight Llama and its tokenizer offline (run by the vLLM venv's Python).

Why: the real-server tests need a model vLLM can load, and no hub can be
reached. A 2-layer, 128-wide Llama with random weights and a byte-level BPE
trained on the repository's own docs is ~1 MB, loads in seconds on a CPU, and
exercises the same scheduler, KV cache and metrics code as a real model.
Usage: ``python tiny_model.py OUT_DIR TEXT_FILE...``.
"""

from __future__ import annotations

import sys
from pathlib import Path

VOCAB = 1024


def build(out: Path, texts: list[Path]) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train([str(p) for p in texts], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>"
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        head_dim=64,
        max_position_embeddings=2048,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        tie_word_embeddings=True,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    fast.save_pretrained(out)


if __name__ == "__main__":
    build(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]])
