"""Write a random-weight Llama checkpoint (and a small tokenizer) for offline vLLM tests and benchmarks.

    python scripts/make_tiny_model.py OUT_DIR                # tiny: 4 layers, hidden 256 (~14 MB, seconds)
    python scripts/make_tiny_model.py OUT_DIR --size tiny-sliding  # the same, half its layers windowed (hybrid)
    python scripts/make_tiny_model.py OUT_DIR --size bench   # larger: prefill of a few thousand tokens takes seconds

Needs torch + transformers (+ tokenizers), i.e. the vLLM environment (scripts/vllm_env.sh). No network.
Weights are drawn from a fixed seed with std 0.08 so greedy decoding is deterministic and far from ties: two runs of
the script produce the same weights, so tests in different processes see the same model. Tests feed token ids
directly; the tokenizer (byte-level BPE trained on a fixed text) only exists so that ``vllm serve`` and
text prompts work too. A ``.kvd-model`` stamp records the config, so calling again with the same size is instant.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

_TINY = dict(
    vocab_size=2048,
    hidden_size=256,
    intermediate_size=512,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=64,
    max_position_embeddings=4096,
)
SIZES = {
    "tiny": _TINY,
    # The tiny model with Gemma-style interleaved attention: every other layer sees only the last 64 tokens
    # (``layer_types``, which vLLM's Llama reads), so vLLM builds KV cache specs of two kinds: a hybrid model.
    "tiny-sliding": {**_TINY, "sliding_window": 64, "layer_types": ["sliding_attention", "full_attention"] * 2},
    # About 0.4B parameters: prefill of 4k tokens takes seconds on 2 CPU cores, KV is 64 KiB per token (fp32).
    "bench": dict(
        vocab_size=2048,
        hidden_size=1024,
        intermediate_size=4096,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=16384,
    ),
}
SEED = 1234
STD = 0.08


def _tokenizer(out: Path, vocab_size: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    text = [
        "the quick brown fox jumps over the lazy dog " * 4,
        "key value cache chunks are stored in a redis protocol daemon " * 4,
        "".join(chr(32 + (i * 7) % 95) for i in range(5000)),
    ]
    tok.train_from_iterator(text, trainer)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "model_max_length": 1 << 20,
            }
        )
    )


def make(out: Path, size: str = "tiny") -> Path:
    cfg_kwargs = SIZES[size]
    stamp = out / ".kvd-model"
    want = json.dumps({"size": size, "seed": SEED, "std": STD, **cfg_kwargs}, sort_keys=True)
    if stamp.exists() and stamp.read_text() == want:
        return out
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(SEED)
    config = LlamaConfig(
        **cfg_kwargs,
        torch_dtype="float32",
        tie_word_embeddings=False,
        bos_token_id=0,
        eos_token_id=1,
        initializer_range=STD,
    )
    model = LlamaForCausalLM(config)
    with torch.no_grad():
        gen = torch.Generator().manual_seed(SEED)
        for _, p in sorted(model.named_parameters()):
            if p.dim() == 1:  # norms stay at 1
                continue
            p.copy_(torch.randn(p.shape, generator=gen) * STD)
    model.save_pretrained(out, safe_serialization=True)
    _tokenizer(out, cfg_kwargs["vocab_size"])
    stamp.write_text(want)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out_dir", type=Path)
    ap.add_argument("--size", choices=sorted(SIZES), default="tiny")
    args = ap.parse_args(argv)
    print(make(args.out_dir, args.size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
