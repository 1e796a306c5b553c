"""Writes a DUSt3R test fixture with upstream's own code (naver/dust3r + croco).

Builds `AsymmetricCroCo3DStereo` with the tiny geometry of the DUSt3R spec's fixtures and the
deterministic weights of its section 10 (recomputed here), runs it on the spec's synthetic
images at any height and width, and writes the same npz keys as the shared fixtures (enc1,
enc2, dec1_hooks, dec2_hooks, pts3d_1, conf_1, pts3d_2_in_1, conf_2 and the swapped sym_*).

    python dust3r_upstream_fixture.py --dust3r DUST3R_CHECKOUT --head linear \\
        --height 48 --width 80 --out DIR

DUST3R_CHECKOUT is a checkout of naver/dust3r with its croco submodule; torch, einops,
huggingface_hub and packaging must be importable.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

MASK = (1 << 64) - 1


def fnv1a64(text):
    h = 0xCBF29CE484222325
    for b in text.encode():
        h = ((h ^ b) * 0x100000001B3) & MASK
    return h


def uniform(seed, n):
    """u_1..u_n of the spec's splitmix64 stream, vectorised."""
    i = np.arange(1, n + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = np.uint64(seed) + i * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def det_weight(key, shape):
    """The spec's deterministic value of state-dict tensor `key`."""
    seed_key = key
    if ".scratch.layer_rn." in key:
        i = int(key.split(".scratch.layer_rn.")[1].split(".")[0])
        seed_key = key.split(".scratch.layer_rn.")[0] + f".scratch.layer{i + 1}_rn.weight"
    n = int(np.prod(shape))
    r = 2.0 * uniform(fnv1a64(seed_key), n) - 1.0
    if len(shape) >= 2:
        convt = key.endswith("act_postprocess.0.1.weight") or key.endswith("act_postprocess.1.1.weight")
        fan_in = shape[0] if convt else int(np.prod(shape[1:]))
        v = r * math.sqrt(3.0 / fan_in)
    elif "norm" in key and not key.startswith("downstream_head") and key.endswith(".weight"):
        v = 1.0 + 0.1 * r
    else:
        v = 0.05 * r
    v = v.astype(np.float32).reshape(shape)
    if key.startswith("downstream_head") and key.endswith("dpt.head.4.weight"):
        v = v * np.float32(0.25)
    return v


def image(phase, h, w):
    """The spec's synthetic view, X = col / S and Y = row / S with S the image width."""
    s = float(w)
    yy, xx = np.meshgrid(np.arange(h) / s, np.arange(w) / s, indexing="ij")
    r = np.sin(6 * xx + phase) * np.cos(4 * yy - phase)
    g = np.cos(5 * (xx + yy) + 2 * phase)
    b = np.sin(9 * xx * yy + phase)
    return np.stack([r, g, b]).astype(np.float32)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dust3r", required=True)
    ap.add_argument("--head", choices=["linear", "dpt"], default="linear")
    ap.add_argument("--height", type=int, required=True)
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    sys.path.insert(0, a.dust3r)
    import torch
    from dust3r.model import AsymmetricCroCo3DStereo

    config = dict(output_mode="pts3d", head_type=a.head, depth_mode=("exp", -math.inf, math.inf),
                  conf_mode=("exp", 1, math.inf), landscape_only=False, patch_embed_cls="PatchEmbedDust3R",
                  img_size=(a.height, a.width), patch_size=16, enc_embed_dim=128, enc_depth=2, enc_num_heads=2,
                  dec_embed_dim=128, dec_depth=12, dec_num_heads=2, mlp_ratio=4, pos_embed="RoPE100")
    torch.manual_seed(0)
    net = AsymmetricCroCo3DStereo(**config).eval()
    state = {k: torch.from_numpy(det_weight(k, tuple(v.shape))) for k, v in net.state_dict().items()}
    net.load_state_dict(state)

    img1, img2 = image(0.0, a.height, a.width), image(0.7, a.height, a.width)
    hooks = {}

    def views(x1, x2):
        v = lambda x: dict(img=torch.from_numpy(x)[None], true_shape=torch.tensor([[a.height, a.width]]),
                           idx=0, instance="0")
        return v(x1), v(x2)

    with torch.no_grad():
        v1, v2 = views(img1, img2)
        (shape1, shape2), (f1, f2), (pos1, pos2) = net._encode_symmetrized(v1, v2)
        dec1, dec2 = net._decoder(f1, pos1, f2, pos2)
        res1, res2 = net(v1, v2)
        sym1, sym2 = net(v2, v1)
    out = dict(img1=img1, img2=img2, enc1=f1[0].numpy(), enc2=f2[0].numpy(),
               dec1_hooks=np.stack([dec1[i][0].numpy() for i in (6, 9, 12)]),
               dec2_hooks=np.stack([dec2[i][0].numpy() for i in (6, 9, 12)]),
               pts3d_1=res1["pts3d"][0].numpy(), conf_1=res1["conf"][0].numpy(),
               pts3d_2_in_1=res2["pts3d_in_other_view"][0].numpy(), conf_2=res2["conf"][0].numpy(),
               sym_pts3d_2=sym1["pts3d"][0].numpy(), sym_conf_2=sym1["conf"][0].numpy(),
               sym_pts3d_1_in_2=sym2["pts3d_in_other_view"][0].numpy(), sym_conf_1=sym2["conf"][0].numpy())
    os.makedirs(a.out, exist_ok=True)
    np.savez_compressed(os.path.join(a.out, "dust3r_tiny_detweights.npz"), **out)
    keys = {k: list(v.shape) for k, v in net.state_dict().items()}
    with open(os.path.join(a.out, "state_dict_keys_tiny.json"), "w") as f:
        json.dump(keys, f)
    meta = dict(config={**config, "depth_mode": ["exp", "-Infinity", "Infinity"],
                        "conf_mode": ["exp", 1, "Infinity"], "img_size": [a.height, a.width]},
                torch=torch.__version__, n_keys=len(keys),
                pts_abs_max=float(np.abs(out["pts3d_1"]).max()),
                note="written by tools/peers/dust3r_upstream_fixture.py with naver/dust3r's own model code")
    text = json.dumps(meta, indent=1).replace('"-Infinity"', "-Infinity").replace('"Infinity"', "Infinity")
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        f.write(text + "\n")


if __name__ == "__main__":
    main()
