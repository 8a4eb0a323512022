#!/usr/bin/env python3
"""Records TRL's GRPO and DPO losses on random tensors, for trainer/trl_crosscheck_test.cc.

TRL's losses live inside trainer methods (GRPOTrainer._compute_loss, DPOTrainer._compute_loss)
that also run the model forward. We call those methods, unbound, on a small stand-in for the
trainer object that carries just the attributes they read, and we stand in for the model with
fixed logits: its per-token logprobs and entropies come from TRL's own selective_log_softmax
and entropy_from_logits. So everything from the logits to the scalar loss and the logged
metrics is TRL's code; only the model is replaced by a tensor.

GRPO's group-normalised advantages are computed inside TRL's generation step
(_generate_and_score_completions, which needs a model, a tokenizer and reward functions), so
they are not called here: the fixture restates their definition for the 'group' scaling,
(r - group mean) / (group std + 1e-4) with Bessel's correction, and docs/lm_losses.md says so.

Everything is float64 so the C++ side can compare to 1e-9. Output: one JSON file of tensors
{"shape": [...], "data": [...]} plus the scalars TRL logged.

Usage (the shared tooling venv; the product never needs it):
    $(python3 bench/bench_env.py) tools/make_trl_fixtures.py tests/data/trl
"""
import collections
import json
import os
import sys
import types

import torch
import trl
from trl import DPOTrainer, GRPOTrainer
from trl.trainer.utils import entropy_from_logits, selective_log_softmax

DT = torch.float64


def tensor_json(t):
    t = t.detach().to(DT) if t.is_floating_point() else t.detach()
    return {"shape": list(t.shape), "data": [float(v) if t.is_floating_point() else int(v)
                                             for v in t.reshape(-1).tolist()]}


def rounded(t, digits=6):
    # Short decimal inputs keep the file small; they are exact float64 values either side.
    return torch.round(t * 10**digits) / 10**digits


class Accelerator:
    """The parts of accelerate.Accelerator the loss code touches, for one process."""
    num_processes = 1
    sync_gradients = True
    device = torch.device("cpu")

    def gather(self, t):
        return t

    def gather_for_metrics(self, t):
        return t

    def reduce(self, t, reduction="sum"):
        return t

    def unwrap_model(self, m):
        return m


def metrics_store():
    return {"train": collections.defaultdict(list), "eval": collections.defaultdict(list)}


# ---------------------------------------------------------------------------------------------
# GRPO


def grpo_inputs(gen):
    B, G, T, V, P = 12, 4, 6, 16, 3
    logits = rounded(torch.randn(B, T, V, generator=gen, dtype=DT) * 2)
    completion_ids = torch.randint(0, V, (B, T), generator=gen)
    lengths = torch.randint(1, T + 1, (B,), generator=gen)
    lengths[0] = T
    completion_mask = (torch.arange(T).unsqueeze(0) < lengths.unsqueeze(1)).to(torch.long)
    with torch.no_grad():
        logp = selective_log_softmax(logits, completion_ids)
    old_logp = rounded(logp + 0.4 * torch.randn(B, T, generator=gen, dtype=DT))
    ref_logp = rounded(logp + 0.2 * torch.randn(B, T, generator=gen, dtype=DT))
    rewards = torch.randint(0, 3, (B,), generator=gen).to(DT)
    rewards[G:2 * G] = 1.0  # one group whose rewards are all equal
    rewards[0], rewards[1] = 0.0, 2.0  # make sure group 0 is not degenerate
    return {
        "group_size": G,
        "prompt_len": P,
        "logits": logits,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "old_logp": old_logp,
        "ref_logp": ref_logp,
        "rewards": rewards,
    }


def trl_group_advantages(rewards, G):
    # Restated from TRL's _generate_and_score_completions (scale_rewards="group"); see module doc.
    grouped = rewards.view(-1, G)
    mean = grouped.mean(dim=1).repeat_interleave(G)
    std = grouped.std(dim=1).repeat_interleave(G)
    return (rewards - mean) / (std + 1e-4), torch.isclose(std, torch.zeros_like(std))


def grpo_stub(loss_type, beta, eps_low, eps_high, max_completion_length, delta, logits):
    stub = types.SimpleNamespace()
    stub.args = types.SimpleNamespace(delta=delta, use_bias_correction_kl=False, steps_per_generation=1)
    stub.beta = beta
    stub.epsilon_low = eps_low
    stub.epsilon_high = eps_high
    stub.loss_type = loss_type
    stub.importance_sampling_level = "token"
    stub.top_entropy_quantile = 1.0
    stub.off_policy_mask_threshold = None
    stub.use_vllm = False
    stub.vllm_importance_sampling_correction = False
    stub.model = types.SimpleNamespace(training=True)
    stub.current_gradient_accumulation_steps = 1
    stub.max_completion_length = max_completion_length
    stub.accelerator = Accelerator()
    stub._metrics = metrics_store()
    stub._entropy_bonus_enabled = False
    stub.aux_loss_enabled = False

    def per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, **kw):
        completion_ids = input_ids[:, -logits_to_keep:]
        return (selective_log_softmax(logits, completion_ids), entropy_from_logits(logits.detach()),
                None)

    stub._get_per_token_logps_and_entropies = per_token_logps_and_entropies
    return stub


GRPO_CASES = [
    # name, TRL loss_type, beta, eps_low, eps_high, max_completion_length, delta
    ("grpo_kl", "grpo", 0.04, 0.2, 0.28, 6, None),
    ("bnpo", "bnpo", 0.0, 0.2, 0.2, 6, None),
    ("dr_grpo_kl", "dr_grpo", 0.04, 0.2, 0.28, 8, None),
    ("dapo", "dapo", 0.0, 0.2, 0.28, 6, None),
    ("luspo_token", "luspo", 0.0, 0.2, 0.28, 6, None),
    # TRL's two-sided clip `delta` (>= 1 + eps_high) caps the ratio of the unclipped term; for
    # A > 0 the clipped term is then already the smaller, so it is exactly dual-clip with c = delta.
    ("bnpo_delta", "bnpo", 0.0, 0.2, 0.28, 6, 1.5),
]


def grpo_fixture(gen):
    x = grpo_inputs(gen)
    B, T = x["completion_ids"].shape
    adv, std_zero = trl_group_advantages(x["rewards"], x["group_size"])
    prompt_ids = torch.zeros(B, x["prompt_len"], dtype=torch.long)
    cases = []
    for name, loss_type, beta, lo, hi, max_len, delta in GRPO_CASES:
        logits = x["logits"].clone().requires_grad_(True)
        stub = grpo_stub(loss_type, beta, lo, hi, max_len, delta, logits)
        inputs = {
            "prompt_ids": prompt_ids,
            "prompt_mask": torch.ones_like(prompt_ids),
            "completion_ids": x["completion_ids"],
            "completion_mask": x["completion_mask"].to(DT),
            "advantages": adv,
            "old_per_token_logps": x["old_logp"],
            "ref_per_token_logps": x["ref_logp"],
            "num_items_in_batch": x["completion_mask"].sum().to(DT),
        }
        loss = GRPOTrainer._compute_loss(stub, None, inputs)
        loss.backward()
        m = stub._metrics["train"]
        cases.append({
            "name": name,
            "trl_loss_type": loss_type,
            "beta": beta,
            "epsilon_low": lo,
            "epsilon_high": hi,
            "max_completion_length": max_len,
            "delta": delta,
            "loss": loss.item(),
            "grad_logits": tensor_json(logits.grad),
            "clip_low": m["clip_ratio/low_mean"][0],
            "clip_high": m["clip_ratio/high_mean"][0],
            "clip_region": m["clip_ratio/region_mean"][0],
            "entropy": m["entropy"][0],
            "kl": m["kl"][0] if "kl" in m else None,
        })
    return {
        "group_size": x["group_size"],
        "logits": tensor_json(x["logits"]),
        "completion_ids": tensor_json(x["completion_ids"]),
        "completion_mask": tensor_json(x["completion_mask"].to(DT)),
        "old_logp": tensor_json(x["old_logp"]),
        "ref_logp": tensor_json(x["ref_logp"]),
        "rewards": tensor_json(x["rewards"]),
        "advantages": tensor_json(adv),
        "std_zero": [bool(v) for v in std_zero.view(-1, x["group_size"])[:, 0].tolist()],
        "cases": cases,
    }


# ---------------------------------------------------------------------------------------------
# DPO


class FakeCausalLM:
    """Returns what TRL's fused LM head returns, from fixed shifted logits [2B, L-1, V]."""

    def __init__(self, shift_logits):
        self.shift_logits = shift_logits
        self.training = True

    def __call__(self, input_ids, attention_mask, labels, fused_lm_head, use_cache=False, **kw):
        assert fused_lm_head
        shift_labels = labels[:, 1:]
        valid = shift_labels != -100
        logps = selective_log_softmax(self.shift_logits, shift_labels.clamp(min=0))
        z = self.shift_logits.detach()
        return types.SimpleNamespace(
            log_probs=logps.masked_fill(~valid, 0.0),
            entropy=entropy_from_logits(z).masked_fill(~valid, 0.0),
            mean_logits=z.mean(-1).masked_fill(~valid, 0.0),
            is_top1=(z.argmax(-1) == shift_labels).masked_fill(~valid, False),
            log_sum_sq_probs=None,
            aux_loss=None,
        )


def dpo_stub(loss_type, beta, model):
    stub = types.SimpleNamespace()
    stub.model = model
    stub.accelerator = Accelerator()
    stub.aux_loss_enabled = False
    stub.ld_alpha = None
    stub.precompute_ref_logps = True
    stub.f_divergence_type = "reverse_kl"
    stub.f_alpha_divergence_coef = 1.0
    stub.loss_types = [loss_type]
    stub.loss_weights = [1.0]
    stub.beta = beta
    stub.label_smoothing = 0.0
    stub.use_weighting = False
    stub.router_aux_loss_coef = 0.0
    stub._metrics = metrics_store()
    stub._total_train_tokens = 0
    stub._tp_size = 1
    stub.args = types.SimpleNamespace(gradient_checkpointing_kwargs=None)
    return stub


def dpo_fixture(gen):
    B, P, C, V = 4, 2, 5, 16
    L = P + C
    input_ids = torch.randint(0, V, (2 * B, L), generator=gen)
    lengths = torch.randint(1, C + 1, (2 * B,), generator=gen)
    completion_mask = torch.zeros(2 * B, L, dtype=torch.long)
    for i, n in enumerate(lengths.tolist()):
        completion_mask[i, P:P + n] = 1
    attention_mask = torch.ones_like(completion_mask)
    shift_logits = rounded(torch.randn(2 * B, L - 1, V, generator=gen, dtype=DT) * 2)
    with torch.no_grad():
        seq = (selective_log_softmax(shift_logits, input_ids[:, 1:]) * completion_mask[:, 1:]).sum(1)
    ref = rounded(seq + 0.5 * torch.randn(2 * B, generator=gen, dtype=DT))
    cases = []
    for name, loss_type, beta in [("sigmoid", "sigmoid", 0.1), ("ipo", "ipo", 0.5)]:
        logits = shift_logits.clone().requires_grad_(True)
        model = FakeCausalLM(logits)
        stub = dpo_stub(loss_type, beta, model)
        inputs = {
            "input_ids": input_ids,
            "attention_mask": attention_mask,
            "completion_mask": completion_mask,
            "ref_chosen_logps": ref[:B],
            "ref_rejected_logps": ref[B:],
        }
        loss = DPOTrainer._compute_loss(stub, model, inputs, return_outputs=False)
        loss.backward()
        m = stub._metrics["train"]
        cases.append({
            "name": name,
            "trl_loss_type": loss_type,
            "beta": beta,
            "loss": loss.item(),
            "grad_logits": tensor_json(logits.grad),
            "chosen_reward": m["rewards/chosen"][0],
            "rejected_reward": m["rewards/rejected"][0],
            "accuracy": m["rewards/accuracies"][0],
            "margin": m["rewards/margins"][0],
            "logps_chosen": m["logps/chosen"][0],
            "logps_rejected": m["logps/rejected"][0],
            "entropy": m["entropy"][0],
        })
    # Batch layout as TRL's: rows [0, B) chosen, [B, 2B) rejected; targets are input_ids[:, 1:].
    return {
        "pairs": B,
        "shift_logits": tensor_json(shift_logits),
        "targets": tensor_json(input_ids[:, 1:]),
        "mask": tensor_json(completion_mask[:, 1:].to(DT)),
        "ref_logps": tensor_json(ref),
        "cases": cases,
    }


def main(out_dir):
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(20261203)
    fixture = {
        "trl_version": trl.__version__,
        "torch_version": torch.__version__,
        "grpo": grpo_fixture(gen),
        "dpo": dpo_fixture(gen),
    }
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "losses.json")
    with open(path, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {path} ({os.path.getsize(path)} bytes) from TRL {trl.__version__}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/data/trl")
