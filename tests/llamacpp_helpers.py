"""A tiny random Llama model in GGUF, written with the standard library and numpy, for llama-server.

No weights are downloaded: the model is random (its text is noise), which is all a test of the
serving path needs. The tokenizer is SentencePiece-style with the 256 byte tokens, so any prompt
tokenizes. Target and draft share the vocabulary, as llama.cpp's speculative decoding requires.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np

_ALIGN = 32
_U32, _I32, _F32, _BOOL, _STR, _ARR, _U64 = 4, 5, 6, 7, 8, 9, 10
_GGML_F32 = 0


def _s(text: str) -> bytes:
    raw = text.encode()
    return struct.pack("<Q", len(raw)) + raw


def _kv(key: str, vtype: int, value: object) -> bytes:
    out = _s(key) + struct.pack("<I", vtype)
    if vtype == _U32:
        out += struct.pack("<I", value)
    elif vtype == _F32:
        out += struct.pack("<f", value)
    elif vtype == _BOOL:
        out += struct.pack("<?", value)
    elif vtype == _STR:
        out += _s(str(value))
    elif vtype == _ARR:
        etype, items = value  # type: ignore[misc]
        out += struct.pack("<IQ", etype, len(items))
        for it in items:
            if etype == _STR:
                out += _s(it)
            elif etype == _F32:
                out += struct.pack("<f", it)
            elif etype == _I32:
                out += struct.pack("<i", it)
    else:
        raise ValueError(vtype)
    return out


def vocab() -> list[str]:
    return ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]


def write_tiny_llama(
    path: Path, *, n_layer: int = 2, n_embd: int = 64, n_head: int = 4, n_ff: int = 128, seed: int = 0
) -> Path:
    toks = vocab()
    n_vocab = len(toks)
    rng = np.random.default_rng(seed)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.05).astype(np.float32)

    tensors: list[tuple[str, np.ndarray]] = [("token_embd.weight", w(n_vocab, n_embd))]
    for i in range(n_layer):
        tensors += [
            (f"blk.{i}.attn_norm.weight", np.ones(n_embd, np.float32)),
            (f"blk.{i}.attn_q.weight", w(n_embd, n_embd)),
            (f"blk.{i}.attn_k.weight", w(n_embd, n_embd)),
            (f"blk.{i}.attn_v.weight", w(n_embd, n_embd)),
            (f"blk.{i}.attn_output.weight", w(n_embd, n_embd)),
            (f"blk.{i}.ffn_norm.weight", np.ones(n_embd, np.float32)),
            (f"blk.{i}.ffn_gate.weight", w(n_ff, n_embd)),
            (f"blk.{i}.ffn_up.weight", w(n_ff, n_embd)),
            (f"blk.{i}.ffn_down.weight", w(n_embd, n_ff)),
        ]
    tensors += [("output_norm.weight", np.ones(n_embd, np.float32)), ("output.weight", w(n_vocab, n_embd))]
    types = [2, 3, 3] + [6] * 256  # unknown, control (bos, eos), byte
    kvs = [
        _kv("general.architecture", _STR, "llama"),
        _kv("general.name", _STR, f"regdiag-tiny-{n_layer}l"),
        _kv("general.alignment", _U32, _ALIGN),
        _kv("llama.context_length", _U32, 1024),
        _kv("llama.embedding_length", _U32, n_embd),
        _kv("llama.block_count", _U32, n_layer),
        _kv("llama.feed_forward_length", _U32, n_ff),
        _kv("llama.attention.head_count", _U32, n_head),
        _kv("llama.attention.head_count_kv", _U32, n_head),
        _kv("llama.attention.layer_norm_rms_epsilon", _F32, 1e-5),
        _kv("llama.rope.dimension_count", _U32, n_embd // n_head),
        _kv("llama.vocab_size", _U32, n_vocab),
        _kv("tokenizer.ggml.model", _STR, "llama"),
        _kv("tokenizer.ggml.tokens", _ARR, (_STR, toks)),
        _kv("tokenizer.ggml.scores", _ARR, (_F32, [0.0] * n_vocab)),
        _kv("tokenizer.ggml.token_type", _ARR, (_I32, types)),
        _kv("tokenizer.ggml.unknown_token_id", _U32, 0),
        _kv("tokenizer.ggml.bos_token_id", _U32, 1),
        _kv("tokenizer.ggml.eos_token_id", _U32, 2),
        _kv("tokenizer.ggml.add_bos_token", _BOOL, True),
    ]
    infos = b""
    offset = 0
    blobs: list[bytes] = []
    for name, arr in tensors:
        dims = list(reversed(arr.shape))  # GGUF lists the fastest-varying dimension first
        infos += _s(name) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", _GGML_F32, offset)
        raw = arr.tobytes()
        pad = (-len(raw)) % _ALIGN
        blobs.append(raw + b"\0" * pad)
        offset += len(raw) + pad
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs) + infos
    head += b"\0" * ((-len(head)) % _ALIGN)
    path.write_bytes(head + b"".join(blobs))
    return path
