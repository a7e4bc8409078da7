"""Readable reference paged attention in torch: the ground truth every kernel is tested against.

Shapes (the same for every backend):
  q            [num_seqs, num_heads, head_dim]          decode: one query per sequence
  q (prefill)  [num_tokens, num_heads, head_dim]        packed: sequence s owns rows
                                                        query_start_loc[s]:query_start_loc[s+1]
  k_cache      [num_blocks, block_size, num_kv_heads, head_dim]   (v_cache the same)
  block_tables [num_seqs, max_blocks_per_seq] int32    physical block of each logical block
  seq_lens     [num_seqs] int32   tokens in the cache for the sequence, including the new ones
  slot_mapping [num_tokens] int   block_id * block_size + offset of each new token
"""
from __future__ import annotations

import torch

from inferlab.core.shapes import cdiv


def write_kv(k, v, k_cache, v_cache, slot_mapping) -> None:
    """Scatter new keys/values [num_tokens, num_kv_heads, head_dim] into their cache slots."""
    nb, bs = k_cache.shape[:2]
    slots = slot_mapping.long()
    k_cache.view(nb * bs, *k_cache.shape[2:])[slots] = k     # [num_slots, kv_heads, head_dim]
    v_cache.view(nb * bs, *v_cache.shape[2:])[slots] = v


def gather_kv(cache, block_table, length: int):
    """The first ``length`` cached tokens of one sequence: [length, num_kv_heads, head_dim]."""
    bs = cache.shape[1]
    nblk = cdiv(length, bs)
    return cache[block_table[:nblk].long()].reshape(nblk * bs, *cache.shape[2:])[:length]


def paged_attention_decode(q, k_cache, v_cache, block_tables, seq_lens, scale: float):
    """One query token per sequence attends to all of its cached tokens."""
    num_seqs, num_heads, head_dim = q.shape
    bs, num_kv_heads = k_cache.shape[1], k_cache.shape[2]
    group = num_heads // num_kv_heads
    max_len = int(seq_lens.max())
    nblk = cdiv(max_len, bs)
    tables = block_tables[:, :nblk].long()                                   # [S, nblk]
    k = k_cache[tables].reshape(num_seqs, nblk * bs, num_kv_heads, head_dim)  # [S, L, KVH, D]
    v = v_cache[tables].reshape(num_seqs, nblk * bs, num_kv_heads, head_dim)
    qg = q.view(num_seqs, num_kv_heads, group, head_dim)                    # [S, KVH, G, D]
    scores = torch.einsum("skgd,slkd->skgl", qg, k) * scale                 # [S, KVH, G, L]
    pos = torch.arange(nblk * bs, device=q.device)
    mask = pos[None, :] >= seq_lens.to(q.device).long()[:, None]            # [S, L]
    scores = scores.masked_fill(mask[:, None, None, :], float("-inf"))
    probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
    out = torch.einsum("skgl,slkd->skgd", probs, v)                         # [S, KVH, G, D]
    return out.reshape(num_seqs, num_heads, head_dim)


def paged_attention_prefill(q, k_cache, v_cache, block_tables, seq_lens, query_start_loc,
                            scale: float):
    """Packed variable-length queries; each sequence's new tokens are the last of its
    ``seq_lens[s]`` cached tokens and attend causally to everything before them."""
    num_tokens, num_heads, head_dim = q.shape
    num_kv_heads = k_cache.shape[2]
    group = num_heads // num_kv_heads
    out = torch.empty_like(q)
    qsl = query_start_loc.tolist()
    for s, length in enumerate(seq_lens.tolist()):
        q0, q1 = qsl[s], qsl[s + 1]
        n = q1 - q0
        if n == 0:
            continue
        k = gather_kv(k_cache, block_tables[s], length)                     # [L, KVH, D]
        v = gather_kv(v_cache, block_tables[s], length)
        qs = q[q0:q1].view(n, num_kv_heads, group, head_dim)                # [n, KVH, G, D]
        scores = torch.einsum("nkgd,lkd->kgnl", qs, k) * scale              # [KVH, G, n, L]
        qpos = torch.arange(length - n, length, device=q.device)
        kpos = torch.arange(length, device=q.device)
        mask = kpos[None, :] > qpos[:, None]                                # [n, L] future keys
        scores = scores.masked_fill(mask, float("-inf"))
        probs = torch.softmax(scores.float(), dim=-1).to(q.dtype)
        o = torch.einsum("kgnl,lkd->nkgd", probs, v)                        # [n, KVH, G, D]
        out[q0:q1] = o.reshape(n, num_heads, head_dim)
    return out
