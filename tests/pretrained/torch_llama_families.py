#!/usr/bin/env python3
"""A float64 PyTorch reference of one forward and loss of the Llama families (llama, mistral,
qwen3, phi3), written from transformers' modeling files' semantics rather than with them:
RMSNorm, rotate-half RoPE, grouped-query attention with the causal mask and'ed with the
sliding window (key j read by query i when i - sliding_window < j <= i, masking_utils'
sliding_window_overlay), Qwen3's q_norm/k_norm per head before RoPE, Phi-3's fused qkv_proj
(q rows, then k, then v) and gate_up_proj (gate rows, then up), SwiGLU, the final norm and the
mean cross-entropy. Reads DIR/config.json, DIR/model.safetensors (parsed here: no safetensors
package needed) and DIR/batch.json ({"B", "T", "inputs", "targets"}); prints the loss.
With ADAPTER_DIR, a PEFT LoRA adapter directory (adapter_config.json, adapter_model.safetensors)
is applied first as PEFT's merge_and_unload computes it: W + scale * B @ A for each adapted
module, scale lora_alpha / r (lora_alpha / sqrt(r) with use_rslora), in float64; the biases the
adapter trained replace the base's. Usage: torch_llama_families.py DIR [ADAPTER_DIR].
Exit 77 when torch is missing. Used by tests/pretrained/torch_reference_test.cpp."""
import json
import math
import struct
import sys

try:
    import torch
except ImportError:
    print("python3 has no torch module (apt-get install python3-torch)")
    sys.exit(77)

F64 = torch.float64


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    tensors = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        assert e["dtype"] == "F32", (name, e["dtype"])
        begin, end = e["data_offsets"]
        t = torch.frombuffer(bytearray(body[begin:end]), dtype=torch.float32)
        tensors[name] = t.reshape(e["shape"]).to(F64)
    return tensors


def rmsnorm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def rope(x, theta):  # x (B, H, T, hd), positions 0..T-1
    hd, T = x.shape[-1], x.shape[-2]
    inv = 1.0 / theta ** (torch.arange(0, hd, 2, dtype=F64) / hd)
    ang = torch.arange(T, dtype=F64)[:, None] * inv[None, :]
    emb = torch.cat([ang, ang], -1)
    rot = torch.cat([-x[..., hd // 2:], x[..., :hd // 2]], -1)
    return x * emb.cos() + rot * emb.sin()


def apply_adapter(w, d):
    c = json.load(open(d + "/adapter_config.json"))
    assert c["peft_type"] == "LORA" and not c.get("use_dora") and not c.get("fan_in_fan_out"), c
    r = c["r"]
    scale = c["lora_alpha"] / (math.sqrt(r) if c.get("use_rslora") else r)
    prefix = "base_model.model."
    t = {k[len(prefix):]: v for k, v in read_safetensors(d + "/adapter_model.safetensors").items()}
    for name, v in t.items():
        if name.endswith(".lora_A.weight"):
            module = name[:-len(".lora_A.weight")]
            w[module + ".weight"] = w[module + ".weight"] + scale * (t[module + ".lora_B.weight"] @ v)
        elif name.endswith(".bias"):  # a wrapped layer's bias is <module>.base_layer.bias
            w[name.replace(".base_layer.bias", ".bias")] = v
        else:
            assert name.endswith(".lora_B.weight"), name


def main(d, adapter=None):
    c = json.load(open(d + "/config.json"))
    w = read_safetensors(d + "/model.safetensors")
    if adapter:
        apply_adapter(w, adapter)
    b = json.load(open(d + "/batch.json"))
    B, T = b["B"], b["T"]
    inputs = torch.tensor(b["inputs"]).reshape(B, T)
    targets = torch.tensor(b["targets"]).reshape(B * T)
    mt = c["model_type"]
    C, NH, NKV = c["hidden_size"], c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or C // NH
    F, eps, theta = c["intermediate_size"], c["rms_norm_eps"], c["rope_theta"]
    window = c.get("sliding_window") if mt in ("mistral", "phi3") else None
    i = torch.arange(T)[:, None]
    j = torch.arange(T)[None, :]
    allowed = j <= i
    if window:
        allowed = allowed & (j > i - window)
    h = w["model.embed_tokens.weight"][inputs]
    for layer in range(c["num_hidden_layers"]):
        p = "model.layers.%d." % layer

        def lin(name, x):
            y = x @ w[p + name + ".weight"].T
            return y + w[p + name + ".bias"] if p + name + ".bias" in w else y

        x = rmsnorm(h, w[p + "input_layernorm.weight"], eps)
        if mt == "phi3":
            qkv = lin("self_attn.qkv_proj", x)
            q, k, v = qkv.split([NH * hd, NKV * hd, NKV * hd], -1)
        else:
            q, k, v = lin("self_attn.q_proj", x), lin("self_attn.k_proj", x), lin("self_attn.v_proj", x)
        q, k, v = (t.reshape(B, T, -1, hd) for t in (q, k, v))
        if mt == "qwen3":
            q = rmsnorm(q, w[p + "self_attn.q_norm.weight"], eps)
            k = rmsnorm(k, w[p + "self_attn.k_norm.weight"], eps)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, T, hd)
        q, k = rope(q, theta), rope(k, theta)
        k = k.repeat_interleave(NH // NKV, 1)
        v = v.repeat_interleave(NH // NKV, 1)
        s = (q @ k.transpose(-1, -2)) / hd ** 0.5
        s = s.masked_fill(~allowed, float("-inf"))
        a = torch.softmax(s, -1) @ v
        h = h + lin("self_attn.o_proj", a.transpose(1, 2).reshape(B, T, NH * hd))
        x = rmsnorm(h, w[p + "post_attention_layernorm.weight"], eps)
        if mt == "phi3":
            gate, up = lin("mlp.gate_up_proj", x).chunk(2, -1)
        else:
            gate, up = lin("mlp.gate_proj", x), lin("mlp.up_proj", x)
        h = h + lin("mlp.down_proj", torch.nn.functional.silu(gate) * up)
    h = rmsnorm(h, w["model.norm.weight"], eps)
    head = w.get("lm_head.weight", w["model.embed_tokens.weight"])
    logits = (h @ head.T).reshape(B * T, -1)
    print("%.17g" % torch.nn.functional.cross_entropy(logits, targets).item())


if __name__ == "__main__":
    main(*sys.argv[1:3])
