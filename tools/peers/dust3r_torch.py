"""PyTorch CPU peer for `sp_dust3r_bench dust3r`.

DUSt3R's forward written with PyTorch operators, from the architecture spec
(shared/spec/dust3r.md: the naver/dust3r + croco model), loading the same model.safetensors the
Rust code loads. Runs one pair (both encoders, both decoder branches, both DPT heads) on the
same input and prints one JSON line with the median time; writes its pointmaps for comparison.

    python dust3r_torch.py --weights DIR --img1 a.npy --img2 b.npy --repeat 1 --out-dir DIR
"""
import argparse
import json
import os
import statistics
import time

import numpy as np
import safetensors.torch
import torch
import torch.nn.functional as F


def load_safetensors(path):
    """The checkpoint's tensors as torch tensors (PyPI safetensors reads the file)."""
    return safetensors.torch.load_file(path)


class Dust3r:
    def __init__(self, w, cfg):
        self.w, self.cfg = w, cfg
        self.base = float(cfg.get("pos_embed", "RoPE100")[4:])

    def ln(self, x, p):
        return F.layer_norm(x, (x.shape[-1],), self.w[p + ".weight"], self.w[p + ".bias"], eps=1e-6)

    def lin(self, x, p):
        return F.linear(x, self.w[p + ".weight"], self.w[p + ".bias"])

    def rope(self, x, pos):  # x: (H, N, D), pos: (N, 2) = (row, col)
        half = x.shape[-1] // 2
        inv = 1.0 / (self.base ** (torch.arange(0, half, 2).float() / half))

        def rot(t, p):
            ang = p.float()[:, None] * inv[None, :]
            cos, sin = torch.cat([ang.cos()] * 2, -1), torch.cat([ang.sin()] * 2, -1)
            t1, t2 = t[..., : half // 2], t[..., half // 2 :]
            return t * cos + torch.cat([-t2, t1], -1) * sin

        return torch.cat([rot(x[..., :half], pos[:, 0]), rot(x[..., half:], pos[:, 1])], -1)

    def attention(self, q, k, v, heads, qpos, kpos):
        n, c = q.shape
        m = k.shape[0]
        q = self.rope(q.view(n, heads, c // heads).transpose(0, 1), qpos)
        k = self.rope(k.view(m, heads, c // heads).transpose(0, 1), kpos)
        v = v.view(m, heads, c // heads).transpose(0, 1)
        return F.scaled_dot_product_attention(q, k, v).transpose(0, 1).reshape(n, c)

    def self_attn(self, x, p, heads, pos):
        c = x.shape[-1]
        qkv = self.lin(x, p + ".qkv")
        a = self.attention(qkv[:, :c], qkv[:, c : 2 * c], qkv[:, 2 * c :], heads, pos, pos)
        return self.lin(a, p + ".proj")

    def mlp(self, x, p):
        return self.lin(F.gelu(self.lin(x, p + ".fc1")), p + ".fc2")

    def encode(self, img):  # img: (3, H, W)
        c = self.cfg
        ps = c["patch_size"]
        x = F.conv2d(img[None], self.w["patch_embed.proj.weight"], self.w["patch_embed.proj.bias"], stride=ps)
        rows, cols = x.shape[2], x.shape[3]
        x = x[0].flatten(1).T
        pos = torch.stack(torch.meshgrid(torch.arange(rows), torch.arange(cols), indexing="ij"), -1).view(-1, 2)
        for i in range(c["enc_depth"]):
            p = f"enc_blocks.{i}"
            x = x + self.self_attn(self.ln(x, p + ".norm1"), p + ".attn", c["enc_num_heads"], pos)
            x = x + self.mlp(self.ln(x, p + ".norm2"), p + ".mlp")
        return self.ln(x, "enc_norm"), pos, (rows, cols)

    def dec_block(self, x, y, p, heads, xpos, ypos):
        x = x + self.self_attn(self.ln(x, p + ".norm1"), p + ".attn", heads, xpos)
        yn = self.ln(y, p + ".norm_y")
        q = self.lin(self.ln(x, p + ".norm2"), p + ".cross_attn.projq")
        k = self.lin(yn, p + ".cross_attn.projk")
        v = self.lin(yn, p + ".cross_attn.projv")
        x = x + self.lin(self.attention(q, k, v, heads, xpos, ypos), p + ".cross_attn.proj")
        return x + self.mlp(self.ln(x, p + ".norm3"), p + ".mlp")

    def decode(self, e1, e2, pos1, pos2):
        c = self.cfg
        f1, f2 = self.lin(e1, "decoder_embed"), self.lin(e2, "decoder_embed")
        l1, l2 = [e1], [e2]
        for i in range(c["dec_depth"]):
            n1 = self.dec_block(f1, f2, f"dec_blocks.{i}", c["dec_num_heads"], pos1, pos2)
            n2 = self.dec_block(f2, f1, f"dec_blocks2.{i}", c["dec_num_heads"], pos2, pos1)
            f1, f2 = n1, n2
            l1.append(f1)
            l2.append(f2)
        l1[-1], l2[-1] = self.ln(l1[-1], "dec_norm"), self.ln(l2[-1], "dec_norm")
        return l1, l2

    def conv(self, x, p, bias=True, stride=1):
        k = self.w[p + ".weight"].shape[-1]
        return F.conv2d(x, self.w[p + ".weight"], self.w[p + ".bias"] if bias else None, stride=stride, padding=k // 2)

    def rcu(self, x, p):
        return x + self.conv(F.relu(self.conv(F.relu(x), p + ".conv1")), p + ".conv2")

    def fusion(self, a, b, p):
        if b is not None:
            a = a + self.rcu(b, p + ".resConfUnit1")
        a = self.rcu(a, p + ".resConfUnit2")
        a = F.interpolate(a, scale_factor=2, mode="bilinear", align_corners=True)
        return self.conv(a, p + ".out_conv")

    def head(self, layers, grid, name):
        d = self.cfg["dec_depth"]
        hooks = [0, d * 2 // 4, d * 3 // 4, d]
        p = f"{name}.dpt"
        maps = [layers[h].T.reshape(1, -1, grid[0], grid[1]) for h in hooks]
        ap = f"{p}.act_postprocess"
        l0 = F.conv_transpose2d(self.conv(maps[0], f"{ap}.0.0"), self.w[f"{ap}.0.1.weight"], self.w[f"{ap}.0.1.bias"], stride=4)
        l1 = F.conv_transpose2d(self.conv(maps[1], f"{ap}.1.0"), self.w[f"{ap}.1.1.weight"], self.w[f"{ap}.1.1.bias"], stride=2)
        l2 = self.conv(maps[2], f"{ap}.2.0")
        l3 = self.conv(self.conv(maps[3], f"{ap}.3.0"), f"{ap}.3.1", stride=2)
        ls = [self.conv(l, f"{p}.scratch.layer{i + 1}_rn", bias=False) for i, l in enumerate([l0, l1, l2, l3])]
        p4 = self.fusion(ls[3], None, f"{p}.scratch.refinenet4")[:, :, : ls[2].shape[2], : ls[2].shape[3]]
        p3 = self.fusion(p4, ls[2], f"{p}.scratch.refinenet3")
        p2 = self.fusion(p3, ls[1], f"{p}.scratch.refinenet2")
        p1 = self.fusion(p2, ls[0], f"{p}.scratch.refinenet1")
        x = self.conv(p1, f"{p}.head.0")
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=True)
        x = self.conv(F.relu(self.conv(x, f"{p}.head.2")), f"{p}.head.4")[0].permute(1, 2, 0)
        xyz, c = x[..., :3], x[..., 3]
        dist = xyz.norm(dim=-1, keepdim=True)
        return xyz / dist.clip(min=1e-8) * torch.expm1(dist), 1 + c.exp()

    def pair(self, img1, img2):
        e1, pos1, grid = self.encode(img1)
        e2, pos2, _ = self.encode(img2)
        l1, l2 = self.decode(e1, e2, pos1, pos2)
        return self.head(l1, grid, "downstream_head1"), self.head(l2, grid, "downstream_head2")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--weights", required=True)
    ap.add_argument("--img1", required=True)
    ap.add_argument("--img2", required=True)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--out-dir", required=True)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with open(os.path.join(args.weights, "config.json")) as f:
        cfg = json.load(f)  # Python's json reads the Infinity tokens
    model = Dust3r(load_safetensors(os.path.join(args.weights, "model.safetensors")), cfg)
    img1 = torch.from_numpy(np.load(args.img1))
    img2 = torch.from_numpy(np.load(args.img2))
    times = []
    with torch.inference_mode():
        for _ in range(args.repeat):
            t = time.perf_counter()
            (pts1, conf1), (pts2, conf2) = model.pair(img1, img2)
            times.append(time.perf_counter() - t)
    np.save(os.path.join(args.out_dir, "torch_pts1.npy"), pts1.numpy())
    np.save(os.path.join(args.out_dir, "torch_pts2.npy"), pts2.numpy())
    print(json.dumps({"median_s": statistics.median(times), "threads": args.threads, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
