"""A tiny random Llama and a tiny random EAGLE-3 draft for it, written with no download: the target
by transformers' own save_pretrained, the draft in the layout vLLM's llama_eagle3 loads (one
`midlayer` decoder layer whose q/k/v take 2 x hidden, `fc` from 3 target hidden states, its own norm
and lm_head; no d2t: the draft vocabulary is the target's). The target gets a byte-level BPE tokenizer
trained here on a few lines of text (so `vllm serve` and `vllm bench serve` take text). Run with
the engine's python:

    python make_models.py OUT_DIR     # writes OUT_DIR/target and OUT_DIR/eagle3
"""

import json
import os
import sys

HIDDEN, LAYERS, HEADS, KV_HEADS, INTER, VOCAB = 192, 3, 4, 2, 384, 512


def target(path):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS, intermediate_size=INTER, vocab_size=VOCAB,
        max_position_embeddings=1024, bos_token_id=1, eos_token_id=2, torch_dtype="float32",
    )  # fmt: skip
    model = LlamaForCausalLM(cfg)
    # Large logits make greedy decoding fall into short loops, which n-gram drafting then predicts.
    with torch.no_grad():
        model.lm_head.weight.mul_(20)
    model.save_pretrained(path)
    tokenizer(path)


TEXT = [
    "Explain, step by step, how a hash map handles collisions.",
    "Write a Python function that returns the n-th Fibonacci number iteratively.",
    "Summarize the causes of the French Revolution in a short paragraph.",
    "List ten fruits and one fact about each. The weather is nice today and we are going to the beach.",
    "What is the derivative of x^3 * sin(x)? Show the work. Write a haiku about a GPU waiting for memory.",
    "Describe the difference between TCP and UDP for a beginner.",
]


def tokenizer(path):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB, special_tokens=["<unk>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )  # fmt: skip
    tok.train_from_iterator(TEXT * 4, trainer)
    assert tok.get_vocab_size() <= VOCAB and tok.token_to_id("<s>") == 1 and tok.token_to_id("</s>") == 2
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")
    fast.save_pretrained(path)


def eagle3(path):
    import torch
    from safetensors.torch import save_file

    torch.manual_seed(1)
    h, hd = HIDDEN, HIDDEN // HEADS

    def w(*shape):
        return (torch.randn(*shape) * 0.02).contiguous()

    tensors = {
        "midlayer.self_attn.q_proj.weight": w(HEADS * hd, 2 * h),
        "midlayer.self_attn.k_proj.weight": w(KV_HEADS * hd, 2 * h),
        "midlayer.self_attn.v_proj.weight": w(KV_HEADS * hd, 2 * h),
        "midlayer.self_attn.o_proj.weight": w(h, HEADS * hd),
        "midlayer.mlp.gate_proj.weight": w(INTER, h),
        "midlayer.mlp.up_proj.weight": w(INTER, h),
        "midlayer.mlp.down_proj.weight": w(h, INTER),
        "midlayer.input_layernorm.weight": torch.ones(h),
        "midlayer.hidden_norm.weight": torch.ones(h),
        "midlayer.post_attention_layernorm.weight": torch.ones(h),
        "norm.weight": torch.ones(h),
        "fc.weight": w(h, 3 * h),
        "lm_head.weight": w(VOCAB, h),
    }
    os.makedirs(path, exist_ok=True)
    save_file(tensors, os.path.join(path, "model.safetensors"))
    cfg = {
        "architectures": ["LlamaForCausalLMEagle3"],
        "model_type": "llama",
        "hidden_size": h,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "intermediate_size": INTER,
        "vocab_size": VOCAB,
        "draft_vocab_size": VOCAB,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
        "tie_word_embeddings": False,
    }
    with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg, f, indent=1)


if __name__ == "__main__":
    out = sys.argv[1]
    target(os.path.join(out, "target"))
    eagle3(os.path.join(out, "eagle3"))
    print(out)
