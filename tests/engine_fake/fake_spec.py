"""The fake engine's speculative-decoding worker: draft, verify and extend each do real work
(sha256 chains whose lengths come from the environment), and `commit` is where the engine "synchronises"
to read how many draft tokens were accepted, like SGLang and vLLM do once a cycle."""

import hashlib
import os


def _work(n: int, seed: bytes) -> bytes:
    h = seed
    for _ in range(n):
        h = hashlib.sha256(h).digest()
    return h


class SpecWorker:
    def __init__(self) -> None:
        self.draft_n = int(os.environ.get("FAKE_DRAFT_N", "3000"))
        self.verify_n = int(os.environ.get("FAKE_VERIFY_N", "9000"))
        if os.environ.get("FAKE_ATTN_BACKEND") == "TORCH_SDPA":  # the slow backend: verify does 10x the work
            self.verify_n *= 10
        self.extend_n = int(os.environ.get("FAKE_EXTEND_N", "2000"))
        # A host sync planted in verify: this many `.item()` reads of a tensor per call (on a GPU each
        # waits for the device; on CPU the profile counts them as the ops that would).
        self.verify_syncs = int(os.environ.get("FAKE_VERIFY_SYNCS", "0"))
        self.flag = None
        if self.verify_syncs:
            import torch

            self.flag = torch.zeros(1)
        self.accept = int(os.environ.get("FAKE_ACCEPT", "2"))
        # A draft that loses its grip: the accepted drafts go from FAKE_ACCEPT_FROM to FAKE_ACCEPT over
        # the first FAKE_ACCEPT_OVER cycles (0: no drift).
        self.accept_from = int(os.environ.get("FAKE_ACCEPT_FROM", str(self.accept)))
        self.accept_over = int(os.environ.get("FAKE_ACCEPT_OVER", "0"))
        self.cycles = 0
        self.steps = 3
        self.state = b"0"

    def draft(self) -> list[bytes]:
        out = []
        for _ in range(self.steps):
            self.state = _work(self.draft_n // self.steps, self.state)
            out.append(self.state)
        return out

    def verify(self, drafts: list[bytes]) -> int:
        self.state = _work(self.verify_n, b"".join(drafts))
        for _ in range(self.verify_syncs):
            self.flag.add_(1).item()
        self.cycles += 1
        accept = self.accept
        if self.accept_over:
            f = min(self.cycles / self.accept_over, 1.0)
            accept = round(self.accept_from + (self.accept - self.accept_from) * f)
        return min(accept, len(drafts))

    def extend(self, accepted: int) -> None:
        self.state = _work(self.extend_n, self.state + bytes([accepted]))

    def rollback(self) -> None:
        """Never called by step(): a phase the engine does not run (recorded as absent, not as zeros)."""

    def commit(self, n_accepted: int) -> int:
        return int(n_accepted)

    def step(self) -> int:
        drafts = self.draft()
        accepted = self.verify(drafts)
        self.extend(accepted)
        return self.commit(accepted) + 1
