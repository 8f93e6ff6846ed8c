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


def _sharpened(model):
    """SSM parameters away from their initial ones (dt_bias, D), routers away from ties."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("dt_bias", ".D", "e_score_correction_bias")):
                p.uniform_(-0.5, 0.5)
            if name.endswith(("router.weight", "gate.weight", "router.layer.weight")) and p.dim() == 2:
                p.normal_(0, 0.5)
    return model


def nemotron_h(path):
    """Every Nemotron-H block type: Mamba-2 with its norm in two groups, attention, MLP, experts."""
    from transformers import NemotronHConfig, NemotronHForCausalLM

    torch.manual_seed(0)
    cfg = NemotronHConfig(vocab_size=256, hidden_size=128, layers_block_type=[
                              "linear_attention", "moe", "full_attention", "mlp", "linear_attention", "moe"],
                          num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=256,
                          mamba_num_heads=8, mamba_head_dim=32, n_groups=2, ssm_state_size=16, conv_kernel=4,
                          chunk_size=64, max_position_embeddings=512, n_routed_experts=4, num_experts_per_tok=2,
                          moe_intermediate_size=64, moe_shared_expert_intermediate_size=128,
                          routed_scaling_factor=1.5, initializer_range=0.08, tie_word_embeddings=False)
    _sharpened(NemotronHForCausalLM(cfg)).save_pretrained(path)


def nemotron_h_dense(path):
    """Nemotron-H without expert blocks (vLLM's CPU build has no kernel for its relu2 experts):
    Mamba-2 with its norm in two groups, attention, MLP."""
    from transformers import NemotronHConfig, NemotronHForCausalLM

    torch.manual_seed(0)
    cfg = NemotronHConfig(vocab_size=256, hidden_size=128, layers_block_type=[
                              "linear_attention", "mlp", "full_attention", "mlp", "linear_attention", "mlp"],
                          num_attention_heads=4, num_key_value_heads=2, head_dim=32, intermediate_size=256,
                          mamba_num_heads=8, mamba_head_dim=32, n_groups=2, ssm_state_size=16, conv_kernel=4,
                          chunk_size=64, max_position_embeddings=512, initializer_range=0.08,
                          tie_word_embeddings=False)
    _sharpened(NemotronHForCausalLM(cfg)).save_pretrained(path)


def falcon_h1(path):
    """Attention beside Mamba-2 in every block, every multiplier away from 1, the mixer without its
    own norm (mamba_rms_norm False: the gate alone), two groups."""
    from transformers import FalconH1Config, FalconH1ForCausalLM

    torch.manual_seed(0)
    cfg = FalconH1Config(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=3,
                         num_attention_heads=4, num_key_value_heads=2, mamba_d_ssm=256, mamba_n_heads=8,
                         mamba_d_head=32, mamba_d_state=16, mamba_n_groups=2, mamba_d_conv=4, mamba_chunk_size=64,
                         mamba_rms_norm=False, max_position_embeddings=512, embedding_multiplier=2.5,
                         lm_head_multiplier=0.4, key_multiplier=0.7, attention_in_multiplier=1.3,
                         attention_out_multiplier=0.8, ssm_in_multiplier=1.2, ssm_out_multiplier=0.6,
                         ssm_multipliers=[0.9, 1.1, 0.7, 1.4, 0.5], mlp_multipliers=[1.2, 0.75],
                         initializer_range=0.08, tie_word_embeddings=False)
    _sharpened(FalconH1ForCausalLM(cfg)).save_pretrained(path)


def granite_moe_hybrid(path):
    """Granite 4 with experts: Mamba-2 (two groups) and attention blocks, each with routed experts
    beside the shared expert; rotary; multipliers away from 1."""
    from transformers import GraniteMoeHybridConfig, GraniteMoeHybridForCausalLM

    torch.manual_seed(0)
    cfg = GraniteMoeHybridConfig(vocab_size=256, hidden_size=128, intermediate_size=64, shared_intermediate_size=128,
                                 num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
                                 max_position_embeddings=512, num_local_experts=4, num_experts_per_tok=2,
                                 layer_types=["mamba", "attention", "mamba", "attention"],
                                 position_embedding_type="rope", mamba_n_heads=8, mamba_d_head=32, mamba_d_state=16,
                                 mamba_n_groups=2, mamba_d_conv=4, mamba_expand=2, mamba_chunk_size=64,
                                 embedding_multiplier=3.0, residual_multiplier=0.7,
                                 attention_multiplier=0.2, logits_scaling=2.5, initializer_range=0.08)
    _sharpened(GraniteMoeHybridForCausalLM(cfg)).save_pretrained(path)


WRITERS = {"llama": llama, "mamba2": mamba2, "mamba": mamba, "granite_hybrid": granite_hybrid, "lfm2": lfm2,
           "nemotron_h": nemotron_h, "nemotron_h_dense": nemotron_h_dense, "falcon_h1": falcon_h1,
           "granite_moe_hybrid": granite_moe_hybrid}
