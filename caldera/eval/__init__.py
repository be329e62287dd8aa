"""Evaluation: perplexity (WikiText-2 / C4 protocols), lm-eval zero-shot tasks, throughput."""
