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

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = "custom"
    n_layers: int = Field(gt=0, le=1024)
    hidden: int = Field(gt=0, le=1 << 20)
    ffn_hidden: int = Field(gt=0, le=1 << 22)
    n_heads: int = Field(gt=0, le=4096)
    n_kv_heads: int = Field(gt=0, le=4096)
    vocab: int = Field(gt=0, le=1 << 24)
    seq_len: int = Field(default=4096, gt=0, le=1 << 24)
    activation: Literal["gelu", "swiglu"] = "swiglu"
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
                             "letters, digits, spaces and . _ + - / : , = @ ( )"
                             + (f" (not {''.join(bad)!r})" if bad else ""))
        return v

    @model_validator(mode="after")
    def _check(self) -> "ModelSpec":
        if self.hidden % self.n_heads:
            raise ValueError(f"hidden ({self.hidden}) must be divisible by n_heads ({self.n_heads})")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be divisible by n_kv_heads ({self.n_kv_heads})")
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
    def kv_dim(self) -> int:
        return self.hidden // self.n_heads * self.n_kv_heads

    @property
    def mlp_matrices(self) -> int:
        """GELU MLP has 2 weight matrices (up, down); SwiGLU has 3 (gate, up, down)."""
        return 3 if self.activation == "swiglu" else 2

    @property
    def attn_params(self) -> int:
        """Q and O are h x h; K and V are h x kv_dim (grouped-query attention)."""
        return 2 * self.hidden * self.hidden + 2 * self.hidden * self.kv_dim

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
