"""A real third-party speculative-decoding loop on CPU: Hugging Face transformers' assisted generation
with two tiny random-weight Llama models built here (no download). `--same` makes the draft a copy of
the target (every draft token accepted); otherwise the draft has its own random weights."""

import argparse
import copy
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

ap = argparse.ArgumentParser()
ap.add_argument("--same", action="store_true")
ap.add_argument("--tokens", type=int, default=40)
ap.add_argument("--hidden", type=int, default=64)
ap.add_argument("--layers", type=int, default=2)
ap.add_argument("--device", default="cpu")
ap.add_argument("--dtype", default="float32")
ap.add_argument(
    "--verify-syncs",
    type=int,
    default=0,
    help="a host sync planted in verify: this many .item() reads after each forward of the target",
)
args = ap.parse_args()

torch.set_num_threads(1)
dtype = getattr(torch, args.dtype)


def model(seed: int) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=args.hidden,
        intermediate_size=args.hidden * 2,
        num_hidden_layers=args.layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
    )
    return LlamaForCausalLM(cfg).to(device=args.device, dtype=dtype).eval()


target = model(0)
draft = copy.deepcopy(target) if args.same else model(1)
if args.verify_syncs:  # the target's forward only (verify): the draft is its own module
    forward = target.forward

    def synced_forward(*a, **kw):
        out = forward(*a, **kw)
        for _ in range(args.verify_syncs):
            out.logits[0, -1, 0].item()  # on CUDA: a copy to the host and a wait for the GPU
        return out

    target.forward = synced_forward
draft.generation_config.num_assistant_tokens = 4
draft.generation_config.num_assistant_tokens_schedule = "constant"
# A random draft is never confident: without this it stops drafting after one token.
draft.generation_config.assistant_confidence_threshold = 0.0
prompt = torch.randint(0, 256, (1, 8), generator=torch.Generator().manual_seed(2)).to(args.device)
t0 = time.perf_counter()
with torch.no_grad():
    out = target.generate(
        prompt,
        assistant_model=draft,
        max_new_tokens=args.tokens,
        do_sample=False,
        pad_token_id=0,
    )
print(f"generated {out.shape[1] - prompt.shape[1]} tokens in {time.perf_counter() - t0:.3f} s", flush=True)
