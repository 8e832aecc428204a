# Regenerates the extra parity fixtures for code paths the main fixtures do not cover:
#   llama3-rope/  LlamaForCausalLM with rope_type "llama3" (original_max_position_embeddings 16)
#   mistral-sw/   MistralForCausalLM with sliding_window 6 (shorter than the prompt)
# Each dir: config.json, model.safetensors, ids.json (prompt), ref.f32 (transformers logits,
# float32 [len(ids), vocab] for every prompt position). Run: /work/venv/bin/python generate.py
import json, os, torch
from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

here = os.path.dirname(os.path.abspath(__file__))
ids = torch.tensor([[5, 17, 100, 42, 7, 99, 120, 3, 11, 64, 127, 20, 31, 8, 77, 19, 23, 45, 6, 101]])
common = dict(vocab_size=128, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, max_position_embeddings=4096, initializer_range=0.3, dtype=torch.float32)

def save(model, name):
    d = os.path.join(here, name)
    model.save_pretrained(d, safe_serialization=True)
    for f in ('generation_config.json',):
        p = os.path.join(d, f)
        if os.path.exists(p): os.remove(p)
    with torch.no_grad():
        model(ids).logits[0].float().numpy().astype('<f4').tofile(os.path.join(d, 'ref.f32'))
    json.dump(ids[0].tolist(), open(os.path.join(d, 'ids.json'), 'w'))

torch.manual_seed(0)
save(LlamaForCausalLM(LlamaConfig(**common, rope_theta=500000.0, rope_scaling={
    "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16})).eval(), 'llama3-rope')
torch.manual_seed(1)
save(MistralForCausalLM(MistralConfig(**common, sliding_window=6)).eval(), 'mistral-sw')
