"""Small random checkpoints written by transformers' own save_pretrained."""

from __future__ import annotations

from pathlib import Path

import torch

# transformers before anything that could stub GPU libraries (see FIELD-NOTES)
import transformers

COMMON = dict(vocab_size=160, hidden_size=64, initializer_range=0.1, tie_word_embeddings=False)

CONFIGS = {
    "llama": lambda: transformers.LlamaConfig(
        **COMMON, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=512),
    "mamba": lambda: transformers.MambaConfig(
        **COMMON, state_size=8, num_hidden_layers=2, conv_kernel=4, expand=2, time_step_rank=8),
    "mamba2": lambda: transformers.Mamba2Config(
        **COMMON, num_heads=8, head_dim=16, expand=2, state_size=16, n_groups=2, num_hidden_layers=2, chunk_size=8),
    "lfm2": lambda: transformers.Lfm2Config(
        **{**COMMON, "tie_word_embeddings": True}, intermediate_size=192, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, layer_types=["conv", "full_attention", "conv", "full_attention"], conv_L_cache=3,
        max_position_embeddings=512),
    "bamba": lambda: transformers.BambaConfig(
        **COMMON, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
        attn_layer_indices=[1, 3], mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=16,
        mamba_expand=2, mamba_chunk_size=8, max_position_embeddings=512),
    # every multiplier away from 1 (each folded into its weights at load); the inner width its own (mamba_d_ssm)
    "falcon_h1": lambda: transformers.FalconH1Config(
        **COMMON, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2,
        mamba_d_ssm=96, mamba_n_heads=6, mamba_d_state=8, mamba_n_groups=2, mamba_chunk_size=8,
        max_position_embeddings=512, embedding_multiplier=2.5, lm_head_multiplier=0.4, key_multiplier=0.7,
        attention_in_multiplier=1.3, attention_out_multiplier=0.8, ssm_in_multiplier=1.2, ssm_out_multiplier=0.6,
        ssm_multipliers=[0.9, 1.1, 0.7, 1.4, 0.5], mlp_multipliers=[1.2, 0.75]),
    # the mixer's grouped gated norm (gate, then norm), and the LM head tied to the scaled table
    "falcon_h1_rms_norm": lambda: transformers.FalconH1Config(
        **{**COMMON, "tie_word_embeddings": True}, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, mamba_d_ssm=96, mamba_n_heads=6, mamba_d_state=8, mamba_n_groups=2,
        mamba_chunk_size=8, mamba_rms_norm=True, mamba_norm_before_gate=False, max_position_embeddings=512,
        embedding_multiplier=2.5, lm_head_multiplier=0.4),
    # Mamba-2 (norm in two groups), experts, attention, MLP; the last block an MLP
    "nemotron_h": lambda: transformers.NemotronHConfig(
        **COMMON, layers_block_type=["linear_attention", "moe", "full_attention", "mlp", "linear_attention", "moe",
                                     "mlp"],
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, intermediate_size=96, mamba_num_heads=8,
        mamba_head_dim=16, n_groups=2, ssm_state_size=16, chunk_size=8, max_position_embeddings=512,
        n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=32, moe_shared_expert_intermediate_size=48,
        routed_scaling_factor=1.5),
    # Granite 4: experts beside the shared expert, rotary, every multiplier away from 1
    "granitemoehybrid": lambda: transformers.GraniteMoeHybridConfig(
        **COMMON, num_hidden_layers=4, layer_types=["mamba", "attention", "mamba", "attention"], num_attention_heads=4,
        num_key_value_heads=2, intermediate_size=32, shared_intermediate_size=48, num_local_experts=6,
        num_experts_per_tok=2, mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=2, mamba_d_state=16,
        mamba_expand=2, mamba_chunk_size=8, position_embedding_type="rope", max_position_embeddings=512,
        embedding_multiplier=3.0, residual_multiplier=0.7, attention_multiplier=0.2, logits_scaling=2.5),
    # the dense variant (no experts, the shared MLP alone), no positional embedding, tied head
    "granitemoehybrid_dense": lambda: transformers.GraniteMoeHybridConfig(
        **{**COMMON, "tie_word_embeddings": True}, num_hidden_layers=3, layer_types=["mamba", "attention", "mamba"],
        num_attention_heads=4, num_key_value_heads=2, intermediate_size=32, shared_intermediate_size=48,
        num_local_experts=0, mamba_n_heads=8, mamba_d_head=16, mamba_n_groups=1, mamba_d_state=16, mamba_expand=2,
        mamba_chunk_size=8, max_position_embeddings=512, embedding_multiplier=3.0, residual_multiplier=0.7,
        logits_scaling=2.5),
    # Jamba: Mamba with dt/B/C norms, attention without positional embedding on layers 1 and 4, experts on odd layers
    "jamba": lambda: transformers.JambaConfig(
        **COMMON, intermediate_size=64, num_hidden_layers=6, num_attention_heads=4, num_key_value_heads=2,
        attn_layer_period=3, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1, num_experts=4,
        num_experts_per_tok=2, mamba_d_state=8, mamba_d_conv=4, mamba_expand=2, mamba_dt_rank=8, rms_norm_eps=1e-5,
        use_mamba_kernels=False, max_position_embeddings=512),
}

CLASSES = {"llama": "LlamaForCausalLM", "mamba": "MambaForCausalLM", "mamba2": "Mamba2ForCausalLM",
           "lfm2": "Lfm2ForCausalLM", "bamba": "BambaForCausalLM", "falcon_h1": "FalconH1ForCausalLM",
           "falcon_h1_rms_norm": "FalconH1ForCausalLM", "nemotron_h": "NemotronHForCausalLM",
           "granitemoehybrid": "GraniteMoeHybridForCausalLM", "granitemoehybrid_dense": "GraniteMoeHybridForCausalLM",
           "jamba": "JambaForCausalLM"}
ATTENTION = ("llama", "lfm2", "bamba", "falcon_h1", "falcon_h1_rms_norm", "nemotron_h", "granitemoehybrid",
             "granitemoehybrid_dense", "jamba")  # made with transformers' eager attention


def make_checkpoint(model_type: str, directory: Path, seed: int = 0):
    """Write a random checkpoint; returns the transformers model (eval, float32)."""
    torch.manual_seed(seed)
    config = CONFIGS[model_type]()
    if model_type in ATTENTION:
        config._attn_implementation = "eager"
    model = getattr(transformers, CLASSES[model_type])(config).eval()
    with torch.no_grad():  # SSM parameters away from their trivial initial values
        for name, p in model.named_parameters():
            if name.endswith(("dt_bias", ".D", "e_score_correction_bias")):
                p.uniform_(-0.5, 0.5)
            if name.endswith(("dt_layernorm.weight", "b_layernorm.weight", "c_layernorm.weight")):
                p.uniform_(0.5, 1.5)  # Jamba's mixer norms: a weight dropped or misplaced shows
            if name.endswith(("router.weight", "gate.weight", "router.layer.weight")) and p.dim() == 2:
                p.normal_(0, 0.5)  # routers made with zeros would tie every expert
    model.save_pretrained(directory)
    return model
