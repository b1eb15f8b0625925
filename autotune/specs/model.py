"""Model spec: the transformer's shape. Pure data plus derived parameter counts."""
from __future__ import annotations

import string
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

NAME_CHARS = frozenset(string.ascii_letters + string.digits + " ._+-/:,=@()")
"""Characters of a model name. The name reaches command lines (the ``command`` backend's
``{model}``), so it has nothing a shell would expand or that could end a quoted string."""
NAME_MAX = 200


class ModelSpec(BaseModel):
    """A decoder-only transformer, dense or mixture-of-experts.

    MoE layout: the first ``first_k_dense`` layers are dense; after them every
    ``moe_layer_step``-th layer is an MoE layer (step 1 = all, 2 = every other).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    name: str = "custom"
    n_layers: int = Field(gt=0, le=1024)
    hidden: int = Field(gt=0, le=1 << 20)
    ffn_hidden: int = Field(gt=0, le=1 << 22)
    n_heads: int = Field(gt=0, le=4096)
    n_kv_heads: int = Field(gt=0, le=4096)
    vocab: int = Field(gt=0, le=1 << 24)
    seq_len: int = Field(default=4096, gt=0, le=1 << 24)
    activation: Literal["gelu", "swiglu", "geglu", "relu", "squared_relu"] = "swiglu"
    head_dim: int = Field(default=0, ge=0, le=1 << 14, description="per-head dimension of queries and keys "
                          "(0: hidden / n_heads); for MLA the non-rotary part (qk_nope_head_dim)")
    attention: Literal["gqa", "mla"] = Field(default="gqa", description="gqa: multi-head, grouped-query or "
                                             "multi-query attention (n_kv_heads); mla: DeepSeek's multi-head "
                                             "latent attention (q_lora_rank, kv_lora_rank, qk_rope_head_dim)")
    q_lora_rank: int = Field(default=0, ge=0, le=1 << 16, description="MLA: query compression rank (0: none)")
    kv_lora_rank: int = Field(default=0, ge=0, le=1 << 16, description="MLA: key-value compression rank")
    qk_rope_head_dim: int = Field(default=0, ge=0, le=1 << 12, description="MLA: rotary part of each "
                                  "query/key head")
    v_head_dim: int = Field(default=0, ge=0, le=1 << 14, description="per-head dimension of values (0: head_dim)")
    sliding_window: int = Field(default=0, ge=0, le=1 << 24, description="local-attention window in tokens "
                                "of the sliding-window layers (0: none)")
    sliding_window_layers: int = Field(default=0, ge=0, le=1024, description="layers that attend within "
                                       "sliding_window only (the rest attend to the whole sequence)")
    moe_experts: int = Field(default=0, ge=0, le=4096)
    moe_top_k: int = Field(default=0, ge=0, le=64)
    moe_shared_experts: int = Field(default=0, ge=0, le=64)
    moe_ffn_hidden: int = Field(default=0, ge=0, le=1 << 22)
    moe_layer_step: int = Field(default=1, ge=1, le=64)
    first_k_dense: int = Field(default=0, ge=0, le=1 << 16)
    default_global_batch_tokens: int = Field(default=1 << 22, gt=0, le=1 << 40)
    source: str = ""

    @field_validator("name")
    @classmethod
    def _safe_name(cls, v: str) -> str:
        bad = sorted({c for c in v if c not in NAME_CHARS})
        if not v or len(v) > NAME_MAX or bad or not v[0].isalnum():
            raise ValueError(f"a name of at most {NAME_MAX} characters, starting with a letter or digit, made of "
                             "ASCII letters (A-Z, a-z), digits 0-9, spaces and . _ + - / : , = @ ( )"
                             + (f" (not {''.join(bad)!r})" if bad else ""))
        return v

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.head_dim == 0 and self.hidden % self.n_heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by n_heads ({self.n_heads}) "
                             "unless head_dim is given")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})")
        if self.attention == "mla" and (self.kv_lora_rank <= 0 or self.qk_rope_head_dim <= 0):
            raise ValueError("attention mla needs kv_lora_rank > 0 and qk_rope_head_dim > 0")
        if self.attention != "mla" and (self.q_lora_rank or self.kv_lora_rank or self.qk_rope_head_dim):
            raise ValueError("q_lora_rank, kv_lora_rank and qk_rope_head_dim are for attention mla only")
        if self.sliding_window_layers > self.n_layers:
            raise ValueError(f"sliding_window_layers ({self.sliding_window_layers}) must be <= n_layers "
                             f"({self.n_layers})")
        if bool(self.sliding_window) != bool(self.sliding_window_layers):
            raise ValueError("sliding_window and sliding_window_layers go together (both 0 or both > 0)")
        if self.moe_experts:
            if not 1 <= self.moe_top_k <= self.moe_experts:
                raise ValueError(f"moe_top_k ({self.moe_top_k}) must be in 1..moe_experts ({self.moe_experts})")
            if self.moe_ffn_hidden <= 0:
                raise ValueError("moe_ffn_hidden must be > 0 for an MoE model")
            if self.first_k_dense >= self.n_layers:
                raise ValueError(f"first_k_dense ({self.first_k_dense}) must be < n_layers ({self.n_layers})")
        return self

    # ---- derived sizes (parameters, not bytes) ----
    @property
    def is_moe(self) -> bool:
        return self.moe_experts > 0

    @property
    def n_moe_layers(self) -> int:
        if not self.is_moe:
            return 0
        return (self.n_layers - self.first_k_dense) // self.moe_layer_step

    @property
    def n_dense_layers(self) -> int:
        return self.n_layers - self.n_moe_layers

    @property
    def qk_head_dim(self) -> int:
        """Query/key width of one head: head_dim (or hidden / n_heads), plus the rotary part for MLA."""
        return (self.head_dim or self.hidden // self.n_heads) + self.qk_rope_head_dim

    @property
    def v_dim(self) -> int:
        """Value width of one head."""
        return self.v_head_dim or self.head_dim or self.hidden // self.n_heads

    @property
    def q_width(self) -> int:
        return self.n_heads * self.qk_head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the keys (per token) under grouped-query attention: n_kv_heads x head size."""
        return self.n_kv_heads * self.qk_head_dim

    @property
    def kv_width(self) -> int:
        """Key plus value elements per token that attention reads (and context parallelism
        exchanges): GQA n_kv_heads (d_qk + d_v); MLA the up-projected heads, n_heads (d_qk + d_v)
        (Megatron-Core's MLA runs the core attention on decompressed K and V)."""
        kv_heads = self.n_heads if self.attention == "mla" else self.n_kv_heads
        return kv_heads * (self.qk_head_dim + self.v_dim)

    @property
    def attention_saved_elems(self) -> int:
        """Elements per token the attention block keeps for its backward (fused kernels), each
        tensor at its own width: the QKV projection's input (h), the queries, keys and values the
        core attention saves (q_width + kv_width), the output projection's input (n_heads d_v) and,
        for MLA, the two latents before and after their norms (2 (q_lora + kv_lora)). Multi-head
        attention with n_heads x head_dim = h gives 5h: Korthikanti et al. 2022's 10 sbh."""
        return self.hidden + self.q_width + self.kv_width + self.n_heads * self.v_dim + 2 * self.mla_latent_elems

    @property
    def mla_latent_elems(self) -> int:
        """MLA's query and key-value latents per token (q_lora + kv_lora), the up projections'
        inputs; 0 for other attention."""
        return self.q_lora_rank + self.kv_lora_rank if self.attention == "mla" else 0

    @property
    def mla_up_elems(self) -> int:
        """MLA's up-projected queries, keys and values per token (what Megatron-Core's
        mla_up_proj recomputation drops); 0 for other attention."""
        return self.q_width + self.kv_width if self.attention == "mla" else 0

    @property
    def mla_up_gemms(self) -> tuple[tuple[int, int], ...]:
        """MLA's up projections as (K, N) per token, N split by TP (``attn_gemms``' head-split
        projections fed by a latent); () for other attention."""
        if self.attention != "mla":
            return ()
        nope = self.qk_head_dim - self.qk_rope_head_dim
        return ((self.q_lora_rank or self.hidden, self.q_width), (self.kv_lora_rank, self.n_heads * (nope + self.v_dim)))

    @property
    def mlp_matrices(self) -> int:
        """A gated MLP (SwiGLU, GeGLU) has 3 weight matrices (gate, up, down), others 2 (up, down)."""
        return 3 if self.activation in ("swiglu", "geglu") else 2

    @property
    def attn_gemms(self) -> tuple[tuple[int, int, str], ...]:
        """The attention block's projections as (K, N, tp) GEMM shapes per token, tp the dimension
        tensor parallelism splits: "N" column-parallel, "K" row-parallel, "" replicated.
        GQA: fused QKV (h -> q + k + v) and output (heads d_v -> h). MLA (DeepSeek-V2,
        arXiv:2405.04434 sec. 2.1; Megatron-Core's layout): the down projections are replicated,
        the up projections and the output are split by head."""
        h, qw, vw = self.hidden, self.q_width, self.n_heads * self.v_dim
        out = (vw, h, "K")
        if self.attention != "mla":
            return ((h, qw + self.kv_dim + self.n_kv_heads * self.v_dim, "N"), out)
        nope = self.qk_head_dim - self.qk_rope_head_dim
        q = ((h, self.q_lora_rank, ""), (self.q_lora_rank, qw, "N")) if self.q_lora_rank else ((h, qw, "N"),)
        kv = ((h, self.kv_lora_rank + self.qk_rope_head_dim, ""),
              (self.kv_lora_rank, self.n_heads * (nope + self.v_dim), "N"))
        return q + kv + (out,)

    @property
    def attn_params(self) -> int:
        """Weights of the attention projections (``attn_gemms``)."""
        return sum(K * N for K, N, _ in self.attn_gemms)

    def attention_keys_per_query(self, seq_len: int, causal_skip: bool) -> float:
        """Keys one query attends to, averaged over layers and positions: s/2 for a causal layer
        whose kernel skips masked blocks (FlashAttention; the cost model's long-standing
        convention), s for one that computes every score (unfused, whatever the window); a
        sliding-window layer of window w < s attends to w - w(w-1)/(2s) on average (the first w
        positions see fewer), capped at s/2: counted exactly a window just under s would give
        (s+1)/2, more than the full layer's s/2 convention, and a window never adds work."""
        s = float(seq_len)
        if not causal_skip:
            return s
        full = 0.5 * s
        w = float(self.sliding_window)
        local = min(w - w * (w - 1) / (2 * s), full) if 0 < w < s else full
        n_local = self.sliding_window_layers
        return ((self.n_layers - n_local) * full + n_local * local) / self.n_layers

    def attention_model_keys(self, seq_len: int) -> float:
        """Keys per query counted in model FLOPs (the non-causal PaLM / Megatron convention: s
        per full layer; a sliding-window layer counts its window)."""
        s = float(seq_len)
        w = float(min(self.sliding_window, seq_len)) if self.sliding_window else s
        n_local = self.sliding_window_layers
        return ((self.n_layers - n_local) * s + n_local * w) / self.n_layers

    @property
    def dense_mlp_params(self) -> int:
        return self.mlp_matrices * self.hidden * self.ffn_hidden

    @property
    def expert_params(self) -> int:
        """Parameters of one routed expert."""
        return self.mlp_matrices * self.hidden * self.moe_ffn_hidden

    @property
    def embedding_params(self) -> int:
        """Input embedding plus untied LM head."""
        return 2 * self.vocab * self.hidden

    @property
    def moe_layer_nonexpert_params(self) -> int:
        """Attention, router and shared experts of one MoE layer (replicated over ep)."""
        return (self.attn_params + self.hidden * self.moe_experts
                + self.moe_shared_experts * self.expert_params)

    @property
    def total_params(self) -> int:
        dense = self.n_dense_layers * (self.attn_params + self.dense_mlp_params)
        moe = self.n_moe_layers * (self.moe_layer_nonexpert_params + self.moe_experts * self.expert_params)
        return dense + moe + self.embedding_params

    @property
    def active_params(self) -> int:
        """Parameters touched per token: only the routed top-k (+ shared) experts count."""
        dense = self.n_dense_layers * (self.attn_params + self.dense_mlp_params)
        moe = self.n_moe_layers * (self.moe_layer_nonexpert_params + self.moe_top_k * self.expert_params)
        return dense + moe + self.embedding_params
