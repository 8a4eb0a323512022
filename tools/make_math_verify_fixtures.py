#!/usr/bin/env python3
"""Records math-verify's verdicts on a seeded corpus of (gold, response) pairs, for
reward/math_verify_crosscheck_test.cc.

The corpus covers every answer form the C++ math verifier handles (docs/math_verifier.md):
GSM8K "#### N", \\boxed{} (nested, several), "the answer is", "answer:", the last number,
thousands separators, decimals, fractions (a/b, \\frac, \\dfrac, \\tfrac), percentages, \\sqrt,
\\left( \\right), \\$, \\text{} units, ^\\circ, negatives and unit words, each as equivalent and
as non-equivalent pairs (near misses: off by one, sign, reciprocal, rounding). `intended` is
what the generator meant; `math_verify` is math_verify.verify(parse(gold), parse(response)).

DISAGREEMENTS below lists the pairs where rlforge answers differently on purpose, each with
the reason; the C++ test requires agreement everywhere else and a real disagreement there.

Usage (in the bench environment, bench/bench_env.py; the product never needs it):
    $(python3 bench/bench_env.py) tools/make_math_verify_fixtures.py \\
        tests/data/math_verify/corpus.json
"""
import fractions
import importlib.metadata
import json
import random
import sys

from math_verify import parse, verify

SEED = 23
F = fractions.Fraction

# (gold, response) -> why rlforge's verdict differs from math-verify's. In each, math-verify
# misses an answer the generator meant as correct.
_LAST_BOX = ("rlforge takes the last \\boxed, the model's final (corrected) answer; math-verify "
             "reads every \\boxed of a response as one set ({1, 2}), equal to neither value")
_BARE_LATEX = ("math-verify parses LaTeX outside a box only between $...$ and finds no answer here; "
               "rlforge reads LaTeX commands with or without delimiters")
DISAGREEMENTS = {
    ("2", "first \\boxed{1}, then corrected to \\boxed{2}"): _LAST_BOX,
    ("62", "I tried \\boxed{7} first, but the correct value is \\boxed{62}."): _LAST_BOX,
    ("4638", "\\boxed{4638 dollars}"):
        "math-verify reads the unit word as a product of symbols (4638*d*o*l*l*a*r*s); rlforge "
        "drops trailing unit words",
    ("3685", "\\boxed{3,685 dollars}"):
        "math-verify reads '3,685 dollars' as the set {3, 685*dollars}; rlforge reads the "
        "thousands separator and drops the unit word",
    ("4399", "#### \\$4399"):
        "math-verify extracts nothing after an escaped dollar sign in plain text; rlforge drops "
        "the currency sign",
    ("2942", "\\boxed{\\text{2942 km}}"):
        "math-verify keeps a number inside \\text{} as text; rlforge unwraps \\text{} and drops "
        "the unit",
    ("1312", "\\boxed{1,312^\\circ}"):
        "math-verify reads 1,312 before a degree sign as the pair (1, 312); rlforge reads the "
        "thousands separator as it does without the degree sign",
    ("$\\frac{1}{2}$", "Answer: \\dfrac{1}{2}"): _BARE_LATEX,
    ("$\\frac{1}{4}$", "We add them up.\n#### \\dfrac{1}{4}"): _BARE_LATEX,
    ("$\\frac{1}{2}$", "So the answer is 50\\%"):
        "math-verify's plain-text reader drops the escaped percent sign and reads 50; rlforge "
        "reads 50\\% as 50% = 1/2, as it does inside $...$",
}


def with_commas(n):
    return f"{n:,}"


def decimal_text(v):
    """The shortest decimal for v when its denominator divides a power of ten, else None."""
    for places in range(0, 7):
        scaled = v * 10**places
        if scaled.denominator == 1:
            if places == 0:
                return str(scaled.numerator)
            sign = "-" if scaled < 0 else ""
            digits = str(abs(scaled.numerator)).rjust(places + 1, "0")
            return f"{sign}{digits[:-places]}.{digits[-places:]}"
    return None


def renderings(v, rng):
    """Ways to write the number v (a Fraction) as an answer."""
    out = []
    sign = "-" if v < 0 else ""
    a = abs(v)
    if v.denominator == 1:
        out += [str(v.numerator)]
        if a >= 1000:
            out.append(sign + with_commas(a.numerator))
    else:
        p, q = a.numerator, a.denominator
        out += [f"{sign}{p}/{q}", f"{sign}\\frac{{{p}}}{{{q}}}", f"{sign}\\dfrac{{{p}}}{{{q}}}",
                f"{sign}\\tfrac{{{p}}}{{{q}}}", f"\\frac{{{sign}{p}}}{{{q}}}",
                f"{sign}\\frac{{{p * 2}}}{{{q * 2}}}"]
    d = decimal_text(v)
    if d is not None and v.denominator != 1:
        out.append(d)
        if d.startswith("0."):
            out.append(d[1:])  # .5
        out.append(d + "0")  # 0.50
    pct = v * 100
    if pct.denominator == 1 and v.denominator != 1:
        out.append(f"{pct.numerator}\\%")
    return out


def in_response(x, rng):
    """A response whose final answer is x, in one of the extraction forms. LaTeX outside a box
    sits in $...$, as models write it (bare LaTeX after a marker is in TRICKY)."""
    m = f"${x}$" if "\\" in x else x
    forms = [
        "We add them up.\n#### {m}",
        "First 3 then 4, so the result is \\boxed{{{x}}}.",
        "The answer is ${x}$.",
        "So the answer is {m}",
        "Answer: {m}",
        "The final answer is ${x}$. I hope it is correct.",
        "Counting again gives ${x}$",
        "We get $\\boxed{{{x}}}$ in the end.",
    ]
    return rng.choice(forms).format(x=x, m=m)


def gold_text(x):
    return x if all(c.isdigit() or c in "-,." for c in x) else f"${x}$"


def near_misses(v):
    out = [v + 1, v - 1, -v if v != 0 else F(1), v * 10]
    if v != 0:
        out.append(1 / v)
    return [m for m in out if m != v]


def random_value(rng):
    kind = rng.choice(["int", "big", "neg", "frac", "dec", "pct"])
    if kind == "int":
        return F(rng.randint(0, 200))
    if kind == "big":
        return F(rng.randint(1000, 2_000_000))
    if kind == "neg":
        return -F(rng.randint(1, 99), rng.choice([1, 1, 2, 3, 4, 7]))
    if kind == "frac":
        q = rng.choice([2, 3, 4, 5, 6, 7, 8, 9, 12])
        return F(rng.randint(1, 3 * q), q)
    if kind == "dec":
        return F(rng.randint(1, 9999), rng.choice([10, 100, 1000]))
    return F(rng.choice([5, 10, 12, 20, 25, 40, 50, 75, 150]), 100)


def generated_pairs(rng, count):
    pairs = []
    while len(pairs) < count:
        v = random_value(rng)
        forms = renderings(v, rng)
        gold = gold_text(rng.choice(forms))
        if rng.random() < 0.6:
            pairs.append(("generated-equal", gold, in_response(rng.choice(forms), rng), True))
        else:
            w = rng.choice(near_misses(v))
            pairs.append(("generated-differ", gold, in_response(rng.choice(renderings(w, rng)), rng),
                          False))
    return pairs


def unit_pairs(rng, count):
    pairs = []
    for _ in range(count):
        n = rng.randint(2, 5000)
        m = n + rng.choice([1, -1, 10])
        same = rng.random() < 0.6
        k = n if same else m
        written = rng.choice([str(k), with_commas(k)])
        boxed = rng.choice(["\\boxed{{{}\\text{{ cm}}}}", "\\boxed{{\\${}}}"])
        if rng.random() < 0.3:  # math-verify reads 1,312^\circ as a tuple: no separators here
            written = str(k)
            boxed = rng.choice(["\\boxed{{{}^\\circ}}", "\\boxed{{{}^{{\\circ}}}}"])
        plain = rng.choice(["The answer is {} dollars.", "The answer is ${}.", "So it is {} cm.",
                            "#### {}", "They have {} apples in total."])
        answer = rng.choice([boxed, plain]).format(written)
        pairs.append(("units", str(n), answer, same))
    return pairs


# Hand-written pairs for the corners: (category, gold, response, intended).
TRICKY = [
    ("boxed-nested", "$\\frac{1}{2}$", "so \\boxed{\\frac{1}{2}}", True),
    ("boxed-nested", "$\\frac{3}{4}$", "\\boxed{\\dfrac{3}{4}} is it", True),
    ("boxed-nested", "$\\frac{1}{2}$", "\\boxed{{\\frac{1}{2}}}", True),
    ("boxed-last", "2", "first \\boxed{1}, then corrected to \\boxed{2}", True),
    ("boxed-last", "1", "first \\boxed{1}, then corrected to \\boxed{2}", False),
    ("boxed-last", "62", "I tried \\boxed{7} first, but the correct value is \\boxed{62}.", True),
    ("units", "4638", "\\boxed{4638 dollars}", True),
    ("units", "3685", "\\boxed{3,685 dollars}", True),
    ("units", "4399", "#### \\$4399", True),
    ("units", "2942", "\\boxed{\\text{2942 km}}", True),
    ("units", "1312", "\\boxed{1,312^\\circ}", True),
    ("bare-latex", "$\\frac{1}{2}$", "Answer: \\dfrac{1}{2}", True),
    ("bare-latex", "$\\frac{1}{4}$", "We add them up.\n#### \\dfrac{1}{4}", True),
    ("percent", "$\\frac{1}{2}$", "So the answer is 50\\%", True),
    ("answer-is", "42", "The answer is 42. Next I check it: 6 * 7 = 42 and 3", True),
    ("last-number", "6", "I think 5 apples, no, 6 apples", True),
    ("last-number", "5", "I think 5 apples, no, 6 apples", False),
    ("gsm8k", "#### 72", "Natalia sold 48/2 = 24 clips in May.\n#### 72", True),
    ("gsm8k", "#### 1,250", "She earns 1,250 dollars.\n#### 1250", True),
    ("gsm8k", "#### 10", "5 * 2 = 10\n#### 12", False),
    ("decimal", "0.5", "\\boxed{.5}", True),
    ("decimal", "0.5", "\\boxed{0.50}", True),
    ("decimal", "$\\frac{1}{2}$", "\\boxed{0.5}", True),
    ("decimal", "1.5", "\\boxed{\\frac{3}{2}}", True),
    ("decimal", "1.5", "\\boxed{\\frac{2}{3}}", False),
    ("rounding", "$\\frac{1}{3}$", "\\boxed{0.333333}", True),
    ("rounding", "$\\frac{1}{3}$", "\\boxed{0.33}", False),
    ("rounding", "$\\frac{2}{3}$", "\\boxed{0.666667}", True),
    ("rounding", "$\\frac{2}{3}$", "\\boxed{0.666666}", False),
    ("rounding", "0.1", "\\boxed{0.1000001}", True),
    ("rounding", "0.1", "\\boxed{0.100001}", False),
    ("percent", "$50\\%$", "\\boxed{0.5}", True),
    ("percent", "$50\\%$", "\\boxed{50}", True),
    ("percent", "$50\\%$", "\\boxed{\\frac{1}{2}}", True),
    ("percent", "$50\\%$", "\\boxed{5}", False),
    ("percent", "0.25", "\\boxed{25\\%}", True),
    ("percent", "$12.5\\%$", "\\boxed{0.125}", True),
    ("percent", "0.5", "\\boxed{50}", False),
    ("sqrt", "4", "\\boxed{\\sqrt{16}}", True),
    ("sqrt", "$\\sqrt{2}$", "\\boxed{1.414214}", True),
    ("sqrt", "$\\sqrt{2}$", "\\boxed{1.41}", False),
    ("sqrt", "$2\\sqrt{2}$", "\\boxed{\\sqrt{8}}", True),
    ("sqrt", "$\\frac{\\sqrt{3}}{2}$", "\\boxed{\\frac{\\sqrt{3}}{2}}", True),
    ("sqrt", "$\\sqrt{3}$", "\\boxed{\\sqrt{2}}", False),
    ("latex", "7", "\\boxed{\\left( 3 + 4 \\right)}", True),
    ("latex", "12", "\\boxed{3 \\times 4}", True),
    ("latex", "12", "\\boxed{3 \\cdot 4}", True),
    ("latex", "$\\pi$", "\\boxed{3.141593}", True),
    ("latex", "1024", "\\boxed{2^{10}}", True),
    ("latex", "5", "\\boxed{x = 5}", True),
    ("latex", "0.3", "\\boxed{0.1 + 0.2}", True),
    ("negative", "-3", "\\boxed{-3}", True),
    ("negative", "-3", "\\boxed{3}", False),
    ("negative", "$-\\frac{1}{2}$", "\\boxed{-0.5}", True),
    ("negative", "$-\\frac{1}{2}$", "\\boxed{\\frac{-1}{2}}", True),
    ("negative", "$-\\frac{1}{2}$", "\\boxed{\\frac{1}{2}}", False),
    ("thousands", "1234567", "The answer is 1,234,567.", True),
    ("thousands", "1234", "\\boxed{1{,}234}", True),
    ("thousands", "1234", "The answer is 1,243.", False),
    ("text", "$\\text{Monday}$", "\\boxed{\\text{Monday}}", True),
    ("text", "$\\text{Monday}$", "\\boxed{\\text{Tuesday}}", False),
    ("empty", "42", "I do not know.", False),
    ("empty", "42", "", False),
]


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    rng = random.Random(SEED)
    cases = TRICKY + unit_pairs(rng, 80) + generated_pairs(rng, 480)
    seen, out = set(), []
    for category, gold, response, intended in cases:
        if (gold, response) in seen:
            continue
        seen.add((gold, response))
        verdict = bool(verify(parse(gold), parse(response)))
        item = {"category": category, "gold": gold, "response": response, "intended": intended,
                "math_verify": verdict}
        if (gold, response) in DISAGREEMENTS:
            item["rlforge_differs"] = DISAGREEMENTS[(gold, response)]
        out.append(item)
    missing = set(DISAGREEMENTS) - seen
    if missing:
        print(f"DISAGREEMENTS not in the corpus: {sorted(missing)}", file=sys.stderr)
        return 1
    doc = {"generator": "tools/make_math_verify_fixtures.py", "seed": SEED,
           "math_verify_version": importlib.metadata.version("math-verify"), "pairs": out}
    with open(sys.argv[1], "w", encoding="utf-8") as f:  # one pair a line: readable diffs
        head = json.dumps({k: v for k, v in doc.items() if k != "pairs"}, ensure_ascii=False)
        f.write(head[:-1] + ', "pairs": [\n')
        f.write(",\n".join(json.dumps(p, ensure_ascii=False) for p in out))
        f.write("\n]}\n")
    agree = sum(p["math_verify"] == p["intended"] for p in out)
    print(f"{len(out)} pairs; math-verify agrees with the intended verdict on {agree}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
