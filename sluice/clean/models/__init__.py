"""The models cleaning uses: fastText language ID and its predict, and training the quality and perplexity models."""
