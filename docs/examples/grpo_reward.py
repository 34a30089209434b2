"""kforge as the reward function of TRL's GRPOTrainer, called here the way the trainer calls it, without TRL.

GRPOTrainer calls each of its `reward_funcs` with keyword arguments: `prompts`, `completions` (strings, or for a
conversational dataset lists of messages), and every other column of the dataset, then wants one float (or None)
per completion. With TRL installed the same object is handed to the trainer:

    from trl import GRPOConfig, GRPOTrainer
    dataset = Dataset.from_list([{"prompt": [{"role": "user", "content": prompt}], "problem": "scale_bias_hardswish"}])
    trainer = GRPOTrainer(model=MODEL, reward_funcs=[reward], args=GRPOConfig(...), train_dataset=dataset)

Run it: python docs/examples/grpo_reward.py [--db sqlite:////tmp/grpo.db]  (CPU: a few minutes the first time, for
the compiles; a second run takes every verdict back from the db)."""

from __future__ import annotations

import argparse
from pathlib import Path

from judging.api import Judge
from pipeline.reward import KernelReward

SOLUTIONS = Path(__file__).resolve().parents[2] / "solutions" / "scale_bias_hardswish"


def completions() -> list[list[dict]]:
    """A group of three answers to one prompt, as a conversational dataset's completions: a fused kernel with prose
    around its code block, a wrong kernel, and prose with no code."""
    fast, wrong = ((SOLUTIONS / name).read_text() for name in ("cpu_fused_o3.py", "cpu_wrong.py"))
    texts = [f"One fused pass instead of six:\n\n```python\n{fast}```\n\nIt reads and writes each element once.",
             f"```python\n{wrong}```", "I would fuse the six elementwise ops into one loop."]
    return [[{"role": "assistant", "content": text}] for text in texts]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=None, help="SQLAlchemy URL (default: ~/.kforge/kforge.db)")
    args = parser.parse_args(argv)
    reward = KernelReward(Judge(db=args.db))
    group = completions()
    prompts = [[{"role": "user", "content": "Write a faster ModelNew for scale_bias_hardswish."}]] * len(group)
    rewards = reward(prompts=prompts, completions=group, problem=["scale_bias_hardswish"] * len(group))
    for answer, value in zip(("fused kernel", "wrong kernel", "no code"), rewards):
        print(f"{answer}: {value}")


if __name__ == "__main__":
    main()
