"""A Flower app that fine-tunes a Hugging Face causal LM with user-entity DP (the uedp package's component)."""
