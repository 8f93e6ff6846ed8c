"""Tiny random checkpoints written by transformers (float32), sharper than the default init so
that greedy ids are not near-ties."""

from __future__ import annotations

import json
import os

import torch


def llama(path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                      num_attention_heads=4, num_key_value_heads=2, head_dim=32, max_position_embeddings=512,
                      initializer_range=0.08)
    LlamaForCausalLM(cfg).save_pretrained(path)


def mamba2(path):
    from transformers import Mamba2Config, Mamba2ForCausalLM

    torch.manual_seed(0)
    cfg = Mamba2Config(vocab_size=256, hidden_size=128, expand=2, num_heads=8, head_dim=32, state_size=16,
                       n_groups=1, conv_kernel=4, num_hidden_layers=2, chunk_size=64, initializer_range=0.08,
                       tie_word_embeddings=False)
    Mamba2ForCausalLM(cfg).save_pretrained(path)


def mamba(path):
    from transformers import MambaConfig, MambaForCausalLM

    torch.manual_seed(0)
    cfg = MambaConfig(vocab_size=256, hidden_size=128, state_size=16, num_hidden_layers=2, expand=2, conv_kernel=4,
                      time_step_rank=8, initializer_range=0.08, tie_word_embeddings=False)
    MambaForCausalLM(cfg).save_pretrained(path)


def granite_hybrid(path):
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    torch.manual_seed(0)
    cfg = GraniteMoeHybridConfig(vocab_size=256, hidden_size=128, intermediate_size=256, shared_intermediate_size=256,
                                 num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=512, num_local_experts=0,
                                 layer_types=["mamba", "attention", "mamba", "attention"],
                                 mamba_n_heads=8, mamba_d_head=32, mamba_d_state=16, mamba_n_groups=1, mamba_d_conv=4,
                                 mamba_expand=2, mamba_chunk_size=64, initializer_range=0.08)
    GraniteMoeHybridForCausalLM(cfg).save_pretrained(path)


def lfm2(path):
    from transformers import Lfm2Config, Lfm2ForCausalLM

    torch.manual_seed(0)
    cfg = Lfm2Config(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                     layer_types=["conv", "full_attention", "conv", "full_attention"], conv_L_cache=3,
                     block_auto_adjust_ff_dim=False, tie_word_embeddings=True)
    Lfm2ForCausalLM(cfg).save_pretrained(path)
    p = os.path.join(path, "config.json")
    with open(p) as f:
        c = json.load(f)
    c.update(conv_dim=128, block_dim=128)  # keys vLLM 0.32's lfm2.py still reads
    with open(p, "w") as f:
        json.dump(c, f, indent=2)


WRITERS = {"llama": llama, "mamba2": mamba2, "mamba": mamba, "granite_hybrid": granite_hybrid, "lfm2": lfm2}
