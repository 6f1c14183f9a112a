"""Offline generation with vLLM's LLM class on a tiny model (tests/engine_vllm/make_models.py):

    python gen.py MODELS_DIR [--spec ngram|eagle3|none] [--k 3] [--tokens 64] [--prompts 2]
                  [--no-prefix-caching]

Token ids in, token ids out (skip_tokenizer_init: the random model has no tokenizer). The prompts
repeat a pattern so that n-gram drafting finds matches.
"""

import argparse
import os
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("models")
    p.add_argument("--spec", default="ngram", choices=["ngram", "eagle3", "none"])
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--tokens", type=int, default=64)
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--dtype", default="float32")
    p.add_argument("--no-prefix-caching", action="store_true")
    a = p.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    # One process (engine core and worker in this one): a start costs one import of vLLM, not three.
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    spec = None
    if a.spec == "ngram":
        spec = {"method": "ngram", "num_speculative_tokens": a.k, "prompt_lookup_max": 4}
    elif a.spec == "eagle3":
        spec = {"method": "eagle3", "model": os.path.join(a.models, "eagle3"), "num_speculative_tokens": a.k}
    t0 = time.perf_counter()
    llm = LLM(
        model=os.path.join(a.models, "target"), skip_tokenizer_init=True, enforce_eager=True, dtype=a.dtype,
        gpu_memory_utilization=0.1, max_model_len=512, speculative_config=spec, seed=0, distributed_executor_backend="uni",
        enable_prefix_caching=not a.no_prefix_caching,
    )  # fmt: skip
    t1 = time.perf_counter()
    prompts = [
        TokensPrompt(prompt_token_ids=[5 + i, 7, 9, 11, 5 + i, 7, 9, 11, 5 + i, 7]) for i in range(a.prompts)
    ]
    params = SamplingParams(temperature=0.0, max_tokens=a.tokens, ignore_eos=True, detokenize=False)
    out = llm.generate(prompts, params, use_tqdm=False)
    t2 = time.perf_counter()
    n = sum(len(o.outputs[0].token_ids) for o in out)
    print(f"engine up {t1 - t0:.1f} s; {n} tokens in {t2 - t1:.2f} s", flush=True)


if __name__ == "__main__":
    main()
